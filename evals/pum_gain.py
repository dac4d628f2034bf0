"""Does the PUM-Math gain behave as the paper says? Prefixes that end in an oracle-correct step against prefixes that
end at the first wrong step (docs/architecture.md "PUM", "Step oracle"; issue 28 §2's sanity check).

On a step-checkable task (rows with `gold_steps`, `procrl.data_builders.arithmetic`), every prefix the PUM-Math
builder estimated is put in one class by the step oracle (`prefix_oracle_class`):

* **correct**: the prefix ends at a step boundary and none of its oracle steps is wrong;
* **first_wrong**: it ends at a step boundary and its first wrong oracle step lies in its last piece (the prefix
  stops right at the first mistake);
* **after_wrong**: it ends at a step boundary and its first wrong step lies in an earlier piece;
* left out, and counted: **partial** (a token-fraction cut inside a step), **no_step** (no oracle step at all),
  **no_step_at_end** (the last piece holds no oracle step, e.g. the answer sentence "The answer is 12.").

"Wrong" has two rules (`WRONG_RULES`): **error**, the oracle's `first_error` (a step that is not valid or not
grounded), and **error_or_off_track**, which also counts a valid, grounded step whose result is no gold result
("12 + 7 = 19" where the chain needs 12 + 3: grounded, since 7 is in the problem, and valid, but a wrong step).

The paper's claim is that the gain of a prefix measures its progress: prefixes that end in a correct step should
have a higher gain than prefixes that end at the first wrong step. `gain_contrast` gives each class's mean value
(G, or a student's raw gain g_s = q_s(x, p) − q_s(x, ∅)) pooled over its prefixes, the difference
mean(correct) − mean(first_wrong), and percentile-bootstrap 95% intervals over problems (prefixes of one problem share
its bare solve rate and its trajectories, so the problem is the unit; `procrl.evals.stats.bootstrap_interval`).
`pair_agreement` counts the built pairs per type, and among those whose one side is correct and the other wrong
(first_wrong or after_wrong), the share whose chosen side is the correct one. `gain_check` runs both on a finished
build directory.

    >>> from procrl.rewards.oracle import gold_steps_from_json
    >>> gold = gold_steps_from_json('[[3,"+",5,8],[8,"+",4,12],[12,"+",3,15]]')
    >>> q = "Lucas has 3 seeds, collects 5, wins 4, then gets 3 more. How many?"
    >>> prefix_oracle_class("3 + 5 = 8.\\n\\n8 + 4 = 12.\\n\\n", q, gold)
    'correct'
    >>> prefix_oracle_class("3 + 5 = 8.\\n\\n8 + 4 = 13.\\n\\n", q, gold)
    'first_wrong'
    >>> prefix_oracle_class("3 + 5 = 8.\\n\\n8 + 4 = 12.\\n\\n12 + 4 = 16.\\n\\n", q, gold)  # valid, grounded
    'correct'
    >>> prefix_oracle_class("3 + 5 = 8.\\n\\n8 + 4 = 12.\\n\\n12 + 4 = 16.\\n\\n", q, gold, wrong="error_or_off_track")
    'first_wrong'
    >>> r = gain_contrast([1.0, 0.5, -1.0, -0.5], ["correct", "correct", "first_wrong", "after_wrong"], ["a"] * 4,
    ...                   resamples=0)
    >>> r.groups["correct"].mean, r.groups["first_wrong"].mean, r.difference, r.groups["after_wrong"].n_prefixes
    (0.75, -1.0, 1.75, 1)
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from procrl.data_builders.datasets import load_math_dataset
from procrl.data_builders.prompts import resolve_template
from procrl.evals.stats import BOOTSTRAP_RESAMPLES, bootstrap_interval
from procrl.rewards.oracle import GOLD_STEPS_COLUMN, GoldStep, gold_steps_from_json, oracle_labels
from procrl.rewards.steps import DEFAULT_SEPARATOR, split_steps

__all__ = [
    "EXCLUDED_CLASSES",
    "PREFIX_CLASSES",
    "WRONG_RULES",
    "GainContrast",
    "GroupGain",
    "PairAgreement",
    "gain_check",
    "gain_contrast",
    "oracle_progress",
    "pair_agreement",
    "prefix_oracle_class",
    "reference_accuracy",
]

PREFIX_CLASSES = ("correct", "first_wrong", "after_wrong")
EXCLUDED_CLASSES = ("partial", "no_step", "no_step_at_end")
WRONG_RULES = ("error", "error_or_off_track")
Interval = tuple[float, float] | None


def prefix_oracle_class(
    prefix: str,
    question: str,
    gold_steps: Sequence[GoldStep],
    *,
    at_step: bool = True,
    wrong: str = "error",
    separator: str = DEFAULT_SEPARATOR,
) -> str:
    """The oracle class of one prefix (module docstring): one of `PREFIX_CLASSES` or `EXCLUDED_CLASSES`.

    Args:
        prefix: the prefix text (the builder's `prefixes.jsonl` "prefix").
        question: the problem text (its numbers are known numbers of the oracle).
        gold_steps: the problem's gold steps (at least one).
        at_step: the prefix ends at a step boundary (the builder's "at_step"); False gives "partial".
        wrong: `WRONG_RULES`: "error" (not valid or not grounded) or "error_or_off_track" (also off track).
        separator: the step separator the pieces are split at (the last piece is the prefix's last step).

    Raises:
        ValueError: an unknown `wrong` rule, or no gold step.
    """
    if wrong not in WRONG_RULES:
        raise ValueError(f"wrong must be one of {WRONG_RULES}, got {wrong!r}")
    if not at_step:
        return "partial"
    labels = oracle_labels(prefix, question, gold_steps)
    if not labels.steps:
        return "no_step"
    pieces = split_steps(prefix, separator)
    last_start = len(prefix) - len(pieces[-1].text) if pieces else 0
    if labels.steps[-1].span[1] <= last_start:
        return "no_step_at_end"
    first = next(
        (i for i, s in enumerate(labels.steps) if s.is_error or (wrong == "error_or_off_track" and not s.on_track)),
        None,
    )
    if first is None:
        return "correct"
    return "first_wrong" if labels.steps[first].span[1] > last_start else "after_wrong"


@dataclass(frozen=True)
class GroupGain:
    """One class's value, pooled over its prefixes.

    Attributes:
        mean: the mean over the class's prefixes (None without one).
        interval: bootstrap 95% interval over problems (None: no prefix, or no bootstrap asked for).
        n_prefixes: prefixes in the class; n_problems: problems with at least one of them.
    """

    mean: float | None
    interval: Interval
    n_prefixes: int
    n_problems: int


@dataclass(frozen=True)
class GainContrast:
    """`gain_contrast`'s result.

    Attributes:
        groups: per class of `PREFIX_CLASSES`, its `GroupGain`.
        difference: mean(correct) − mean(first_wrong); None when either class is empty.
        difference_interval: its bootstrap 95% interval over problems (both means from the same resamples).
        excluded: prefixes left out, per class of `EXCLUDED_CLASSES` (0 included).
    """

    groups: dict[str, GroupGain]
    difference: float | None
    difference_interval: Interval
    excluded: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _unit_index(problem_ids: Sequence[str]) -> tuple[np.ndarray, int]:
    index: dict[str, int] = {}
    return np.array([index.setdefault(str(p), len(index)) for p in problem_ids], dtype=np.int64), len(index)


def _interval(n_units: int, statistic, resamples: int, seed: int) -> Interval:
    if resamples < 1 or n_units < 1:
        return None
    try:
        return bootstrap_interval(n_units, statistic, resamples=resamples, seed=seed)
    except ValueError:  # not finite on any resample
        return None


def gain_contrast(
    values: Sequence[float],
    classes: Sequence[str],
    problem_ids: Sequence[str],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> GainContrast:
    """Mean value per oracle class and the difference correct − first_wrong, with bootstrap intervals over problems.

    A class mean pools prefixes (a problem with more prefixes in a class weighs more). One bootstrap resample draws
    problems with replacement and recomputes every class mean and the difference from the same draw; a resample
    without a prefix of a class is left out for that class (`bootstrap_interval`).

    Args:
        values: one finite value per prefix (the intrinsic utility G, or a student's gain g_s).
        classes: each prefix's class (`prefix_oracle_class`); classes outside `PREFIX_CLASSES` are counted in
            `excluded` only.
        problem_ids: each prefix's problem (the bootstrap unit).
        resamples: bootstrap draws (0: no intervals); seed: their seed.

    Raises:
        ValueError: lengths that differ, a non-finite value, or a class that is neither in `PREFIX_CLASSES` nor in
            `EXCLUDED_CLASSES`.
    """
    if not len(values) == len(classes) == len(problem_ids):
        raise ValueError(f"{len(values)} values, {len(classes)} classes, {len(problem_ids)} problem ids; one each")
    unknown = set(classes) - set(PREFIX_CLASSES) - set(EXCLUDED_CLASSES)
    if unknown:
        raise ValueError(f"unknown prefix classes {sorted(unknown)}; use prefix_oracle_class")
    array = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(array)):
        raise ValueError("gain_contrast: every value must be finite")
    units, n_units = _unit_index(problem_ids)
    sums = np.zeros((n_units, len(PREFIX_CLASSES)))
    counts = np.zeros((n_units, len(PREFIX_CLASSES)))
    for unit, value, kind in zip(units, array, classes, strict=True):
        if kind in PREFIX_CLASSES:
            column = PREFIX_CLASSES.index(kind)
            sums[unit, column] += value
            counts[unit, column] += 1

    def means(idx: np.ndarray) -> np.ndarray:
        total, n = sums[idx].sum(axis=0), counts[idx].sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, total / np.maximum(n, 1), np.nan)

    every = np.arange(n_units)
    point = means(every)
    groups = {}
    for k, kind in enumerate(PREFIX_CLASSES):
        n = int(counts[:, k].sum())
        groups[kind] = GroupGain(
            mean=float(point[k]) if n else None,
            interval=_interval(n_units, lambda idx, k=k: float(means(idx)[k]), resamples, seed) if n else None,
            n_prefixes=n,
            n_problems=int((counts[:, k] > 0).sum()),
        )
    both = groups["correct"].n_prefixes and groups["first_wrong"].n_prefixes
    difference = float(point[0] - point[1]) if both else None

    def gap(idx: np.ndarray) -> float:
        m = means(idx)
        return float(m[0] - m[1])

    interval = _interval(n_units, gap, resamples, seed) if both else None
    excluded = Counter(kind for kind in classes if kind in EXCLUDED_CLASSES)
    return GainContrast(groups, difference, interval, {kind: excluded[kind] for kind in EXCLUDED_CLASSES})


@dataclass(frozen=True)
class PairAgreement:
    """`pair_agreement`'s result, per pair type and "all".

    Attributes:
        pairs: pairs per type.
        decided: pairs whose one side is correct and the other wrong (first_wrong or after_wrong).
        agree: among the decided pairs, the share whose chosen side is the correct one (None without one).
        intervals: bootstrap 95% interval of `agree` over problems (None: undefined or not asked for).
    """

    pairs: dict[str, int]
    decided: dict[str, int]
    agree: dict[str, float | None]
    intervals: dict[str, Interval]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pair_agreement(
    chosen_classes: Sequence[str],
    rejected_classes: Sequence[str],
    pair_types: Sequence[str],
    problem_ids: Sequence[str],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> PairAgreement:
    """Pair counts per type and how often the builder's preference agrees with the oracle (`PairAgreement`).

    Raises:
        ValueError: lengths that differ.
    """
    n = len(pair_types)
    if not len(chosen_classes) == len(rejected_classes) == n == len(problem_ids):
        raise ValueError("pair_agreement: give one chosen class, rejected class, pair type and problem id per pair")
    wrong = ("first_wrong", "after_wrong")
    units, n_units = _unit_index(problem_ids)
    kinds = sorted(set(pair_types))
    result: dict[str, dict] = {"pairs": {}, "decided": {}, "agree": {}, "intervals": {}}
    for kind in ["all", *kinds]:
        rows = [i for i in range(n) if kind in ("all", pair_types[i])]
        hits = np.zeros((n_units, 2))  # per problem: decided pairs, of which agree
        for i in rows:
            c, r = chosen_classes[i], rejected_classes[i]
            if (c == "correct" and r in wrong) or (r == "correct" and c in wrong):
                hits[units[i], 0] += 1
                hits[units[i], 1] += c == "correct"
        decided = int(hits[:, 0].sum())

        def share(idx: np.ndarray, hits=hits) -> float:
            total = hits[idx].sum(axis=0)
            return float(total[1] / total[0]) if total[0] else math.nan

        result["pairs"][kind] = len(rows)
        result["decided"][kind] = decided
        result["agree"][kind] = share(np.arange(n_units)) if decided else None
        result["intervals"][kind] = _interval(n_units, share, resamples, seed) if decided else None
    return PairAgreement(**result)


def oracle_progress(prefix: str, question: str, gold: Sequence[GoldStep], *, at_step: bool) -> tuple[int, int]:
    """The oracle's ranking key of a prefix: (1, its steps) without an error step, (0, index of its first error)
    with one, compared as tuples: any error-free prefix ranks above any prefix with an error, more correct steps
    rank higher, and a later first error ranks above an earlier one. A prefix cut inside a step (`at_step` False)
    is labelled as truncated (a number at its very end is no step).

    >>> from procrl.rewards.oracle import gold_steps_from_json
    >>> gold = gold_steps_from_json('[[3,"+",5,8],[8,"+",4,12]]')
    >>> [oracle_progress(p, "3 seeds, 5 more, 4 more", gold, at_step=True) for p in
    ...  ["3 + 5 = 8.\\n\\n", "3 + 5 = 8.\\n\\n8 + 4 = 12.\\n\\n", "3 + 5 = 9.\\n\\n"]]
    [(1, 1), (1, 2), (0, 0)]
    """
    labels = oracle_labels(prefix, question, gold, truncated=not at_step)
    return (1, len(labels.steps)) if labels.first_error is None else (0, labels.first_error)


def reference_accuracy(
    credit: Sequence[float],
    pair_types: Sequence[str],
    problem_ids: Sequence[str],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Pairwise accuracy of a reference ranking from per-pair credit (1: it prefers the chosen side, 1/2: a tie, 0),
    per pair type and "all": `{kind: {"accuracy", "interval", "pairs"}}`, the interval a bootstrap over problems.

    >>> reference_accuracy([1.0, 0.5, 0.0], ["vertical", "vertical", "horizontal"], ["a", "a", "b"], resamples=0)["all"]
    {'accuracy': 0.5, 'interval': None, 'pairs': 3}
    """
    if not len(credit) == len(pair_types) == len(problem_ids):
        raise ValueError("reference_accuracy: give one credit, pair type and problem id per pair")
    units, n_units = _unit_index(problem_ids)
    result = {}
    for kind in ["all", *sorted(set(pair_types))]:
        rows = [i for i in range(len(credit)) if kind in ("all", pair_types[i])]
        sums = np.zeros((n_units, 2))
        for i in rows:
            sums[units[i]] += (credit[i], 1.0)

        def share(idx: np.ndarray, sums=sums) -> float:
            total = sums[idx].sum(axis=0)
            return float(total[0] / total[1]) if total[1] else math.nan

        result[kind] = {
            "accuracy": share(np.arange(n_units)) if rows else None,
            "interval": _interval(n_units, share, resamples, seed) if rows else None,
            "pairs": len(rows),
        }
    return result


def _credit(a, b) -> float:
    return 1.0 if a > b else 0.5 if a == b else 0.0


def _short_name(model: str) -> str:
    return Path(model.rstrip("/")).name or model


def gain_check(build_dir: str | Path, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """The sanity check on a finished PUM-Math build (`procrl build-pum-data`'s `output_dir`): reads its
    `stats.json` (the config: data set, slice, prompt, separator, students), `prefixes.jsonl` and `pairs.parquet`,
    loads the problems again for their questions and gold steps, and returns

    `{"build_dir", "dataset", "problems", "prefixes", "classes": {rule: {class: count}}, "contrast": {rule: {value:
    GainContrast dict}}, "pairs": {rule: PairAgreement dict}, "references": {"length", "oracle_progress":
    reference_accuracy dicts, "oracle_progress_unmatched_pairs"}}`, where the values are "G" (the intrinsic
    utility), "mean_g" (the students' mean raw gain) and "g/<student>" (each student's raw gain); the references
    are the pairwise accuracies of "the longer prefix (in tokens) wins" and of `oracle_progress` on all the pairs
    (what a PUM's held-out accuracy is read against: the baseline and a process-aware ranking).

    Raises:
        FileNotFoundError: a file of the build is missing.
        ValueError: the build's problems have no gold steps (not a step-checkable set), or a prefix's problem is not
            in the build's slice.
    """
    build = Path(build_dir)
    stats = json.loads((build / "stats.json").read_text())
    config = stats["config"]
    separator = config.get("step_separator", DEFAULT_SEPARATOR)
    rows = load_math_dataset(
        config["dataset"],
        split=config.get("split"),
        start=config.get("start", 0),
        end=config.get("end"),
        prompt_template=resolve_template(config.get("prompt_template", "one_shot")),
    )
    if GOLD_STEPS_COLUMN not in rows.column_names:
        raise ValueError(
            f"{config['dataset']!r} has no {GOLD_STEPS_COLUMN} column: the gain check needs a step-checkable set "
            "(arith-...)"
        )
    problems = {r["problem_id"]: (r["question"], gold_steps_from_json(r[GOLD_STEPS_COLUMN])) for r in rows}
    records = [json.loads(line) for line in (build / "prefixes.jsonl").read_text().splitlines() if line.strip()]
    if any("at_step" not in r for r in records):
        raise ValueError(
            f"{build}/prefixes.jsonl has no at_step field (built before it was recorded); run the build again with the "
            "same config: its rollout cache makes that quick"
        )
    missing = {r["problem_id"] for r in records} - set(problems)
    if missing:
        raise ValueError(f"{len(missing)} prefix problems are not in {config['dataset']}: {sorted(missing)[:3]}")
    pairs = datasets.load_dataset("parquet", data_files=str(build / "pairs.parquet"), split="train")
    students = [_short_name(s) for s in config["students"]]
    values = {"G": [r["utility"] for r in records], "mean_g": [float(np.mean(r["gains"])) for r in records]}
    if len(set(students)) < len(students):  # two students' paths end alike: keep both, by index
        students = [f"{s}:{name}" for s, name in enumerate(students)]
    values |= {f"g/{name}": [r["gains"][s] for r in records] for s, name in enumerate(students)}
    problem_ids = [r["problem_id"] for r in records]
    report: dict[str, Any] = {
        "build_dir": str(build),
        "dataset": config["dataset"],
        "problems": len({r["problem_id"] for r in records}),
        "prefixes": len(records),
        "classes": {},
        "contrast": {},
        "pairs": {},
    }
    # what a ranking reaches on these very pairs: "the longer prefix wins" and the oracle's progress key
    progress = {
        (r["problem_id"], r["prefix"]): oracle_progress(r["prefix"], *problems[r["problem_id"]], at_step=r["at_step"])
        for r in records
    }
    chosen_keys = [progress.get((p, t)) for p, t in zip(pairs["problem_id"], pairs["chosen"], strict=True)]
    rejected_keys = [progress.get((p, t)) for p, t in zip(pairs["problem_id"], pairs["rejected"], strict=True)]
    known = [i for i, (c, r) in enumerate(zip(chosen_keys, rejected_keys, strict=True)) if c and r]
    types, ids = list(pairs["pair_type"]), list(pairs["problem_id"])
    report["references"] = {
        "length": reference_accuracy(
            [_credit(c, r) for c, r in zip(pairs["chosen_tokens"], pairs["rejected_tokens"], strict=True)],
            types, ids, resamples=resamples, seed=seed,
        ),
        "oracle_progress": reference_accuracy(
            [_credit(chosen_keys[i], rejected_keys[i]) for i in known], [types[i] for i in known],
            [ids[i] for i in known], resamples=resamples, seed=seed,
        ),
        "oracle_progress_unmatched_pairs": len(types) - len(known),
    }  # fmt: skip
    for rule in WRONG_RULES:
        classes = [
            prefix_oracle_class(
                r["prefix"], *problems[r["problem_id"]], at_step=r["at_step"], wrong=rule,
                separator=separator,
            )
            for r in records
        ]  # fmt: skip
        report["classes"][rule] = dict(Counter(classes))
        report["contrast"][rule] = {
            name: gain_contrast(v, classes, problem_ids, resamples=resamples, seed=seed).to_dict()
            for name, v in values.items()
        }
        by_text = {(r["problem_id"], r["prefix"]): c for r, c in zip(records, classes, strict=True)}
        report["pairs"][rule] = pair_agreement(
            [by_text.get((p, t), "unknown") for p, t in zip(pairs["problem_id"], pairs["chosen"], strict=True)],
            [by_text.get((p, t), "unknown") for p, t in zip(pairs["problem_id"], pairs["rejected"], strict=True)],
            list(pairs["pair_type"]),
            list(pairs["problem_id"]),
            resamples=resamples,
            seed=seed,
        ).to_dict()
    return report
