"""PUM-Math: outcome-grounded prefix preference pairs for the Prefix Utility Model (DESIGN §4 "PUM").

Paper: "From Correctness to Utility: Gain-Based Prefix Evaluation for LLM Reasoning" (arXiv 2606.07190).

Pipeline (`build_pum_math`):

1. problems with a parseable gold answer (`load_math_dataset`); a gold that cannot be parsed is skipped and counted;
2. trajectories: sampled from a policy model (`n_trajectories` per problem) and/or the data set's reference
   solution (GSM8K: one step per line, calculator annotations removed, "#### N" -> "The answer is N.");
3. prefixes: cuts at step boundaries (`split_steps`) and at token fractions (default 0.25/0.5/0.75 of the
   trajectory's tokens in the FIRST student's tokenizer, moved back to a clean character boundary); a prefix is a
   list of text pieces (whole steps, the last one possibly partial), tokenized piece by piece
   (`tokenize_steps`), so every prefix's ids are a strict prefix of the trajectory's ids. Identical prefix texts
   of one problem are one prefix (counted);
4. student rollouts: every student s continues every prefix p `n_rollouts` times and the bare problem
   `n_rollouts_bare` times; solve rate q_s(x,p) = k/n (the answer of prefix + continuation, checked with
   `is_correct`, each math-verify step under `verify_timeout_s` seconds; a check that runs out counts as wrong and
   is counted in stats.json `verification_timeouts`); gain g_s(x,p) = q_s(x,p) - q_s(x,∅);
5. intrinsic utility G(x,p) = mean_s g_s(x,p)/σ_s, σ_s = population std (ddof 0) of student s's gains over the
   data set (`normalization="student_std"`, the default; "none": σ_s = 1; "problem_zscore": σ_s = std of s's
   gains within the problem, gains centred per problem). A student whose σ_s = 0 is excluded and counted;
6. pairs: vertical (two prefixes of one trajectory) and horizontal (prefixes of two different trajectories of one
   problem whose token lengths differ by at most `horizontal_tolerance` x the longer one); chosen = higher G;
   kept when |ΔG| > κ·sqrt(Var(ΔG)) with Var(ΔG) = (1/M²) Σ_s [v(k_sa, n) + v(k_sb, n)]/σ_s²,
   v = q̃(1 - q̃)/(n + 2), q̃ = (k + 1)/(n + 2) (q_s(x,∅) cancels within a problem; the smoothing keeps 0/n and
   n/n from having zero variance). Ties (ΔG = 0) are dropped, or kept with `is_tie=True` and margin 0.

Output (`output_dir`): `dataset/` (`Dataset.save_to_disk`), `pairs.parquet`, `stats.json`, `gains.png`,
`prefixes.jsonl` (every prefix with its success counts per student, gains and G), and the resumable rollout
cache `cache/`. Columns: `prompt` (problem text), `chosen`, `rejected` (prefix texts),
`margin` (ΔG >= 0, in units of the normalised gain), `pair_type` ("vertical" | "horizontal"), `problem_id`,
`gain_chosen`, `gain_rejected` (G), `n_rollouts` (per prefix and student), plus `is_tie`, `chosen_tokens`,
`rejected_tokens` (first student's tokenizer) and `delta_std` (sqrt Var(ΔG)).

Run: `procrl build-pum-data --config configs/pum/build_gsm8k.yaml`, `accelerate launch -m
procrl.data_builders.pum_math --config ...` (GPUs), `ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 -m
procrl.data_builders.pum_math --config ...` (CPU). Rollouts are sharded over the processes; the pairs are built
and written by the main process.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from procrl.utils import get_logger

logger = get_logger(__name__)

PAIR_TYPES = ("vertical", "horizontal")
NORMALIZATIONS = ("student_std", "none", "problem_zscore")
TRAJECTORY_SOURCES = ("policy", "reference", "both")

# A plain (no chat template) one-shot prompt for base models such as Gemma 3 270M: the same worked example as
# `datasets.ONE_SHOT_TEMPLATE`. The trajectory continues after "Answer:" with a leading space.
PLAIN_ONE_SHOT_TEMPLATE = (
    "Question: A baker makes 4 trays of 6 muffins and sells 15 of them. How many muffins are left?\n"
    "Answer: The baker makes 4 * 6 = 24 muffins. He sells 15, so 24 - 15 = 9 muffins are left. The answer is 9.\n\n"
    "Question: {question}\nAnswer:"
)
PLAIN_STOP = ("\nQuestion:",)


# ----------------------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------------------


@dataclass
class PUMMathConfig:
    """Settings of the PUM-Math builder (parsed by `TrlParser`: `--config x.yaml`, flags override)."""

    dataset: str = field(
        default="gsm8k",
        metadata={
            "help": "Problems: 'gsm8k', 'svamp', 'math500' (shipped) or a path / hub id for datasets.load_dataset."
        },
    )
    split: str = field(default="test", metadata={"help": "Split of `dataset`."})
    start: int = field(default=0, metadata={"help": "First problem (row index) to use."})
    end: int | None = field(default=50, metadata={"help": "One past the last problem to use; null = all."})
    output_dir: str = field(
        default="outputs/pum_math",
        metadata={"help": "Where dataset/, pairs.parquet, stats.json, gains.png and cache/ go."},
    )
    trajectory_source: str = field(
        default="both",
        metadata={"help": "'policy' (sampled), 'reference' (the data set's solutions) or 'both'."},
    )
    policy_model: str = field(
        default="default", metadata={"help": "Model that samples trajectories ('default' = SmolLM2-135M-Instruct)."}
    )
    policy_template: str = field(
        default="chat", metadata={"help": "'chat' (chat template, one-shot exchange) or 'plain' (base model)."}
    )
    n_trajectories: int = field(default=2, metadata={"help": "Sampled trajectories per problem."})
    policy_temperature: float = field(default=0.8, metadata={"help": "Sampling temperature of the policy."})
    policy_top_p: float = field(default=1.0, metadata={"help": "Top-p of the policy."})
    max_trajectory_tokens: int = field(default=256, metadata={"help": "Max new tokens of a sampled trajectory."})
    students: list[str] = field(
        default_factory=lambda: ["default", "gemma3-270m"],
        metadata={"help": "Student models (names or paths), weak to strong; M >= 1 (the paper uses M >= 2)."},
    )
    student_templates: list[str] = field(
        default_factory=lambda: ["chat", "plain"],
        metadata={
            "help": "Per student: 'chat' or 'plain' (base models without a chat template). One value applies to all."
        },
    )
    student_temperatures: list[float] = field(
        default_factory=lambda: [1.0], metadata={"help": "Per student sampling temperature (one value applies to all)."}
    )
    student_top_p: list[float] = field(
        default_factory=lambda: [1.0], metadata={"help": "Per student top-p (one value applies to all)."}
    )
    student_max_new_tokens: list[int] = field(
        default_factory=lambda: [192],
        metadata={"help": "Per student max new tokens of a rollout (one value applies to all)."},
    )
    n_rollouts: int = field(default=4, metadata={"help": "Rollouts per prefix and student (n)."})
    n_rollouts_bare: int = field(default=8, metadata={"help": "Rollouts from the bare problem per student (n_0)."})
    step_separator: str = field(
        default="\n\n", metadata={"help": "Step separator of trajectories (DESIGN default '\\n\\n')."}
    )
    cut_fractions: list[float] = field(
        default_factory=lambda: [0.25, 0.5, 0.75],
        metadata={"help": "Token fractions to cut trajectories at, each in (0, 1)."},
    )
    cut_at_steps: bool = field(
        default=True, metadata={"help": "Also cut at every step boundary (the full trajectory included)."}
    )
    max_step_cuts: int = field(
        default=8, metadata={"help": "At most this many step-boundary cuts per trajectory (evenly spaced, last kept)."}
    )
    normalization: str = field(
        default="student_std",
        metadata={"help": "Intrinsic utility: 'student_std' (DESIGN), 'none' or 'problem_zscore'."},
    )
    kappa: float = field(
        default=1.0, metadata={"help": "Adaptive margin: keep a pair when |ΔG| > kappa * sqrt(Var(ΔG))."}
    )
    horizontal_tolerance: float = field(
        default=0.10, metadata={"help": "Horizontal pairs: |L_a - L_b| <= tolerance * max(L_a, L_b) tokens."}
    )
    keep_ties: bool = field(
        default=False, metadata={"help": "Keep pairs with ΔG = 0 (margin 0, is_tie = True) instead of dropping them."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of trajectories and rollouts (same seed -> same dataset)."})
    replication_seed: int | None = field(
        default=None,
        metadata={
            "help": "If set, re-estimate every kept pair's solve rates with fresh rollouts under this seed and report the "
            "fraction whose order replicates (in stats.json, rewritten after the pairs are written and checked)."
        },
    )
    verify_timeout_s: float = field(
        default=30.0,
        metadata={
            "help": "Wall-clock budget, in seconds, of each math-verify step (a gold parse; the gold and the answer "
            "steps of a rollout's check). A step that runs out counts as a failure (wrong answer, unparseable gold) "
            "and is counted in stats.json (verification_timeouts, with a warning). Generous on purpose: a check normally "
            "takes a small fraction of a second, and a tight budget would let the machine's load change the dataset."
        },
    )
    engine: str = field(
        default="auto", metadata={"help": "Rollout engine: 'auto' (vLLM when importable), 'transformers' or 'vllm'."}
    )
    batch_size: int = field(default=16, metadata={"help": "Generation batch size of the transformers engine."})
    shard_size: int = field(default=64, metadata={"help": "Rollouts per cache shard (the unit of resumption)."})
    device: str | None = field(
        default=None,
        metadata={"help": "Device of the transformers engine (default: this process's accelerator device)."},
    )

    def __post_init__(self) -> None:
        def broadcast(name: str) -> None:
            values = list(getattr(self, name))
            if len(values) == 1:
                values = values * len(self.students)
            if len(values) != len(self.students):
                raise ValueError(
                    f"{name} has {len(values)} values for {len(self.students)} students; give one value, or one per student"
                )
            setattr(self, name, values)

        if not self.students:
            raise ValueError("students is empty; give at least one model, e.g. students: [default, gemma3-270m]")
        for name in ("student_templates", "student_temperatures", "student_top_p", "student_max_new_tokens"):
            broadcast(name)
        for template in [*self.student_templates, self.policy_template]:
            if template not in ("chat", "plain"):
                raise ValueError(f"template {template!r} is not 'chat' or 'plain'")
        if self.trajectory_source not in TRAJECTORY_SOURCES:
            raise ValueError(f"trajectory_source must be one of {TRAJECTORY_SOURCES}, got {self.trajectory_source!r}")
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {self.normalization!r}")
        if self.n_rollouts < 1 or self.n_rollouts_bare < 1:
            raise ValueError("n_rollouts and n_rollouts_bare must be >= 1")
        if self.trajectory_source != "reference" and self.n_trajectories < 1:
            raise ValueError(
                "n_trajectories must be >= 1 when trajectories are sampled (or use trajectory_source: reference)"
            )
        if any(not 0.0 < f < 1.0 for f in self.cut_fractions):
            raise ValueError(f"cut_fractions must lie in (0, 1), got {self.cut_fractions}")
        if not self.cut_fractions and not self.cut_at_steps:
            raise ValueError("no cuts: set cut_at_steps: true or give cut_fractions")
        if self.kappa < 0 or not 0 <= self.horizontal_tolerance < 1:
            raise ValueError("kappa must be >= 0 and horizontal_tolerance in [0, 1)")
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be greater than start ({self.start})")
        if not 0 < self.verify_timeout_s < math.inf:
            raise ValueError(
                f"verify_timeout_s must be a positive, finite number of seconds, got {self.verify_timeout_s}"
            )


# ----------------------------------------------------------------------------------------------------------
# Arithmetic (pure functions; unit-tested with hand-computed values)
# ----------------------------------------------------------------------------------------------------------


def smoothed_variance(k: int, n: int) -> float:
    """Variance of a solve-rate estimate from k successes in n rollouts, Laplace-smoothed (DESIGN §4 PUM).

    v = q̃(1 - q̃)/(n + 2) with q̃ = (k + 1)/(n + 2), so 0/n and n/n do not get zero variance.

    >>> round(smoothed_variance(0, 4), 6), round(smoothed_variance(2, 4), 6)
    (0.023148, 0.041667)
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"smoothed_variance needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    q = (k + 1) / (n + 2)
    return q * (1 - q) / (n + 2)


