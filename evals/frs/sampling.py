"""FRS traces: sample completions of a policy with their tail confidences and final-answer correctness.

Two samplers, one `Trace` per completion:

- `generate_traces`: the training callback's (`procrl.trainers.frs_callback`, the live policy, GRPO's sampling
  settings), `procrl.generation.generate_completions` (left padding, KV cache, cut after the first EOS); each
  trace's confidence comes from that generation's own raw logits (`completion_logps`, T = 1);
- `sample_traces`: `procrl frs`'s (offline), through a `procrl.generation` rollout engine (vLLM or transformers),
  whose `Rollout.logprobs` are raw (T = 1) as well, and procrl's sample store (`procrl.data_builders.rollouts.
  run_rollouts`: content-addressed shards, so an interrupted run resumes where it stopped and a rerun samples
  nothing);
- `select_traces`: the samples of a `procrl select` report, read back from the same store.

No second forward pass in any.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from procrl.data_builders.rollout_shards import read_shard_file
from procrl.data_builders.rollouts import RolloutRequest, run_rollouts
from procrl.evals.frs import Trace, tail_confidence_from_logps
from procrl.evals.selection import read_select_run, store_dir
from procrl.generation import (
    RolloutEngine,
    SamplingParams,
    derive_seed,
    eos_token_ids,
    generate_completions,
    render_prompts,
)
from procrl.rewards.oracle import GOLD_STEPS_COLUMN
from procrl.rewards.outcome import is_correct
from procrl.utils import get_logger, prompt_to_text

logger = get_logger(__name__)

__all__ = ["generate_traces", "sample_traces", "select_traces"]


def generate_traces(
    model,
    tokenizer,
    rows: Sequence[dict[str, Any]],
    *,
    n_traces: int,
    generation_config,
    eos_ids: Sequence[int] | None = None,
    batch_size: int = 32,
    tail_fraction: float = 0.1,
    chat_template_kwargs: dict | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
) -> list[Trace]:
    """Sample `n_traces` completions per problem and turn each into a `procrl.evals.frs.Trace`.

    Generation is `procrl.generation.generate_completions` (left padding, KV cache, cut after the first EOS); each
    trace's confidence is the FRS tail confidence of its `completion_logps` (raw distribution, T = 1, from the
    generation's own logits), and its correctness is `procrl.rewards.outcome.is_correct` against the `answer` column.

    Args:
        model: causal LM (its training mode is restored afterwards).
        tokenizer: its tokenizer (pad token required).
        rows: problems in procrl's data schema (`prompt`, `answer`; `problem_id` and `question` used when present).
        n_traces: completions per problem.
        generation_config: a `transformers.GenerationConfig` (sampling settings, `max_new_tokens`); not modified.
        eos_ids: ids that end a completion; default: the tokenizer's and the model's EOS ids.
        batch_size: completions per `generate` call.
        tail_fraction: FRS tail share (0.1).

    Returns:
        `len(rows) * n_traces` traces, problem by problem, traces of one problem in sampling order.

    Raises:
        ValueError: `n_traces` or `batch_size` below 1.
    """
    if n_traces < 1 or batch_size < 1:
        raise ValueError(f"n_traces and batch_size must be >= 1, got {n_traces} and {batch_size}")
    eos_ids = list(eos_ids) if eos_ids is not None else eos_token_ids(tokenizer, model.generation_config)
    jobs = [(row_index, row) for row_index, row in enumerate(rows) for _ in range(n_traces)]
    traces: list[Trace] = []
    was_training = model.training
    model.eval()
    bar = tqdm(total=len(jobs), desc="FRS generate", unit="trace", disable=not progress)
    try:
        for lo in range(0, len(jobs), batch_size):
            chunk = jobs[lo : lo + batch_size]
            prompt_ids = render_prompts(tokenizer, [row["prompt"] for _, row in chunk], chat_template_kwargs)
            out = generate_completions(
                model,
                prompt_ids,
                generation_config,
                pad_token_id=tokenizer.pad_token_id,
                eos_ids=eos_ids,
                device=device,
            )
            texts = tokenizer.batch_decode(out.completion_ids, skip_special_tokens=True)
            for (row_index, row), ids, logps, text in zip(
                chunk, out.completion_ids, out.completion_logps, texts, strict=True
            ):
                cut = not ids or ids[-1] not in eos_ids  # generate_completions cuts after the first EOS
                traces.append(_trace(row_index, row, text, logps, len(ids), tail_fraction, truncated=cut))
            bar.update(len(chunk))
    finally:
        bar.close()
        model.train(was_training)
    return traces


def _trace(
    row_index: int,
    row: dict[str, Any],
    text: str,
    logps: Sequence[float],
    num_tokens: int,
    tail_fraction: float,
    *,
    truncated: bool | None,
):
    gold, gold_steps = row.get("answer"), row.get(GOLD_STEPS_COLUMN)
    return Trace(
        problem_id=str(row.get("problem_id") or f"row/{row_index}"),
        problem=row.get("question") or prompt_to_text(row["prompt"]),
        completion=text,
        gold=None if gold is None else str(gold),
        correct=is_correct(text, gold),
        confidence=tail_confidence_from_logps(logps, tail_fraction),
        num_tokens=num_tokens,
        gold_steps=None if gold_steps is None else str(gold_steps),
        truncated=truncated,
    )


def sample_traces(
    engine: RolloutEngine,
    rows: Sequence[dict[str, Any]],
    *,
    n_traces: int,
    params: SamplingParams,
    batch_size: int,
    tail_fraction: float,
    seed: int,
    cache_dir: str | os.PathLike,
    chat_template_kwargs: dict | None = None,
    progress: bool = True,
) -> list[Trace]:
    """Sample `n_traces` completions per problem through the sample store and turn each into a `Trace` (confidence:
    FRS tail confidence of the rollout's raw (T = 1) log-probs; correctness: `is_correct` against the `answer`
    column).

    The rows (each problem's prompt, `engine.tokenizer`'s rendering, repeated `n_traces` times) go to `run_rollouts`
    in shards of `batch_size // n_traces` problems (at least one), shard c sampled by one `engine.generate` call
    seeded with `derive_seed(seed, c)`, into `cache_dir`: a run interrupted and started again with the same settings
    reuses the finished shards and produces exactly the traces of an uninterrupted run (the same engine on the same
    machine), and a rerun (e.g. with another judge) samples nothing. The store is keyed by the engine's
    `cache_key()` (a vLLM trace is never reused as a transformers one), the rows, `params` and the seeds.

    Args:
        engine: the rollout engine (`procrl.generation.make_engine`).
        rows: problems in procrl's data schema (`prompt`, `answer`; `problem_id` and `question` used when present).
        n_traces: completions per problem.
        params: the sampling settings (`max_new_tokens`, temperature, top-p, top-k).
        batch_size: completions per `generate` call (rounded down to whole problems).
        tail_fraction: FRS tail share (0.1).
        seed: base seed of the shards.
        cache_dir: the sample store's folder.
        progress: show the progress bar.

    Returns:
        `len(rows) * n_traces` traces, problem by problem, traces of one problem in sampling order.

    Raises:
        ValueError: `n_traces` or `batch_size` below 1.
    """
    if n_traces < 1 or batch_size < 1:
        raise ValueError(f"n_traces and batch_size must be >= 1, got {n_traces} and {batch_size}")
    prompt_ids = render_prompts(engine.tokenizer, [row["prompt"] for row in rows], chat_template_kwargs)
    requests = [RolloutRequest(str(i), ids, n_traces) for i, ids in enumerate(prompt_ids)]
    results = run_rollouts(
        engine, requests, params, seed=seed, cache_dir=cache_dir, shard_size=max(1, batch_size // n_traces) * n_traces,
        desc="FRS generate", shard_seed=lambda c: derive_seed(seed, c), progress=progress,
    )  # fmt: skip
    return [
        _trace(i, row, r.text, r.logprobs, len(r.token_ids), tail_fraction, truncated=r.finish_reason == "length")
        for i, row in enumerate(rows)
        for r in results[str(i)]
    ]


def select_traces(
    report_path: str | Path, rows: Sequence[dict[str, Any]], *, tail_fraction: float = 0.1
) -> list[Trace]:
    """The samples of a `procrl select` run as FRS traces, so one sample set serves best-of-N and FRS.

    Each candidate of the run (problem-major, in sampling order) becomes a `Trace`: its text and token count from
    its problems.jsonl (`procrl.evals.selection.read_select_run`), its tail confidence from the sampler's raw (T = 1)
    log-probs in the shard files the run lists (`samples.files`, in the run's sample store `cache/`:
    `procrl.evals.selection.store_dir`; the same log-probs `sample_traces` uses) and its correctness from
    `is_correct` against `rows`' `answer` (the check `procrl select` makes).

    Args:
        report_path: the select run's directory (`procrl select --output-dir`).
        rows: the report's problems in procrl's data schema, in the report's order (`question` or `prompt` is the
            problem text the judge sees; `answer` the gold).
        tail_fraction: FRS tail share (0.1).

    Returns:
        `len(rows) * n` traces, problem by problem.

    Raises:
        ValueError: the directory holds no select run, a shard file it lists is missing or unreadable, they hold
            another number of samples, or the run's problems do not match `rows` (count or `problem_id`).
    """
    report_path = Path(report_path)
    try:
        report = read_select_run(report_path)
        problems = report["problems"]
        candidates = [c for p in problems for c in p["candidates"]]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"--traces-from {err}") from None
    if len(problems) != len(rows):
        raise ValueError(
            f"--traces-from {report_path} holds {len(problems)} problems but the data slice has {len(rows)}; "
            "give the report's dataset, start and end"
        )
    for i, (problem, row) in enumerate(zip(problems, rows, strict=True)):
        wanted = str(row.get("problem_id") or f"row/{i}")
        if row.get("problem_id") is not None and str(problem.get("problem_id")) != wanted:
            raise ValueError(
                f"--traces-from {report_path}: problem {i} is {problem.get('problem_id')!r}, the data slice's is "
                f"{wanted!r}; give the report's dataset, start and end"
            )
    store = store_dir(report_path)
    try:
        samples = [r for name in report["samples"]["files"] for r in read_shard_file(store / name)]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"--traces-from {report_path}: its samples in {store} are missing or unreadable ({err}); rerun procrl "
            "select to write them"
        ) from None
    if len(samples) != len(candidates):
        raise ValueError(
            f"--traces-from {report_path}: its shard files in {store} hold {len(samples)} samples, the report "
            f"{len(candidates)} candidates; rerun procrl select"
        )
    traces, k = [], 0
    for i, (problem, row) in enumerate(zip(problems, rows, strict=True)):
        for candidate in problem["candidates"]:
            cut = samples[k].finish_reason == "length"
            traces.append(
                _trace(i, row, candidate["text"], samples[k].logprobs, int(candidate["num_tokens"]), tail_fraction,
                       truncated=cut)
            )  # fmt: skip
            k += 1
    return traces
