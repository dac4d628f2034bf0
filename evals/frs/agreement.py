"""How far an FRS judge agrees with a reference judge on the same traces (issue 28 §4): an LLM judge against the step
oracle's judge (`--judge oracle`, `procrl.evals.frs.oracle_judge`) on the arith tasks, where the oracle is right by
construction.

    rows = read_judged(llm_run)                                        # an LLM judge's `procrl frs` run
    agreement = judge_agreement(rows, oracle_reference(rows))           # `procrl frs agreement RUN --output-dir D`
    agreement = judge_agreement(rows, read_judged(other_run))          # `... --reference OTHER_RUN`

**Matching.** The reference is the step oracle's judge applied to the judged run's own traces (`oracle_reference`:
each row's `gold_steps` and problem text, exactly `--judge oracle`'s scores), or another `procrl frs` run over the
same traces; a trace is keyed by (problem_id, completion text), and the first fully scored row of a key counts
(identical completions of one problem get identical judgements from a deterministic judge). Only traces that both
judges scored on all four dimensions enter (`matched`); the judged run usually scored fewer (FRS judges the top-K%
traces and one random trace per question, `procrl.evals.frs.compute.plan_judging`).

**Spearman's ρ** on the reasoning score RS = (sum − 4) / 16 × 100: Pearson's correlation of the mid-ranks (ties
share their mean rank); undefined (None) with fewer than 2 traces or when either side is constant. Interval:
percentile bootstrap over problems (`procrl.evals.stats.bootstrap_interval`); resamples where ρ is undefined are
left out.

**Cohen's κ** per dimension (faithfulness, utility, coherence, factuality; categories 1-5, unweighted; Cohen 1960):
κ = (p_o − p_e) / (1 − p_e), p_o the share of traces with the same score, p_e = Σ_c p_judge(c)·p_reference(c);
undefined when p_e = 1 (both judges give one and the same score to every trace). κ = 0 is chance agreement, which
is also what a judge that gives every trace the same score gets against any reference.

**Near-constant check.** `modal_share`: the share of matched traces that get the judge's most common RS; 1.0 is a
constant judge, whatever its mean.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from procrl.evals.frs.judging import DIMENSIONS
from procrl.evals.frs.oracle_judge import oracle_scores
from procrl.evals.reporting import markdown_table
from procrl.evals.stats import BOOTSTRAP_RESAMPLES, bootstrap_interval, format_estimate, ratio
from procrl.rewards.oracle import GOLD_STEPS_COLUMN, gold_steps_from_json, oracle_labels

__all__ = [
    "DIMENSIONS",
    "JudgeAgreement",
    "cohen_kappa",
    "format_agreement",
    "judge_agreement",
    "oracle_reference",
    "read_judged",
    "spearman",
]

CATEGORIES = (1, 2, 3, 4, 5)
JUDGED_FILE = "judged_traces.jsonl"


def _midranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end - 1) / 2 + 1
            start = end
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation of two equal-length sequences (mid-ranks for ties); None (undefined) with fewer
    than 2 pairs or when either side is constant.

    Raises:
        ValueError: the lengths differ.

    >>> spearman([1, 2, 3, 4], [10, 20, 30, 40]), spearman([1, 2, 3], [3, 2, 1]), spearman([1, 1, 1], [1, 2, 3])
    (1.0, -1.0, None)
    >>> round(spearman([1, 2, 2, 3], [1, 3, 2, 4]), 4)   # ranks [1, 2.5, 2.5, 4] against [1, 3, 2, 4]
    0.9487
    """
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} values against {len(y)}")
    if len(x) < 2:
        return None
    rx, ry = _midranks(np.asarray(x, dtype=float)), _midranks(np.asarray(y, dtype=float))
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denominator = float(np.sqrt((dx * dx).sum() * (dy * dy).sum()))
    return float((dx * dy).sum() / denominator) if denominator > 0 else None


def cohen_kappa(a: Sequence[int], b: Sequence[int], categories: Sequence[int] = CATEGORIES) -> float | None:
    """Cohen's κ of two raters' labels over the same items (module docstring); None when there is no item or p_e = 1.

    Raises:
        ValueError: the lengths differ, or a label is not in `categories`.

    >>> cohen_kappa([1, 2, 3, 4], [1, 2, 3, 4]), cohen_kappa([5, 5, 5], [5, 5, 5])
    (1.0, None)
    >>> cohen_kappa([5, 5, 5, 5], [1, 5, 3, 5])   # a constant judge: p_o = p_e = 0.5
    0.0
    >>> cohen_kappa([1, 1, 2, 2], [1, 2, 2, 2])   # p_o 0.75, p_e 0.5 * 0.25 + 0.5 * 0.75 = 0.5
    0.5
    """
    if len(a) != len(b):
        raise ValueError(f"cohen_kappa: {len(a)} labels against {len(b)}")
    if bad := sorted({v for v in (*a, *b) if v not in categories}):
        raise ValueError(f"cohen_kappa: labels {bad} are not among the categories {list(categories)}")
    if not a:
        return None
    n = len(a)
    p_o = sum(x == y for x, y in zip(a, b, strict=True)) / n
    count_a, count_b = Counter(a), Counter(b)
    p_e = sum(count_a[c] * count_b[c] for c in categories) / (n * n)
    return (p_o - p_e) / (1 - p_e) if p_e < 1 else None


