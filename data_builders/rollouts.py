"""Rollout engines and resumable, sharded rollouts for the data builders (DESIGN §5, issue 3 "Rollout engine").

One interface, two engines:

- `TransformersEngine`: batched `generate` with left padding and the KV cache (reusing
  `procrl.trainers.rollout.generate_completions`), prompts sorted by length into batches to cut padding;
- `VLLMEngine`: vLLM's offline `LLM`, used when `vllm` is importable (the import is lazy).

Both return one `Rollout` per prompt row: the sampled token ids cut after the first EOS (kept) or after the first
token that completes a stop string (kept), their text, and their log-probabilities under the RAW model distribution
(temperature 1, no top-p/top-k; natural log), whatever the sampling settings were.

`run_rollouts` is what the builders call. It expands requests into rows, cuts the rows into shards, spreads the
shards over accelerate processes, and writes each finished shard atomically to `cache_dir`:

    >>> engine = make_engine("default")                                  # doctest: +SKIP
    >>> params = SamplingParams(temperature=0.7, max_new_tokens=256)
    >>> requests = [RolloutRequest("gsm8k/test/0/scratch", prompt_ids, n=8)]  # doctest: +SKIP
    >>> out = run_rollouts(engine, requests, params, seed=0, cache_dir="rollout_cache")  # doctest: +SKIP
    >>> len(out["gsm8k/test/0/scratch"])                                 # doctest: +SKIP
    8

Cache and resume. A shard's file name is a hash of everything its content depends on: the engine's
`cache_key()` (model identity, dtype, and for transformers the device type and batch size, which fix the batch
composition), the shard's rows (prompt ids, repeated n times), `params.to_dict()`, the seed and the shard index.
The shard's generation is seeded from (seed, that hash), and its batches are a function of its rows alone, so its
content depends on neither the process that produced it nor the number of processes. A run killed with `kill -9`
and rerun regenerates only the missing shards; every shard that exists is reused verbatim. Every call, fresh or
resumed, returns what the shard files hold (the values it just computed are read back from the files too, and
JSON keeps floats exactly), so a resumed run returns bit for bit what an uninterrupted run returns for the shards
both read, and the regenerated shards are what the first run would have written on the same machine (see
Determinism). A changed setting changes every hash, so stale shards are never reused (they stay on disk; delete the
directory to reclaim space). Files are written to a temporary name and renamed, so a killed run leaves at most a
`*.tmp.*` file, which is ignored.

Processes. Shard i belongs to process i % num_processes (accelerate `PartialState`: one process, `accelerate
launch`, or `ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2`). A process that has finished its own shards
waits for the others' files to appear (a file poll, so a long imbalance cannot hit the collective timeout), then
every process reads all shards. Several machines need `cache_dir` on a shared file system.

Determinism (transformers): each batch is sampled after `torch.manual_seed` of a seed derived from (shard seed,
batch index), inside `torch.random.fork_rng` so the caller's RNG is untouched. Batches are a fixed function of the
shard's rows. The same machine, library versions, dtype, batch size and thread count therefore reproduce a shard
exactly. Another CPU model (e.g. AMX or AVX-512 matmul kernels) or GPU rounds the logits differently: a shard
regenerated there has log-probs that differ in the last bits and, rarely, a different token where two candidates
were nearly tied. Its rows are equally valid samples; the cache key does not include the machine, so a cache can be
resumed elsewhere, and then only the reused shards are bitwise those of the first machine.
"""

from __future__ import annotations

import abc
import hashlib
import json
import math
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from procrl.utils import get_logger

if TYPE_CHECKING:
    from accelerate import PartialState
    from transformers import PreTrainedTokenizerBase

logger = get_logger(__name__)

__all__ = [
    "FINISH_REASONS",
    "Rollout",
    "RolloutEngine",
    "RolloutRequest",
    "RolloutStats",
    "SamplingParams",
    "TransformersEngine",
    "VLLMEngine",
    "weights_fingerprint",
    "cut_completion",
    "default_state",
    "derive_seed",
    "make_engine",
    "run_rollouts",
]

FINISH_REASONS = ("eos", "stop", "length")
# Bumped whenever the shard file layout or the seeding scheme changes, so old shards are never reused.
SHARD_FORMAT_VERSION = 1


