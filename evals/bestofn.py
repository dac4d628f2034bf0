"""Best-of-k curves from `procrl select` reports: every selection method at every k from ONE sample set.

The PiCSAR paper (arXiv 2508.21787) compares PiCSAR@6 with self-consistency@16 and the PUM paper a PUM's best-of-N
with majority vote; both read off one table when every method picks from the same n samples per problem, with k of
them visible (`bestofn_curves`):

- `random`: the expected accuracy of a uniform pick: the problem's mean correctness at every k (exact, no draw);
- `majority` (self-consistency): the most frequent non-None extracted answer of S, equal answers counted together
  as the outcome check grades them ("0.5" = "1/2"), ties to the answer whose first occurrence in S is earliest; no
  answer in S -> wrong;
- `longest`: the most `num_tokens` (the length baseline), ties earliest;
- `pass@k`: some candidate of S is correct (the ceiling of any selector), exactly 1 - C(n - c, k) / C(n, k);
- `<name>` for every `score_<name>` column: argmax of the score over S, ties earliest, None never picked, all None
  -> wrong (abstain). A name equal to one of the baselines' is kept as `score_<name>`;
- `greedy` (only when every problem has a `greedy` entry): its correctness, the same at every k.

Expected accuracy of a method at k < n, per problem: the mean of its correctness over `subsets` random k-subsets
drawn with `random.Random(f"{seed}:{problem_id}:{k}")` (`draw_subsets`: the SAME subsets for every method, so the
methods are paired; every k-subset once when there are no more than `subsets`); at k == n the full set, once. The curve point is the mean over problems with a percentile
bootstrap 95% interval over problems (`procrl.evals.stats.bootstrap_mean_interval`).

`score_auroc`: the within-problem AUROC of each score column and of `num_tokens` (the PUM paper's ranking
robustness): P(s_correct > s_incorrect) + 0.5 P(tie) over the (correct, incorrect) pairs of scored candidates.

The pick rules are `procrl select`'s own (`procrl.evals.selection_rules`: `pick_argmax` = `select_argmax`,
`pick_majority` = `select_majority`; no torch). Reading the reports:
`procrl.evals.bestofn_data` (`load_reports`); the table and plot: `procrl.evals.bestofn_plot`; all three
re-exported here.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from procrl.evals.stats import BOOTSTRAP_RESAMPLES, bootstrap_mean_interval, ratio
from procrl.evals.bestofn_data import BASELINES, Problem, Samples, load_reports
from procrl.evals.bestofn_plot import bestofn_table, plot_bestofn
from procrl.evals.selection_rules import select_argmax as pick_argmax
from procrl.evals.selection_rules import select_majority as pick_majority
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "BASELINES",
    "DEFAULT_KS",
    "Problem",
    "Samples",
    "bestofn_curves",
    "bestofn_table",
    "draw_subsets",
    "load_reports",
    "pairwise_auroc",
    "pick_argmax",
    "pick_majority",
    "plot_bestofn",
    "score_auroc",
]

DEFAULT_KS = (1, 2, 4, 6, 8, 16)


# ----------------------------------------------------------------------------------------------------------
# Pick rules and the methods
# ----------------------------------------------------------------------------------------------------------


# A method: (problem, subset of candidate indices in their original order) -> correctness in [0, 1].
Method = Callable[[Problem, Sequence[int]], float]


def _random(problem: Problem, subset: Sequence[int]) -> float:
    return sum(problem.correct[i] for i in subset) / len(subset)


def _random_exact(problem: Problem, k: int) -> float:
    """E over k-subsets of a uniform pick's correctness = the problem's mean correctness (any k)."""
    return sum(problem.correct) / len(problem.correct)


def _pass_at_k_exact(problem: Problem, k: int) -> float:
    """The unbiased pass@k estimator 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, arXiv 2107.03374, eq. 1): the
    probability that a uniformly drawn k-subset of the n samples, c of them correct, holds a correct one."""
    n, c = len(problem.correct), sum(problem.correct)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _majority(problem: Problem, subset: Sequence[int]) -> float:
    pick = pick_majority([problem.extracted[i] for i in subset])
    return 0.0 if pick is None else float(problem.correct[subset[pick]])


def _longest(problem: Problem, subset: Sequence[int]) -> float:
    pick = pick_argmax([problem.num_tokens[i] for i in subset])
    return 0.0 if pick is None else float(problem.correct[subset[pick]])


def _pass_at_k(problem: Problem, subset: Sequence[int]) -> float:
    return float(any(problem.correct[i] for i in subset))


@dataclass(frozen=True)
class _Argmax:
    """The argmax method of one score column (a picklable callable)."""

    name: str

    def __call__(self, problem: Problem, subset: Sequence[int]) -> float:
        scores = problem.scores[self.name]
        pick = pick_argmax([scores[i] for i in subset])
        return 0.0 if pick is None else float(problem.correct[subset[pick]])


def _methods(samples: Samples) -> dict[str, Method]:
    """The subset methods in table order: random, majority, longest, the score columns, pass@k (the ceiling)."""
    methods: dict[str, Method] = {"random": _random, "majority": _majority, "longest": _longest}
    methods |= {name: _Argmax(name) for name in samples.score_names}
    methods["pass@k"] = _pass_at_k
    return methods


# methods whose expectation over k-subsets has a closed form: computed exactly, not from the drawn subsets
_EXACT: dict[str, Callable[[Problem, int], float]] = {"random": _random_exact, "pass@k": _pass_at_k_exact}


# ----------------------------------------------------------------------------------------------------------
# Curves and AUROC
# ----------------------------------------------------------------------------------------------------------


def draw_subsets(problem_id: str, n: int, k: int, subsets: int, seed: int) -> list[tuple[int, ...]]:
    """The k-subsets of [0, n) a problem's methods are averaged over, each sorted (candidates in original order).

    k == n: the full set, once. C(n, k) <= `subsets`: every k-subset once (the expectation is then exact). Else
    `subsets` draws of `random.Random(f"{seed}:{problem_id}:{k}").sample`.

    Raises:
        ValueError: k < 1, k > n or subsets < 1.

    >>> draw_subsets("p", 3, 3, 64, 0)
    [(0, 1, 2)]
    >>> draw_subsets("p", 4, 2, 5, 0) == draw_subsets("p", 4, 2, 5, 0)
    True
    """
    if not 1 <= k <= n:
        raise ValueError(f"k = {k} must be in [1, n = {n}] (n samples per problem); use --ks with values <= {n}")
    if subsets < 1:
        raise ValueError(f"subsets must be >= 1, got {subsets}")
    if k == n:
        return [tuple(range(n))]
    if math.comb(n, k) <= subsets:
        return list(itertools.combinations(range(n), k))
    rng = random.Random(f"{seed}:{problem_id}:{k}")
    return [tuple(sorted(rng.sample(range(n), k))) for _ in range(subsets)]


def bestofn_curves(
    samples: Samples,
    ks: Sequence[int] = DEFAULT_KS,
    *,
    subsets: int = 64,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> dict:
    """Accuracy of every method at every k, and the score columns' within-problem AUROC (a json-safe dict).

    Args:
        samples: `load_reports`'s merged sample set (n candidates per problem).
        ks: subset sizes (each in [1, n]; sorted, duplicates dropped).
        subsets: random k-subsets per problem and k < n; seed: their seed and the bootstrap's;
        resamples: bootstrap draws of the intervals.

    Returns:
        {"command": "bestofn", "settings": {ks, subsets, seed, resamples, n, reports}, "problems": count,
        "unparseable_gold": count, "problem_ids": [...], "methods": [row names in table order], "curves": {method:
        [{"k", "accuracy", "ci_low", "ci_high"}]} (fractions in [0, 1]; all three None without problems: undefined,
        not 0), "per_problem": {method: {str(k): [each problem's expected accuracy]}} (for paired comparisons),
        "auroc": `score_auroc`'s dict}.

    Raises:
        ValueError: no ks, a k outside [1, n], subsets < 1.
    """
    ks = sorted(set(int(k) for k in ks))
    if not ks:
        raise ValueError("ks is empty; give subset sizes, e.g. --ks 1,2,4,6,8,16")
    for k in ks:
        draw_subsets("", samples.n, k, subsets, seed)  # the k and subsets checks, before any work
    methods = _methods(samples)
    per_problem: dict[str, dict[str, list[float]]] = {m: {str(k): [] for k in ks} for m in methods}
    for problem in samples.problems:
        for k in ks:
            draws = draw_subsets(problem.problem_id, samples.n, k, subsets, seed)
            for name, method in methods.items():
                exact = _EXACT.get(name)
                value = exact(problem, k) if exact else sum(method(problem, s) for s in draws) / len(draws)
                per_problem[name][str(k)].append(value)
    if samples.problems and all(p.greedy is not None for p in samples.problems):
        greedy = [float(p.greedy) for p in samples.problems]
        per_problem = {"greedy": {str(k): greedy for k in ks}} | per_problem
    else:
        have = sum(p.greedy is not None for p in samples.problems)
        if have:
            logger.info("bestofn: %d of %d problems have a greedy entry; no greedy row", have, len(samples.problems))
    curves = {}
    for name, by_k in per_problem.items():
        curves[name] = []
        for k in ks:
            values = by_k[str(k)]  # empty without problems: no accuracy, no interval
            low, high = bootstrap_mean_interval(values, resamples=resamples, seed=seed) if values else (None, None)
            curves[name].append({"k": k, "accuracy": ratio(sum(values), len(values)), "ci_low": low, "ci_high": high})
    settings = {"ks": ks, "subsets": subsets, "seed": seed, "resamples": resamples, "n": samples.n}
    return {
        "command": "bestofn",
        "settings": settings | {"reports": samples.reports},
        "problems": len(samples.problems),
        "unparseable_gold": samples.unparseable_gold,
        "problem_ids": [p.problem_id for p in samples.problems],
        "methods": list(per_problem),
        "curves": curves,
        "per_problem": per_problem,
        "auroc": score_auroc(samples, resamples=resamples, seed=seed),
    }


def pairwise_auroc(scores: Sequence[float | None], correct: Sequence[bool]) -> float | None:
    """P(score of a correct candidate > score of an incorrect one) + 0.5 P(tie), over all (correct, incorrect)
    pairs of scored (non-None) candidates; None without at least one scored candidate of each kind.

    >>> pairwise_auroc([3.0, 1.0, 1.0, None], [True, False, True, False])  # pairs (3>1), (1=1): (1 + 0.5) / 2
    0.75
    >>> pairwise_auroc([1.0, 2.0], [True, True]) is None
    True
    """
    pos = [s for s, c in zip(scores, correct, strict=True) if s is not None and math.isfinite(s) and c]
    neg = [s for s, c in zip(scores, correct, strict=True) if s is not None and math.isfinite(s) and not c]
    if not pos or not neg:
        return None
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def score_auroc(samples: Samples, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> dict:
    """Within-problem AUROC (`pairwise_auroc`) of `longest` (score = num_tokens) and of every score column.

    Returns:
        {name: {"auroc": mean over the problems with a correct and an incorrect scored candidate, "problems": their
        count, "ci_low", "ci_high": bootstrap 95% interval over them}}; with no such problem all three are None.
    """
    columns = {"longest": [[float(t) for t in p.num_tokens] for p in samples.problems]}
    columns |= {name: [p.scores[name] for p in samples.problems] for name in samples.score_names}
    out = {}
    for name, rows in columns.items():
        values = [pairwise_auroc(row, p.correct) for row, p in zip(rows, samples.problems, strict=True)]
        values = [v for v in values if v is not None]
        if not values:
            out[name] = {"auroc": None, "problems": 0, "ci_low": None, "ci_high": None}
            continue
        low, high = bootstrap_mean_interval(values, resamples=resamples, seed=seed)
        out[name] = {"auroc": sum(values) / len(values), "problems": len(values), "ci_low": low, "ci_high": high}
    return out
