"""Best-of-k curves of `procrl select --ks`: every selection method at every k from ONE sample set.

The PiCSAR paper (arXiv 2508.21787) compares PiCSAR@6 with self-consistency@16 and the PUM paper a PUM's best-of-N
with majority vote; both read off one table when every method picks from the same n samples per problem, with k of
them visible (`bestofn_curves`):

- `random`: the expected accuracy of a uniform pick: the problem's mean correctness at every k (exact, no draw);
- `majority` (self-consistency): the most frequent non-None extracted answer of S, equal answers counted together
  as the outcome check grades them ("0.5" = "1/2"), ties to the answer whose first occurrence in S is earliest; no
  answer in S -> wrong;
- `longest`: the most `num_tokens` (the length baseline), ties earliest;
- `pass@k`: some candidate of S is correct (the ceiling of any selector), exactly
  `procrl.evals.stats.pass_at_k` = 1 - C(n - c, k) / C(n, k);
- `<name>` for every `score_<name>` column: argmax of the score over S, ties earliest, None never picked, all None
  -> wrong (abstain). A name equal to one of the baselines' is kept as `score_<name>`;
- `greedy` (only when every problem has a `greedy` entry): its correctness, the same at every k.

Expected accuracy of a method at k < n, per problem: the mean of its correctness over `subsets` random k-subsets
drawn with `random.Random(f"{seed}:{problem_id}:{k}")` (`draw_subsets`: the SAME subsets for every method, so the
methods are paired; every k-subset once when there are no more than `subsets`); at k == n the full set, once. The
curve point is the mean over problems with a percentile bootstrap 95% interval over problems
(`procrl.evals.stats.bootstrap_mean_interval`).

`contrasts`: paired differences between two methods' curve points, e.g. PiCSAR at k = 6 against majority at
k = 16 ("picsar@6-majority@16", `parse_contrasts`): per problem the first method's expected accuracy minus the
second's, their mean with a percentile bootstrap 95% interval over problems (the methods pick from the same samples,
so the problems pair them).

`score_auroc`: the within-problem AUROC (`procrl.evals.stats.auroc`) of each score column and of `num_tokens` (the
PUM paper's ranking robustness): P(s_correct > s_incorrect) + 0.5 P(tie) over the (correct, incorrect) pairs of
scored candidates. A candidate whose score is None is left out of its problem's pairs (for a PiCSAR column: no
extractable answer, so always a wrong one); a problem without both a correct and an incorrect scored candidate (all
right, all wrong) has none and is left out. The value is the mean over the problems that have one, their count
beside it, with a percentile bootstrap 95% interval over them.

The samples are `procrl select`'s problem rows (`samples_from_problems`); the pick rules are its own
(`procrl.evals.selection_rules`: `pick_argmax` = `select_argmax`, `pick_majority` = `select_majority`; no torch).
The result renders as markdown (`bestofn_table`), a figure (`plot_bestofn`) and run-record metrics (`curve_metrics`).
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from procrl.evals.reporting import figure, markdown_table, pyplot
from procrl.evals.selection_rules import select_argmax as pick_argmax
from procrl.evals.selection_rules import select_majority as pick_majority
from procrl.evals.stats import (
    BOOTSTRAP_RESAMPLES,
    auroc,
    bootstrap_mean_interval,
    format_estimate,
    pass_at_k,
    ratio,
)
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "BASELINES",
    "Problem",
    "Samples",
    "bestofn_curves",
    "bestofn_table",
    "curve_metrics",
    "draw_subsets",
    "parse_contrasts",
    "parse_ks",
    "pick_argmax",
    "pick_majority",
    "plot_bestofn",
    "samples_from_problems",
    "score_auroc",
]

BASELINES = ("greedy", "random", "majority", "longest", "pass@k")  # the rows besides the score columns
SCORE_PREFIX = "score_"


# ----------------------------------------------------------------------------------------------------------
# The samples
# ----------------------------------------------------------------------------------------------------------


@dataclass
class Problem:
    """One problem's n candidates (original order): `correct` (n,) bools, `extracted` (n,) answers (None: none),
    `num_tokens` (n,) token counts, `scores` {name: (n,) floats or None}, `greedy` the greedy answer's correctness
    (None: no greedy entry; a greedy entry whose `correct` is not true counts as wrong)."""

    problem_id: str
    correct: list[bool]
    extracted: list[str | None]
    num_tokens: list[int]
    scores: dict[str, list[float | None]] = field(default_factory=dict)
    greedy: bool | None = None


@dataclass
class Samples:
    """The sample set: the `problems` with a parseable gold (each with `n` candidates) and how many were left out
    for an unparseable gold."""

    problems: list[Problem]
    n: int
    unparseable_gold: int

    @property
    def score_names(self) -> list[str]:
        """The score columns' names (without `score_`), in the order the candidates hold them."""
        return list(self.problems[0].scores) if self.problems else []