def population_std(values: Sequence[float]) -> float:
    """Population standard deviation (ddof 0); 0.0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


@dataclass
class PrefixRates:
    """Successes of every student on one prefix: `successes[s]` of `n` rollouts; bare problem `bare[s]` of `n_bare`."""

    successes: list[int]
    n: int
    bare: list[int]
    n_bare: int

    def gains(self) -> list[float]:
        """g_s = q_s(x,p) - q_s(x,∅) per student."""
        return [k / self.n - k0 / self.n_bare for k, k0 in zip(self.successes, self.bare, strict=True)]


def student_scales(gains: Sequence[Sequence[float]]) -> list[float]:
    """σ_s: population std of each student's gains over all prefixes; `gains` is (P, M) (prefix-major)."""
    if not gains:
        return []
    return [population_std([row[s] for row in gains]) for s in range(len(gains[0]))]


def intrinsic_utility(gains: Sequence[float], scales: Sequence[float], centers: Sequence[float] | None = None) -> float:
    """G = mean over students with σ_s > 0 of (g_s - c_s)/σ_s (c_s = 0 unless per-problem centring); 0.0 if none."""
    centers = centers or [0.0] * len(gains)
    terms = [(g - c) / s for g, c, s in zip(gains, centers, scales, strict=True) if s > 0]
    return sum(terms) / len(terms) if terms else 0.0


