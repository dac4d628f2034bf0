"""Time limits of the outcome checks (part of `procrl.rewards.outcome`): every math-verify operation runs under
one wall-clock budget, from any thread.

Why not math-verify's own: math-verify 0.9.0 bounds ``parse``/``verify`` with ``signal.alarm``: outside the main
thread it raises ValueError ("doesn't support threaded environment"), and its ``alarm(0)`` cancels any enclosing
alarm. A worker *thread* with a join timeout does not work either: sympy evaluates ``10^{10^{10}}`` as a
big-integer power in C that holds the GIL, so the waiting thread never runs again (measured: the whole
process freezes). So math-verify's timeouts are always disabled here, and every sympy call
(``procrl.rewards.outcome.compare._OPS``) runs under one wall-clock budget per check (``DEFAULT_TIMEOUT_S``, seconds):

* main thread (POSIX): in process, under our own ``SIGALRM`` interval timer (``setitimer``). CPython checks
  signals inside big-integer arithmetic, so this also stops the C-level case. Any SIGALRM handler and
  timer that were set before are restored afterwards (pytest-timeout keeps working).
* any other thread: in a helper *process* (``python -c``, reused, one per concurrent caller, at most
  ``_MAX_IDLE_WORKERS`` kept idle) that applies the same in-process timer in its own main thread; the
  caller waits ``timeout + _GRACE_S`` with ``poll`` and kills the worker if it has not answered. A fresh
  worker costs ~0.5 s once (import + warm-up), a check then ~1 ms of pipe traffic.

A check that times out (or fails inside math-verify) counts as wrong (0.0); a gold whose parse times out
is unparseable (None). Windows has neither SIGALRM nor ``poll`` on pipes: there the checks run without a time
limit (a warning is logged once).

``DEFAULT_TIMEOUT_S`` is read at call time; set it on ``procrl.rewards.outcome`` (which forwards it here) or here.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from procrl.rewards.outcome.compare import _OPS, _warm_up
from procrl.utils import get_logger

logger = get_logger("rewards.outcome")

#: Wall-clock budget, in seconds, of one math-verify operation (parsing a gold, or parsing and verifying one
#: answer). Read at call time, so it can be changed on the module (or on ``procrl.rewards.outcome``).
DEFAULT_TIMEOUT_S: float = 3.0
_GRACE_S = 2.0  # extra seconds the caller waits for a worker process before killing it
_STARTUP_TIMEOUT_S = 60.0  # seconds a new worker process may take to import math-verify and warm up
_MAX_IDLE_WORKERS = 4


class _CheckTimeout(BaseException):
    """Raised by our SIGALRM handler; a BaseException so math-verify's ``except Exception`` cannot swallow it."""


class _NoSignals(Exception):
    """Signal handlers cannot be installed here (not the main thread of the main interpreter)."""


def _run_with_deadline(fn: Callable[..., Any], args: tuple, timeout_s: float) -> tuple[str, Any]:
    """Run ``fn(*args)`` in this (main) thread under a SIGALRM interval timer: ("ok"|"timeout"|"error", value)."""
    armed = [True]

    def on_alarm(signum, frame):  # noqa: ARG001
        if armed[0]:
            raise _CheckTimeout

    try:
        old_handler = signal.signal(signal.SIGALRM, on_alarm)
    except ValueError as exc:
        raise _NoSignals(str(exc)) from exc
    started = time.monotonic()
    old_delay, old_interval = 0.0, 0.0
    try:
        try:
            # Fire after timeout_s, then every 50 ms in case something catches BaseException and carries on.
            old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, timeout_s, 0.05)
            return "ok", fn(*args)
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _CheckTimeout:
        return "timeout", None
    except Exception as exc:  # math-verify catches its own errors; this is a last line of defence
        logger.debug("outcome check failed", exc_info=True)
        return "error", repr(exc)
    finally:
        signal.signal(signal.SIGALRM, old_handler if old_handler is not None else signal.SIG_DFL)
        if old_delay > 0:  # give back the caller's pending alarm, minus the time we used
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - started), 1e-3), old_interval)


# ---- worker processes for callers outside the main thread ----------------------------------------


def _send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    data = len(data).to_bytes(4, "big") + data
    while data:
        data = data[os.write(fd, data) :]


