"""The embedded judge server (core layer): `transformers serve` on loopback, started and stopped as a process group.

`JudgeServer` starts `transformers serve <model dir> --host 127.0.0.1 --port P --device cpu` and stops its whole
process group; `open_judge("local")` (`procrl.judges.spec`) pairs it with an `OpenAICompatibleJudge`.

Measured here (SmolLM2-135M-Instruct on 2 CPU cores shared with other jobs, `benchmarks/bench_judges.py`): the
server answers 8-19 s after start; a 16-token judgement took ~1 s on a quiet CPU, 3.5 s under load with
`num_threads=1` and 22 s under load with torch's default threads (thrashing). Without `--continuous-batching`
the server runs one generation at a time, so client concurrency 8 gave 0.97-1.09x the throughput of 1; with it,
2.7x (after a one-off ~95 s first request).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Sequence

from procrl.models import resolve_model
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["JudgeServer"]


class JudgeServer:
    """`transformers serve` on loopback, as a context manager (DESIGN §3 "Local servers").

        with JudgeServer("default") as server:
            judge = OpenAICompatibleJudge(server.base_url, server.model_id)

    The command is `<python> -m transformers.cli.transformers serve <model dir> --host H --port P --device D`
    (the model is preloaded and pinned: the server answers 400 to any other model id). It runs in its own process
    group, which is killed (SIGTERM, then SIGKILL after 10 s) on exit, also at interpreter exit if `stop` was never
    called.

    Args:
        model: "default" (the embedded SmolLM2-135M-Instruct) or a model directory / hub id.
        host: bind address; loopback by default.
        port: TCP port; None picks a free one.
        device: "cpu", "cuda:0", "auto".
        startup_timeout_s: how long to wait for `GET /v1/models` to answer.
        log_path: where the server's output goes; default: a temporary file deleted on stop.
        continuous_batching: pass `--continuous-batching` (the server batches concurrent requests; without it, it
            generates one request at a time). Its paged KV cache is sized from free memory unless bounded: on CPU it
            took 13-14 GB of this 24 GB machine and pushed it into thrashing, so `cb_num_blocks` bounds it.
        cb_num_blocks / cb_block_size: KV-cache blocks x tokens per block with continuous batching (default 256 x 32
            = 8192 cached tokens, ~0.4 GB for SmolLM2-135M in fp32); None leaves transformers' own sizing.
        num_threads: CPU threads of the server's torch (`OMP_NUM_THREADS`); None inherits the environment. On a
            crowded CPU, 1 avoids thread thrashing (measured here with 8 runnable processes on 2 cores: 9 s instead
            of 74 s for one 24-token reply).
        extra_args: more `transformers serve` options.

    Attributes:
        base_url: "http://<host>:<port>/v1".
        model_id: the model id requests must name (the served directory, as given to the server).

    Raises:
        RuntimeError (from `start`): the server exited or did not answer within `startup_timeout_s`; the message
            holds the tail of its log.
    """

    def __init__(
        self,
        model: str = "default",
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        device: str = "cpu",
        startup_timeout_s: float = 300.0,
        log_path: str | None = None,
        continuous_batching: bool = False,
        num_threads: int | None = None,
        extra_args: Sequence[str] = (),
        cb_num_blocks: int | None = 256,
        cb_block_size: int | None = 32,
    ):
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"JudgeServer: num_threads must be >= 1 or None, got {num_threads}")

        self.model_id = resolve_model(model)
        self.host = host
        self.port = port
        self.device = device
        self.startup_timeout_s = float(startup_timeout_s)
        self.log_path = log_path
        self.continuous_batching = continuous_batching
        self.num_threads = num_threads
        self.extra_args = list(extra_args)
        self.cb_num_blocks = cb_num_blocks
        self.cb_block_size = cb_block_size
        self.startup_s: float | None = None
        self._process: subprocess.Popen | None = None
        self._own_log: str | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("JudgeServer has no port before start()")
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        """The server command line."""
        cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", self.model_id]
        cmd += ["--host", self.host, "--port", str(self.port), "--device", self.device]
        if self.continuous_batching:
            cmd.append("--continuous-batching")
            if self.cb_num_blocks is not None:
                cmd += ["--cb-num-blocks", str(self.cb_num_blocks)]
            if self.cb_block_size is not None:
                cmd += ["--cb-block-size", str(self.cb_block_size)]
        return cmd + self.extra_args

    def start(self) -> JudgeServer:
        """Start the server and wait until `GET /v1/models` answers 200."""
        if self._process is not None:
            raise RuntimeError("JudgeServer already started")
        if self.host not in ("127.0.0.1", "localhost", "::1"):
            logger.warning("judge server binds %s, not loopback: it is reachable from other machines", self.host)
        if self.port is None:
            self.port = _free_port(self.host)
        if self.log_path is None:
            fd, self._own_log = tempfile.mkstemp(prefix="procrl-judge-server-", suffix=".log")
            os.close(fd)
        log_file = self.log_path or self._own_log
        began = time.monotonic()
        env = dict(os.environ)
        if self.num_threads is not None:
            env["OMP_NUM_THREADS"] = str(self.num_threads)
        with open(log_file, "ab") as log:
            self._process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        self._finalizer = weakref.finalize(self, _kill_process_group, self._process)
        logger.info("starting judge server on %s (log: %s)", self.base_url, log_file)
        try:
            self._wait_ready(began)
        except BaseException as exc:
            why = str(exc) if isinstance(exc, _NotReady) else f"startup interrupted ({type(exc).__name__})"
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(
                f"transformers serve did not start: {why} (command: {' '.join(self.command())}). "
                f"Last server log lines:\n{tail}"
            ) from None
        self.startup_s = time.monotonic() - began
        logger.info("judge server ready after %.1f s", self.startup_s)
        return self

    def _wait_ready(self, began: float) -> None:
        url = f"{self.base_url}/models"
        while True:
            if self._process is None or self._process.poll() is not None:
                code = None if self._process is None else self._process.returncode
                raise _NotReady(f"the server exited with code {code}")
            try:
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError, TimeoutError):
                pass
            if time.monotonic() - began > self.startup_timeout_s:
                raise _NotReady(f"no answer from {url} within {self.startup_timeout_s:.0f} s")
            time.sleep(0.25)

    def log_tail(self, lines: int = 30) -> str:
        """The last `lines` lines of the server log ("" when there is none)."""
        path = self.log_path or self._own_log
        if not path or not os.path.exists(path):
            return ""
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64_000))
            text = handle.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Kill the server's process group (idempotent) and remove the temporary log."""
        if self._finalizer is not None:
            self._finalizer()  # runs _kill_process_group once
            self._finalizer = None
        self._process = None
        if self._own_log is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._own_log)
            self._own_log = None

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"JudgeServer(model_id={self.model_id!r}, host={self.host!r}, port={self.port}, device={self.device!r})"


class _NotReady(Exception):
    pass


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _kill_process_group(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)  # start_new_session=True: the group id is the server's pid
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