def delta_variance(a: PrefixRates, b: PrefixRates, scales: Sequence[float]) -> float:
    """Var(ΔG) of two prefixes of one problem: (1/M²) Σ_s [v(k_sa, n_a) + v(k_sb, n_b)]/σ_s² over students with σ_s > 0."""
    valid = [s for s, scale in enumerate(scales) if scale > 0]
    if not valid:
        return 0.0
    total = sum(
        (smoothed_variance(a.successes[s], a.n) + smoothed_variance(b.successes[s], b.n)) / scales[s] ** 2
        for s in valid
    )
    return total / len(valid) ** 2


# ----------------------------------------------------------------------------------------------------------
# Problems, trajectories, prefixes
# ----------------------------------------------------------------------------------------------------------


@dataclass
class Problem:
    problem_id: str
    question: str
    prompt: list | str  # the dataset's chat prompt (one-shot exchange)
    answer: str  # gold as the source gives it
    solution: str = ""  # reference solution ("" when the source has none)


@dataclass
class Trajectory:
    problem_id: str
    index: int
    source: str  # "policy" | "reference"
    steps: list[str]  # text pieces that tile the trajectory
    prefix_keys: list[str] = field(default_factory=list)  # the prefixes cut from it, shortest first

    @property
    def text(self) -> str:
        return "".join(self.steps)


@dataclass
class Prefix:
    key: str
    problem_id: str
    pieces: list[str]
    n_tokens: int  # length in the first student's tokenizer (trajectory part only)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


_CALC = re.compile(r"<<[^<>]*>>")
_GSM_FINAL = re.compile(r"^\s*####\s*(.+?)\s*$")


def reference_steps(solution: str, separator: str = "\n\n") -> list[str]:
    """Steps of a data set's reference solution, as text pieces joined by `separator`.

    GSM8K style (a line "#### N" at the end): one step per non-empty line, calculator annotations `<<...>>`
    removed, the "#### N" line becomes "The answer is N." (the phrase our outcome check reads). Other
    solutions (MATH) are split with `split_steps`. An empty solution gives [].
    """
    from procrl.rewards.steps import split_steps

    lines = [line.strip() for line in solution.strip().splitlines() if line.strip()]
    if lines and _GSM_FINAL.match(lines[-1]):
        final = _GSM_FINAL.match(lines[-1]).group(1)
        body = [_CALC.sub("", line) for line in lines[:-1]]
        steps = [*body, f"The answer is {final}."]
        return [step + separator for step in steps[:-1]] + [steps[-1]]
    return [s.text for s in split_steps(solution.strip(), separator)]


def _clean_cut(tokenizer, ids: Sequence[int], cut: int, text: str) -> tuple[int, str]:
    """Largest c <= cut whose decoded ids[:c] is a prefix of `text` (byte-level BPE can split a character)."""
    while cut > 0:
        decoded = tokenizer.decode(list(ids[:cut]), skip_special_tokens=True)
        if text.startswith(decoded) and decoded:
            return cut, decoded
        cut -= 1
    return 0, ""


def cut_trajectory(
    tokenizer, steps: Sequence[str], fractions: Sequence[float], at_steps: bool = True, max_step_cuts: int = 8
) -> list[tuple[list[str], int]]:
    """Prefixes of one trajectory as (pieces, n_tokens), shortest first, without duplicates.

    Step cuts end after step k (k = 1..K, the full trajectory included; at most `max_step_cuts`, evenly spaced,
    the last kept). Fraction cuts end at token floor(f·L) of the piecewise tokenization (L = all trajectory
    tokens), moved back to the nearest token whose decoded text is a prefix of the trajectory text; their
    pieces are the whole steps before the cut plus the partial step. Token counts are in `tokenizer`.
    """
    from procrl.rewards.steps import tokenize_steps

    steps = [s for s in steps if s]
    if not steps:
        return []
    ids, boundaries = tokenize_steps(tokenizer, steps)
    text = "".join(steps)
    cuts: dict[str, tuple[list[str], int]] = {}
    if at_steps:
        chosen = list(range(len(steps)))
        if len(chosen) > max_step_cuts:
            picks = (
                {round(i * (len(steps) - 1) / (max_step_cuts - 1)) for i in range(max_step_cuts)}
                if max_step_cuts > 1
                else set()
            )
            chosen = sorted(picks | {len(steps) - 1})
        for k in chosen:
            cuts.setdefault("".join(steps[: k + 1]), (list(steps[: k + 1]), boundaries[k]))
    starts = [0, *boundaries[:-1]]
    for fraction in fractions:
        cut, decoded = _clean_cut(tokenizer, ids, math.floor(fraction * len(ids)), text)
        if cut == 0:
            continue
        k = max(i for i, start in enumerate(starts) if start < cut)  # the step the cut falls in
        whole = steps[:k]
        partial = decoded[len("".join(whole)) :]
        pieces = [*whole, partial] if partial else list(whole)
        if pieces:
            cuts.setdefault(decoded, (pieces, cut))
    return sorted(cuts.values(), key=lambda item: item[1])


