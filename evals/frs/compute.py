"""The FRS computation (part of `procrl.evals.frs`): which traces to judge, judging them, and the summary.

Only the traces that are used are judged (`plan_judging`): the top floor(max(K%) * N) traces, plus what the
selection gain needs (`FRSConfig.random_baseline`); the bin estimator (`estimator="bins"`) judges at most
`max_per_bin` traces of each equal-count confidence bin that overlaps the top max(K)%. FRS@K = mean RS over the kept
traces that have a score; the selection gain is the mean, over questions with >= 2 ranked traces, of
RS(most confident trace) - RS(random trace). Each is computed twice: from RS (the validated scores) and from
RS_expected (the G-Eval expected scores, `Trace.rs_expected`), the latter only when every scored trace has expected
scores (else None, and `FRSReport.n_scored_without_probs` says how many lack them). `rs_auc` / `rs_expected_auc`:
how well RS separates correct from incorrect final answers over the scored traces
(`procrl.evals.stats.auroc`).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from procrl.evals.frs.arguments import FRSConfig
from procrl.evals.frs.confidence import kept_count, rank_by_confidence
from procrl.evals.frs.judging import ReasoningJudgement, expected_scores, judge_messages
from procrl.evals.frs.oracle_judge import OracleJudge
from procrl.evals.frs.traces import FRSReport, Trace
from procrl.evals.stats import auroc

if TYPE_CHECKING:  # the judge client is only needed when something is judged
    from procrl.judges import Judge, JudgeResult

__all__ = ["compute_frs", "judge_traces", "plan_judging", "summarize"]

_RS, _RS_EXPECTED = "rs", "rs_expected"  # the two `Trace` properties every estimate can be computed from


def compute_frs(
    traces: Sequence[Trace],
    judge: Judge | OracleJudge | None,
    config: FRSConfig | None = None,
    *,
    progress: bool = True,
) -> FRSReport:
    """Judge the traces FRS needs (see `plan_judging`) and summarise them.

    Args:
        traces: every trace of one (model, benchmark); their `scores`/`unscored` fields are filled in place.
        judge: a `procrl.judges.Judge`, or the `OracleJudge` (`judge: oracle`, traces with `gold_steps`); None
            computes only what needs no judge (accuracies, confidences).

    Raises:
        ValueError: the `OracleJudge` and a trace it must judge without usable gold steps.
        config: `FRSConfig()` when None.
        progress: show the judge's progress bar.
    """
    config = config or FRSConfig()
    if judge is not None:
        judge_traces(traces, plan_judging(traces, config), judge, config, progress=progress)
    stats = getattr(judge, "stats", None)
    return summarize(traces, config, judge_stats=stats.as_dict() if hasattr(stats, "as_dict") else None)


def plan_judging(traces: Sequence[Trace], config: FRSConfig) -> list[int]:
    """Indices (ascending) of the traces that must be judged: the FRS@K sets up to max(K), and the traces the
    selection gain compares. Nothing else is judged."""
    ranked = rank_by_confidence([t.confidence for t in traces])
    needed: set[int] = set()
    if config.estimator == "topk":
        needed.update(ranked[: kept_count(len(ranked), max(config.k_values))])
    else:
        for members in _bins(ranked, config):
            needed.update(members)
    if config.selection_gain:
        for group in _question_groups(traces, ranked).values():
            if len(group) < 2:
                continue
            if config.random_baseline == "mean":
                needed.update(group)
            else:
                needed.update({group[0], _random_member(traces, group, config.seed)})
    return sorted(needed)


def judge_traces(
    traces: Sequence[Trace],
    indices: Sequence[int],
    judge: Judge | OracleJudge,
    config: FRSConfig,
    *,
    progress: bool = True,
) -> None:
    """Judge `traces[i]` for every i in `indices` (one batched call, so the client's concurrency applies) and
    store each result in the trace: `scores` (and `expected_scores` when the result carries probabilities for all
    four dimensions) when valid, else `unscored` with the reason. The request shows the final-answer check unless
    `config.judge_sees_correctness` is False. The `OracleJudge` gets the traces themselves (`OracleJudge.judge_traces`)
    and its results are stored the same way.

    Raises:
        RuntimeError: the judge returned another number of results than requests (a backend bug).
        ValueError: the `OracleJudge` and a trace without usable gold steps."""
    if not indices:
        return
    if isinstance(judge, OracleJudge):  # the structured problem, not chat messages (`procrl.evals.frs.oracle_judge`)
        results = judge.judge_traces([traces[i] for i in indices])
    else:
        requests = [
            judge_messages(
                traces[i].problem,
                traces[i].completion,
                traces[i].gold,
                traces[i].correct,
                max_trace_chars=config.max_trace_chars,
                show_final_correct=config.judge_sees_correctness,
            )
            for i in indices
        ]
        results = judge.judge(requests, ReasoningJudgement, desc="FRS judge", progress=progress)
    if len(results) != len(indices):
        raise RuntimeError(f"the judge returned {len(results)} results for {len(indices)} requests")
    for i, result in zip(indices, results, strict=True):
        traces[i].scores, traces[i].unscored = _scores_of(result)
        traces[i].expected_scores = expected_scores(result.probs) if traces[i].scores is not None else None


def _scores_of(result: JudgeResult) -> tuple[dict[str, int] | None, str | None]:
    if result.value is None:
        return None, result.unscored or "unscored"
    try:
        value = result.value
        if isinstance(value, ReasoningJudgement):
            value = value.model_dump()  # re-validated below: a judge may have built it with model_construct
        judgement = ReasoningJudgement.model_validate(value)  # strict: no coercion of a bool, "3" or 3.0
    except Exception:  # a judge that returned something else than the schema: a typed failure, not a crash
        return None, "schema"
    return judgement.model_dump(), None


def summarize(traces: Sequence[Trace], config: FRSConfig, judge_stats: dict[str, Any] | None = None) -> FRSReport:
    """FRS@K, accuracies, selection gain and the AUC of RS (each from RS and from RS_expected) from traces whose
    judged ones carry `scores` / `expected_scores` (see `compute_frs` and the module docstring)."""
    ranked = rank_by_confidence([t.confidence for t in traces])
    n = len(ranked)
    kept_at_k = {k: kept_count(n, k) for k in config.k_values}
    at_k: dict[float, float | None] = {}
    dropped_at_k: dict[float, int] = {}
    accuracy_at_k: dict[float, float | None] = {}
    bins = _bins(ranked, config) if config.estimator == "bins" else None
    scored = [t for t in traces if t.scores is not None]
    without_probs = sum(t.expected_scores is None for t in scored)
    with_expected = bool(scored) and without_probs == 0  # RS_expected estimates only when no trace lacks them
    at_k_expected: dict[float, float | None] = {}
    for k, keep in kept_at_k.items():
        kept = ranked[:keep]
        accuracy_at_k[k] = _accuracy(traces[i] for i in kept)
        at_k[k], dropped_at_k[k] = _frs_at(traces, ranked, bins, keep, _RS)
        at_k_expected[k] = _frs_at(traces, ranked, bins, keep, _RS_EXPECTED)[0] if with_expected else None
    judged = [t for t in traces if t.scores is not None or t.unscored is not None]
    gain, questions, dropped, gain_expected = None, 0, 0, None
    if config.selection_gain and judged:  # without any judgement there is nothing to compare
        gain, questions, dropped = _selection_gain(traces, ranked, config, _RS)
        if with_expected:
            gain_expected = _selection_gain(traces, ranked, config, _RS_EXPECTED)[0]
    correct = [t for t in scored if t.correct is True]
    incorrect = [t for t in scored if t.correct is False]
    confidences = [t.confidence for t in traces if t.confidence is not None]
    return FRSReport(
        k_percent=config.k_percent,
        score=at_k.get(config.k_percent),
        at_k=at_k,
        accuracy=_accuracy(traces),
        accuracy_kept=accuracy_at_k.get(config.k_percent),
        accuracy_at_k=accuracy_at_k,
        selection_gain=gain,
        selection_gain_questions=questions,
        selection_gain_dropped=dropped,
        n_problems=len({t.problem_id for t in traces}),
        n_traces=len(traces),
        n_ranked=n,
        n_no_confidence=len(traces) - n,
        n_unparseable_gold=sum(t.correct is None for t in traces),
        kept_at_k=kept_at_k,
        dropped_at_k=dropped_at_k,
        n_judged=len(judged),
        n_scored=sum(t.scores is not None for t in traces),
        unscored=dict(Counter(t.unscored for t in judged if t.unscored is not None)),
        mean_confidence=_mean(confidences),
        estimator=config.estimator,
        random_baseline=config.random_baseline,
        judge=judge_stats,
        score_expected=at_k_expected.get(config.k_percent),
        at_k_expected=at_k_expected,
        selection_gain_expected=gain_expected,
        n_scored_without_probs=without_probs,
        rs_auc=auroc([t.rs for t in correct], [t.rs for t in incorrect]),
        rs_expected_auc=(
            auroc([t.rs_expected for t in correct], [t.rs_expected for t in incorrect]) if with_expected else None
        ),
        auc_n_correct=len(correct),
        auc_n_incorrect=len(incorrect),
        judge_sees_correctness=config.judge_sees_correctness,
    )


# -- helpers --------------------------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _accuracy(traces) -> float | None:
    known = [t.correct for t in traces if t.correct is not None]
    return sum(known) / len(known) if known else None


def _hash_int(*parts: object) -> int:
    """A process-independent hash (Python's `hash` is salted per process)."""
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "big")


def _question_groups(traces: Sequence[Trace], ranked: Sequence[int]) -> dict[str, list[int]]:
    """Ranked traces of each question, most confident first."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i in ranked:
        groups[traces[i].problem_id].append(i)
    return groups


def _random_member(traces: Sequence[Trace], group: Sequence[int], seed: int) -> int:
    """One trace of the question, uniform over its ranked traces (the most confident included), fixed by the seed."""
    members = sorted(group)
    return members[_hash_int(seed, "random", traces[members[0]].problem_id) % len(members)]


def _frs_at(
    traces: Sequence[Trace], ranked: Sequence[int], bins: Sequence[Sequence[int]] | None, keep: int, attr: str
) -> tuple[float | None, int]:
    """(FRS over the top `keep` ranked traces, kept traces without a score) from the `attr` score of each trace."""
    if bins is not None:
        return _bin_estimate(traces, ranked, bins, keep, attr)
    scores = [getattr(traces[i], attr) for i in ranked[:keep]]
    valid = [s for s in scores if s is not None]
    return _mean(valid), len(scores) - len(valid)


def _selection_gain(
    traces: Sequence[Trace], ranked: Sequence[int], config: FRSConfig, attr: str
) -> tuple[float | None, int, int]:
    def rs(i: int) -> float | None:
        return getattr(traces[i], attr)

    gains, dropped = [], 0
    for group in _question_groups(traces, ranked).values():
        if len(group) < 2:
            continue
        if config.random_baseline == "mean":
            scored = [i for i in group if rs(i) is not None]  # "valid traces": ranked and scored
            if len(scored) < 2:
                dropped += 1
                continue
            gains.append(rs(scored[0]) - _mean([rs(i) for i in scored]))
        else:
            top, pick = rs(group[0]), rs(_random_member(traces, group, config.seed))
            if top is None or pick is None:
                dropped += 1
                continue
            gains.append(top - pick)
    return _mean(gains), len(gains), dropped


def _bins(ranked: Sequence[int], config: FRSConfig) -> list[list[int]]:
    """The judged sample of each equal-count confidence bin that overlaps the top max(K)% (ranked order).

    Bin b holds ranked positions [floor(b N / B), floor((b + 1) N / B)); its sample is the `max_per_bin` members
    with the smallest seeded hash (all of them when the bin is small). Bins past the top max(K)% are empty lists.
    """
    n, n_bins = len(ranked), config.n_bins
    reach = kept_count(n, max(config.k_values))
    position = {i: r for r, i in enumerate(ranked)}
    bins = []
    for b in range(n_bins):
        lo, hi = b * n // n_bins, (b + 1) * n // n_bins
        if lo >= reach:
            bins.append([])
            continue
        members = list(ranked[lo:hi])
        members.sort(key=lambda i: _hash_int(config.seed, "bin", i))
        bins.append(sorted(members[: config.max_per_bin], key=position.__getitem__))
    return bins


def _bin_estimate(
    traces: Sequence[Trace], ranked: Sequence[int], bins: Sequence[Sequence[int]], keep: int, attr: str = _RS
) -> tuple[float | None, int]:
    """FRS@K by the bin estimator: sum over bins of w_b * mean RS (the trace's `attr`: rs or rs_expected) of the
    bin's judged sample, w_b = the bin's share
    of the top `keep` ranked positions; bins without any score are left out and the weights renormalised.
    Returns (estimate, number of sampled traces in overlapping bins without a score)."""
    n, n_bins = len(ranked), len(bins)
    weighted, weight_total, dropped = 0.0, 0.0, 0
    for b, sample in enumerate(bins):
        lo, hi = b * n // n_bins, (b + 1) * n // n_bins
        overlap = max(0, min(hi, keep) - lo)
        if overlap == 0 or not sample:
            continue
        scores = [getattr(traces[i], attr) for i in sample]
        valid = [s for s in scores if s is not None]
        dropped += len(scores) - len(valid)
        if valid:
            weighted += overlap * _mean(valid)
            weight_total += overlap
    return (weighted / weight_total if weight_total else None), dropped
