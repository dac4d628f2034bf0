"""FRS traces: sample completions of a policy with their tail confidences and final-answer correctness.

Two samplers, one `Trace` per completion:

- `generate_traces`: the training callback's (`procrl.trainers.frs_callback`, the live policy, GRPO's sampling
  settings), `procrl.generation.generate_completions` (left padding, KV cache, cut after the first EOS); each
  trace's confidence comes from that generation's own raw logits (`completion_logps`, T = 1);
- `engine_traces` / `generate_traces_resumable`: `procrl frs`'s (offline), through a `procrl.generation` rollout
  engine (vLLM or transformers), whose `Rollout.logprobs` are raw (T = 1) as well; the resumable form writes the
  traces chunk by chunk so that an interrupted run resumes where it stopped.

No second forward pass in either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from procrl.evals.frs import Trace, tail_confidence_from_logps
from procrl.evals.selection import cache_paths, read_select_run
from procrl.generation import (
    RolloutEngine,
    SamplingParams,
    derive_seed,
    eos_token_ids,
    generate_completions,
    render_prompts,
)
from procrl.rewards.outcome import is_correct
from procrl.utils import get_logger, json_safe, prompt_to_text

logger = get_logger(__name__)

__all__ = ["engine_traces", "generate_traces", "generate_traces_resumable", "select_traces"]


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
                traces.append(_trace(row_index, row, text, logps, len(ids), tail_fraction))
            bar.update(len(chunk))
    finally:
        bar.close()
        model.train(was_training)
    return traces


def _trace(
    row_index: int, row: dict[str, Any], text: str, logps: Sequence[float], num_tokens: int, tail_fraction: float
):
    gold = row.get("answer")
    return Trace(
        problem_id=str(row.get("problem_id") or f"row/{row_index}"),
        problem=row.get("question") or prompt_to_text(row["prompt"]),
        completion=text,
        gold=None if gold is None else str(gold),
        correct=is_correct(text, gold),
        confidence=tail_confidence_from_logps(logps, tail_fraction),
        num_tokens=num_tokens,
    )


def engine_traces(
    engine: RolloutEngine,
    rows: Sequence[dict[str, Any]],
    *,
    n_traces: int,
    params: SamplingParams,
    seed: int,
    tail_fraction: float = 0.1,
    chat_template_kwargs: dict | None = None,
    first_row_index: int = 0,
) -> list[Trace]:
    """Sample `n_traces` completions per problem with one `engine.generate(..., seed=seed)` call and turn each into
    a `Trace` (confidence: FRS tail confidence of the rollout's raw (T = 1) log-probs; correctness:
    `is_correct` against the `answer` column; `first_row_index` names problems without a `problem_id`).

    Returns:
        `len(rows) * n_traces` traces, problem by problem, traces of one problem in sampling order.

    Raises:
        ValueError: `n_traces` below 1.
    """
    if n_traces < 1:
        raise ValueError(f"n_traces must be >= 1, got {n_traces}")
    prompt_ids = render_prompts(engine.tokenizer, [row["prompt"] for row in rows], chat_template_kwargs)
    rollouts = engine.generate([ids for ids in prompt_ids for _ in range(n_traces)], params, seed=seed)
    jobs = [(first_row_index + i, row) for i, row in enumerate(rows) for _ in range(n_traces)]
    return [
        _trace(index, row, r.text, r.logprobs, len(r.token_ids), tail_fraction)
        for (index, row), r in zip(jobs, rollouts, strict=True)
    ]


def generate_traces_resumable(
    path: str | Path,
    settings: Mapping[str, Any],
    engine: RolloutEngine,
    rows: Sequence[dict[str, Any]],
    *,
    n_traces: int,
    params: SamplingParams,
    batch_size: int,
    tail_fraction: float,
    seed: int,
    progress: bool = True,
) -> list[Trace]:
    """Sample the traces in chunks of problems, appending each chunk to the JSONL file `path` (`traces.jsonl`).

    Each chunk (`batch_size // n_traces` problems, at least one) is one `engine_traces` call seeded with
    `derive_seed(seed, chunk index)`, so a run interrupted and started again with the same settings reuses the
    finished chunks and produces exactly the traces of an uninterrupted run (the same engine on the same machine);
    a rerun with the same settings (e.g. with another judge) generates nothing. The first line of the file holds
    `settings` plus `problems`, `tail_fraction` and the engine's `cache_key()` (a vLLM trace is never reused as a
    transformers one); a file with other settings is replaced, and the lines of a chunk cut mid-write are dropped.

    Args:
        path: the JSONL file (its folder must exist).
        settings: what makes two runs the same (JSON values: model, data slice, sampling settings, seed, ...).
        engine: the rollout engine (`procrl.generation.make_engine`).
        rows: problems in procrl's data schema (`prompt`, `answer`; `problem_id` and `question` used when present).
        n_traces: completions per problem.
        params: the sampling settings (`max_new_tokens`, temperature, top-p, top-k).
        batch_size: completions per chunk (and per `generate` call of the transformers engine).
        tail_fraction: FRS tail share (0.1).
        seed: base seed of the chunks.
        progress: show one progress bar over all traces.

    Returns:
        `len(rows) * n_traces` traces, problem by problem, traces of one problem in sampling order.

    Raises:
        ValueError: `n_traces` or `batch_size` below 1.
    """
    if n_traces < 1 or batch_size < 1:
        raise ValueError(f"n_traces and batch_size must be >= 1, got {n_traces} and {batch_size}")
    path = Path(path)
    settings = {**settings, "problems": len(rows), "tail_fraction": tail_fraction, "engine": engine.cache_key()}
    per_chunk = max(1, batch_size // n_traces)  # problems per chunk
    traces: list[Trace] = []
    if path.is_file():
        lines = path.read_text().splitlines()
        if lines and json.loads(lines[0]).get("settings") == json_safe(settings):
            traces = [Trace.from_dict(json.loads(line)) for line in lines[1:]]
            logger.info("reusing %d traces from %s", len(traces), path)
    if not traces:
        path.write_text(json.dumps({"settings": json_safe(settings)}) + "\n")
    done = len(rows) if len(traces) == len(rows) * n_traces else len(traces) // n_traces // per_chunk * per_chunk
    if len(traces) != done * n_traces:  # a chunk cut mid-write: drop its lines from the file too
        traces = traces[: done * n_traces]
        lines = [json.dumps({"settings": json_safe(settings)})] + [json.dumps(json_safe(t.to_dict())) for t in traces]
        path.write_text("\n".join(lines) + "\n")
    bar = tqdm(total=len(rows) * n_traces, initial=len(traces), desc="FRS generate", unit="trace", disable=not progress)
    for chunk, lo in enumerate(range(0, len(rows), per_chunk)):
        if lo < done:
            continue
        new = engine_traces(
            engine,
            rows[lo : lo + per_chunk],
            n_traces=n_traces,
            params=params,
            seed=derive_seed(seed, chunk),
            tail_fraction=tail_fraction,
            first_row_index=lo,
        )
        with path.open("a") as handle:
            handle.writelines(json.dumps(json_safe(t.to_dict())) + "\n" for t in new)
        traces.extend(new)
        bar.update(len(new))
    bar.close()
    return traces


def select_traces(
    report_path: str | Path, rows: Sequence[dict[str, Any]], *, tail_fraction: float = 0.1
) -> list[Trace]:
    """The samples of a `procrl select` run as FRS traces, so one sample set serves best-of-N and FRS.

    Each candidate of the run (problem-major, in sampling order) becomes a `Trace`: its text and token count from
    its problems.jsonl (`procrl.evals.selection.read_select_run`), its tail confidence from the sampler's raw (T = 1)
    log-probs in the run's samples file (`samples.jsonl` beside them, the same log-probs `engine_traces` uses) and
    its correctness from `is_correct` against `rows`' `answer` (the check `procrl select` makes).

    Args:
        report_path: the select run's directory (`procrl select --output-dir`).
        rows: the report's problems in procrl's data schema, in the report's order (`question` or `prompt` is the
            problem text the judge sees; `answer` the gold).
        tail_fraction: FRS tail share (0.1).

    Returns:
        `len(rows) * n` traces, problem by problem.

    Raises:
        ValueError: the directory holds no select run, its samples file is missing or holds another number of samples,
            or the report's problems do not match `rows` (count or `problem_id`).
    """
    report_path = Path(report_path)
    try:
        problems = read_select_run(report_path)["problems"]
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
    samples_path, _ = cache_paths(report_path)
    try:
        lines = samples_path.read_text().splitlines()[1:]
        logps = [json.loads(line)["logps"] for line in lines]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"--traces-from {report_path}: its samples file {samples_path} is missing or unreadable ({err}); "
            "rerun procrl select to write it"
        ) from None
    if len(logps) != len(candidates):
        raise ValueError(
            f"--traces-from {report_path}: {samples_path} holds {len(logps)} samples, the report {len(candidates)} "
            "candidates; rerun procrl select"
        )
    traces, k = [], 0
    for i, (problem, row) in enumerate(zip(problems, rows, strict=True)):
        for candidate in problem["candidates"]:
            traces.append(_trace(i, row, candidate["text"], logps[k], int(candidate["num_tokens"]), tail_fraction))
            k += 1
    return traces