# ----------------------------------------------------------------------------------------------------------
# Pairs
# ----------------------------------------------------------------------------------------------------------


@dataclass
class PairCounts:
    kept: Counter = field(default_factory=Counter)
    dropped_by_margin: Counter = field(default_factory=Counter)
    ties_kept: Counter = field(default_factory=Counter)
    ties_dropped: Counter = field(default_factory=Counter)
    identical_pairs_dropped: int = 0
    duplicate_pairs_dropped: int = 0

    def as_dict(self) -> dict:
        return {
            "pairs": dict(self.kept),
            "dropped_by_margin": dict(self.dropped_by_margin),
            "ties_kept": dict(self.ties_kept),
            "ties_dropped": dict(self.ties_dropped),
            "identical_pairs_dropped": self.identical_pairs_dropped,
            "duplicate_pairs_dropped": self.duplicate_pairs_dropped,
        }


def candidate_pairs(
    trajectories: Sequence[Trajectory], prefixes: dict[str, Prefix], tolerance: float, counts: PairCounts
) -> list[tuple[str, str, str]]:
    """(key_a, key_b, pair_type) candidates of ONE problem: vertical (two prefixes of one trajectory) first, then
    horizontal (prefixes of two trajectories with |L_a - L_b| <= tolerance * max(L_a, L_b)). A pair of a prefix
    with itself (identical text reached from two trajectories) is dropped and counted; a pair already listed is
    counted as a duplicate."""
    seen: set[frozenset] = set()
    out: list[tuple[str, str, str]] = []

    def add(a: str, b: str, kind: str) -> None:
        if a == b:
            counts.identical_pairs_dropped += 1
            return
        key = frozenset((a, b))
        if key in seen:
            counts.duplicate_pairs_dropped += 1
            return
        seen.add(key)
        out.append((a, b, kind))

    for traj in trajectories:
        for a, b in itertools.combinations(traj.prefix_keys, 2):
            add(a, b, "vertical")
    for t1, t2 in itertools.combinations(trajectories, 2):
        for a in t1.prefix_keys:
            for b in t2.prefix_keys:
                la, lb = prefixes[a].n_tokens, prefixes[b].n_tokens
                if abs(la - lb) <= tolerance * max(la, lb):
                    add(a, b, "horizontal")
    return out


def select_pairs(
    candidates: Sequence[tuple[str, str, str]],
    utility: dict[str, float],
    variance: dict[tuple[str, str], float],
    kappa: float,
    keep_ties: bool,
    counts: PairCounts,
) -> list[dict]:
    """Apply the adaptive margin filter |ΔG| > kappa * sqrt(Var(ΔG)); orient chosen = higher G.

    Returns dicts with chosen_key, rejected_key, pair_type, margin (|ΔG|), delta_std, is_tie. A tie (ΔG == 0) is
    dropped unless `keep_ties` (then margin 0, chosen = the first key); counts are updated per pair type.
    """
    out = []
    for a, b, kind in candidates:
        delta = utility[a] - utility[b]
        std = math.sqrt(variance[(a, b)])
        if delta == 0.0:
            if keep_ties:
                counts.ties_kept[kind] += 1
                out.append(dict(chosen_key=a, rejected_key=b, pair_type=kind, margin=0.0, delta_std=std, is_tie=True))
            else:
                counts.ties_dropped[kind] += 1
            continue
        if abs(delta) <= kappa * std:
            counts.dropped_by_margin[kind] += 1
            continue
        chosen, rejected = (a, b) if delta > 0 else (b, a)
        counts.kept[kind] += 1
        out.append(
            dict(
                chosen_key=chosen, rejected_key=rejected, pair_type=kind, margin=abs(delta), delta_std=std, is_tie=False
            )
        )
    return out


def attach_rates(
    problem_id: str, prefix_keys: Sequence[str], successes: Sequence[Sequence[int]]
) -> dict[str, list[int]]:
    """Pair every prefix of one problem with its per-student success counts.

    Raises:
        ValueError: the number of success rows differs from the number of prefixes (names the problem), instead
            of an IndexError or a silent zip truncation.
    """
    if len(prefix_keys) != len(successes):
        raise ValueError(
            f"problem {problem_id}: {len(prefix_keys)} prefixes but {len(successes)} rows of solve counts; "
            "the rollout results do not match the cuts (stale cache? rerun with a fresh output_dir)"
        )
    return {key: list(row) for key, row in zip(prefix_keys, successes, strict=True)}


def compute_utilities(
    rates: dict[str, PrefixRates], problem_of: dict[str, str], normalization: str
) -> tuple[dict[str, float], dict[str, list[float]], list[float], list[int]]:
    """G for every prefix, plus the per-problem scales used for Var(ΔG).

    Returns:
        (utility per prefix key, scales per problem id (one σ per student), data-set σ_s, excluded student indices
        (σ_s = 0 over the data set)).
    """
    keys = list(rates)
    gains = {key: rates[key].gains() for key in keys}
    n_students = len(next(iter(gains.values()))) if gains else 0
    global_scales = student_scales([gains[k] for k in keys]) if keys else []
    excluded = [s for s, scale in enumerate(global_scales) if scale == 0]
    utility: dict[str, float] = {}
    problem_scales: dict[str, list[float]] = {}
    by_problem: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        by_problem[problem_of[key]].append(key)
    for pid, members in by_problem.items():
        if normalization == "problem_zscore":
            scales = [population_std([gains[k][s] for k in members]) for s in range(n_students)]
            centers = [sum(gains[k][s] for k in members) / len(members) for s in range(n_students)]
        elif normalization == "none":
            scales = [1.0 if s not in excluded else 0.0 for s in range(n_students)]
            centers = None
        else:
            scales = list(global_scales)
            centers = None
        problem_scales[pid] = scales
        for key in members:
            utility[key] = intrinsic_utility(gains[key], scales, centers)
    return utility, problem_scales, global_scales, excluded


# ----------------------------------------------------------------------------------------------------------
# Rollouts
# ----------------------------------------------------------------------------------------------------------


