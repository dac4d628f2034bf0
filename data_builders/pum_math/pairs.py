"""Pairs of prefixes: vertical and horizontal candidates, the adaptive margin filter |ΔG| > κ·sqrt(Var(ΔG)), and
`assemble_pairs` (solve counts -> gains -> G -> margin-filtered rows; pure, no model)."""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from procrl.data_builders.pum_math.prefixes import Prefix, Trajectory
from procrl.data_builders.pum_math.stats import PrefixRates, compute_utilities, delta_variance
from procrl.utils import get_logger

logger = get_logger(__name__)


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
