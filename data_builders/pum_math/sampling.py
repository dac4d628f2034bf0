"""Rollouts of the builder: trajectories sampled from the policy, student continuations of every prefix and bare
problem, and their verified solve counts (`is_correct` under `verify_timeout_s`, timeouts counted). The rollouts go
through `procrl.data_builders.rollouts.run_rollouts` (sharded over processes, resumable)."""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from procrl.data_builders.pum_math.config import PLAIN_ONE_SHOT_TEMPLATE, PLAIN_STOP, PUMMathConfig
from procrl.data_builders.pum_math.prefixes import Prefix, Problem
from procrl.data_builders.rollouts import RolloutRequest, RolloutStats, run_rollouts
from procrl.generation import SamplingParams, make_engine_from, render_prompts, strip_stop
from procrl.models import resolve_model
from procrl.rewards import outcome
from procrl.rewards.steps import tokenize_steps
from procrl.utils import get_logger

logger = get_logger(__name__)


def _student_prompt_ids(tokenizer, problem: Problem, template: str) -> list[int]:
    if template == "chat":
        return render_prompts(tokenizer, [problem.prompt])[0]
    return list(tokenizer(PLAIN_ONE_SHOT_TEMPLATE.format(question=problem.question))["input_ids"])


def _continuation_pieces(pieces: Sequence[str], template: str) -> list[str]:
    """Plain prompts end with "Answer:"; the solution follows after one space (as in the worked example)."""
    if template == "plain" and pieces:
        return [" " + pieces[0].lstrip(" "), *pieces[1:]]
    return list(pieces)


def _sampling(config: PUMMathConfig, s: int):
    stop = PLAIN_STOP if config.student_templates[s] == "plain" else ()
    return SamplingParams(
        temperature=config.student_temperatures[s],
        top_p=config.student_top_p[s],
        max_new_tokens=config.student_max_new_tokens[s],
        stop=stop,
    )


def _add_stats(total: Counter | None, part) -> None:
    """Sum one `run_rollouts` call's counts into `total` (rollouts generated / read from cache, tokens)."""
    if total is not None:
        total["generated_rows"] += part.generated_rows
        total["cached_rows"] += part.cached_rows
        total["tokens_generated"] += part.tokens_generated


def timed_check(check, args: tuple, budget_s: float, counts: Counter | None):
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


def warn_timeouts(n: int, config: PUMMathConfig, what: str) -> None:
    """Warn that `n` math-verify checks of `what` ran out of `config.verify_timeout_s` (nothing when n = 0)."""
    if n:
        logger.warning(
            "%s: %d math-verify checks ran out of their %g s budget (verify_timeout_s) and counted as failures; "
            "on a less loaded machine the dataset can differ (raise verify_timeout_s)",
            what,
            n,
            config.verify_timeout_s,
        )


def _make_engine(name: str, config: PUMMathConfig, state):
    device = config.device or (str(state.device) if state is not None else None)
    return make_engine_from(config, resolve_model(name), batch_size=config.batch_size, device=device)


class EnginePool:
    """The builder's engines by model name: the caller's (`given`, e.g. scripted test engines), else built on first
    use (`make_engine_from(config, ...)`: its `generation_backend`). It holds at most one engine it built, released
    when another model is asked for: consecutive stages of one model (the policy that is also a student, the
    replication check) load it once, and two models never share the memory (a vLLM engine on a GPU takes most of
    it)."""

    def __init__(self, config: PUMMathConfig, state=None, given: dict | None = None):
        self.config, self.state, self.given = config, state, dict(given or {})
        self.name: str | None = None
        self.engine = None

    def get(self, name: str):
        """The engine of model `name` (a given one, the one held, or a new one after releasing the one held)."""
        if name in self.given:
            return self.given[name]
        if name != self.name:
            self.release()
            self.engine, self.name = _make_engine(name, self.config, self.state), name
        return self.engine

    def release(self) -> None:
        """Drop the engine held (its memory is freed once nothing else refers to it)."""
        if self.engine is not None:
            self.engine, self.name = None, None
            gc.collect()


def _pool(config: PUMMathConfig, state, engines) -> tuple[EnginePool, bool]:
    """(the pool to draw engines from, whether this call made it and must release it)."""
    if isinstance(engines, EnginePool):
        return engines, False
    return EnginePool(config, state, engines), True


def estimate_solve_counts(
    config: PUMMathConfig,
    problems: dict[str, Problem],
    prefixes: dict[str, Prefix],
    *,
    seed: int,
    cache_dir: Path,
    state=None,
    stats=None,
    engines: dict | EnginePool | None = None,
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

    def solved(text: str, gold: str) -> bool:
        # outcome.is_correct is looked up at each call (as the function-local import did), so it can be swapped
        return bool(timed_check(outcome.is_correct, (text, gold), config.verify_timeout_s, counts))

    pool, own_pool = _pool(config, state, engines)
    prefix_success: dict[str, list[int]] = {key: [] for key in prefixes}
    bare_success: dict[str, list[int]] = {pid: [] for pid in problems}
    bare_rates: list[list[float]] = []
    for s, name in enumerate(config.students):
        template = config.student_templates[s]
        engine = pool.get(name)
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
            hits = sum(solved(strip_stop(r.text, params.stop), problem.answer) for r in results[f"{pid}/bare"])
            bare_success[pid].append(hits)
            rates.append(hits / config.n_rollouts_bare)
        if bare:
            bare_rates.append(rates)
        for key, prefix in prefixes.items():
            answer = problems[prefix.problem_id].answer
            hits = sum(solved(prefix.text + strip_stop(r.text, params.stop), answer) for r in results[key])
            prefix_success[key].append(hits)
        del engine
    if own_pool:
        pool.release()
    return prefix_success, bare_success, bare_rates


def sample_trajectories(
    config: PUMMathConfig, problems: Sequence[Problem], *, cache_dir: Path, state=None, stats=None, engines=None
):
    """`n_trajectories` sampled solutions per problem from the policy model: {problem_id: [text, ...]}.

    `engines`: a dict of given engines by model name, or the build's `EnginePool`."""
    pool, own_pool = _pool(config, state, engines)
    engine = pool.get(config.policy_model)
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
    out = {p.problem_id: [strip_stop(r.text, params.stop).strip() for r in results[p.problem_id]] for p in problems}
    del engine
    if own_pool:
        pool.release()
    return out