def _student_prompt_ids(tokenizer, problem: Problem, template: str) -> list[int]:
    from procrl.trainers.rollout import render_prompts

    if template == "chat":
        return render_prompts(tokenizer, [problem.prompt])[0]
    return list(tokenizer(PLAIN_ONE_SHOT_TEMPLATE.format(question=problem.question))["input_ids"])


def _continuation_pieces(pieces: Sequence[str], template: str) -> list[str]:
    """Plain prompts end with "Answer:"; the solution follows after one space (as in the worked example)."""
    if template == "plain" and pieces:
        return [" " + pieces[0].lstrip(" "), *pieces[1:]]
    return list(pieces)


def _sampling(config: PUMMathConfig, s: int):
    from procrl.data_builders.rollouts import SamplingParams

    stop = PLAIN_STOP if config.student_templates[s] == "plain" else ()
    return SamplingParams(
        temperature=config.student_temperatures[s],
        top_p=config.student_top_p[s],
        max_new_tokens=config.student_max_new_tokens[s],
        stop=stop,
    )


def _strip_stop(text: str, stops: Sequence[str]) -> str:
    for stop in stops:
        pos = text.find(stop)
        if pos >= 0:
            text = text[:pos]
    return text


def _add_stats(total: Counter | None, part) -> None:
    """Sum one `run_rollouts` call's counts into `total` (rollouts generated / read from cache, tokens)."""
    if total is not None:
        total["generated_rows"] += part.generated_rows
        total["cached_rows"] += part.cached_rows
        total["tokens_generated"] += part.tokens_generated


def _checked(check, args: tuple, budget_s: float, counts: Counter | None):
    """`check(*args, timeout_s=budget_s)` (`is_correct` or `parse_gold` of `procrl.rewards.outcome`); a call that
    fails (False or None) after at least `budget_s` seconds is counted in `counts["verification_timeouts"]`.

    rewards.outcome's public functions report a timeout only as a failure (no status), so the wall time tells the
    timeouts apart: a step that runs out has used its whole budget, and a normal step takes milliseconds. Not counted:
    an error inside math-verify (a plain failure). Counted although no step timed out: an `is_correct` whose two
    steps (gold, answer; each under the budget) together took the budget and failed (unlikely at a generous one)."""
    started = time.perf_counter()
    value = check(*args, timeout_s=budget_s)
    if counts is not None and (value is None or value is False) and time.perf_counter() - started >= budget_s:
        counts["verification_timeouts"] += 1
    return value


def _warn_timeouts(n: int, config: PUMMathConfig, what: str) -> None:
    if n:
        logger.warning(
            "%s: %d math-verify checks ran out of their %g s budget (verify_timeout_s) and counted as failures; "
            "on a less loaded machine the dataset can differ (raise verify_timeout_s)",
            what,
            n,
            config.verify_timeout_s,
        )


def _make_engine(name: str, config: PUMMathConfig, state):
    from procrl.data_builders.rollouts import make_engine
    from procrl.models import resolve_model

    device = config.device or (str(state.device) if state is not None else None)
    return make_engine(resolve_model(name), engine=config.engine, batch_size=config.batch_size, device=device)


def estimate_solve_counts(
    config: PUMMathConfig,
    problems: dict[str, Problem],
    prefixes: dict[str, Prefix],
    *,
    seed: int,
    cache_dir: Path,
    state=None,
    stats=None,
    engines: dict | None = None,
    bare: bool = True,
    counts: Counter | None = None,
) -> tuple[dict[str, list[int]], dict[str, list[int]], list[list[float]]]:
    """Run every student on every prefix (n) and bare problem (n_0; skipped when `bare` is false, leaving the bare
    counts and rates empty); count verified answers (`is_correct` under `config.verify_timeout_s`; checks that ran
    out of it are added to `counts["verification_timeouts"]`).

    Returns:
        (successes per prefix key (one count per student), successes per problem id on the bare problem,
        raw gains per student are computed later; the third item lists each student's per-rollout correctness
        rate on the bare problems, for the histogram).
    """
    import gc

    from procrl.data_builders.rollouts import RolloutRequest, RolloutStats, run_rollouts
    from procrl.rewards.outcome import is_correct
    from procrl.rewards.steps import tokenize_steps

    def solved(text: str, gold: str) -> bool:
        return bool(_checked(is_correct, (text, gold), config.verify_timeout_s, counts))

    prefix_success: dict[str, list[int]] = {key: [] for key in prefixes}
    bare_success: dict[str, list[int]] = {pid: [] for pid in problems}
    bare_rates: list[list[float]] = []
    for s, name in enumerate(config.students):
        template = config.student_templates[s]
        engine = (engines or {}).get(name) or _make_engine(name, config, state)
        tokenizer = engine.tokenizer
        prompt_ids = {pid: _student_prompt_ids(tokenizer, p, template) for pid, p in problems.items()}
        requests = [
            RolloutRequest(key=f"{pid}/bare", prompt_ids=ids, n=config.n_rollouts_bare)
            for pid, ids in prompt_ids.items()
            if bare
        ]
        bare_keys = {r.key for r in requests}
        for key, prefix in prefixes.items():
            ids, _ = tokenize_steps(
                tokenizer, _continuation_pieces(prefix.pieces, template), prompt_ids[prefix.problem_id]
            )
            requests.append(RolloutRequest(key=key, prompt_ids=ids, n=config.n_rollouts))
        params = _sampling(config, s)
        call_stats = RolloutStats()
        results = run_rollouts(
            engine,
            requests,
            params,
            seed=seed + 1000 * (s + 1),
            cache_dir=cache_dir / f"student{s}",
            shard_size=config.shard_size,
            desc=f"student {s} ({name})",
            state=state,
            stats=call_stats,
            groups=[
                r.key.removesuffix("/bare") if r.key in bare_keys else prefixes[r.key].problem_id for r in requests
            ],
        )
        _add_stats(stats, call_stats)
        rates = []
        for pid, problem in problems.items() if bare else ():
            hits = sum(solved(_strip_stop(r.text, params.stop), problem.answer) for r in results[f"{pid}/bare"])
            bare_success[pid].append(hits)
            rates.append(hits / config.n_rollouts_bare)
        if bare:
            bare_rates.append(rates)
        for key, prefix in prefixes.items():
            answer = problems[prefix.problem_id].answer
            hits = sum(solved(prefix.text + _strip_stop(r.text, params.stop), answer) for r in results[key])
            prefix_success[key].append(hits)
        if engines is None or name not in engines:
            del engine
            gc.collect()
    return prefix_success, bare_success, bare_rates