def samples_from_problems(problems: Sequence[dict], n: int) -> Samples:
    """The `Samples` of `procrl select`'s problem rows (`run_select`'s `problems`: `candidates[i]` with
    `extracted`, `correct` (None: unparseable gold), `num_tokens` and `score_<column>`; optionally `greedy`
    {"correct", ...}). Problems with an unparseable gold are left out and counted; a score that is None, NaN or
    infinite is None (never picked); a column a problem lacks is None for its candidates.

    Raises:
        ValueError: a problem without `n` candidates.
    """
    kept, names = [], {}
    for row in problems:
        candidates = row["candidates"]
        if len(candidates) != n:
            raise ValueError(f"problem {row.get('problem_id')!r} has {len(candidates)} candidates, expected n = {n}")
        if any(c["correct"] is None for c in candidates):
            continue
        scores = {}
        for key in dict.fromkeys(k for c in candidates for k in c if k.startswith(SCORE_PREFIX)):
            name = key.removeprefix(SCORE_PREFIX)
            name = key if name in BASELINES or not name else name
            names[name] = None
            scores[name] = [_finite(c.get(key)) for c in candidates]
        greedy = row.get("greedy")
        kept.append(
            Problem(
                problem_id=str(row["problem_id"]),
                correct=[bool(c["correct"]) for c in candidates],
                extracted=[None if c["extracted"] is None else str(c["extracted"]) for c in candidates],
                num_tokens=[int(c["num_tokens"]) for c in candidates],
                scores=scores,
                greedy=None if not isinstance(greedy, dict) else greedy.get("correct") is True,
            )
        )
    for problem in kept:  # every problem gets every column, in one order
        problem.scores = {name: problem.scores.get(name, [None] * n) for name in names}
    return Samples(kept, n, len(problems) - len(kept))


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def parse_ks(text: str) -> list[int]:
    """Comma-separated subset sizes as sorted distinct integers ("" -> []).

    Raises:
        ValueError: a word that is not an integer, or a k < 1.

    >>> parse_ks("8, 2,2"), parse_ks("")
    ([2, 8], [])
    """
    try:
        ks = sorted({int(w) for w in str(text).split(",") if w.strip()})
    except ValueError:
        raise ValueError(f"--ks {text!r} must be comma-separated integers, e.g. 1,2,4,8") from None
    if ks and ks[0] < 1:
        raise ValueError(f"--ks {text!r}: every k must be >= 1")
    return ks


# ----------------------------------------------------------------------------------------------------------
# The methods
# ----------------------------------------------------------------------------------------------------------


# A method: (problem, subset of candidate indices in their original order) -> correctness in [0, 1].
Method = Callable[[Problem, Sequence[int]], float]


def _random(problem: Problem, subset: Sequence[int]) -> float:
    return sum(problem.correct[i] for i in subset) / len(subset)


def _majority(problem: Problem, subset: Sequence[int]) -> float:
    pick = pick_majority([problem.extracted[i] for i in subset])
    return 0.0 if pick is None else float(problem.correct[subset[pick]])


def _longest(problem: Problem, subset: Sequence[int]) -> float:
    pick = pick_argmax([problem.num_tokens[i] for i in subset])
    return 0.0 if pick is None else float(problem.correct[subset[pick]])


def _pass(problem: Problem, subset: Sequence[int]) -> float:
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
    methods["pass@k"] = _pass
    return methods


# methods whose expectation over k-subsets has a closed form: computed exactly, not from the drawn subsets
_EXACT: dict[str, Callable[[Problem, int], float]] = {
    "random": lambda p, k: sum(p.correct) / len(p.correct),  # E of a uniform pick = the mean correctness (any k)
    "pass@k": lambda p, k: pass_at_k(len(p.correct), sum(p.correct), k),
}


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


