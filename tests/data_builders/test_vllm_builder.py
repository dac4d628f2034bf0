"""The PUM-Math builder on the real vLLM engine (the CPU build here), through its command line in subprocesses:
a build killed with SIGKILL once its first rollout shard is on disk, then rerun, gives the dataset, prefix
records and rollout shards of an uninterrupted build exactly (tiny: 2 GSM8K problems, reference trajectories,
2 rollouts of 8 tokens per prefix, shards of 2 rows)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import wait_for_output  # tests/helpers

pytest.importorskip("vllm", reason="the vLLM engine needs vllm (make install)")

ROOT = Path(__file__).resolve().parents[2]
ARGS = [
    "--dataset", "gsm8k", "--start", "0", "--end", "2", "--trajectory_source", "reference",
    "--students", "default", "--student_templates", "chat", "--student_max_new_tokens", "8",
    "--n_rollouts", "2", "--n_rollouts_bare", "2", "--cut_fractions", "0.5", "--max_step_cuts", "2",
    "--shard_size", "2", "--seed", "3", "--kappa", "0", "--generation_backend", "vllm", "--vllm_kv_cache_gib", "0.5",
]  # fmt: skip


def _command(out: Path) -> list[str]:
    return [sys.executable, "-m", "procrl.scripts.build_pum_data", *ARGS, "--output_dir", str(out)]


def _env() -> dict:
    return {**os.environ, "TOKENIZERS_PARALLELISM": "false"}


def _build(out: Path) -> None:
    proc = subprocess.run(_command(out), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def _shards(out: Path) -> list[Path]:
    return sorted((out / "cache").rglob("rollouts-*.jsonl"))


def _rollouts(out: Path) -> dict[str, list[dict]]:
    """Every shard's rollouts (token ids, text, log-probs, finish reason) by file name; the header (wall time) left
    out."""
    return {f.name: [json.loads(line) for line in f.read_text().splitlines()[1:]] for f in _shards(out)}


# The command line as `python -m` runs it, with one change: once `Shard.write` has put a shard on disk (atomically:
# temporary file, fsync, os.replace), the build says so on stdout and blocks for good. The test kills it there: at
# an event (exactly one shard done, the rest not), not at a moment a poll happened to see, when a fast engine may
# already have written every shard and finished.
KILLED_AFTER_ONE_SHARD = """
import runpy, sys, threading
from procrl.data_builders.rollout_shards import Shard

write = Shard.write

def written_then_blocked(self, *args, **kwargs):
    write(self, *args, **kwargs)
    print("shard written", flush=True)
    threading.Event().wait()

Shard.write = written_then_blocked
runpy.run_module("procrl.scripts.build_pum_data", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_kill_9_and_rerun_give_the_uninterrupted_build(tmp_path):
    import datasets

    reference, resumed = tmp_path / "uninterrupted", tmp_path / "resumed"
    _build(reference)
    total = len(_shards(reference))
    assert total >= 4 and json.loads((reference / "stats.json").read_text())["rollouts"]["from_cache"] == 0

    killed = [sys.executable, "-c", KILLED_AFTER_ONE_SHARD, *_command(resumed)[3:]]
    with open(tmp_path / "killed.log", "wb") as log:
        proc = subprocess.Popen(killed, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=log)
        try:
            wait_for_output(proc, b"shard written", timeout_s=600)  # the timeout only guards against a hang
        except AssertionError as err:
            proc.kill()
            proc.wait()
            raise AssertionError(f"{err}\n{(tmp_path / 'killed.log').read_text()[-3000:]}") from None
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        proc.stdout.close()
    kept = {f: f.read_bytes() for f in _shards(resumed)}  # read once the killed build has exited
    assert len(kept) == 1 < total and not (resumed / "stats.json").exists()  # killed in the middle

    _build(resumed)
    stats = json.loads((resumed / "stats.json").read_text())["rollouts"]
    assert stats["from_cache"] == 2 * len(kept) and stats["generated_this_run"] == stats["total"] - 2 * len(kept)
    assert {f: f.read_bytes() for f in kept} == kept  # the killed run's shards were reused as they are
    # Same engine, seeds and rows: the regenerated shards hold the uninterrupted build's rollouts bit for bit
    # (vLLM seeds every row, so a row's sample does not depend on the rows sharing its batch).
    assert _rollouts(resumed) == _rollouts(reference)
    assert (resumed / "prefixes.jsonl").read_text() == (reference / "prefixes.jsonl").read_text()
    got = datasets.load_from_disk(str(resumed / "dataset")).to_list()
    assert got == datasets.load_from_disk(str(reference / "dataset")).to_list()
