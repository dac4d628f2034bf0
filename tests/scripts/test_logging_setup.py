"""`configure_logging`: INFO for procrl, warnings only for the openai client's per-request HTTP lines."""

from __future__ import annotations

import logging

from procrl.scripts._common import QUIET_LOGGERS, configure_logging


def test_http_request_lines_are_quiet(monkeypatch):
    for name in QUIET_LOGGERS:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)  # restored after the test
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", logging.INFO)
    configure_logging()
    assert not logging.getLogger("httpx2").isEnabledFor(logging.INFO)
    assert logging.getLogger("httpx2").isEnabledFor(logging.WARNING)
    assert logging.getLogger("procrl.judges.client").isEnabledFor(logging.INFO)