# ----------------------------------------------------------------------------------------------------------
# The builder
# ----------------------------------------------------------------------------------------------------------


def load_problems(config: PUMMathConfig, counts: Counter) -> list[Problem]:
    """Problems of the configured slice whose gold parses (within `verify_timeout_s`); the others are skipped and
    counted (a parse that ran out of the budget also in `counts["verification_timeouts"]`)."""
    from procrl.data_builders.datasets import load_math_dataset
    from procrl.rewards.outcome import parse_gold

    data = load_math_dataset(config.dataset, split=config.split, start=config.start, end=config.end)
    problems = []
    for row in data:
        if _checked(parse_gold, (row["answer"],), config.verify_timeout_s, counts) is None:
            counts["unparseable_golds_skipped"] += 1
            logger.warning("problem %s: gold %r cannot be parsed; skipped", row["problem_id"], row["answer"][:60])
            continue
        problems.append(
            Problem(row["problem_id"], row["question"], row["prompt"], row["answer"], row.get("solution") or "")
        )
    return problems


def sample_trajectories(
    config: PUMMathConfig, problems: Sequence[Problem], *, cache_dir: Path, state=None, stats=None, engines=None
):
    """`n_trajectories` sampled solutions per problem from the policy model: {problem_id: [text, ...]}."""
    import gc

    from procrl.data_builders.rollouts import RolloutRequest, RolloutStats, SamplingParams, run_rollouts

    engine = (engines or {}).get(config.policy_model) or _make_engine(config.policy_model, config, state)
    params = SamplingParams(
        temperature=config.policy_temperature,
        top_p=config.policy_top_p,
        max_new_tokens=config.max_trajectory_tokens,
        stop=PLAIN_STOP if config.policy_template == "plain" else (),
    )
    requests = [
        RolloutRequest(
            key=p.problem_id,
            prompt_ids=_student_prompt_ids(engine.tokenizer, p, config.policy_template),
            n=config.n_trajectories,
        )
        for p in problems
    ]
    call_stats = RolloutStats()
    results = run_rollouts(
        engine,
        requests,
        params,
        seed=config.seed,
        cache_dir=cache_dir / "policy",
        shard_size=config.shard_size,
        desc="trajectories",
        state=state,
        stats=call_stats,
        groups=[r.key for r in requests],
    )
    _add_stats(stats, call_stats)
    out = {p.problem_id: [_strip_stop(r.text, params.stop).strip() for r in results[p.problem_id]] for p in problems}
    if engines is None or config.policy_model not in engines:
        del engine
        gc.collect()
    return out


def build_pum_math(config: PUMMathConfig, *, state=None, engines: dict | None = None):
    """Build the PUM-Math pairs (see the module docstring). Returns (Dataset or None off the main process, stats).

    Args:
        config: the builder settings.
        state: an `accelerate.PartialState` that shards the rollouts (default: `rollouts.default_state()`).
        engines: optional {model name: RolloutEngine} to use instead of loading models (tests use scripted engines).
    """
    from transformers import AutoTokenizer

    from procrl.data_builders.rollouts import default_state
    from procrl.models import resolve_model

    # default_state(): PartialState(cpu=True) without CUDA or with ACCELERATE_USE_CPU, so torchrun ranks on CPU
    # really form a gloo group (a bare PartialState() ignores ACCELERATE_USE_CPU and every rank thinks it is alone)
    state = state or default_state()
    start_time = time.time()
    output_dir = Path(config.output_dir)
    cache_dir = output_dir / "cache"
    counts: Counter = Counter()
    rollout_stats: Counter = Counter()

    problems = load_problems(config, counts)
    if not problems:
        raise ValueError(f"no problem with a parseable gold answer in {config.dataset}[{config.start}:{config.end}]")
    length_tokenizer = (
        engines[config.students[0]].tokenizer
        if engines and config.students[0] in engines
        else AutoTokenizer.from_pretrained(resolve_model(config.students[0]))
    )

    texts: dict[str, list[tuple[str, list[str]]]] = {p.problem_id: [] for p in problems}
    if config.trajectory_source in ("reference", "both"):
        for p in problems:
            steps = reference_steps(p.solution, config.step_separator)
            if steps:
                texts[p.problem_id].append(("reference", steps))
            else:
                counts["problems_without_reference"] += 1
    if config.trajectory_source in ("policy", "both"):
        from procrl.rewards.steps import split_steps

        sampled = sample_trajectories(
            config, problems, cache_dir=cache_dir, state=state, stats=rollout_stats, engines=engines
        )
        for pid, samples in sampled.items():
            for text in samples:
                steps = [s.text for s in split_steps(text, config.step_separator)]
                if not steps:
                    counts["empty_trajectories_dropped"] += 1
                elif any("".join(steps) == "".join(t) for _, t in texts[pid]):
                    counts["duplicate_trajectories_dropped"] += 1
                else:
                    texts[pid].append(("policy", steps))

    trajectories: list[Trajectory] = []
    prefixes: dict[str, Prefix] = {}
    by_text: dict[tuple[str, str], str] = {}
    for p in problems:
        n_prefixes = 0
        for index, (source, steps) in enumerate(texts[p.problem_id]):
            traj = Trajectory(p.problem_id, index, source, steps)
            for pieces, n_tokens in cut_trajectory(
                length_tokenizer, steps, config.cut_fractions, config.cut_at_steps, config.max_step_cuts
            ):
                text = "".join(pieces)
                key = by_text.get((p.problem_id, text))
                if key is None:
                    key = f"{p.problem_id}/p{n_prefixes}"
                    n_prefixes += 1
                    by_text[(p.problem_id, text)] = key
                    prefixes[key] = Prefix(key, p.problem_id, pieces, n_tokens)
                else:
                    counts["identical_prefixes_merged"] += 1
                if key not in traj.prefix_keys:
                    traj.prefix_keys.append(key)
            trajectories.append(traj)
    problem_map = {p.problem_id: p for p in problems}
    logger.info("%d problems, %d trajectories, %d prefixes", len(problems), len(trajectories), len(prefixes))

    prefix_success, bare_success, _ = estimate_solve_counts(
        config,
        problem_map,
        prefixes,
        seed=config.seed,
        cache_dir=cache_dir,
        state=state,
        stats=rollout_stats,
        engines=engines,
        counts=counts,
    )
    _warn_timeouts(counts["verification_timeouts"], config, "PUM-Math")
    result = assemble_pairs(config, problems, trajectories, prefixes, prefix_success, bare_success)
    result["bare_success"] = bare_success
    stats = {
        "problems": len(problems),
        "unparseable_golds_skipped": counts["unparseable_golds_skipped"],
        "trajectories": dict(Counter(t.source for t in trajectories)),
        "prefixes": len(prefixes),
        "identical_prefixes_merged": counts["identical_prefixes_merged"],
        "duplicate_trajectories_dropped": counts["duplicate_trajectories_dropped"],
        "empty_trajectories_dropped": counts["empty_trajectories_dropped"],
        "problems_without_reference": counts["problems_without_reference"],
        "verification_timeouts": counts["verification_timeouts"],
        "students": list(config.students),
        "rollouts": {
            "per_student": len(prefixes) * config.n_rollouts + len(problems) * config.n_rollouts_bare,
            "total": (len(prefixes) * config.n_rollouts + len(problems) * config.n_rollouts_bare)
            * len(config.students),
            "generated_this_run": rollout_stats["generated_rows"],
            "from_cache": rollout_stats["cached_rows"],
        },
        "tokens_generated": rollout_stats["tokens_generated"],
        **result["stats"],
    }
    dataset = None
    stats["wall_time_s"] = round(time.time() - start_time, 1)
    if state.is_main_process:  # the pairs are usable (e.g. by train_pum.py) while the replication check runs
        dataset = write_outputs(config, result, stats)
    state.wait_for_everyone()
    if config.replication_seed is not None:
        logger.info("pairs written to %s; replication check (seed %d) next", config.output_dir, config.replication_seed)
        stats["replication"] = replicate(config, problem_map, prefixes, result, state=state, engines=engines)
        stats["wall_time_s_with_replication"] = round(time.time() - start_time, 1)
        if state.is_main_process:
            (Path(config.output_dir) / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False))
            logger.info("replication: %s", json.dumps(stats["replication"]))
    return dataset, stats


