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