def _receive(fd: int, timeout_s: float | None) -> tuple[str, Any]:
    """Read one frame from ``fd`` within ``timeout_s`` seconds (None: no limit): the frame, ("no reply", None)
    when the time ran out, or ("dead", None) when the other end closed the pipe."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    buffer = bytearray()
    while True:
        if len(buffer) >= 4:
            size = int.from_bytes(buffer[:4], "big")
            if len(buffer) >= 4 + size:
                return pickle.loads(bytes(buffer[4 : 4 + size]))
        if deadline is None:
            poller.poll()
        else:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "no reply", None
            if not poller.poll(max(1, int(remaining * 1000))):
                continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return "dead", None
        buffer += chunk


def _worker_main(out_fd: int) -> None:
    """Body of a worker process (``_WORKER_CODE``): read (op, args, timeout) frames on stdin, answer on ``out_fd``
    (the original stdout; fd 1 already points to stderr, so anything a library prints stays out of the protocol)."""
    in_fd = sys.stdin.fileno()
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    _warm_up()
    _send(out_fd, ("ok", "ready"))
    while True:
        request = _receive(in_fd, None)
        if request[0] == "dead":
            return
        op, args, timeout_s = request
        try:
            reply = _run_with_deadline(_OPS[op], args, timeout_s)
        except BaseException as exc:  # noqa: BLE001 - the worker must always answer
            reply = ("error", repr(exc))
        try:
            _send(out_fd, reply)
        except Exception as exc:  # an unpicklable result
            _send(out_fd, ("error", f"unpicklable result: {exc!r}"))


# The worker imports this package like any caller: procrl/__init__, procrl.rewards/__init__ and procrl.utils import
# nothing heavy, so it never pulls in torch, and a worker starts in well under a second. Its stdout is moved to
# stderr before that import: only the frames of `_send` go to the original stdout.
_WORKER_CODE = (
    "import os\n"
    "out_fd = os.dup(1)\n"
    "os.dup2(2, 1)\n"
    "from procrl.rewards.outcome.deadline import _worker_main\n"
    "_worker_main(out_fd)\n"
)


class _Worker:
    """One helper process (see module doc). Not thread-safe: a worker serves one caller at a time."""

    def __init__(self) -> None:
        if not sys.executable:
            raise RuntimeError("procrl.rewards.outcome: no Python executable to start a worker process")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if isinstance(path, str) and path)
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_CODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            close_fds=True,
        )
        status, value = _receive(self.proc.stdout.fileno(), _STARTUP_TIMEOUT_S)
        if (status, value) != ("ok", "ready"):
            tail = self.stderr_tail()
            self.kill()
            raise RuntimeError(
                f"procrl.rewards.outcome: the answer-checking worker process did not start ({status}):\n{tail}"
            )

    def call(self, op: str, args: tuple, timeout_s: float) -> tuple[str, Any]:
        try:
            _send(self.proc.stdin.fileno(), (op, args, timeout_s))
        except OSError:
            return "dead", None
        return _receive(self.proc.stdout.fileno(), timeout_s + _GRACE_S)

    def stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-2000:].decode(errors="replace")
        except (OSError, ValueError):
            return ""

    def kill(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._stderr.close()


_POOL_LOCK = threading.Lock()
_IDLE: list[_Worker] = []


def _run_in_worker(op: str, args: tuple, timeout_s: float) -> tuple[str, Any]:
    with _POOL_LOCK:
        worker = _IDLE.pop() if _IDLE else None
    if worker is None:
        worker = _Worker()
    status, value = worker.call(op, args, timeout_s)
    if status in ("no reply", "dead"):
        if status == "no reply":  # the worker did not even stop itself: it may be stuck in C code
            logger.warning("outcome worker process gave no reply within %.1f s; killed it", timeout_s + _GRACE_S)
        else:
            logger.warning("outcome worker process exited unexpectedly: %s", worker.stderr_tail())
        worker.kill()  # never reuse it
        return ("timeout" if status == "no reply" else "error"), value
    with _POOL_LOCK:
        if len(_IDLE) < _MAX_IDLE_WORKERS:
            _IDLE.append(worker)
            worker = None
    if worker is not None:
        worker.kill()
    return status, value


@atexit.register
def _close_workers() -> None:
    with _POOL_LOCK:
        workers, _IDLE[:] = list(_IDLE), []
    for worker in workers:
        worker.kill()


_NO_LIMIT_WARNED = False


def _bounded(op: str, args: tuple, timeout_s: float) -> tuple[str, Any]:
    """Run ``_OPS[op](*args)`` within ``timeout_s`` seconds from any thread: ("ok"|"timeout"|"error", value)."""
    global _NO_LIMIT_WARNED
    if os.name != "posix" or not hasattr(signal, "setitimer"):
        if not _NO_LIMIT_WARNED:
            logger.warning("procrl.rewards.outcome: no time limit on this platform (needs POSIX signals)")
            _NO_LIMIT_WARNED = True
        try:
            return "ok", _OPS[op](*args)
        except Exception as exc:
            return "error", repr(exc)
    result = None
    if threading.current_thread() is threading.main_thread():
        _warm_up()
        try:
            result = _run_with_deadline(_OPS[op], args, timeout_s)
        except _NoSignals:  # e.g. a sub-interpreter
            pass
    if result is None:
        result = _run_in_worker(op, args, timeout_s)
    if result[0] == "timeout":
        logger.warning("outcome check (%s) took longer than %.1f s; counted as a failed check", op, timeout_s)
    return result


def _timeout(timeout_s: float | None) -> float:
    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    return timeout_s
