"""`build_pum_math`: the whole builder (problems -> trajectories -> prefixes -> student rollouts -> pairs ->
files, then the optional replication check); see the package docstring of `procrl.data_builders.pum_math`."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from transformers import AutoTokenizer

from procrl.data_builders.datasets import load_math_dataset
from procrl.data_builders.prompts import resolve_template
from procrl.data_builders.pum_math.config import PUMMathConfig
from procrl.data_builders.pum_math.outputs import write_outputs
from procrl.data_builders.pum_math.pairs import assemble_pairs
from procrl.data_builders.pum_math.prefixes import Prefix, Problem, Trajectory, cut_trajectory, reference_steps
from procrl.data_builders.pum_math.replication import replicate
from procrl.data_builders.pum_math.sampling import (
    EnginePool,
    estimate_solve_counts,
    sample_trajectories,
    timed_check,
    warn_timeouts,
)
from procrl.generation import default_state
from procrl.models import resolve_model
from procrl.rewards import outcome
from procrl.rewards.steps import split_steps
from procrl.utils import get_logger

logger = get_logger(__name__)


def load_problems(config: PUMMathConfig, counts: Counter) -> list[Problem]:
    """Problems of the configured slice whose gold parses (within `verify_timeout_s`); the others are skipped and
    counted (a parse that ran out of the budget also in `counts["verification_timeouts"]`)."""
    data = load_math_dataset(
        config.dataset,
        split=config.split,
        start=config.start,
        end=config.end,
        prompt_template=resolve_template(config.prompt_template),
    )
    problems = []
    for row in data:
        if timed_check(outcome.parse_gold, (row["answer"],), config.verify_timeout_s, counts) is None:
            counts["unparseable_golds_skipped"] += 1
            logger.warning("problem %s: gold %r cannot be parsed; skipped", row["problem_id"], row["answer"][:60])
            continue
        problems.append(
            Problem(row["problem_id"], row["question"], row["prompt"], row["answer"], row.get("solution") or "")
        )
    return problems


def maps_to_unknown(tokenizer, text: str) -> bool:
    """Whether `tokenizer` encodes `text` with its unknown token (False for a tokenizer without one, e.g. byte-level
    BPE). A word-level tokenizer (the arith organism's, `procrl.data_builders.arithmetic_tokenizer`) can decode a
    sampled text that does not encode back: two space-less word tokens ("makes", "The") fuse into one unknown word.
    Such a trajectory would reach the students and the PUM as ids the policy never produced."""
    unk = getattr(tokenizer, "unk_token_id", None)
    return unk is not None and unk in tokenizer.encode(text, add_special_tokens=False)


def build_pum_math(config: PUMMathConfig, *, state=None, engines: dict | None = None):
    """Build the PUM-Math pairs (see the package docstring). Returns (Dataset or None off the main process, stats).

    Args:
        config: the builder settings.
        state: an `accelerate.PartialState` that shards the rollouts (default: `procrl.generation.default_state()`).
        engines: optional {model name: RolloutEngine} to use instead of loading models (tests use scripted engines).

    Raises:
        ValueError: no problem of the slice has a parseable gold answer.
    """
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
    # one engine at a time, reused while the next stage asks for the same model (policy = student 0, replication)
    engines = EnginePool(config, state, engines)

    texts: dict[str, list[tuple[str, list[str]]]] = {p.problem_id: [] for p in problems}
    if config.trajectory_source in ("reference", "both"):
        for p in problems:
            steps = reference_steps(p.solution, config.step_separator)
            if steps:
                texts[p.problem_id].append(("reference", steps))
            else:
                counts["problems_without_reference"] += 1
    if config.trajectory_source in ("policy", "both"):
        sampled = sample_trajectories(
            config, problems, cache_dir=cache_dir, state=state, stats=rollout_stats, engines=engines
        )
        for pid, samples in sampled.items():
            for text in samples:
                steps = [s.text for s in split_steps(text, config.step_separator)]
                if not steps:
                    counts["empty_trajectories_dropped"] += 1
                elif maps_to_unknown(length_tokenizer, text):
                    counts["unknown_token_trajectories_dropped"] += 1
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
                at_step = pieces == steps[: len(pieces)]  # whole steps: a step cut (or a fraction cut on a boundary)
                key = by_text.get((p.problem_id, text))
                if key is None:
                    key = f"{p.problem_id}/p{n_prefixes}"
                    n_prefixes += 1
                    by_text[(p.problem_id, text)] = key
                    prefixes[key] = Prefix(key, p.problem_id, pieces, n_tokens, at_step)
                else:
                    counts["identical_prefixes_merged"] += 1
                    prefixes[key].at_step = prefixes[key].at_step or at_step
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
    warn_timeouts(counts["verification_timeouts"], config, "PUM-Math")
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
        "unknown_token_trajectories_dropped": counts["unknown_token_trajectories_dropped"],
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
    engines.release()
    return dataset, stats