# --------------------------------------------------------------------------------------------------------------------
# Data types


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion. Hashable and canonical (`to_dict`), so it can key the rollout cache.

    The sampling knobs act on the sampler only: `Rollout.logprobs` are always raw (temperature 1) log-probs.
    """

    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature; 0 means greedy decoding."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass in (0, 1]; 1 = off."})
    top_k: int = field(default=0, metadata={"help": "Keep the k most likely tokens; 0 = off."})
    max_new_tokens: int = field(default=256, metadata={"help": "Most tokens generated per completion (>= 1)."})
    stop: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "Stop strings: a completion ends with the first token that completes one of them in the "
            "completion's text (the token, hence the stop string, is kept). Text of the prompt never matches."
        },
    )
    min_new_tokens: int = field(
        default=0,
        metadata={"help": "EOS is suppressed before this many tokens (benchmarks use it to force lengths); 0 = off."},
    )

    def __post_init__(self):
        # Canonical types, so SamplingParams(temperature=1) and (temperature=1.0) key the same cache entry.
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        object.__setattr__(self, "stop", stop)
        for name, kind in (("temperature", float), ("top_p", float), ("top_k", int)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        for name in ("max_new_tokens", "min_new_tokens"):
            object.__setattr__(self, name, int(getattr(self, name)))
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 turns it off), got {self.top_p}.")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 turns it off), got {self.top_k}.")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}.")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise ValueError(
                f"min_new_tokens must be in [0, max_new_tokens={self.max_new_tokens}], got {self.min_new_tokens}."
            )
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must hold non-empty strings, got {self.stop!r}; use () for no stop strings.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def samples_raw_distribution(self) -> bool:
        """True when the sampler draws from the raw model distribution (T = 1, no top-p, no top-k)."""
        return self.temperature == 1.0 and self.top_p == 1.0 and self.top_k == 0

    def to_dict(self) -> dict:
        """Canonical JSON-able dict (stop strings as a list), e.g. for cache keys."""
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d


@dataclass
class Rollout:
    """One sampled completion.

    Attributes:
        token_ids: generated ids `(L,)`, cut after the first EOS (kept) or after the first token that completes a
            stop string (kept); never longer than `max_new_tokens`.
        text: `tokenizer.decode(token_ids, skip_special_tokens=True)`. With a stop string it may run a few characters
            past the stop string when the completing token does (e.g. token "\\n\\nThe" for stop "\\n\\n").
        logprobs: natural-log probabilities of `token_ids` under the RAW model distribution (temperature 1, no
            top-p/top-k), `(L,)`; logits at position t score token t + 1.
        finish_reason: "eos" (ends with an EOS id), "stop" (a stop string), or "length" (`max_new_tokens` reached).
    """

    token_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: str

    def __post_init__(self):
        if len(self.logprobs) != len(self.token_ids):
            raise ValueError(f"Rollout has {len(self.token_ids)} token ids but {len(self.logprobs)} log-probs.")
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason must be one of {FINISH_REASONS}, got {self.finish_reason!r}.")

    def to_dict(self) -> dict:
        return {
            "token_ids": list(self.token_ids),
            "text": self.text,
            "logprobs": list(self.logprobs),
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Rollout:
        return cls(
            token_ids=[int(t) for t in d["token_ids"]],
            text=str(d["text"]),
            logprobs=[float(x) for x in d["logprobs"]],
            finish_reason=str(d["finish_reason"]),
        )


@dataclass
class RolloutRequest:
    """n samples wanted for one prompt.

    Attributes:
        key: the caller's stable id, unique within one `run_rollouts` call (e.g. "gsm8k-12/traj3/cut2/student0").
            It names the result only; the cache is keyed by content, so renaming keys reuses cached shards.
        prompt_ids: the full prompt, already rendered (for prefix continuation it ends with the prefix ids).
        n: number of samples (>= 0; 0 gives an empty list).
    """

    key: str
    prompt_ids: list[int]
    n: int

    def __post_init__(self):
        self.prompt_ids = [int(t) for t in self.prompt_ids]
        if not self.prompt_ids:
            raise ValueError(f"RolloutRequest {self.key!r} has no prompt ids; render the prompt first.")
        if int(self.n) != self.n or self.n < 0:
            raise ValueError(f"RolloutRequest {self.key!r}: n must be an integer >= 0, got {self.n!r}.")
        self.n = int(self.n)


@dataclass
class RolloutStats:
    """What one `run_rollouts` call did, summed over all processes.

    Attributes:
        rows: rollouts returned (sum of n over requests).
        generated_rows / cached_rows: rollouts generated in this call / read from shards that already existed.
        tokens_generated: tokens of the generated rollouts after cutting (EOS included); padding and tokens
            generated past a row's end inside a batch are not counted.
        shards / generated_shards / cached_shards: the same in shards.
        wall_time_s: wall time of the call on this process (seconds).
    """

    rows: int = 0
    generated_rows: int = 0
    cached_rows: int = 0
    tokens_generated: int = 0
    shards: int = 0
    generated_shards: int = 0
    cached_shards: int = 0
    wall_time_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------------------------------
# Engines: the interface


class RolloutEngine(abc.ABC):
    """Generates one `Rollout` per prompt row.

    Attributes:
        model_id: stable identity of the model weights and dtype (engine kind, resolved path or hub id, dtype, and a
            fingerprint of local weight files), used in cache keys.
        tokenizer: the model's tokenizer (decoding, stop strings).
    """

    model_id: str
    tokenizer: PreTrainedTokenizerBase

    @abc.abstractmethod
    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams, *, seed: int) -> list[Rollout]:
        """One rollout per row of `prompt_ids` (B lists of ids), in order; callers repeat a row for n samples.

        Deterministic given (rows, params, seed, engine): the same call returns the same rollouts.
        """

    def cache_key(self) -> str:
        """Everything about the engine that changes what `generate` returns; `run_rollouts` hashes it into shard
        names. Defaults to `model_id`; engines whose samples depend on more (device, batch size) add it."""
        return self.model_id


# --------------------------------------------------------------------------------------------------------------------
# Sharded, resumable rollouts


class _GroupProgress:
    """Progress bar of request groups (problems): a group counts once every shard holding one of its rows is done."""

    def __init__(self, requests, groups, shard_size, desc, unit, state):
        from tqdm.auto import tqdm

        self.pending: dict[str, set[int]] = {}
        if groups is None:
            self.bar = None
            return
        if isinstance(groups, str) or len(groups) != len(requests):
            raise ValueError(f"groups must name one group per request ({len(requests)}), got {len(groups)}.")
        row = 0
        for request, group in zip(requests, groups, strict=True):
            shard_ids = self.pending.setdefault(str(group), set())
            shard_ids.update((row + j) // shard_size for j in range(request.n))
            row += request.n
        self.bar = tqdm(total=len(self.pending), desc=desc, unit=unit, disable=not state.is_main_process,
                        dynamic_ncols=True)  # fmt: skip

    def update(self, done: set[int]) -> None:
        if self.bar is None:
            return
        finished = [g for g, shard_ids in self.pending.items() if shard_ids <= done]
        for group in finished:
            del self.pending[group]
        if finished:
            self.bar.update(len(finished))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_rollouts(
    engine: RolloutEngine,
    requests: Sequence[RolloutRequest],
    params: SamplingParams,
    *,
    seed: int,
    cache_dir: str | os.PathLike,
    shard_size: int = 64,
    desc: str = "rollouts",
    state: PartialState | None = None,
    stats: RolloutStats | None = None,
    poll_interval_s: float = 0.5,
    groups: Sequence[str] | None = None,
    group_unit: str = "problem",
) -> dict[str, list[Rollout]]:
    """Generate `n` rollouts for every request, sharded over processes and cached on disk; resumable.

    Rows are the requests in order, each repeated n times; consecutive runs of `shard_size` rows form shard 0, 1,
    ...; shard i is generated by process i % num_processes unless its file already exists in `cache_dir` (see the
    module docstring for the cache key and the seeding). Every process returns the full result.

    Args:
        engine: the rollout engine (the same model and settings on every process).
        requests: what to sample; keys must be unique.
        params: sampling settings (part of the cache key).
        seed: base seed (part of the cache key); each shard is seeded from (seed, shard hash).
        cache_dir: directory of shard files `rollouts-<hash>.jsonl` (created if missing; shared by all processes).
        shard_size: rows per shard (the unit of resume and of work sharing).
        desc: label of the progress bar (counts rollouts, main process only).
        state: accelerate `PartialState`; default `default_state()`.
        stats: if given, filled in place with the counts of this call (summed over processes).
        poll_interval_s: how often a process that is done checks for the other processes' shard files.
        groups: one group name per request (e.g. its problem id): a second progress bar counts the groups whose
            rows are all generated (`group_unit`s, e.g. problems).
        group_unit: the unit of that bar.

    Returns:
        `{request.key: [n Rollouts]}` in request order; the i-th rollout of a request is its i-th row.

    Raises:
        ValueError: duplicate request keys, shard_size < 1, or `groups` not one per request.
        RuntimeError: a shard file in `cache_dir` is unreadable after its owner wrote it (delete it and rerun).
    """
    from tqdm.auto import tqdm

    start = time.perf_counter()
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}.")
    keys = [r.key for r in requests]
    if len(set(keys)) != len(keys):
        duplicates = sorted({k for k in keys if keys.count(k) > 1})[:5]
        raise ValueError(
            f"RolloutRequest keys must be unique; repeated: {duplicates}. Add the sample index to the key."
        )
    if state is None:
        state = default_state()

    rows = [r.prompt_ids for r in requests for _ in range(r.n)]
    shards = [
        _Shard.build(i, rows[s : s + shard_size], engine, params, seed, cache_dir)
        for i, s in enumerate(range(0, len(rows), shard_size))
    ]
    Path(cache_dir).mkdir(parents=True, exist_ok=True)

    done = {s.index for s in shards if s.is_complete()}
    mine = [s for s in shards if s.index % state.num_processes == state.process_index and s.index not in done]
    bar = tqdm(total=len(rows), desc=desc, unit="rollout", disable=not state.is_main_process, dynamic_ncols=True)
    bar.update(sum(len(s.rows) for s in shards if s.index in done))
    group_bar = _GroupProgress(requests, groups, shard_size, f"{desc}: {group_unit}s", group_unit, state)
    group_bar.update(done)
    generated_rows = generated_tokens = 0
    for shard in mine:
        t0 = time.perf_counter()
        rollouts = engine.generate(shard.rows, params, seed=shard.seed)
        if len(rollouts) != len(shard.rows):
            raise RuntimeError(
                f"{type(engine).__name__}.generate returned {len(rollouts)} rollouts for {len(shard.rows)} rows."
            )
        shard.write(rollouts, wall_time_s=time.perf_counter() - t0)
        done.add(shard.index)
        generated_rows += len(rollouts)
        generated_tokens += sum(len(r.token_ids) for r in rollouts)
        bar.update(len(rollouts))
        group_bar.update(done)

    # Wait for the other processes' shards by polling files (no collective timeout however long they take).
    waiting = [s for s in shards if s.index not in done]
    last_log = time.perf_counter()
    while waiting:
        still = []
        for shard in waiting:
            if not shard.path.exists() or not shard.is_complete():
                still.append(shard)
            else:
                bar.update(len(shard.rows))
                done.add(shard.index)
        waiting = still
        group_bar.update(done)
        if waiting:
            if time.perf_counter() - last_log > 600:
                logger.info("%s: waiting for %d shards of other processes", desc, len(waiting))
                last_log = time.perf_counter()
            time.sleep(poll_interval_s)
    bar.close()
    group_bar.close()
    state.wait_for_everyone()

    results: dict[str, list[Rollout]] = {}
    flat: list[Rollout] = []
    for shard in shards:
        rollouts = shard.read()
        if rollouts is None:
            raise RuntimeError(f"Shard file {shard.path} is missing or unreadable; delete it and rerun.")
        flat.extend(rollouts)
    offset = 0
    for request in requests:
        results[request.key] = flat[offset : offset + request.n]
        offset += request.n

    counts = [(generated_rows, generated_tokens, len(mine))]
    if state.num_processes > 1:  # a collective: every process takes this branch, whether it passed `stats` or not
        from accelerate.utils import gather_object

        counts = gather_object(counts)
    if stats is not None:
        stats.rows = len(rows)
        stats.generated_rows = sum(c[0] for c in counts)
        stats.cached_rows = len(rows) - stats.generated_rows
        stats.tokens_generated = sum(c[1] for c in counts)
        stats.shards = len(shards)
        stats.generated_shards = sum(c[2] for c in counts)
        stats.cached_shards = len(shards) - stats.generated_shards
        stats.wall_time_s = time.perf_counter() - start
    logger.info(
        "%s: %d rollouts in %d shards (%d generated here), %.1f s",
        desc,
        len(rows),
        len(shards),
        generated_rows,
        time.perf_counter() - start,
    )
    return results


@dataclass
class _Shard:
    """One shard: its rows, content hash, seed and file."""

    index: int
    rows: list[list[int]]
    digest: str
    seed: int
    path: Path

    @classmethod
    def build(cls, index, rows, engine, params, seed, cache_dir) -> _Shard:
        digest = _hash(
            {
                "format": SHARD_FORMAT_VERSION,
                "engine": engine.cache_key(),
                "params": params.to_dict(),
                "seed": int(seed),
                "shard": index,
                "rows": rows,
            }
        )
        return cls(index, rows, digest, derive_seed(seed, digest), Path(cache_dir) / f"rollouts-{digest[:32]}.jsonl")

    def write(self, rollouts: Sequence[Rollout], wall_time_s: float) -> None:
        """Write atomically: a temporary file in the same directory, fsync, then `os.replace`."""
        header = {
            "format": SHARD_FORMAT_VERSION,
            "digest": self.digest,
            "shard": self.index,
            "rows": len(self.rows),
            "tokens": sum(len(r.token_ids) for r in rollouts),
            "wall_time_s": round(wall_time_s, 3),
        }
        tmp = self.path.with_name(f"{self.path.name}.tmp.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(header) + "\n")
            for rollout in rollouts:
                f.write(json.dumps(rollout.to_dict(), ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def is_complete(self) -> bool:
        """The file exists, belongs to this shard and holds all its rows (cheap: no rollout is parsed)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                header = json.loads(f.readline())
                lines = sum(1 for line in f if line.strip())
        except (OSError, ValueError):
            return False
        return header.get("digest") == self.digest and header.get("rows") == len(self.rows) == lines

    def read(self) -> list[Rollout] | None:
        """The shard's rollouts, or None when the file is missing, belongs to another key, or is incomplete."""
        try:
            with open(self.path, encoding="utf-8") as f:
                lines = f.read().splitlines()
            header = json.loads(lines[0])
            if header.get("digest") != self.digest or header.get("rows") != len(self.rows):
                logger.warning("Ignoring shard file %s: its header does not match this shard.", self.path)
                return None
            rollouts = [Rollout.from_dict(json.loads(line)) for line in lines[1:]]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, IndexError) as err:
            logger.warning("Ignoring unreadable shard file %s (%s); it will be regenerated.", self.path, err)
            return None
        return rollouts if len(rollouts) == len(self.rows) else None


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def derive_seed(*parts: Any) -> int:
    """A seed in [0, 2**63) derived from `parts` by SHA-256 (stable across processes and Python versions)."""
    return int.from_bytes(hashlib.sha256(json.dumps(parts).encode()).digest()[:8], "big") >> 1


