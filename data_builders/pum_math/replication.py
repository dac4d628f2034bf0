"""The replication study: fresh rollouts (seed `replication_seed`) re-estimate every kept pair's prefixes, and the
fraction of pairs whose order replicates is reported per pair type (stats.json `replication`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from procrl.data_builders.pum_math.config import PAIR_TYPES, PUMMathConfig
from procrl.data_builders.pum_math.prefixes import Prefix, Problem
from procrl.data_builders.pum_math.sampling import estimate_solve_counts, warn_timeouts
from procrl.data_builders.pum_math.stats import PrefixRates, intrinsic_utility


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
    warn_timeouts(counts["verification_timeouts"], config, "replication")
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
