"""Reading an offline wandb run's `.wandb` file in a test: only once the process that writes it has exited.

The file is written by wandb's service process (wandb-core), not by the test's process, and `run.finish()` returns
before it is complete (wandb 0.31):

- `run.finish()` waits for the exit record's *response* (wandb/sdk/wandb_run.py:2316 `_atexit_cleanup` -> `_on_finish`,
  :2763-2778: `deliver_exit`, then `wait_with_progress`), then only *publishes* `inform_finish`, without waiting for
  an answer (wandb_run.py:2328-2330 -> wandb/sdk/lib/service/service_connection.py:365-371). wandb-core closes the run's
  transaction log when it handles that message (core/pkg/server/connection.go `handleInformFinish` ->
  core/internal/stream/stream.go `Stream.Close`, which waits for the writer goroutine that closes the log), and its
  leveldb-style writer keeps the current 32 KiB block in memory until the block fills or the log is closed
  (core/pkg/leveldb/record.go `Writer.Next` / `Writer.Close`). Right after `run.finish()` the file can hold its
  7-byte header only, and the run reads as "running".
- `wandb.teardown()` (wandb/sdk/wandb_setup.py:572-592 -> `_teardown`, :365-376) calls
  `ServiceConnection.teardown` (service_connection.py:411-450), which publishes `inform_teardown` on the same
  connection, after `inform_finish` (wandb-core handles one connection's requests in order: `inform_finish`'s
  `Stream.Close` returns before `inform_teardown` is read), and then joins the service process:
  `self._proc.join()` (:450) is `Popen.wait()` (wandb/sdk/lib/service/service_process.py:99-101). When teardown
  returns, the writer has exited, so the file is complete.
- That join happens only for a service this process started: a process that found `WANDB_SERVICE` in its
  environment connects to that service without owning it, and its teardown returns without waiting
  (service_connection.py:43-57 and :431-432). wandb puts `WANDB_SERVICE` into `os.environ` when it starts a service
  (service_connection.py:73, `save_to_env`) and teardown clears it (:435, on the owning path only, before the join).
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path

WANDB_SERVICE_ENV = "WANDB_SERVICE"  # wandb/env.py: SERVICE, the service token a child process would connect with


@contextlib.contextmanager
def owned_wandb_service(monkeypatch) -> Iterator[None]:
    """A block whose wandb runs go to a wandb-core process that this process starts and owns. On leaving it,
    `wandb.teardown()` stops that process and waits for it to exit: after the block every `.wandb` file its runs
    wrote is complete, and no service is left for later tests (or for their subprocesses, which would inherit
    `WANDB_SERVICE` and attach to it instead of starting, and waiting for, their own)."""
    import wandb

    wandb.teardown()  # a service an earlier test left running: stopped and joined (nothing happens without one)
    monkeypatch.delenv(WANDB_SERVICE_ENV, raising=False)  # a parent process's service: not ours to join
    try:
        yield
    except BaseException:
        wandb.teardown()
        raise
    wandb.teardown()
    # Teardown clears the token only where it owns the service, just before joining it (see the module doc).
    assert WANDB_SERVICE_ENV not in os.environ, "wandb.teardown() did not join the service: the runs may be unwritten"


def wandb_records(directory: str | Path) -> list:
    """The records of the one offline run's .wandb file below `directory` (a LevelDB-style log of
    `wandb_internal_pb2.Record`: a 7-byte ":W&B" header, 32 KiB blocks, records with a 7-byte crc/length/type header,
    types full/first/middle/last). Read it after `owned_wandb_service` (or the writing process) has ended."""
    from wandb.proto import wandb_internal_pb2

    (path,) = Path(directory).rglob("*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, payloads, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        payload, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            payloads.append(payload)
        elif kind in (2, 3):
            pending += payload
        elif kind == 4:
            payloads.append(pending + payload)
            pending = b""
    records = []
    for payload in payloads:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        records.append(record)
    return records


def wandb_summary(records: list) -> dict:
    """The run's final summary from its `wandb_records`: every `summary` record's updates in order (a key is its
    `key`, or its `nested_key` parts joined by "/")."""
    summary = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return summary
