"""Greedy evaluation of a policy on math problems: accuracy with a 95% interval, rewards, length, wall time.

Used before and after GRPO training by `train_grpo.py` (`procrl.scripts.train_grpo`). Generation goes through
the same `generate_completions` as the training rollout (left padding, KV cache, cut after the first EOS), with
sampling off, so the raw per-token log-probs the reward functions need (`completion_logps`) come for free. With an
`engine` (the trainer's colocated vLLM engine, `procrl.trainers.vllm_colocate.colocate_engine`) the greedy
completions and their raw log-probs come from `engine.generate` instead; the scoring is the same.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from tqdm.auto import tqdm
from transformers import GenerationConfig

from procrl.evals.stats import bootstrap_mean_interval, ratio, wilson_interval
from procrl.generation import SamplingParams, eos_token_ids, generate_completions, render_prompts
from procrl.utils import check_reward_length, get_logger

logger = get_logger(__name__)


@dataclass
class EvalResult:
    """Evaluation of one model on one data set (greedy decoding).

    A mean or fraction over nothing is None (undefined, not 0; `procrl.evals.stats`): with n = 0 the accuracy, its
    interval, `mean_length` and `truncated_frac` are None; `mean_reward` is None when no row has a reward.

    Attributes:
        name: data set label, e.g. "svamp[700:850]".
        n: problems evaluated.
        accuracy: fraction verified correct (problems whose gold cannot be parsed count as wrong and are
            reported in `unparseable_gold`).
        ci_low, ci_high: Wilson 95% interval of the accuracy.
        mean_reward: mean weighted sum of the raw rewards (`reward_weights`), None counted as 0 inside a row, rows
            that no reward function applies to left out (as TRL logs `reward`).
        rewards: mean of each reward function over the completions it applies to (None values skipped).
        mean_length: mean completion length in tokens (EOS included).
        truncated_frac: completions that reached `max_new_tokens` without EOS.
        wall_time_s: seconds spent generating and scoring.
        problems: one entry per problem, in data set order: `problem_id` (the row's, else its 0-based index as a
            string), `correct` (1.0 / 0.0, None for an unparseable gold) and `rewards` (reward name -> the raw
            value or None): what paired before/after intervals are computed from (`paired_comparison`).
    """

    name: str
    n: int
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    mean_reward: float | None
    rewards: dict[str, float | None]
    mean_length: float | None
    truncated_frac: float | None
    unparseable_gold: int
    wall_time_s: float
    problems: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def evaluate(
    model,
    tokenizer,
    dataset,
    *,
    name: str,
    outcome_func: Callable,
    reward_funcs: Sequence[Callable] = (),
    reward_weights: Sequence[float] | None = None,
    max_new_tokens: int = 256,
    batch_size: int = 32,
    chat_template_kwargs: dict | None = None,
    progress: bool = True,
    engine=None,
) -> EvalResult:
    """Greedy-decode every problem of `dataset` once and score it.

    Args:
        model: causal LM (its training mode is restored afterwards).
        tokenizer: its tokenizer (pad token required; left padding is applied here).
        dataset: rows with `prompt` and `answer` (procrl's data schema).
        name: label for reports.
        outcome_func: TRL-style outcome reward (1.0 / 0.0 / None) that defines accuracy.
        reward_funcs: reward functions to report (they receive `completion_logps` and the dataset columns).
        reward_weights: weights for `mean_reward` (default 1.0 each).
        max_new_tokens: generation budget in tokens.
        batch_size: prompts per `generate` call.
        engine: None (default): greedy `generate_completions` with `model`; else a `procrl.generation` rollout
            engine (`VLLMEngine`) holding the same weights, which generates greedily (`SamplingParams(temperature=0,
            max_new_tokens=max_new_tokens)`, seed 0) with raw log-probs; `model` then only matters to rewards bound
            to it. The caller syncs the engine's weights first.

    Raises:
        ValueError: a reward function returns the wrong number of values (named in the message), or the
            weights do not match the reward functions.
    """
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)
    if len(weights) != len(reward_funcs):
        raise ValueError(f"{len(weights)} reward_weights for {len(reward_funcs)} reward functions")
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=eos_token_ids(tokenizer, model.generation_config),
    )
    eos_ids = eos_token_ids(tokenizer, model.generation_config)
    names = [getattr(f, "__name__", type(f).__name__) for f in reward_funcs]
    per_func: list[list[float]] = [[] for _ in reward_funcs]
    weighted: list[float] = []
    correct, lengths, truncated, unparseable = 0, [], 0, 0
    problems: list[dict] = []
    was_training = model.training
    model.eval()
    start = time.perf_counter()
    bar = tqdm(total=len(dataset), desc=f"eval {name}", unit="problem", disable=not progress)
    try:
        for lo in range(0, len(dataset), batch_size):
            rows = dataset[lo : lo + batch_size]
            prompts = rows["prompt"]
            prompt_ids = render_prompts(tokenizer, prompts, chat_template_kwargs)
            out = _greedy(model, engine, prompt_ids, config, tokenizer, eos_ids, max_new_tokens)
            completions = tokenizer.batch_decode(out.completion_ids, skip_special_tokens=True)
            columns = {k: v for k, v in rows.items() if k not in ("prompt", "completion", "completion_ids")}
            kwargs = dict(columns, completion_logps=out.completion_logps)
            outcome = check_reward_length(
                getattr(outcome_func, "__name__", "outcome"),
                outcome_func(prompts=prompts, completions=completions, completion_ids=out.completion_ids, **kwargs),
                len(prompts),
            )
            correct += sum(1 for v in outcome if v is not None and v >= 1.0)
            unparseable += sum(1 for v in outcome if v is None)
            rows_rewards = []
            for func, func_name in zip(reward_funcs, names, strict=True):
                values = func(prompts=prompts, completions=completions, completion_ids=out.completion_ids, **kwargs)
                rows_rewards.append(check_reward_length(func_name, values, len(prompts)))
            ids = rows.get("problem_id") or [str(lo + i) for i in range(len(prompts))]
            for i in range(len(prompts)):
                problems.append(
                    {
                        "problem_id": ids[i],
                        "correct": None if outcome[i] is None else float(outcome[i] >= 1.0),
                        "rewards": {nm: values[i] for nm, values in zip(names, rows_rewards, strict=True)},
                    }
                )
                total, applied = 0.0, False
                for k, values in enumerate(rows_rewards):
                    value = values[i]
                    if value is not None and math.isfinite(value):
                        per_func[k].append(float(value))
                        total += weights[k] * float(value)
                        applied = True
                if applied:
                    weighted.append(total)
            for ids in out.completion_ids:
                lengths.append(len(ids))
                truncated += int(not ids or ids[-1] not in eos_ids)
            bar.update(len(prompts))
    finally:
        bar.close()
        model.train(was_training)
    n = len(dataset)
    low, high = wilson_interval(correct, n) or (None, None)  # no problem: no interval
    return EvalResult(
        name=name,
        n=n,
        accuracy=ratio(correct, n),
        ci_low=low,
        ci_high=high,
        mean_reward=ratio(sum(weighted), len(weighted)),
        rewards={nm: ratio(sum(v), len(v)) for nm, v in zip(names, per_func, strict=True)},
        mean_length=ratio(sum(lengths), n),
        truncated_frac=ratio(truncated, n),
        unparseable_gold=unparseable,
        wall_time_s=time.perf_counter() - start,
        problems=problems,
    )


class _Greedy(NamedTuple):
    completion_ids: list[list[int]]
    completion_logps: list[list[float]]


def _greedy(model, engine, prompt_ids, config, tokenizer, eos_ids, max_new_tokens: int):
    """Greedy completions `(B, L_i)` and their raw log-probs, from `model` or from `engine` (see `evaluate`)."""
    if engine is None:
        return generate_completions(model, prompt_ids, config, pad_token_id=tokenizer.pad_token_id, eos_ids=eos_ids)
    rollouts = engine.generate(prompt_ids, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens), seed=0)
    return _Greedy([r.token_ids for r in rollouts], [r.logprobs for r in rollouts])


def paired_comparison(before: dict, after: dict, *, seed: int = 0) -> dict[str, dict]:
    """Paired before/after differences on the same problems: accuracy and every reward (e.g. ProcessAcc from
    `oracle_process_reward`), each with a percentile-bootstrap 95% interval of the mean difference over problems.

    Args:
        before, after: `EvalResult.to_dict()` of the same data set, with `problems`.
        seed: bootstrap seed.

    Returns:
        metric ("accuracy" or a reward name) -> `{"n", "before", "after", "diff", "ci_low", "ci_high"}` over the
        problems present in both with a value in both (None or non-finite values are left out, and counted out of
        `n`); a metric without such a problem is absent (undefined, not 0).

    >>> row = lambda pid, c: {"problem_id": pid, "correct": c, "rewards": {}}
    >>> b = {"problems": [row("a", 0.0), row("b", 1.0), row("c", 0.0)]}
    >>> a = {"problems": [row("a", 1.0), row("b", 1.0), row("c", None)]}
    >>> out = paired_comparison(b, a)["accuracy"]
    >>> out["n"], out["before"], out["after"], out["diff"]
    (2, 0.5, 1.0, 0.5)
    """
    after_by_id = {p["problem_id"]: p for p in after.get("problems", [])}
    pairs: dict[str, list[tuple[float, float]]] = {}
    for p in before.get("problems", []):
        q = after_by_id.get(p["problem_id"])
        if q is None:
            continue
        values = {"accuracy": (p["correct"], q["correct"])}
        values.update({k: (v, q["rewards"].get(k)) for k, v in p["rewards"].items()})
        for metric, (x, y) in values.items():
            if x is not None and y is not None and math.isfinite(x) and math.isfinite(y):
                pairs.setdefault(metric, []).append((float(x), float(y)))
    out = {}
    for metric, rows in pairs.items():
        diffs = [y - x for x, y in rows]
        low, high = bootstrap_mean_interval(diffs, seed=seed)
        out[metric] = {
            "n": len(rows),
            "before": sum(x for x, _ in rows) / len(rows),
            "after": sum(y for _, y in rows) / len(rows),
            "diff": sum(diffs) / len(rows),
            "ci_low": low,
            "ci_high": high,
        }
    return out
