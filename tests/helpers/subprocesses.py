"""Synchronising with a test's subprocess on what it prints, not on time."""

from __future__ import annotations

import os
import selectors
import subprocess
import time


def wait_for_output(proc: subprocess.Popen, marker: bytes, timeout_s: float = 300) -> bytes:
    """Read `proc.stdout` (a binary pipe) until `marker` appears and return what was read; fail if the process exits
    first. The timeout only guards against a hang, it is not what orders the test's steps."""
    seen = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while marker not in seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0 and selector.select(remaining), f"no {marker!r} within {timeout_s} s: {seen!r}"
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"the process exited (code {proc.wait()}) before printing {marker!r}: {seen!r}"
            seen += chunk
    return seen


GROUP_EXIT_S = 120.0  # generous: SIGKILLed processes holding a model's memory take a moment to go on a loaded machine


def group_gone(process: subprocess.Popen, timeout_s: float = GROUP_EXIT_S) -> bool:
    """Whether the process group that `process` leads (JudgeServer starts it with start_new_session) is gone within
    `timeout_s`: polled until no member is left (its members are not all our children, so nothing to wait() on),
    reaping the leader as it exits (a zombie still counts as a member). `stop()` has sent the group SIGKILL by then;
    its own wait for the group is bounded (5 s), so the test waits for the event itself."""
    deadline = time.monotonic() + timeout_s
    while True:
        process.poll()
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # polling interval, not synchronisation: the loop waits for the group to be gone
