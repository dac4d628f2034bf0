"""Outcome reward for math: 1.0 when the final answer matches the gold answer, 0.0 otherwise, None when
the gold answer cannot be parsed (DESIGN §3 "Outcome checking", §4 "Outcome").

Pipeline
--------
1. ``extract_answer`` finds the final answer of a completion with plain regular expressions (linear time):
   the last ``\\boxed{...}``/``\\fbox{...}``, else the last "The answer is ...", else the last ``#### ...``
   line, else None. There is deliberately no "last number anywhere" fallback: a policy could learn to
   spray numbers. Only the last ``TAIL_CHARS`` (4,000) characters of a completion are searched.
2. ``parse_gold`` reads a gold answer: GSM8K solutions (``#### N``, ``<<48/2=24>>`` annotations ignored),
   plain numbers, MATH-style LaTeX. Prose golds ("see figure", "N/A") are unparseable, never reward 1.0.
3. Both sides go through math-verify (``parse`` with ``LatexExtractionConfig`` on ``\\boxed{<answer>}``,
   then ``verify(gold, answer)``); we never compare symbolically ourselves. Numbers are normalised first
   (sign, ``$``, thousands separators only in 3-digit groups, trailing period), so "1,25" is not 125.

Time limits (why not math-verify's own)
---------------------------------------
math-verify 0.9.0 bounds ``parse``/``verify`` with ``signal.alarm``: outside the main thread it raises
ValueError ("doesn't support threaded environment"), and its ``alarm(0)`` cancels any enclosing alarm.
A worker *thread* with a join timeout does not work either: sympy evaluates ``10^{10^{10}}`` as a
big-integer power in C that holds the GIL, so the waiting thread never runs again (measured: the whole
process freezes). So math-verify's timeouts are always disabled here, and every sympy call
(``_OPS``) runs under one wall-clock budget per check (``DEFAULT_TIMEOUT_S``, seconds):

* main thread (POSIX): in process, under our own ``SIGALRM`` interval timer (``setitimer``). CPython checks
  signals inside big-integer arithmetic, so this also stops the C-level case. Any SIGALRM handler and
  timer that were set before are restored afterwards (pytest-timeout keeps working).
* any other thread: in a helper *process* (``python -c``, reused, one per concurrent caller, at most
  ``_MAX_IDLE_WORKERS`` kept idle) that applies the same in-process timer in its own main thread; the
  caller waits ``timeout + _GRACE_S`` with ``poll`` and kills the worker if it has not answered. A fresh
  worker costs ~0.5 s once (import + warm-up), a check then ~1 ms of pipe traffic.

A check that times out (or fails inside math-verify) counts as wrong (0.0); a gold whose parse times out
is unparseable (None). Extracted answers and golds longer than ``MAX_ANSWER_CHARS`` are ignored, which
also keeps the pipe messages small. Windows has neither SIGALRM nor ``poll`` on pipes: there the checks
run without a time limit (a warning is logged once).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from procrl.utils import check_reward_length, completion_to_text, get_logger

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_ANSWER_CHARS",
    "TAIL_CHARS",
    "extract_answer",
    "is_correct",
    "outcome_reward",
    "parse_gold",
]

logger = get_logger("rewards.outcome")

#: Wall-clock budget, in seconds, of one math-verify operation (parsing a gold, or parsing and verifying one
#: answer). Read at call time, so it can be changed on the module.
DEFAULT_TIMEOUT_S: float = 3.0
#: Only the last TAIL_CHARS characters of a completion are searched for its final answer.
TAIL_CHARS: int = 4_000
#: An extracted answer (or gold value) longer than this many characters is treated as absent/unparseable.
MAX_ANSWER_CHARS: int = 1_000

_UNPARSEABLE_METRIC = "outcome/unparseable_gold"
_GRACE_S = 2.0  # extra seconds the caller waits for a worker process before killing it
_STARTUP_TIMEOUT_S = 60.0  # seconds a new worker process may take to import math-verify and warm up
_MAX_IDLE_WORKERS = 4

# --------------------------------------------------------------------------------------------------
# Text handling (pure regular expressions; linear time on the capped inputs)
# --------------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_IS = re.compile(r"\bthe\s+(?:final\s+)?answer\s+is\s*:?[ \t]*", re.IGNORECASE)
_HASHES = re.compile(r"^[ \t]*####[ \t]*(.*)$", re.MULTILINE)
_CALCULATOR = re.compile(r"<<[^<>\n]*>>")
# A number: optional sign, optional currency, digits with thousands separators in 3-digit groups only (or
# none), optional decimals, optional percent. The lookahead forbids stopping inside a longer number, so
# "1,25" and "12,345,67" are not numbers at all (rather than 1 or 12,345).
_NUMBER = re.compile(
    r"(?P<sign>[-+]?)[ \t]*(?:\\?\$)?[ \t]*(?P<sign2>[-+]?)"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?!\d|[.,]\d)"
    r"(?P<pct>[ \t]*\\?%)?"
)
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]")
_SENTENCE_END = re.compile(r"\.(?=\s|$)")
_PUNCT = re.compile(r"[.,;:!?)\]]+")
_LIST_ITEM = re.compile(r"\s*[-+\d$\\]")
_TRAILING_CLAUSE = re.compile(
    r",?\s+(?:because|since|so|which|as|therefore|hence|thus|where|when|for|from|if)\b", re.IGNORECASE
)
_HEDGE_WORD = re.compile(r"\s+(?:or|and|to|plus|minus|times)\b", re.IGNORECASE)
_TEXT_GROUP = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*\{[^{}]*\}")
_TEXT_WRAPPED = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox)\s*\{([^{}]*)\}")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]+")
_MATH_WORDS = frozenset(
    "sin cos tan cot sec csc log exp lim max min gcd lcm mod deg det dim sup inf sqrt infty "
    "arcsin arccos arctan sinh cosh tanh".split()
)
_NON_ANSWERS = frozenset({"n/a", "na", "-", "?", "..."})
_BARE_PI = re.compile(r"(?<![\\A-Za-z])pi(?![A-Za-z])")
_BARE_PERCENT = re.compile(r"(?<!\\)%")


def _clean(text: str) -> str:
    """Drop ANSI escape sequences and control characters other than tab/newline/carriage return."""
    return _CONTROL.sub("", _ANSI.sub("", text)).replace("\u2212", "-")


def _balanced(text: str, start: int) -> str | None:
    """Content of the brace group whose ``{`` is at ``start - 1``; None when it never closes (truncated)."""
    depth = 1
    i = start
    while i < len(text):
        char = text[i]
        if char == "\\":  # an escaped character (\{, \}, \\) never opens or closes a group
            i += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    return None


def _last_box(text: str) -> tuple[bool, str | None]:
    """(found, content) of the last ``\\boxed{}``/``\\fbox{}``; content is None when that box is truncated."""
    last = None
    for last in _BOX_OPEN.finditer(text):  # noqa: B007 - we want the last match
        pass
    if last is None:
        return False, None
    return True, _balanced(text, last.end())


def _number(text: str, *, loose: bool) -> str | None:
    """Canonical form of the number at the start of ``text`` ("-1250.00", "50\\%"), or None.

    strict (``loose=False``): the number must be all of ``text`` (a trailing period is allowed).
    loose: the number may be followed by sentence punctuation, a closing ``$``, or words such as units
    ("12 apples because ..."), but not by an operator, a digit list or a hedge ("3 or 5", "12, 13").
    """
    match = _NUMBER.match(text)
    if match is None or (match.group("sign") and match.group("sign2")):
        return None
    rest = text[match.end() :]
    if not _number_ends(rest, loose=loose):
        return None
    sign = "-" if "-" in (match.group("sign") + match.group("sign2")) else ""
    number = match.group("num").replace(",", "")
    if number.startswith("."):
        number = "0" + number
    return sign + number + ("\\%" if match.group("pct") else "")


def _number_ends(rest: str, *, loose: bool) -> bool:
    rest = rest.strip("*_")  # markdown emphasis around the number
    if not rest.strip() or re.fullmatch(r"\s*\$?\.?\s*", rest):
        return True
    if not loose:
        return False
    if rest[0] == "$":  # closing delimiter of inline math: "$12$, so ..."
        return True
    punct = _PUNCT.match(rest)
    if punct:
        after = rest[punct.end() :]
        if not after.strip():
            return True
        if not after[0].isspace():  # "12.x", "12,5"
            return False
        return "," not in punct.group() or not _LIST_ITEM.match(after)  # "12, 13" is a list, not 12
    if rest[0].isspace():
        after = rest.lstrip()
        return after[0].isalpha() and not _HEDGE_WORD.match(rest)
    return False


def _prepare(value: str) -> str:
    """Small plain-text to LaTeX fixes so math-verify reads the value as written: ``%``, ``**``, ``pi``."""
    value = value.strip()
    value = _BARE_PERCENT.sub(r"\\%", value)
    value = value.replace("**", "^")
    return _BARE_PI.sub(r"\\pi", value)


def _value(raw: str | None, *, loose: bool) -> str | None:
    """An answer value ready for math-verify: a canonical number, else the prepared LaTeX text (None when
    empty or longer than ``MAX_ANSWER_CHARS``). ``loose`` as in ``_number``; it also cuts free text at the
    end of its sentence."""
    if raw is None:
        return None
    raw = raw.strip().strip("*").strip()
    number = _number(raw, loose=loose)
    if number is not None:
        return number
    wrapped = _TEXT_WRAPPED.fullmatch(raw)
    if wrapped is not None:  # math-verify reads \text{13} as the symbol "13", which 13.0 does not equal
        number = _number(wrapped.group(1).strip(), loose=False)
        if number is not None:
            return number
    span = _MATH_SPAN.match(raw)
    if span is not None:  # "$\frac{1}{2}$." -> \frac{1}{2}
        raw = next(group for group in span.groups() if group is not None)
        number = _number(raw.strip(), loose=False)
        if number is not None:
            return number
    elif loose:  # free text after "The answer is": up to the end of the sentence
        for stop in (_SENTENCE_END, _TRAILING_CLAUSE):
            end = stop.search(raw)
            raw = raw[: end.start()] if end else raw
    raw = _prepare(raw.rstrip(" \t.,;:!"))
    return raw if raw and len(raw) <= MAX_ANSWER_CHARS else None


def _after_phrase(text: str, start: int) -> str:
    """The rest of the line after "The answer is"; the next non-empty line when the line is empty."""
    line_end = text.find("\n", start)
    line = text[start:] if line_end < 0 else text[start:line_end]
    if line.strip() or line_end < 0:
        return line
    for line in text[line_end + 1 :].split("\n"):
        if line.strip():
            return line
    return ""


def extract_answer(text: str) -> str | None:
    """The final answer written in a completion, normalised for comparison, or None when there is none.

    Order: the LAST ``\\boxed{...}`` or ``\\fbox{...}`` (balanced braces, nesting allowed; when the last
    box never closes, e.g. a truncated ``\\boxed{3``, the answer is None), else the last
    "The answer is ..." (a number with optional sign, ``$``, 3-digit-group thousands separators, decimals
    and ``%``; or a LaTeX/plain expression up to the end of the sentence or line), else the last
    ``#### ...`` line. There is no "last number anywhere" fallback. Only the last ``TAIL_CHARS``
    characters are searched; control characters are ignored; answers longer than ``MAX_ANSWER_CHARS``
    characters count as absent. Numbers come back canonical ("1250", "-3"), other answers as LaTeX.
    Never raises: anything that is not a string gives None.

    >>> extract_answer(r"First \\boxed{3}, then finally \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> extract_answer("So the answer is $1,250.")
    '1250'
    >>> extract_answer(r"truncated \\boxed{3") is None
    True
    """
    if not isinstance(text, str) or not text:
        return None
    text = _clean(text[-TAIL_CHARS:])
    found, content = _last_box(text)
    if found:
        return _value(content, loose=False)
    phrase = None
    for phrase in _ANSWER_IS.finditer(text):  # noqa: B007 - we want the last match
        pass
    if phrase is not None:
        return _value(_after_phrase(text, phrase.end()), loose=True)
    hashes = None
    for hashes in _HASHES.finditer(text):  # noqa: B007 - we want the last match
        pass
    if hashes is not None:
        return _value(hashes.group(1), loose=True)
    return None


def _is_prose(value: str) -> bool:
    """True for a value that is words rather than math ("see figure", "N/A"); ``\\text{...}`` is allowed."""
    if value.strip().lower() in _NON_ANSWERS:
        return True
    stripped = _LATEX_COMMAND.sub(" ", _TEXT_GROUP.sub(" ", value))
    return any(len(word) >= 3 and word.lower() not in _MATH_WORDS for word in _WORD.findall(stripped))


def _gold_value(gold: Any) -> str | None:
    """The gold answer as the string handed to math-verify, or None when it is not a usable answer."""
    if not isinstance(gold, str):
        return None
    text = _CALCULATOR.sub("", _clean(gold)).strip()
    if not text:
        return None
    if "####" in text:  # GSM8K: solution text, then "#### N"
        value = text.rsplit("####", 1)[1].strip()
        value = value.split("\n", 1)[0] if value else value
        return _checked_gold(_value(value, loose=True))
    found, content = _last_box(text)
    if found:  # MATH-style full solution
        return _checked_gold(_value(content, loose=False))
    return _checked_gold(_value(text, loose=False))


def _checked_gold(value: str | None) -> str | None:
    if value is None or _is_prose(value):
        return None
    return value


# --------------------------------------------------------------------------------------------------
# math-verify operations (the only code that runs sympy; always under a time limit, see module doc)
# --------------------------------------------------------------------------------------------------


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that its timeouts are off; they are off on purpose (we bound the work)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())


def _mv_parse(value: str) -> list:
    from math_verify import LatexExtractionConfig, parse

    config = [LatexExtractionConfig(boxed_match_priority=0)]
    return parse("\\boxed{" + value + "}", extraction_config=config, parsing_timeout=None)


@functools.lru_cache(maxsize=4096)
def _parsed_gold(value: str) -> tuple | None:
    """math-verify's parse of a gold value (a tuple, for the cache); None when it yields no sympy object."""
    from sympy import Basic, MatrixBase

    parsed = _mv_parse(value)
    if not any(isinstance(item, (Basic, MatrixBase)) for item in parsed):
        return None
    return tuple(parsed)


def _op_parse_gold(value: str) -> list | None:
    parsed = _parsed_gold(value)
    return None if parsed is None else list(parsed)


def _op_gold_ok(value: str) -> bool:
    return _parsed_gold(value) is not None


def _op_verify(gold_value: str, answer: str) -> bool:
    from math_verify import verify

    gold = _parsed_gold(gold_value)
    if gold is None:
        return False
    target = _mv_parse(answer)
    return bool(target) and bool(verify(list(gold), target, timeout_seconds=None))


_OPS: dict[str, Callable[..., Any]] = {
    "parse_gold": _op_parse_gold,
    "gold_ok": _op_gold_ok,
    "verify": _op_verify,
}

_WARM_LOCK = threading.Lock()
_WARM = False


def _warm_up() -> None:
    """Import math-verify and build its grammar once, outside any time limit (the first parse is slow)."""
    global _WARM
    with _WARM_LOCK:
        if not _WARM:
            _op_verify("\\frac{1}{2}", "0.5")
            _WARM = True


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


def _worker_main() -> None:
    """Entry point of a worker process: read (op, args, timeout) frames on stdin, answer on stdout."""
    out_fd = os.dup(1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the protocol
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


# The worker loads this file by path: only procrl/__init__ and procrl.utils get imported with it, never the
# rest of procrl.rewards (which may pull in torch), so a worker starts in well under a second.
_WORKER_CODE = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_procrl_outcome_worker', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "module._worker_main()\n"
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
            [sys.executable, "-c", _WORKER_CODE, os.path.abspath(__file__)],
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


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def parse_gold(gold: str | None, *, timeout_s: float | None = None) -> list | None:
    """Parse a gold answer; return math-verify's parse result list, or None when it cannot be parsed.

    Accepts GSM8K solutions (text ending in ``#### N``; calculator annotations ``<<48/2=24>>`` are
    ignored, the sign is kept, ``$`` and 3-digit-group thousands separators are dropped, text after the
    number is ignored), plain numbers ("27", "27.0"), and MATH-style LaTeX (``\\frac{1}{2}``, ``50\\%``,
    ``\\dfrac{\\pi}{2}``, ``\\text{13}``, or a full solution whose last ``\\boxed{}`` holds the answer).
    Unparseable: None, "", prose ("see figure", "N/A"), a value longer than ``MAX_ANSWER_CHARS``
    characters, anything math-verify turns into no sympy object, and a parse that takes longer than
    ``timeout_s`` seconds (default ``DEFAULT_TIMEOUT_S``). Never raises for bad input.

    >>> parse_gold("Half of 48 is <<48/2=24>>24.\\n#### 24")
    [24, '24']
    >>> parse_gold(r"\\dfrac{\\pi}{2}")[0]
    pi/2
    >>> parse_gold("see figure") is None
    True
    """
    value = _gold_value(gold)
    if value is None:
        return None
    status, parsed = _bounded("parse_gold", (value,), _timeout(timeout_s))
    return parsed if status == "ok" else None


def is_correct(completion: Any, gold: str | None, *, timeout_s: float | None = None) -> bool | None:
    """Whether the final answer of ``completion`` equals ``gold``; None iff the gold cannot be parsed.

    ``completion`` is a string or a TRL message list (anything else counts as an empty completion); its
    answer comes from ``extract_answer`` and is compared with math-verify, so numbers compare as numbers
    ("0.5" equals ``\\frac{1}{2}``). A completion without an answer, or a comparison that takes longer
    than ``timeout_s`` seconds (default ``DEFAULT_TIMEOUT_S``), is False. Safe to call from any thread;
    never raises for bad input.

    >>> is_correct(r"Half of one is \\boxed{\\frac{1}{2}}", "0.5")
    True
    >>> is_correct([{"role": "assistant", "content": "The answer is 3."}], "#### -3")
    False
    >>> is_correct("The answer is 3.", "see figure") is None
    True
    """
    timeout_s = _timeout(timeout_s)
    value = _gold_value(gold)
    if value is None:
        return None
    status, ok = _bounded("gold_ok", (value,), timeout_s)
    if status != "ok" or not ok:
        return None
    return _answer_matches(value, completion, timeout_s)


def _answer_matches(gold_value: str, completion: Any, timeout_s: float) -> bool:
    answer = extract_answer(completion_to_text(completion))
    if answer is None:
        return False
    status, ok = _bounded("verify", (gold_value, answer), timeout_s)
    return status == "ok" and ok is True


def outcome_reward(
    prompts: Sequence[Any] | None = None,
    completions: Sequence[Any] | None = None,
    completion_ids: Sequence[Any] | None = None,
    *,
    answer: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """TRL reward function: 1.0 when a completion's final answer equals its gold, 0.0 otherwise, None when
    the gold cannot be parsed (so it never earns 1.0).

    ``answer`` is the dataset's gold column, one string per completion (TRL repeats it per generation).
    When TRL passes ``log_metric``, the fraction of golds in this batch that cannot be parsed is logged
    as ``outcome/unparseable_gold``. Each check is limited to ``DEFAULT_TIMEOUT_S`` seconds (a timeout is
    0.0) and works from any thread. Raises ValueError when ``answer`` is missing or its length differs
    from the number of completions.

    >>> outcome_reward(completions=[r"\\boxed{4}", "The answer is 5", "no idea"], answer=["4", "4", "4"])
    [1.0, 0.0, 0.0]
    """
    if answer is None:
        raise ValueError(
            "outcome_reward needs the gold answers: the dataset must have an `answer` column "
            "(TRL passes dataset columns to reward functions as keyword arguments)."
        )
    if completions is None:
        raise ValueError("outcome_reward needs `completions` (one per gold answer).")
    if isinstance(answer, str) or not isinstance(answer, Sequence):
        raise ValueError(
            f"outcome_reward: `answer` must be a list with one gold per completion, got {type(answer).__name__}."
        )
    if len(answer) != len(completions):
        raise ValueError(
            f"outcome_reward: got {len(answer)} gold answers for {len(completions)} completions; "
            "the `answer` column must have exactly one entry per completion."
        )
    timeout_s = _timeout(None)
    gold_ok: dict[str, bool] = {}  # one parse per distinct gold per batch (GRPO repeats each gold G times)
    rewards: list[float | None] = []
    for completion, gold in zip(completions, answer, strict=True):
        value = _gold_value(gold)
        if value is not None and value not in gold_ok:
            status, ok = _bounded("gold_ok", (value,), timeout_s)
            gold_ok[value] = status == "ok" and bool(ok)
        if value is None or not gold_ok[value]:
            rewards.append(None)
        else:
            rewards.append(1.0 if _answer_matches(value, completion, timeout_s) else 0.0)
    log_metric = kwargs.get("log_metric")
    if callable(log_metric) and rewards:
        log_metric(_UNPARSEABLE_METRIC, sum(reward is None for reward in rewards) / len(rewards))
    return check_reward_length("outcome_reward", rewards, len(completions))