def read_judged(run_dir: str | Path) -> list[dict]:
    """The rows of a `procrl frs` run's judged_traces.jsonl.

    Raises:
        FileNotFoundError: the run has no judged_traces.jsonl (the message names the path).
    """
    path = Path(run_dir) / JUDGED_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no judged traces (is {run_dir} a finished `procrl frs` run?)")
    with path.open() as handle:
        return [json.loads(line) for line in handle if line.strip()]


def oracle_reference(rows: Iterable[dict]) -> list[dict]:
    """The step oracle's FRS scores of judged-trace rows (`procrl.evals.frs.oracle_judge.oracle_scores`, the scores
    `--judge oracle` gives): each row's problem_id and completion with the oracle's `scores`.

    Raises:
        ValueError: a row without `gold_steps` (not a step-checkable problem: the message names it), or gold steps
            that do not parse.
    """
    reference = []
    for row in rows:
        if not row.get(GOLD_STEPS_COLUMN):
            raise ValueError(
                f"problem {row.get('problem_id')}: no `{GOLD_STEPS_COLUMN}`: the oracle judges arith tasks only"
            )
        gold = gold_steps_from_json(row[GOLD_STEPS_COLUMN])
        labels = oracle_labels(row["completion"], row["problem"], gold, truncated=bool(row.get("truncated")))
        reference.append(
            {"problem_id": row["problem_id"], "completion": row["completion"], "scores": oracle_scores(labels)}
        )
    return reference


def _scored(rows: Iterable[dict]) -> dict[tuple[str, str], dict[str, int]]:
    scored: dict[tuple[str, str], dict[str, int]] = {}
    for row in rows:
        scores = row.get("scores") or {}
        if all(isinstance(scores.get(d), int) for d in DIMENSIONS):
            scored.setdefault((row["problem_id"], row["completion"]), {d: scores[d] for d in DIMENSIONS})
    return scored


def _rs(scores: dict[str, int]) -> float:
    return (sum(scores.values()) - 4) / 16 * 100


@dataclass
class JudgeAgreement:
    """`judge_agreement`'s result: counts, Spearman's ρ on RS with its interval, κ per dimension, mean RS of each
    judge (0-100) and the judge's modal-RS share (module docstring). None = undefined."""

    matched: int
    problems: int
    judge_scored: int
    reference_scored: int
    spearman_rs: float | None
    spearman_rs_interval: tuple[float, float] | None
    kappa: dict[str, float | None]
    exact_share: dict[str, float | None]
    mean_rs_judge: float | None
    mean_rs_reference: float | None
    modal_share: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def judge_agreement(
    judge_rows: Iterable[dict], reference_rows: Iterable[dict], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> JudgeAgreement:
    """Agreement of a judge's judged traces with a reference judge's on the traces both scored (module docstring).

    Args:
        judge_rows, reference_rows: judged_traces.jsonl rows (`read_judged`): problem_id, completion, scores.
        resamples: bootstrap draws for ρ's interval (0: none); seed: their seed.
    """
    judge, reference = _scored(judge_rows), _scored(reference_rows)
    keys = [key for key in judge if key in reference]
    a = [judge[key] for key in keys]
    b = [reference[key] for key in keys]
    rs_a, rs_b = np.array([_rs(s) for s in a]), np.array([_rs(s) for s in b])
    problems = sorted({key[0] for key in keys})
    rho = spearman(rs_a, rs_b)
    interval = None
    if rho is not None and resamples > 0 and len(problems) > 1:
        index = {p: i for i, p in enumerate(problems)}
        members = [[] for _ in problems]
        for row, key in enumerate(keys):
            members[index[key[0]]].append(row)

        def statistic(idx: np.ndarray) -> float:
            rows = [r for i in idx for r in members[i]]
            value = spearman(rs_a[rows], rs_b[rows])
            return float("nan") if value is None else value

        interval = bootstrap_interval(len(problems), statistic, resamples=resamples, seed=seed)
    modal = Counter(rs_a.tolist()).most_common(1)[0][1] if keys else 0
    return JudgeAgreement(
        matched=len(keys),
        problems=len(problems),
        judge_scored=len(judge),
        reference_scored=len(reference),
        spearman_rs=rho,
        spearman_rs_interval=interval,
        kappa={d: cohen_kappa([s[d] for s in a], [s[d] for s in b]) for d in DIMENSIONS},
        exact_share={d: ratio(sum(x[d] == y[d] for x, y in zip(a, b, strict=True)), len(keys)) for d in DIMENSIONS},
        mean_rs_judge=float(rs_a.mean()) if keys else None,
        mean_rs_reference=float(rs_b.mean()) if keys else None,
        modal_share=ratio(modal, len(keys)),
    )


def format_agreement(rows: Sequence[tuple[str, JudgeAgreement]]) -> str:
    """A markdown table, one row per (label, agreement): counts, ρ on RS [95%], κ per dimension, mean RS of both,
    the modal-RS share; "–" where undefined."""
    header = ["judged run", "traces matched", "problems", "Spearman ρ (RS) [95%]"]
    header += [f"κ {d}" for d in DIMENSIONS] + ["mean RS judge", "mean RS reference", "modal-RS share"]
    table = []
    for label, ag in rows:
        cells = [label, ag.matched, ag.problems, format_estimate(ag.spearman_rs, ag.spearman_rs_interval)]
        cells += [format_estimate(ag.kappa[d]) for d in DIMENSIONS]
        cells += [format_estimate(ag.mean_rs_judge, spec=".1f"), format_estimate(ag.mean_rs_reference, spec=".1f")]
        table.append([*cells, format_estimate(ag.modal_share)])
    return markdown_table(header, table, align=["left"] + ["right"] * (len(header) - 1)) + "\n"