def assemble_pairs(config, problems, trajectories, prefixes, prefix_success, bare_success) -> dict:
    """Solve counts -> gains -> G -> margin-filtered pairs (pure; no model). Returns rows, gains and stats."""
    rates: dict[str, PrefixRates] = {}
    keys_of: dict[str, list[str]] = defaultdict(list)
    for key, prefix in prefixes.items():
        keys_of[prefix.problem_id].append(key)
    for p in problems:
        keys = keys_of[p.problem_id]
        per_prefix = attach_rates(p.problem_id, keys, [prefix_success[k] for k in keys])
        for key, successes in per_prefix.items():
            if len(successes) != len(config.students):
                raise ValueError(f"prefix {key}: {len(successes)} student counts for {len(config.students)} students")
            rates[key] = PrefixRates(successes, config.n_rollouts, bare_success[p.problem_id], config.n_rollouts_bare)
    problem_of = {k: prefixes[k].problem_id for k in rates}
    utility, problem_scales, global_scales, excluded = compute_utilities(rates, problem_of, config.normalization)
    for s in excluded:
        logger.warning(
            "student %d (%s): its gains have zero spread over the data set; excluded from G", s, config.students[s]
        )
    if len(excluded) == len(config.students):
        logger.warning("every student's gains have zero spread: all G = 0, no pair can pass the margin filter")

    counts = PairCounts()
    rows = []
    question = {p.problem_id: p.question for p in problems}
    by_problem: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in trajectories:
        by_problem[traj.problem_id].append(traj)
    for p in problems:
        candidates = candidate_pairs(by_problem[p.problem_id], prefixes, config.horizontal_tolerance, counts)
        variance = {(a, b): delta_variance(rates[a], rates[b], problem_scales[p.problem_id]) for a, b, _ in candidates}
        for pair in select_pairs(candidates, utility, variance, config.kappa, config.keep_ties, counts):
            c, r = prefixes[pair["chosen_key"]], prefixes[pair["rejected_key"]]
            rows.append(
                {
                    "prompt": question[p.problem_id],
                    "chosen": c.text,
                    "rejected": r.text,
                    "margin": float(pair["margin"]),
                    "pair_type": pair["pair_type"],
                    "problem_id": p.problem_id,
                    "gain_chosen": float(utility[c.key]),
                    "gain_rejected": float(utility[r.key]),
                    "n_rollouts": config.n_rollouts,
                    "is_tie": pair["is_tie"],
                    "chosen_tokens": c.n_tokens,
                    "rejected_tokens": r.n_tokens,
                    "delta_std": float(pair["delta_std"]),
                    "chosen_key": c.key,
                    "rejected_key": r.key,
                }
            )
    raw_gains = {s: [rates[k].gains()[s] for k in rates] for s in range(len(config.students))}
    all_deltas = defaultdict(list)
    for row in rows:
        all_deltas[row["pair_type"]].append(row["margin"])
    return {
        "rows": rows,
        "prefixes": prefixes,
        "raw_gains": raw_gains,
        "rates": rates,
        "utility": utility,
        "problem_scales": problem_scales,
        "stats": {
            "student_sigma": [round(s, 6) for s in global_scales],
            "students_excluded_zero_spread": [config.students[s] for s in excluded],
            **counts.as_dict(),
        },
    }