def parse_contrasts(text: str) -> list[tuple[str, int, str, int]]:
    """Comma-separated `a@ka-b@kb` (method a at k = ka minus method b at k = kb) as tuples.

    Raises:
        ValueError: an entry not of that form or a k that is not a positive integer.

    >>> parse_contrasts("picsar@6-majority@16, pass@k@4-random@4")
    [('picsar', 6, 'majority', 16), ('pass@k', 4, 'random', 4)]
    """
    out = []
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        match = re.fullmatch(r"(.+)@(\d+)-(.+)@(\d+)", entry)
        if not match or int(match[2]) < 1 or int(match[4]) < 1:
            raise ValueError(f"contrast {entry!r}: write METHOD@K-METHOD@K, e.g. picsar@6-majority@16")
        out.append((match[1], int(match[2]), match[3], int(match[4])))
    return out


def _contrast(per_problem: dict, contrast: tuple[str, int, str, int], *, resamples: int, seed: int) -> dict:
    a, ka, b, kb = contrast
    for method, k in ((a, ka), (b, kb)):
        if method not in per_problem or str(k) not in per_problem[method]:
            raise ValueError(
                f"contrast {a}@{ka}-{b}@{kb}: no curve point {method}@{k} (methods: {', '.join(per_problem)}; the "
                "k must be one of --ks)"
            )
    diffs = [x - y for x, y in zip(per_problem[a][str(ka)], per_problem[b][str(kb)], strict=True)]
    low, high = bootstrap_mean_interval(diffs, resamples=resamples, seed=seed) if diffs else (None, None)
    return {
        "name": f"{a}@{ka}-{b}@{kb}",
        "problems": len(diffs),
        "first": ratio(sum(per_problem[a][str(ka)]), len(diffs)),
        "second": ratio(sum(per_problem[b][str(kb)]), len(diffs)),
        "diff": ratio(sum(diffs), len(diffs)),
        "ci_low": low,
        "ci_high": high,
    }


