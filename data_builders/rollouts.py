"""Resumable, sharded rollouts: procrl's one sample store (docs/architecture.md "Engines", issue 3 "Rollout engine"), behind the data
builders, `procrl select` and `procrl frs`.

The engines (`SamplingParams`, `Rollout`, `RolloutEngine`, `TransformersEngine`, `VLLMEngine`, `make_engine`) live in
the core layer, `procrl.generation`. `run_rollouts` is what every sampler calls. It expands requests into
rows, cuts the rows into shards, spreads the shards over accelerate processes, and writes each finished shard
atomically to `cache_dir` (`procrl.data_builders.rollout_shards`):

    >>> engine = make_engine("default")                                  # doctest: +SKIP
    >>> params = SamplingParams(temperature=0.7, max_new_tokens=256)
    >>> requests = [RolloutRequest("gsm8k/test/0/scratch", prompt_ids, n=8)]  # doctest: +SKIP
    >>> out = run_rollouts(engine, requests, params, seed=0, cache_dir="rollout_cache")  # doctest: +SKIP
    >>> len(out["gsm8k/test/0/scratch"])                                 # doctest: +SKIP
    8

Cache and resume. A shard's file name is a hash of everything its content depends on: the engine's
`cache_key()` (model identity, dtype, and for transformers the device type and batch size, which fix the batch
composition), the shard's rows (prompt ids, repeated n times), `params.to_dict()`, the seed and the shard index.
The shard's generation is seeded from (seed, that hash) (or with the caller's `shard_seed(index)`, which then joins
the hash: the offline commands keep the seeds of their generate calls), and its batches are a function of its rows
alone, so its
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

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from accelerate.utils import gather_object
from tqdm.auto import tqdm

from procrl.data_builders.rollout_shards import GroupProgress, Shard
from procrl.generation import Rollout, RolloutEngine, SamplingParams, default_state
from procrl.utils import get_logger

if TYPE_CHECKING:
    from accelerate import PartialState

logger = get_logger(__name__)

__all__ = ["RolloutRequest", "RolloutStats", "run_rollouts"]


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
        files: the shard files that hold the rows, in row order (`cache_dir / "rollouts-<hash>.jsonl"`; a report
            lists their names so that its samples can be read back: `rollout_shards.read_shard_file`).
    """

    rows: int = 0
    generated_rows: int = 0
    cached_rows: int = 0
    tokens_generated: int = 0
    shards: int = 0
    generated_shards: int = 0
    cached_shards: int = 0
    wall_time_s: float = 0.0
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


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
    shard_seed: Callable[[int], int] | None = None,
    progress: bool = True,
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
        shard_seed: `shard_seed(i)` is the seed shard i is sampled with (it joins the shard's hash); None (the
            builders): `derive_seed(seed, shard hash)`. The offline commands pass the seeds of their generate calls.
        progress: show the progress bars (on the main process).

    Returns:
        `{request.key: [n Rollouts]}` in request order; the i-th rollout of a request is its i-th row.

    Raises:
        ValueError: duplicate request keys, shard_size < 1, or `groups` not one per request.
        RuntimeError: a shard file in `cache_dir` is unreadable after its owner wrote it (delete it and rerun).
    """
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
    seed_of = shard_seed or (lambda i: None)  # None: the shard's seed is derived from its hash
    shards = [
        Shard.build(i, rows[lo : lo + shard_size], engine, params, seed, cache_dir, seed_of(i))
        for i, lo in enumerate(range(0, len(rows), shard_size))
    ]
    Path(cache_dir).mkdir(parents=True, exist_ok=True)

    done = {s.index for s in shards if s.is_complete()}
    mine = [s for s in shards if s.index % state.num_processes == state.process_index and s.index not in done]
    show = progress and state.is_main_process
    bar = tqdm(total=len(rows), desc=desc, unit="rollout", disable=not show, dynamic_ncols=True)
    bar.update(sum(len(s.rows) for s in shards if s.index in done))
    group_bar = GroupProgress(requests, groups, shard_size, f"{desc}: {group_unit}s", group_unit, show)
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
        stats.files = [str(shard.path) for shard in shards]
    logger.info(
        "%s: %d rollouts in %d shards (%d generated here), %.1f s",
        desc,
        len(rows),
        len(shards),
        generated_rows,
        time.perf_counter() - start,
    )
    return results
