"""The shard files of `procrl.data_builders.rollouts.run_rollouts` (data builders layer), procrl's one sample store:
one `Shard` per run of `shard_size` rows, named by a hash of everything its content depends on and written
atomically; `read_shard_file` for a shard named by its path (a report's list of the files it sampled into); and the
progress bar that counts request groups (problems) whose shards are all done.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from procrl.generation import Rollout, derive_seed
from procrl.generation.runtime import stable_hash
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["SHARD_FORMAT_VERSION", "GroupProgress", "Shard", "read_shard_file"]

# Bumped whenever the shard file layout or the seeding scheme changes, so old shards are never reused.
SHARD_FORMAT_VERSION = 1


@dataclass
class Shard:
    """One shard: its rows, content hash, seed and file.

    Attributes:
        index: position of the shard in the call (rows `index * shard_size` ...); process `index % num_processes`
            generates it.
        rows: the prompt ids of its rows (a request repeated n times gives n rows).
        digest: SHA-256 hex of everything the content depends on (`SHARD_FORMAT_VERSION`, the engine's
            `cache_key()`, `params.to_dict()`, the seed, the index, the rows and, when the caller chose it, the
            shard's seed).
        seed: the seed the engine samples the shard with: `derive_seed(seed, digest)`, or the caller's.
        path: `cache_dir / "rollouts-<digest[:32]>.jsonl"`: a JSON header line, then one `Rollout.to_dict()` a line.
    """

    index: int
    rows: list[list[int]]
    digest: str
    seed: int
    path: Path

    @classmethod
    def build(cls, index, rows, engine, params, seed, cache_dir, shard_seed: int | None = None) -> Shard:
        """Shard `index` of `rows`; `shard_seed` (None: derived from the digest) is the seed it is sampled with."""
        key = {
            "format": SHARD_FORMAT_VERSION,
            "engine": engine.cache_key(),
            "params": params.to_dict(),
            "seed": int(seed),
            "shard": index,
            "rows": rows,
        }
        if shard_seed is not None:
            key["shard_seed"] = int(shard_seed)
        digest = stable_hash(key)
        seed = derive_seed(seed, digest) if shard_seed is None else int(shard_seed)
        return cls(index, rows, digest, seed, Path(cache_dir) / f"rollouts-{digest[:32]}.jsonl")

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
            header, rollouts = _load(self.path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
            logger.warning("Ignoring unreadable shard file %s (%s); it will be regenerated.", self.path, err)
            return None
        if header.get("digest") != self.digest or header.get("rows") != len(self.rows):
            logger.warning("Ignoring shard file %s: its header does not match this shard.", self.path)
            return None
        return rollouts if len(rollouts) == len(self.rows) else None


def _load(path: Path) -> tuple[dict, list[Rollout]]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    return json.loads(lines[0]), [Rollout.from_dict(json.loads(line)) for line in lines[1:]]


def read_shard_file(path: str | os.PathLike) -> list[Rollout]:
    """The rollouts of the shard file `path` (`rollouts-<digest[:32]>.jsonl`, e.g. one a report lists), checked
    against its header: its digest names the file and it holds all its rows.

    Raises:
        ValueError: the file is missing or unreadable, its header names another file, or rows are missing (the
            message names the file).
    """
    path = Path(path)
    try:
        header, rollouts = _load(path)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
        raise ValueError(f"shard file {path} is missing or unreadable ({type(err).__name__}: {err})") from None
    if f"rollouts-{str(header.get('digest'))[:32]}.jsonl" != path.name or header.get("rows") != len(rollouts):
        raise ValueError(f"shard file {path} does not hold the shard its name and header promise (incomplete?)")
    return rollouts


class GroupProgress:
    """Progress bar of request groups (problems): a group counts once every shard holding one of its rows is done."""

    def __init__(self, requests, groups, shard_size, desc, unit, show: bool):
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
        self.bar = tqdm(total=len(self.pending), desc=desc, unit=unit, disable=not show, dynamic_ncols=True)

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