def replicate(
    config: PUMMathConfig,
    problems: dict[str, Problem],
    prefixes: dict[str, Prefix],
    result: dict,
    *,
    state=None,
    engines=None,
) -> dict:
    """Re-estimate the solve rates of every kept pair's prefixes with fresh rollouts (seed `replication_seed`) and
    report, per pair type, the fraction of non-tie pairs whose order replicates (G_new(chosen) > G_new(rejected),
    with the original σ_s) and the fraction that tie under the new estimate.

    Both prefixes of a pair belong to one problem, so q_s(x, ∅) cancels in ΔG = Σ_s (q_s(c) − q_s(r)) / σ_s: the bare
    problems are not rolled out again (the original counts are reused) and only the prefixes are re-estimated."""
    rows = [r for r in result["rows"] if not r["is_tie"]]
    if not rows:
        return {"pairs": 0}
    needed = {k for r in rows for k in (r["chosen_key"], r["rejected_key"])}
    sub_prefixes = {k: prefixes[k] for k in needed}
    sub_problems = {pid: problems[pid] for pid in {prefixes[k].problem_id for k in needed}}
    cache_dir = Path(config.output_dir) / "cache_replication"
    counts: Counter = Counter()
    prefix_success, _, _ = estimate_solve_counts(
        config,
        sub_problems,
        sub_prefixes,
        seed=config.replication_seed,
        cache_dir=cache_dir,
        state=state,
        engines=engines,
        bare=False,
        counts=counts,
    )
    _warn_timeouts(counts["verification_timeouts"], config, "replication")
    bare_success = result["bare_success"]
    out: dict = {"seed": config.replication_seed, "verification_timeouts": counts["verification_timeouts"]}
    for kind in PAIR_TYPES:
        subset = [r for r in rows if r["pair_type"] == kind]
        agree = ties = 0
        for r in subset:
            scales = result["problem_scales"][r["problem_id"]]
            g = {}
            for key in (r["chosen_key"], r["rejected_key"]):
                rates = PrefixRates(
                    prefix_success[key], config.n_rollouts, bare_success[r["problem_id"]], config.n_rollouts_bare
                )
                g[key] = intrinsic_utility(rates.gains(), scales)
            delta = g[r["chosen_key"]] - g[r["rejected_key"]]
            agree += delta > 0
            ties += delta == 0
        out[kind] = {
            "pairs": len(subset),
            "replicated": agree,
            "replicated_frac": round(agree / len(subset), 4) if subset else None,
            "tied_frac": round(ties / len(subset), 4) if subset else None,
        }
    total = sum(out[k]["pairs"] for k in PAIR_TYPES)
    out["all"] = {
        "pairs": total,
        "replicated_frac": round(sum(out[k]["replicated"] for k in PAIR_TYPES) / total, 4) if total else None,
    }
    return out


OUTPUT_COLUMNS = (
    "prompt", "chosen", "rejected", "margin", "pair_type", "problem_id", "gain_chosen", "gain_rejected",
    "n_rollouts", "is_tie", "chosen_tokens", "rejected_tokens", "delta_std",
)  # fmt: skip


def write_outputs(config: PUMMathConfig, result: dict, stats: dict):
    """dataset/ (save_to_disk), pairs.parquet, stats.json and gains.png in `config.output_dir`."""
    import datasets

    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    columns = {name: [row[name] for row in result["rows"]] for name in OUTPUT_COLUMNS}
    features = datasets.Features(
        {
            "prompt": datasets.Value("string"),
            "chosen": datasets.Value("string"),
            "rejected": datasets.Value("string"),
            "margin": datasets.Value("float64"),
            "pair_type": datasets.Value("string"),
            "problem_id": datasets.Value("string"),
            "gain_chosen": datasets.Value("float64"),
            "gain_rejected": datasets.Value("float64"),
            "n_rollouts": datasets.Value("int64"),
            "is_tie": datasets.Value("bool"),
            "chosen_tokens": datasets.Value("int64"),
            "rejected_tokens": datasets.Value("int64"),
            "delta_std": datasets.Value("float64"),
        }
    )
    dataset = datasets.Dataset.from_dict(columns, features=features)
    if len(dataset) == 0:
        logger.warning(
            "no pair passed the margin filter (see stats.json); more rollouts (n_rollouts), more trajectories, a "
            "stronger student or a lower kappa give more pairs"
        )
    dataset.save_to_disk(str(output_dir / "dataset"))
    dataset.to_parquet(str(output_dir / "pairs.parquet"))
    with open(output_dir / "prefixes.jsonl", "w") as f:
        for key, rates in result["rates"].items():
            record = {
                "key": key,
                "problem_id": result["prefixes"][key].problem_id,
                "prefix": result["prefixes"][key].text,
                "n_tokens": result["prefixes"][key].n_tokens,
                "successes": rates.successes,
                "n": rates.n,
                "bare_successes": rates.bare,
                "n_bare": rates.n_bare,
                "gains": [round(g, 6) for g in rates.gains()],
                "utility": round(result["utility"][key], 6),
            }
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    stats = {**stats, "config": asdict(config)}
    (output_dir / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False))
    plot_gains(result, config, output_dir / "gains.png")
    return dataset


def plot_gains(result: dict, config: PUMMathConfig, path: Path) -> None:
    """Histograms: raw gains g_s per student; |ΔG| of kept pairs per pair type."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    bins = [i / 8 - 1.0 - 1 / 16 for i in range(18)]
    for s, gains in result["raw_gains"].items():
        axes[0].hist(gains, bins=bins, alpha=0.5, label=f"student {s}: {config.students[s]}")
    axes[0].set_xlabel("gain g_s(x,p) = q_s(x,p) - q_s(x,∅)")
    axes[0].set_ylabel("prefixes")
    axes[0].set_title("Prefix gains per student")
    axes[0].legend(fontsize=8)
    for kind in PAIR_TYPES:
        margins = [r["margin"] for r in result["rows"] if r["pair_type"] == kind]
        if margins:
            axes[1].hist(margins, bins=20, alpha=0.5, label=f"{kind} ({len(margins)})")
    axes[1].set_xlabel("|ΔG| of kept pairs (normalised gain units)")
    axes[1].set_ylabel("pairs")
    axes[1].set_title("Kept pairs per type")
    if result["rows"]:
        axes[1].legend(fontsize=8)
    else:
        axes[1].text(0.5, 0.5, "no pair kept (see stats.json)", ha="center", va="center", transform=axes[1].transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------------------


def make_parser():
    from trl import TrlParser

    return TrlParser((PUMMathConfig,))


def main(argv: list[str] | None = None) -> int:
    """`procrl build-pum-data --config configs/pum/build_gsm8k.yaml [--flag value ...]`."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    (config,) = make_parser().parse_args_and_config(args=argv)
    dataset, stats = build_pum_math(config)
    if dataset is not None:
        print(json.dumps({k: v for k, v in stats.items() if k != "config"}, indent=2))
        print(f"pairs: {len(dataset)} -> {Path(config.output_dir).resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
