"""A PUM against the step oracle on a policy's own samples (issue 28 §2): first-error detection and within-problem
AUROC, on the completions a `procrl select` run sampled from a set with gold steps (arith), beside the select run's
other scores.

`pum_oracle_agreement(select_dir, pum)`:
1. reads the select run (`procrl.evals.selection.read_select_run`: its settings and every candidate's text, token
   count and `score_<column>` values) and its problems again (same data set, slice and prompt template), which must
   carry `gold_steps`;
2. labels every candidate with the oracle (`procrl.rewards.oracle.oracle_labels`; a candidate of `max_new_tokens`
   tokens counts as truncated, so a number at its very end is no step: the select run keeps no finish reason, so a
   completion whose EOS is exactly the last token of the budget counts as truncated too, which changes its label
   only when its text ends on a result);
3. scores it with the PUM on the oracle's step units (`procrl.evals.oracle_agreement.pum_scores`: U(x, pieces 0..k)
   per step k, and U(x, y) of the whole completion);
4. first-error detection (ProcessBench's F1, `first_error_detection`) with a CROSS-FITTED threshold: the problems
   are split into `folds` folds by position (problem i in fold i mod folds); each fold's threshold is the F1-best
   one on the other folds (`choose_threshold`), so no completion is flagged by a threshold chosen on itself. The
   pooled predictions are scored once (a fold's step scores minus its threshold, against threshold 0: a step is
   flagged exactly when its score is below its fold's threshold). The interval holds the thresholds fixed: it does
   not cover the choice of threshold. Too few completions of a class to choose one: `first_error` says why;
5. within-problem AUROC against the oracle (error-free completions against the others, `within_problem_auroc`) of
   the PUM's U(x, y), of every `score_<column>` the select run holds (PiCSAR, mean log-prob, ...) and of the
   completion's length in tokens ("num_tokens": longer ranks higher), so the PUM is read beside the baselines on
   the same completions;
6. step AUROC of the PUM's per-step utilities: valid steps against invalid ones, and steps without error against
   error steps (`step_auroc`); the same of the step increments U(x, p_k) - U(x, p_{k-1}) (p_{-1} the empty prefix),
   the step rewards of mixed-mode GRPO, which do not grow with the step's position as utilities may.

Intervals are percentile-bootstrap 95% over problems (`procrl.evals.stats`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tqdm.auto import tqdm

from procrl.evals.offline import load_rows
from procrl.evals.oracle_agreement import (
    choose_threshold,
    first_error_detection,
    is_error_free,
    pum_scores,
    step_auroc,
    within_problem_auroc,
)
from procrl.evals.selection import read_select_run
from procrl.evals.stats import BOOTSTRAP_RESAMPLES
from procrl.rewards.oracle import GOLD_STEPS_COLUMN, OracleLabels, gold_steps_from_json, oracle_labels
from procrl.rewards.pum import PrefixUtilityModel
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["crossfit_shift", "label_candidates", "pum_oracle_agreement"]


def label_candidates(select_run: dict, rows: Sequence[dict]) -> tuple[list[str], list[str], list[str], list]:
    """(problem ids, questions, texts, oracle labels) of every candidate of a select run, problem-major.

    Raises:
        ValueError: a problem of the run missing from `rows`, or a row without `gold_steps`.
    """
    by_id = {str(row["problem_id"]): row for row in rows}
    budget = int(select_run["settings"]["max_new_tokens"])
    ids, questions, texts, labels = [], [], [], []
    for problem in select_run["problems"]:
        row = by_id.get(str(problem["problem_id"]))
        if row is None:
            raise ValueError(f"problem {problem['problem_id']!r} of the select run is not in its data slice")
        if not row.get(GOLD_STEPS_COLUMN):
            raise ValueError(
                f"problem {problem['problem_id']!r} has no {GOLD_STEPS_COLUMN}: the oracle needs a step-checkable "
                "set (arith-*)"
            )
        gold = gold_steps_from_json(row[GOLD_STEPS_COLUMN])
        for candidate in problem["candidates"]:
            truncated = int(candidate["num_tokens"]) >= budget
            ids.append(str(problem["problem_id"]))
            questions.append(row["question"])
            texts.append(candidate["text"])
            labels.append(oracle_labels(candidate["text"], row["question"], gold, truncated=truncated))
    return ids, questions, texts, labels


def crossfit_shift(
    step_scores: Sequence[Sequence[float]], labels: Sequence[OracleLabels], problem_ids: Sequence[str], folds: int
) -> tuple[list[list[float]], list[float]]:
    """Each completion's step scores minus its fold's threshold, and the folds' thresholds (module docstring, 4).

    Fold of a completion = position of its problem among the distinct ids in order of appearance, mod `folds`.
    A step is flagged at threshold 0 on the shifted scores exactly when it is flagged at its fold's threshold.

    >>> from procrl.rewards.oracle import gold_steps_from_json, oracle_labels
    >>> gold = gold_steps_from_json('[[1,"+",1,2]]')
    >>> labels = [oracle_labels(t, "1 and 1", gold) for t in ["1 + 1 = 2.", "1 + 1 = 3.", "1 + 1 = 2.", "1 + 1 = 3."]]
    >>> shifted, thresholds = crossfit_shift([[0.9], [0.5], [0.8], [0.2]], labels, ["a", "a", "b", "b"], 2)
    >>> [round(t, 3) for t in thresholds], [round(s[0], 3) for s in shifted]  # a's threshold from b's scores
    ([0.5, 0.7], [0.4, 0.0, 0.1, -0.5])

    Raises:
        ValueError: `folds` < 2, fewer distinct problems than folds, or a fold whose complement has no erroneous or
            no error-free completion with steps (`choose_threshold`'s message).
    """
    order = list(dict.fromkeys(str(p) for p in problem_ids))
    if folds < 2 or len(order) < folds:
        raise ValueError(f"cross-fitting needs folds >= 2 and at least that many problems (folds={folds}, "
                         f"{len(order)} problems)")  # fmt: skip
    fold_of = {p: i % folds for i, p in enumerate(order)}
    member = [fold_of[str(p)] for p in problem_ids]
    thresholds = []
    for fold in range(folds):
        rest = [i for i, f in enumerate(member) if f != fold]
        thresholds.append(choose_threshold([step_scores[i] for i in rest], [labels[i] for i in rest]))
    shifted = [[s - thresholds[f] for s in scores] for scores, f in zip(step_scores, member, strict=True)]
    return shifted, thresholds


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def pum_oracle_agreement(
    select_dir: str | Path,
    pum: PrefixUtilityModel,
    *,
    folds: int = 2,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """The PUM against the oracle on a select run's samples (module docstring).

    Args:
        select_dir: the output directory of a finished `procrl select` run on a set with `gold_steps`.
        pum: the loaded PUM (`PrefixUtilityModel.from_pretrained`).
        folds: cross-fitting folds of the first-error threshold (>= 2).
        resamples: bootstrap draws over problems (0: no intervals); seed: their seed.

    Returns:
        json-safe: `select_dir`, `counts` (problems, completions, without_steps; of those with steps: erroneous
        (an error step), error_free (no error step, ProcessAcc 1), incomplete (no error step, ProcessAcc < 1)),
        `first_error` (`FirstErrorDetection` as a dict, threshold 0 on the shifted scores, plus `thresholds` per
        fold; `{"undefined": reason}` when no threshold can be chosen), `within_problem_auroc` (scorer ->
        `WithinProblemAUROC` as a dict; "pum_full" is this PUM's U(x, y), "num_tokens" the token count),
        `step_auroc` (valid and no_error positives) of the utilities, `step_auroc_increments` the same of the
        increments.

    Raises:
        ValueError: an unreadable select run, or problems without gold steps.
    """
    run = read_select_run(select_dir)
    slice_keys = ("dataset", "split", "start", "end", "prompt_template")
    rows = load_rows(SimpleNamespace(**{key: run["settings"][key] for key in slice_keys}))  # the run's problems
    problem_ids, questions, texts, labels = label_candidates(run, rows)
    logger.info("pum-oracle: %d completions of %d problems labelled", len(texts), len(run["problems"]))
    chunks = range(0, len(texts), 512)
    step_scores: list[list[float]] = []  # U(x, pieces 0..k) per step k
    increments: list[list[float]] = []  # U(x, pieces 0..k) - U(x, pieces 0..k-1), the empty prefix before step 0
    full: list[float | None] = []
    for start in tqdm(chunks, desc="PUM scores", disable=not progress):
        part = slice(start, start + 512)
        steps, whole = pum_scores(pum, questions[part], texts[part], labels[part], include_empty=True)
        step_scores += [row[1:] for row in steps]
        increments += [[after - before for before, after in pairwise(row)] for row in steps]
        full += whole
    try:
        shifted, thresholds = crossfit_shift(step_scores, labels, problem_ids, folds)
    except ValueError as error:  # too few of a class to choose a threshold: the AUROCs are still reported
        logger.warning("pum-oracle: no first-error detection: %s", error)
        first_error = {"undefined": str(error), "folds": folds}
    else:
        detection = first_error_detection(shifted, labels, 0.0, problem_ids=problem_ids, resamples=resamples, seed=seed)
        first_error = {**asdict(detection), "thresholds": thresholds, "folds": folds}

    candidates = [c for problem in run["problems"] for c in problem["candidates"]]
    columns: dict[str, list[float | None]] = {"pum_full": [_finite(v) for v in full]}
    for key in sorted({k for c in candidates for k in c if k.startswith("score_")}):
        columns[key.removeprefix("score_")] = [_finite(c.get(key)) for c in candidates]
    columns["num_tokens"] = [float(c["num_tokens"]) for c in candidates]  # the length baseline: longer ranks higher
    within = {
        name: asdict(within_problem_auroc(values, labels, problem_ids, resamples=resamples, seed=seed))
        for name, values in columns.items()
    }
    steps_auroc, increments_auroc = (
        {
            positive: asdict(step_auroc(scores, labels, positive=positive, problem_ids=problem_ids,
                                        resamples=resamples, seed=seed))
            for positive in ("valid", "no_error")
        }
        for scores in (step_scores, increments)
    )  # fmt: skip
    with_steps = [label for label in labels if label.steps]
    return {
        "select_dir": str(select_dir),
        "dataset": run.get("dataset"),
        "counts": {
            "problems": len(run["problems"]),
            "completions": len(labels),
            "without_steps": len(labels) - len(with_steps),
            "erroneous": sum(label.first_error is not None for label in with_steps),
            "error_free": sum(is_error_free(label) for label in with_steps),
            "incomplete": sum(label.first_error is None and not is_error_free(label) for label in with_steps),
        },
        "first_error": first_error,
        "within_problem_auroc": within,
        "step_auroc": steps_auroc,
        "step_auroc_increments": increments_auroc,
    }