def bestofn_curves(
    samples: Samples,
    ks: Sequence[int],
    *,
    subsets: int = 64,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    contrasts: Sequence[tuple[str, int, str, int]] = (),
) -> dict:
    """Accuracy of every method at every k, and the score columns' within-problem AUROC (a json-safe dict).

    Args:
        samples: the sample set (n candidates per problem; `samples_from_problems`).
        ks: subset sizes (each in [1, n]; sorted, duplicates dropped).
        subsets: random k-subsets per problem and k < n; seed: their seed and the bootstrap's;
        resamples: bootstrap draws of the intervals.
        contrasts: `parse_contrasts` tuples: paired differences of two curve points (module docstring).

    Returns:
        {"settings": {ks, subsets, seed, resamples, n}, "problems": count, "unparseable_gold": count,
        "problem_ids": [...], "methods": [row names in table order], "curves": {method: [{"k", "accuracy",
        "ci_low", "ci_high"}]} (fractions in [0, 1]; all three None without problems: undefined, not 0),
        "per_problem": {method: {str(k): [each problem's expected accuracy]}} (for paired comparisons), "auroc":
        `score_auroc`'s dict, "contrasts": [{"name", "problems", "first", "second", "diff", "ci_low", "ci_high"}]}.

    Raises:
        ValueError: no ks, a k outside [1, n], subsets < 1, a contrast naming a method or k without a curve point.
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
    elif have := sum(p.greedy is not None for p in samples.problems):
        logger.info("bestofn: %d of %d problems have a greedy entry; no greedy row", have, len(samples.problems))
    curves = {}
    for name, by_k in per_problem.items():
        curves[name] = []
        for k in ks:
            values = by_k[str(k)]  # empty without problems: no accuracy, no interval
            low, high = bootstrap_mean_interval(values, resamples=resamples, seed=seed) if values else (None, None)
            curves[name].append({"k": k, "accuracy": ratio(sum(values), len(values)), "ci_low": low, "ci_high": high})
    return {
        "settings": {"ks": ks, "subsets": subsets, "seed": seed, "resamples": resamples, "n": samples.n},
        "problems": len(samples.problems),
        "unparseable_gold": samples.unparseable_gold,
        "problem_ids": [p.problem_id for p in samples.problems],
        "methods": list(per_problem),
        "curves": curves,
        "per_problem": per_problem,
        "auroc": score_auroc(samples, resamples=resamples, seed=seed),
        "contrasts": [_contrast(per_problem, c, resamples=resamples, seed=seed) for c in contrasts],
    }


def score_auroc(samples: Samples, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> dict:
    """Within-problem AUROC of `longest` (score = num_tokens) and of every score column: per problem
    `procrl.evals.stats.auroc` of the scored (not None) correct candidates' scores against the incorrect ones'.

    Returns:
        {name: {"auroc": mean over the problems with a correct and an incorrect scored candidate, "problems": their
        count, "ci_low", "ci_high": bootstrap 95% interval over them}}; with no such problem all three are None.
    """
    columns = {"longest": [[float(t) for t in p.num_tokens] for p in samples.problems]}
    columns |= {name: [p.scores[name] for p in samples.problems] for name in samples.score_names}
    out = {}
    for name, rows in columns.items():
        values = []
        for row, problem in zip(rows, samples.problems, strict=True):
            scored = [(s, c) for s, c in zip(row, problem.correct, strict=True) if s is not None]
            value = auroc([s for s, c in scored if c], [s for s, c in scored if not c])
            if value is not None:
                values.append(value)
        if not values:
            out[name] = {"auroc": None, "problems": 0, "ci_low": None, "ci_high": None}
            continue
        low, high = bootstrap_mean_interval(values, resamples=resamples, seed=seed)
        out[name] = {"auroc": sum(values) / len(values), "problems": len(values), "ci_low": low, "ci_high": high}
    return out


# ----------------------------------------------------------------------------------------------------------
# Table, figure, metrics
# ----------------------------------------------------------------------------------------------------------


def bestofn_table(result: dict) -> str:
    """The accuracy table (a row per method, a column per k, cells `acc% [lo, hi]` with one decimal; "–" where
    undefined: no problem) and the within-problem AUROC table ("–": no problem holding both kinds of candidate) of a
    `bestofn_curves` result, as markdown.

    >>> result = {"settings": {"ks": [1, 2], "n": 2, "subsets": 4, "seed": 0}, "problems": 3, "unparseable_gold": 0,
    ...     "curves": {"random": [{"k": 1, "accuracy": 0.5, "ci_low": 0.25, "ci_high": 0.75},
    ...                           {"k": 2, "accuracy": 0.5, "ci_low": 0.25, "ci_high": 0.75}]},
    ...     "auroc": {"longest": {"auroc": None, "problems": 0, "ci_low": None, "ci_high": None}}}
    >>> print(bestofn_table(result).splitlines()[4])
    | random | 50.0 [25.0, 75.0] | 50.0 [25.0, 75.0] |
    """
    s = result["settings"]
    accuracy = [
        [method, *(format_estimate(p["accuracy"], (p["ci_low"], p["ci_high"]), ".1f", 100) for p in points)]
        for method, points in result["curves"].items()
    ]
    aurocs = [
        [name, None, None, 0]
        if a["auroc"] is None
        else [name, f"{a['auroc']:.3f}", f"[{a['ci_low']:.3f}, {a['ci_high']:.3f}]", a["problems"]]
        for name, a in result["auroc"].items()
    ]
    return (
        "\n".join(
            [
                f"Best-of-k accuracy (%, [95% bootstrap interval over problems]): {result['problems']} problems, "
                f"n = {s['n']} samples each, {s['subsets']} random k-subsets per problem for k < n (seed {s['seed']}); "
                f"{result['unparseable_gold']} left out (unparseable gold).",
                "",
                markdown_table(["method", *(f"k={k}" for k in s["ks"])], accuracy),
                "",
                "Within-problem AUROC: P(score of a correct sample > an incorrect one) + 0.5 P(tie), mean over the "
                "problems with both kinds of scored sample (`longest`: the score is num_tokens).",
                "",
                markdown_table(["score", "AUROC", "95% interval", "problems"], aurocs),
                *_contrast_lines(result.get("contrasts") or []),
            ]
        )
        + "\n"
    )


def _contrast_lines(contrasts: Sequence[dict]) -> list[str]:
    if not contrasts:
        return []
    rows = [
        [
            c["name"],
            format_estimate(c["first"], None, ".1f", 100),
            format_estimate(c["second"], None, ".1f", 100),
            format_estimate(c["diff"], (c["ci_low"], c["ci_high"]), "+.1f", 100),
            c["problems"],
        ]
        for c in contrasts
    ]
    return [
        "",
        "Paired contrasts (first − second, points; per problem, then the mean with a 95% bootstrap interval over "
        "problems):",
        "",
        markdown_table(["contrast", "first (%)", "second (%)", "difference", "problems"], rows),
    ]


def plot_bestofn(result: dict, path: str | Path) -> Path:
    """Accuracy (%) against k (log2 axis), one line per method of `result["curves"]` with its 95% interval as a
    band (undefined points left out); saved as a 120 dpi PNG at `path` (its folder created). Returns the path."""
    colors = pyplot().get_cmap("tab20").colors  # 20 distinct colours: a dozen methods never share one
    with figure(path, dpi=120, figsize=(7, 4.5)) as (fig, ax):
        for i, (method, points) in enumerate(result["curves"].items()):
            points = [p for p in points if p["accuracy"] is not None]  # an undefined point is not drawn
            if not points:
                continue
            ks = [p["k"] for p in points]
            color = colors[2 * i % 20 + i // 10]
            style = {"linestyle": "--", "color": "black"} if method == "pass@k" else {"color": color}
            accuracy = [100 * p["accuracy"] for p in points]
            (line,) = ax.plot(ks, accuracy, marker="o", markersize=3, label=method, **style)
            banded = [p for p in points if p["ci_low"] is not None and p["ci_high"] is not None]
            low, high = [100 * p["ci_low"] for p in banded], [100 * p["ci_high"] for p in banded]
            ax.fill_between([p["k"] for p in banded], low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        ks = result["settings"]["ks"]
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("k (samples the method picks from)")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"Best-of-k over {result['problems']} problems (n = {result['settings']['n']})")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # no line without problems
            ax.legend(fontsize=8)
        fig.tight_layout()
    return Path(path)


def curve_metrics(result: dict) -> dict[str, float]:
    """The run record's flat metrics of a `bestofn_curves` result: `bestofn/<method>/acc@<k>` (and `ci_low@<k>`,
    `ci_high@<k>`; fractions), `bestofn/<score>/auroc` (and `auroc_ci_low`, `auroc_ci_high`, `auroc_problems`),
    `bestofn/problems`, `bestofn/unparseable_gold`; an undefined value (None: no problem) is left out.

    >>> metrics = curve_metrics({"problems": 2, "unparseable_gold": 1, "auroc": {},
    ...     "curves": {"random": [{"k": 1, "accuracy": 0.5, "ci_low": 0.0, "ci_high": 1.0}]}})
    >>> metrics["bestofn/random/acc@1"], metrics["bestofn/random/ci_high@1"], metrics["bestofn/problems"]
    (0.5, 1.0, 2)
    """
    metrics: dict[str, float] = {}
    for method, points in result["curves"].items():
        for p in points:
            metrics[f"bestofn/{method}/acc@{p['k']}"] = p["accuracy"]
            metrics[f"bestofn/{method}/ci_low@{p['k']}"] = p["ci_low"]
            metrics[f"bestofn/{method}/ci_high@{p['k']}"] = p["ci_high"]
    for name, a in result["auroc"].items():
        if a["auroc"] is not None:
            metrics[f"bestofn/{name}/auroc"] = a["auroc"]
            metrics[f"bestofn/{name}/auroc_ci_low"] = a["ci_low"]
            metrics[f"bestofn/{name}/auroc_ci_high"] = a["ci_high"]
            metrics[f"bestofn/{name}/auroc_problems"] = a["problems"]
    for c in result.get("contrasts") or []:
        metrics[f"bestofn/contrast/{c['name']}"] = c["diff"]
        metrics[f"bestofn/contrast/{c['name']}/ci_low"] = c["ci_low"]
        metrics[f"bestofn/contrast/{c['name']}/ci_high"] = c["ci_high"]
    metrics["bestofn/problems"] = result["problems"]
    metrics["bestofn/unparseable_gold"] = result["unparseable_gold"]
    return {key: value for key, value in metrics.items() if value is not None}  # undefined values left out