# --------------------------------------------------------------------------------------------------------------------
# Ending a completion: EOS, stop strings, length (shared by both engines)


def cut_completion(
    token_ids: Sequence[int], *, eos_ids: Sequence[int], stop: Sequence[str], tokenizer
) -> tuple[int, str]:
    """Where a completion ends and why: `(length in tokens, finish_reason)`.

    The completion ends after the first EOS id ("eos"), or earlier after the first token k such that a stop string
    occurs in `decode(token_ids[:k], skip_special_tokens=True)` ("stop"); otherwise it keeps every token
    ("length"). Only the completion's own text is searched, never the prompt's.
    """
    eos = set(eos_ids)
    cut, reason = len(token_ids), "length"
    for k, token in enumerate(token_ids):
        if token in eos:
            cut, reason = k + 1, "eos"
            break
    if stop:
        k_stop = _first_stop(token_ids[:cut], stop, tokenizer)
        if k_stop is not None:
            cut, reason = k_stop, "stop"
    return cut, reason


def _first_stop(token_ids: Sequence[int], stop: Sequence[str], tokenizer) -> int | None:
    """Smallest k such that a stop string is in decode(token_ids[:k]); None if none is (binary search: containing a
    stop string is monotone in k because a longer prefix decodes to a longer text)."""

    def has_stop(k: int) -> bool:
        text = tokenizer.decode(list(token_ids[:k]), skip_special_tokens=True)
        return any(s in text for s in stop)

    if not token_ids or not has_stop(len(token_ids)):
        return None
    lo, hi = 1, len(token_ids)  # has_stop(hi) holds
    while lo < hi:
        mid = (lo + hi) // 2
        if has_stop(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _stop_criteria(tokenizer, stop: Sequence[str], prompt_width: int):
    """A `StoppingCriteriaList` that ends a row as soon as its generated text (after `prompt_width` left-padded
    prompt columns) contains a stop string: the same predicate as `cut_completion`. transformers' own
    `stop_strings` would also match text that starts in the prompt, which we must not do."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StopInCompletion(StoppingCriteria):
        def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
            texts = tokenizer.batch_decode(input_ids[:, prompt_width:].tolist(), skip_special_tokens=True)
            return torch.tensor([any(s in t for s in stop) for t in texts], dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([StopInCompletion()])


# --------------------------------------------------------------------------------------------------------------------
# Engines


class TransformersEngine(RolloutEngine):
    """Batched transformers generation: left padding, KV cache, log-probs from the generation's own raw logits.

    Prompts are sorted by length (stable) into batches of `batch_size` rows, which cuts padding; results come back in
    input order. Sampling is controlled by `SamplingParams` only: the model's own `generation_config` sampling
    defaults (repetition penalty, typical-p, ...) are overridden with neutral values.

    Args:
        model_name_or_path: "default" (the embedded SmolLM2-135M-Instruct), a local directory or a hub id.
        device: "cpu", "cuda", "cuda:1", ...; default: this process's accelerator (accelerate's
            `PartialState().device`) when CUDA is available, else "cpu".
        dtype: "auto" (bfloat16 on a GPU that supports it, else float16 on GPU, float32 on CPU), "float32",
            "bfloat16" or "float16".
        batch_size: rows per `generate` call (part of the cache key: it fixes which rows share the sampler's RNG).
        model / tokenizer: already-built objects (tests); the model is used as is (not moved, not cast).
        model_id: override the identity used in cache keys (default: derived from the path, dtype and weights).
    """

    def __init__(
        self,
        model_name_or_path: str = "default",
        *,
        device: str | None = None,
        dtype: str = "auto",
        batch_size: int = 16,
        model=None,
        tokenizer=None,
        model_id: str | None = None,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        from procrl.models import resolve_model
        from procrl.trainers.rollout import eos_token_ids

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.batch_size = int(batch_size)
        if model is None:
            source = str(resolve_model(model_name_or_path))
            self.device = torch.device(device) if device is not None else _default_device()
            model = AutoModelForCausalLM.from_pretrained(source, dtype=_resolve_dtype(dtype, self.device))
            model = model.to(self.device).eval()
            # Sampling is governed by SamplingParams alone: drop the checkpoint's sampling defaults (min_p, ...),
            # which generate() would otherwise fill in; keep its special token ids.
            gc = model.generation_config
            model.generation_config = GenerationConfig(
                bos_token_id=gc.bos_token_id, eos_token_id=gc.eos_token_id, pad_token_id=gc.pad_token_id
            )
            fingerprint = weights_fingerprint(source)
        else:
            source = model_name_or_path if model_name_or_path != "default" else model.name_or_path or "in-memory"
            self.device = torch.device(device) if device is not None else next(model.parameters()).device
            fingerprint = weights_fingerprint(None, model)
        self.model = model
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(source)
        self.eos_ids = eos_token_ids(self.tokenizer, getattr(model, "generation_config", None))
        if not self.eos_ids:
            raise ValueError(f"{source}: neither the tokenizer nor the generation config defines an EOS token.")
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        dtype_name = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.model_id = model_id or f"transformers:{source}:{dtype_name}:{fingerprint}"

    def cache_key(self) -> str:
        # The device type (not its index: ranks on cuda:0 and cuda:1 must agree) and the batch size change samples.
        return f"{self.model_id}|device={self.device.type}|batch_size={self.batch_size}"

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams, *, seed: int) -> list[Rollout]:
        from procrl.trainers.rollout import generate_completions

        rows = [[int(t) for t in row] for row in prompt_ids]
        if any(not row for row in rows):
            raise ValueError("Every prompt row needs at least one token id.")
        config = self._generation_config(params)
        order = sorted(range(len(rows)), key=lambda i: (len(rows[i]), i))
        results: list[Rollout | None] = [None] * len(rows)
        fork_devices = [self.device] if self.device.type == "cuda" else []
        for batch_index, start in enumerate(range(0, len(order), self.batch_size)):
            indices = order[start : start + self.batch_size]
            batch = [rows[i] for i in indices]
            criteria = _stop_criteria(self.tokenizer, params.stop, max(map(len, batch))) if params.stop else None
            with torch.random.fork_rng(devices=fork_devices):
                torch.manual_seed(derive_seed(seed, batch_index))
                out = generate_completions(
                    self.model,
                    batch,
                    config,
                    pad_token_id=self.pad_token_id,
                    eos_ids=self.eos_ids,
                    device=self.device,
                    stopping_criteria=criteria,
                )
            for j, i in enumerate(indices):
                ids, logps = out.completion_ids[j], out.completion_logps[j]
                cut, reason = cut_completion(ids, eos_ids=self.eos_ids, stop=params.stop, tokenizer=self.tokenizer)
                results[i] = Rollout(
                    token_ids=ids[:cut],
                    text=self.tokenizer.decode(ids[:cut], skip_special_tokens=True),
                    logprobs=logps[:cut],
                    finish_reason=reason,
                )
        return results  # type: ignore[return-value]

    def _generation_config(self, params: SamplingParams):
        from transformers import GenerationConfig

        # Greedy: the warpers are not applied (transformers/generation/utils.py, _get_logits_processor adds them only
        # when sampling), so temperature/top-p/top-k stay unset (setting them only triggers "not valid" warnings).
        sampling = (
            {"do_sample": False}
            if params.greedy
            else {
                "do_sample": True,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "top_k": params.top_k,  # 0 = no TopKLogitsWarper (transformers/generation/utils.py, _get_logits_processor)
            }
        )
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            min_new_tokens=params.min_new_tokens or None,
            eos_token_id=list(self.eos_ids),
            pad_token_id=self.pad_token_id,
            # Explicit neutral values: a None would be filled from the model's generation_config, then from
            # transformers' global defaults (top_k = 50!) in GenerationMixin._prepare_generation_config.
            repetition_penalty=1.0,
            typical_p=1.0,
            epsilon_cutoff=0.0,
            eta_cutoff=0.0,
            no_repeat_ngram_size=0,
            **sampling,
        )


class VLLMEngine(RolloutEngine):
    """vLLM offline generation with the same interface (requires `pip install vllm` and a GPU).

    Each row gets its own seed, derived from (seed, row index), so a row's sample does not depend on which rows share
    its batch (up to GPU numerics). Log-probs: vLLM's sampled-token log-probs equal the raw distribution only when the
    sampler draws from it (T = 1, top_p = 1, top_k = 0, min_new_tokens = 0); otherwise the completions are rescored with one extra
    prompt-log-prob pass (`prompt_logprobs=0` on prompt + completion, temperature 1), as DESIGN §3 requires.
    Stop strings are applied by vLLM (`include_stop_str_in_output=True`), then `cut_completion` recomputes the end
    and the text from the token ids, so both engines follow one rule. With several accelerate processes each rank
    runs its own engine on its own GPU (`distributed_executor_backend="external_launcher"`, as TRL's colocate mode).

    Args:
        model_name_or_path: "default", a local directory or a hub id.
        dtype: "auto" (bfloat16 when supported, else float16), "float32", "bfloat16" or "float16".
        batch_size: accepted so one config drives both engines, and ignored: all rows `generate` receives (one
            `run_rollouts` shard) go to vLLM in one call and vLLM schedules its own batches. Per-row seeds make
            results independent of that, so with vLLM pass a large `shard_size` (e.g. 1024) to keep the GPU busy.
        tokenizer: optional tokenizer object (default: loaded from the model path).
        **llm_kwargs: passed to `vllm.LLM` (`gpu_memory_utilization`, `max_model_len`, `tensor_parallel_size`, ...).
    """

    def __init__(
        self,
        model_name_or_path: str = "default",
        *,
        device: str | None = None,
        dtype: str = "auto",
        batch_size: int | None = None,
        tokenizer=None,
        model_id: str | None = None,
        **llm_kwargs,
    ):
        try:
            from vllm import LLM
        except ImportError as err:
            raise ImportError("VLLMEngine needs vLLM: pip install vllm (or use engine='transformers').") from err
        from transformers import AutoTokenizer, GenerationConfig

        from procrl.models import resolve_model
        from procrl.trainers.rollout import eos_token_ids

        if device is not None and not str(device).startswith("cuda"):
            raise ValueError(f"VLLMEngine runs on CUDA GPUs only, got device={device!r}; use engine='transformers'.")
        source = str(resolve_model(model_name_or_path))
        torch_dtype = _resolve_dtype(dtype, torch.device("cuda"))
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(source)
        try:
            generation_config = GenerationConfig.from_pretrained(source)
        except OSError:
            generation_config = None
        self.eos_ids = eos_token_ids(self.tokenizer, generation_config)
        llm_kwargs.setdefault("seed", 0)
        llm_kwargs.setdefault("generation_config", "vllm")  # sampling comes from SamplingParams, not the checkpoint
        if default_state().num_processes > 1:
            llm_kwargs.setdefault("distributed_executor_backend", "external_launcher")
        self.llm = LLM(model=source, dtype=str(torch_dtype).removeprefix("torch."), **llm_kwargs)
        self.model_id = (
            model_id or f"vllm:{source}:{str(torch_dtype).removeprefix('torch.')}:{weights_fingerprint(source)}"
        )

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams, *, seed: int) -> list[Rollout]:
        from vllm import SamplingParams as VSamplingParams

        rows = [[int(t) for t in row] for row in prompt_ids]
        # Sampled-token log-probs are raw only if nothing reshapes the distribution (min_tokens masks EOS, which
        # renormalises vLLM's "processed" log-probs); otherwise rescore.
        raw = params.samples_raw_distribution and params.min_new_tokens == 0
        sampling = [
            VSamplingParams(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else -1,  # -1 = off in every vLLM version
                max_tokens=params.max_new_tokens,
                min_tokens=params.min_new_tokens,
                stop=list(params.stop) or None,
                include_stop_str_in_output=True,
                stop_token_ids=list(self.eos_ids),
                logprobs=0 if raw else None,
                seed=derive_seed(seed, j),
            )
            for j in range(len(rows))
        ]
        outputs = self.llm.generate([{"prompt_token_ids": r} for r in rows], sampling, use_tqdm=False)

        cuts, all_ids, all_logps = [], [], []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            cut, reason = cut_completion(ids, eos_ids=self.eos_ids, stop=params.stop, tokenizer=self.tokenizer)
            cuts.append((cut, reason))
            all_ids.append(ids[:cut])
            all_logps.append(
                [lp[t].logprob for lp, t in zip(completion.logprobs[:cut], ids[:cut], strict=True)] if raw else None
            )
        if not raw:
            all_logps = self._rescore(rows, all_ids)
        return [
            Rollout(ids, self.tokenizer.decode(ids, skip_special_tokens=True), logps, reason)
            for ids, logps, (_, reason) in zip(all_ids, all_logps, cuts, strict=True)
        ]

    def _rescore(self, rows: list[list[int]], completions: list[list[int]]) -> list[list[float]]:
        """Raw (T = 1) log-probs of each completion given its prompt: vLLM's prompt log-probs of prompt + completion
        (entry j scores token j given tokens < j; entry 0 is None)."""
        from vllm import SamplingParams as VSamplingParams

        scored = [i for i, c in enumerate(completions) if c]
        result: list[list[float]] = [[] for _ in completions]
        params = VSamplingParams(max_tokens=1, temperature=1.0, top_p=1.0, top_k=-1, prompt_logprobs=0)
        prompts = [{"prompt_token_ids": rows[i] + completions[i]} for i in scored]
        for i, out in zip(scored, self.llm.generate(prompts, params, use_tqdm=False), strict=True):
            offset = len(rows[i])
            result[i] = [out.prompt_logprobs[offset + k][token].logprob for k, token in enumerate(completions[i])]
        return result


def make_engine(model_name_or_path: str = "default", *, engine: str = "auto", **kwargs) -> RolloutEngine:
    """Build a rollout engine: "vllm", "transformers", or "auto" (vLLM when it is importable and a CUDA GPU is
    visible, else transformers). `kwargs` go to the engine's constructor (`device`, `dtype`, `batch_size`, ...)."""
    import importlib.util

    if engine not in ("auto", "transformers", "vllm"):
        raise ValueError(f"engine must be 'auto', 'transformers' or 'vllm', got {engine!r}.")
    if engine == "auto":
        has_vllm = importlib.util.find_spec("vllm") is not None
        on_gpu = torch.cuda.is_available() and str(kwargs.get("device") or "cuda").startswith("cuda")
        engine = "vllm" if has_vllm and on_gpu else "transformers"
        logger.info("Rollout engine: %s (vllm %s)", engine, "importable" if has_vllm else "not installed")
    if engine == "vllm":
        return VLLMEngine(model_name_or_path, **kwargs)
    return TransformersEngine(model_name_or_path, **kwargs)


# --------------------------------------------------------------------------------------------------------------------
# Helpers


def default_state() -> PartialState:
    """accelerate's `PartialState`, on CPU when `ACCELERATE_USE_CPU` is set or no CUDA GPU is visible.

    A bare `PartialState()` ignores `ACCELERATE_USE_CPU` (only `Accelerator` reads it) and, without a GPU, stays
    single-process even under `torchrun --nproc_per_node 2`; `PartialState(cpu=True)` sets up gloo there. The state
    is a singleton: whichever call comes first in a process decides, so builders should create it through this.
    """
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available())


def _default_device() -> torch.device:
    if torch.cuda.is_available() and os.environ.get("ACCELERATE_USE_CPU", "").lower() not in ("1", "true", "yes"):
        return default_state().device  # this rank's GPU under accelerate launch / torchrun
    return torch.device("cpu")


def _resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype not in names:
        raise ValueError(f"dtype must be 'auto' or one of {sorted(names)}, got {dtype!r}.")
    return names[dtype]


def weights_fingerprint(source, model=None) -> str:
    """Short hash that changes when the weights change. An in-memory model: SHA-256 of its parameters' names, dtypes,
    shapes and raw bytes (exact: a float sum would depend on the reduction order of the CPU's or GPU's kernels and
    thread count, so two ranks holding the same weights could name the same shard differently and wait for each
    other forever). So two models with the same parameter names, dtypes, shapes and bits get the same fingerprint,
    wherever they live (the bytes are read on the CPU: a copy on another device, or a deepcopy, gives the same one),
    and any difference gives another (but for a collision of the 48-bit hash): one ulp in one parameter, or another dtype, even one that holds the same
    values exactly (float32 weights converted to float64 are another model here). Buffers and `requires_grad` are
    not hashed. A local directory: names, sizes and modification times of its weight and config files (a
    retrained checkpoint written to the same path gets new keys). A hub id: "hub" (pin a revision by downloading it
    to a directory)."""
    if model is not None:
        digest = hashlib.sha256()
        with torch.no_grad():
            for name, p in model.named_parameters():
                digest.update(json.dumps([name, str(p.dtype), list(p.shape)]).encode())
                digest.update(p.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy())
        return "params-" + digest.hexdigest()[:12]
    path = Path(str(source))
    if path.is_dir():
        entries = sorted(
            (p.name, p.stat().st_size, p.stat().st_mtime_ns)
            for p in path.iterdir()
            if p.is_file() and p.suffix in (".safetensors", ".bin", ".json", ".gguf", ".pt")
        )
        return _hash(entries)[:12]
    return "hub"
