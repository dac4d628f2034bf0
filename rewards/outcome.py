"""Outcome reward for math: 1.0 when the final answer matches the gold answer, 0.0 otherwise, None when
the gold answer cannot be parsed (DESIGN §3 "Outcome checking", §4 "Outcome").

Pipeline
--------
1. ``extract_answer`` finds the final answer of a completion with plain regular expressions (linear time):
   the last ``\\boxed{...}``/``\\fbox{...}`` (or brace-less ``\\boxed 2``), else the last "The answer is ...",
   else the text after the last ``####`` (anywhere in a line), else None. There is deliberately no "last number
   anywhere" fallback: a policy could learn to spray numbers. That is ``answer_extraction="strict"``, the
   default; ``"flexible"`` (``get_outcome_reward("flexible")``) adds the last number of the final sentence, unless it
   is part of an expression, hedged or a cut-off list marker. Only the last ``TAIL_CHARS`` (4,000) characters of a
   completion are searched.
2. ``parse_gold`` reads a gold answer: GSM8K solutions (``#### N``, ``<<48/2=24>>`` annotations ignored),
   plain numbers, MATH-style LaTeX. Prose golds ("see figure", "N/A") are unparseable, never reward 1.0.
3. Both sides go through math-verify (``parse`` with ``LatexExtractionConfig`` on ``\\boxed{<answer>}``,
   then ``verify(gold, answer)``); we never compare symbolically ourselves. Numbers are normalised first
   (sign, ``$``, thousands separators only in 3-digit groups, trailing period), so "1,25" is not 125. Two
   numbers (also inside tuples, finite sets and intervals) are compared here instead, because math-verify's
   numeric comparison has absolute tolerances (it pays 1/2^98 for 1/2^99): exactly when both are rational, a
   decimal against an irrational value by correct rounding, two exact values relatively at 50 digits (the rules are
   in ``is_correct``).

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
    "ANSWER_EXTRACTION_MODES",
    "DEFAULT_TIMEOUT_S",
    "MAX_ANSWER_CHARS",
    "OutcomeReward",
    "TAIL_CHARS",
    "extract_answer",
    "get_outcome_reward",
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

#: How ``extract_answer`` finds the final answer of a completion: "strict" (an explicit marker: a box,
#: "The answer is ..." or "#### ...") or "flexible" (also the last number of the final sentence).
ANSWER_EXTRACTION_MODES: tuple[str, ...] = ("strict", "flexible")

_UNPARSEABLE_METRIC = "outcome/unparseable_gold"
_NO_ANSWER_METRIC = "outcome/no_answer_{mode}"  # one key per extraction mode: modes never mix in one metric
_GRACE_S = 2.0  # extra seconds the caller waits for a worker process before killing it
_STARTUP_TIMEOUT_S = 60.0  # seconds a new worker process may take to import math-verify and warm up
_MAX_IDLE_WORKERS = 4

# --------------------------------------------------------------------------------------------------
# Text handling (pure regular expressions; linear time on the capped inputs)
# --------------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*")
# A brace-less box (``\boxed 2``, ``\boxed \frac12``) holds everything up to the end of its math span or line, as
# in the MATH data set's reference code (``last_boxed_only_string``: ``split("$")[0]``).
_BRACELESS_END = re.compile(r"\$|\\\]|\\\)|\n")
# ... and starts like math: a digit, a sign, a command or a lone letter ("\boxed x = 5"); "\boxed. The answer is 7",
# "\boxed notation" and prose contents are mentions of the command, not boxes.
_BRACELESS_START = re.compile(r"[-+]?[ \t]*(?:\d|\.\d|\\[A-Za-z]|[A-Za-z](?![A-Za-z]))")
_ANSWER_IS = re.compile(r"\bthe\s+(?:final\s+)?answer\s+is\s*:?[ \t]*", re.IGNORECASE)
_HASHES = re.compile(r"(?<!#)####(?!#)[ \t]*(.*)$", re.MULTILINE)  # anywhere in a line: "Adding up: #### 1,000"
_CALCULATOR = re.compile(r"<<[^<>\n]*>>")
# A number: optional sign, optional currency, digits with thousands separators ("," or LaTeX's "{,}") in 3-digit
# groups only (or none), optional decimals, an optional exponent ("1e-30"), optional percent. The lookahead forbids
# stopping inside a longer number, so "1,25" and "12,345,67" are not numbers at all (rather than 1 or 12,345).
_NUMBER_BODY = (
    r"(?P<num>\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?:[eE](?P<exp>[-+]?\d+))?"
    r"(?!\d|[.,]\d|\{,\}\d)(?P<pct>[ \t]*\\?%)?"
)
_NUMBER = re.compile(r"(?P<sign>[-+]?)[ \t]*(?:\\?\$)?[ \t]*(?P<sign2>[-+]?)" + _NUMBER_BODY)
# A number inside a sentence (answer_extraction="flexible"): not part of a word, a longer number, an exponent or
# a LaTeX argument ("x2", "m^{2}", "\frac{1}{2}" hold no number here); "$9{,}500$" and "-3" do.
_NUMBER_IN_TEXT = re.compile(r"(?<![\w.,{}^_\\-])(?P<sign>-?)(?:\\?\$)?(?P<sign2>)" + _NUMBER_BODY + r"(?![\w^_])")
_FINAL_PUNCT = ".!?*_"  # stripped, with whitespace, from the end of a completion before its final sentence is read
# A simple fraction in a sentence ("3/4 of them", "-1/2"), with the boundaries of _NUMBER_IN_TEXT on both sides.
_FRACTION_IN_TEXT = re.compile(
    r"(?<![\w.,{}^_\\/-])(?P<sign>-?)(?:\\?\$)?(?P<a>\d+)[ \t]*/[ \t]*(?P<b>\d+)(?!\d|[.,]\d|\{,\}\d)(?![\w^_/])"
)
# What makes the last number of a final sentence part of something else (answer_extraction="flexible"; see
# ``_final_sentence_number``). The text before the number is read with trailing spaces and "$" removed.
_OPERATOR_BEFORE = re.compile(r"(?:[/+\-\u00d7\u00f7^\u00b7\u2013]|\\(?:times|div|cdot|pm|mp))$")
_OPERAND_BEFORE = re.compile(r"[\d)]$")  # "10 -3", "1 1/2", "1 000": right after another number
_OPERATOR_AFTER = re.compile(r"[ \t$]*(?:[/+\-\u00d7\u00f7^=\u00b7\u2013]|\\(?:times|div|cdot|pm|mp)(?![A-Za-z]))")
# "*" multiplies when spaced on both sides ("6 * 7") or tight between operands ("6*x"); "*42*" and "**42**" are
# markdown emphasis. Read on the text before the number as it is (not stripped) and on the text after it.
_STAR_BEFORE = re.compile(r"(?:[\w)}][ \t]+\*{1,2}[ \t]+|[\w)}]\*{1,2})\$?$")
_STAR_AFTER = re.compile(r"\$?(?:[ \t]+\*{1,2}[ \t]+|\*{1,2}(?=\$?[\w(\\]))")
_HEDGE_BEFORE = re.compile(r"\d[\\%$*_)]*[ \t]+(?:or|and|to|plus|minus|times)[ \t]+[$*_]*$", re.IGNORECASE)
_HEADING_BEFORE = re.compile(r"\b(?:step|part|case)[ \t]*[$*_]*$", re.IGNORECASE)
_LIST_MARKER_AFTER = re.compile(r"[.)][\s*_]*")
_SENTENCE_BREAK = re.compile(r"[.!?](?=\s)|\n")
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


def _last_box(text: str) -> tuple[bool, str | None, bool]:
    """(found, content, braced) of the last ``\\boxed``/``\\fbox``. ``\\boxed{...}`` holds its balanced group
    (None when it never closes: truncated); a brace-less ``\\boxed 2`` / ``\\boxed \\frac12`` holds the text up to
    the next ``$``, ``\\]``, ``\\)`` or line end. A brace-less one whose text does not start like math or is no
    answer (empty, prose: "I'll write it in \\boxed. The answer is 7") is a mention of the command, not a box: it is
    skipped, so an earlier box or a later marker applies."""
    for box in reversed(list(_BOX.finditer(text))):
        start = box.end()
        if start < len(text) and text[start] == "{":
            return True, _balanced(text, start + 1), True
        end = _BRACELESS_END.search(text, start)
        content = text[start : end.start() if end else len(text)].strip()
        if _BRACELESS_START.match(content):
            value = _value(content, loose=True)
            if value is not None and not _is_prose(value):
                return True, content, False
    return False, None, True


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
    return _canonical_number(match)


def _canonical_number(match: re.Match) -> str:
    """The canonical number ("-1250.00", "50\\%", "1\\times10^{-30}") of a match of ``_NUMBER``/``_NUMBER_IN_TEXT``."""
    sign = "-" if "-" in (match.group("sign") + match.group("sign2")) else ""
    number = match.group("num").replace("{,}", "").replace(",", "")
    if number.startswith("."):
        number = "0" + number
    if match.group("exp") is not None:  # math-verify reads "1e-30" as e - 30 (Euler's number)
        number += "\\times10^{" + match.group("exp") + "}"
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


def _final_sentence_number(text: str) -> str | None:
    """The last number of the final sentence of ``text`` (answer_extraction="flexible"), canonical, or None.

    A simple fraction ending there is read whole ("Thus 3/4 of them." gives ``\\frac{3}{4}``). None, rather than a
    piece of something else, when that number
    * is an operand: next to ``/`` or a binary operator (``+ - * × ÷ ^ ·``, ``\\times``, ``\\div``, ``\\cdot``,
      ``\\pm``), or right after another number ("The result is 10 - 3.", "10 -3", "1 1/2", "1 000", "5-gallon"); the
      value after the last ``=`` is the result, not an operand ("6 * 7 = 42" gives 42), unless an operator follows;
    * is hedged, as in strict mode: next to "or", "and", "to", "plus", "minus", "times" and another number
      ("Answer: 5 or 6", "It is 0.5 or 1/2."), or followed by one of those words ("6 or more");
    * is a heading or list marker of a cut-off completion: "Step 3" ("Part", "Case"), or a final sentence that is
      only ``N.`` or ``N)`` ("1. Compute 3+4=7.\\n2.": a list cut off, not the answer 2; also "\\n42.");
    * stands inside parentheses after another number ("12 (2023 prices)." is ambiguous: None, neither 12 nor 2023).
    """
    stop = len(text)
    while stop and (text[stop - 1].isspace() or text[stop - 1] in _FINAL_PUNCT):  # linear ("[...]+$" is quadratic)
        stop -= 1
    body = text[:stop]
    breaks = None
    for breaks in _SENTENCE_BREAK.finditer(body):  # noqa: B007 - we want the last match
        pass
    offset = breaks.end() if breaks is not None else 0
    sentence = body[offset:]
    number = None
    for number in _NUMBER_IN_TEXT.finditer(sentence):  # noqa: B007 - we want the last match
        pass
    if number is None:
        return None
    start, end, value = number.start(), number.end(), _canonical_number(number)
    for fraction in _FRACTION_IN_TEXT.finditer(sentence):
        if fraction.end() == end:
            sign, numerator, denominator = fraction.group("sign", "a", "b")
            start, value = fraction.start(), f"{sign}\\frac{{{numerator}}}{{{denominator}}}"
    before, after = sentence[:start], sentence[end:]
    tail = before.rstrip(" \t$")[-16:]  # bounded look-behind: the checks only need the last few characters
    if (
        _OPERATOR_BEFORE.search(tail)
        or _OPERAND_BEFORE.search(tail)
        or _STAR_BEFORE.search(before[-16:])
        or _OPERATOR_AFTER.match(after)
        or _STAR_AFTER.match(after)
        or _HEDGE_BEFORE.search(before[-48:])
        or _HEDGE_WORD.match(after.lstrip("$*_"))
        or _HEADING_BEFORE.search(before[-24:])
        or (not before.strip(" \t#*_") and _LIST_MARKER_AFTER.fullmatch(text, offset + end))
    ):
        return None
    opened = []  # positions of the parentheses still open before the number
    for i, char in enumerate(before):
        if char == "(":
            opened.append(i)
        elif char == ")" and opened:
            opened.pop()
    if opened and any(char.isdigit() for char in before[: opened[-1]]):
        return None
    return value


def _check_extraction(answer_extraction: str) -> str:
    if answer_extraction not in ANSWER_EXTRACTION_MODES:
        raise ValueError(
            f"answer_extraction={answer_extraction!r} is not one of {ANSWER_EXTRACTION_MODES}: use 'strict' (a box, "
            "'The answer is ...' or '#### ...'; the default) or 'flexible' (also the last number of the final sentence)."
        )
    return answer_extraction


def extract_answer(text: str, *, answer_extraction: str = "strict") -> str | None:
    """The final answer written in a completion, normalised for comparison, or None when there is none.

    ``answer_extraction="strict"`` (the default) looks for an explicit answer marker, in this order: the LAST
    ``\\boxed{...}`` or ``\\fbox{...}`` (balanced braces, nesting allowed; when the last box never closes, e.g. a
    truncated ``\\boxed{3``, the answer is None; a brace-less ``\\boxed 2`` or ``\\boxed \\frac12`` holds the text up
    to the next ``$``, ``\\]``, ``\\)`` or line end, as in the MATH data set; a brace-less one that holds no answer,
    as in "I'll write it in \\boxed. The answer is 7", is a mention, not a box), else the last "The answer is ..."
    (a number with optional sign, ``$``, 3-digit-group thousands separators written ``,`` or ``{,}``, decimals, an
    exponent and ``%``; or a LaTeX/plain expression up to the end of the sentence or line; when that text holds
    ``####``, the value after it: "The answer is: #### 72" gives 72), else the text after the last ``####``
    (anywhere in a line). There is no "last number anywhere" fallback: a policy could learn to spray numbers.
    ``answer_extraction="flexible"`` adds one fallback after these: the last number of the final sentence ("The
    total is $9{,}500$." gives 9500, "Thus 3/4 of them." ``\\frac{3}{4}``; same number rules). It gives None when
    the final sentence has no number, or when its last number is part of something else: an operand ("The result
    is 10 - 3."; the value after a final ``=`` is a result: "6 * 7 = 42" gives 42), a hedge ("Answer: 5 or 6"), a
    heading or list marker of a cut-off completion ("**Step 3", a final "2."), or a number in parentheses after
    another number ("12 (2023 prices)."); see ``_final_sentence_number``. Only the last ``TAIL_CHARS`` characters
    are searched; control characters are ignored; answers longer than ``MAX_ANSWER_CHARS`` characters count as
    absent. Numbers come back canonical ("1250", "-3", "1\\times10^{-30}"), other answers as LaTeX. Never raises for
    bad text (anything that is not a string gives None); raises ValueError for an unknown ``answer_extraction``.

    >>> extract_answer(r"First \\boxed{3}, then finally \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> extract_answer("So the answer is $1,250.")
    '1250'
    >>> extract_answer(r"truncated \\boxed{3") is None
    True
    >>> extract_answer(r"so the result is $\\boxed 2$.")
    '2'
    >>> extract_answer("The total is $9{,}500$.") is None, extract_answer("The total is $9{,}500$.", answer_extraction="flexible")
    (True, '9500')
    """
    _check_extraction(answer_extraction)
    if not isinstance(text, str) or not text:
        return None
    text = _clean(text[-TAIL_CHARS:])
    found, content, braced = _last_box(text)
    if found:
        return _value(content, loose=not braced)
    phrase = None
    for phrase in _ANSWER_IS.finditer(text):  # noqa: B007 - we want the last match
        pass
    if phrase is not None:  # "The answer is: #### 72" and "The answer is 72 #### 72" give the #### value, 72
        after = _after_phrase(text, phrase.end())
        hashes = None
        for hashes in _HASHES.finditer(after):  # noqa: B007 - we want the last match
            pass
        return _value(after if hashes is None else hashes.group(1), loose=True)
    hashes = None
    for hashes in _HASHES.finditer(text):  # noqa: B007 - we want the last match
        pass
    if hashes is not None:
        return _value(hashes.group(1), loose=True)
    if answer_extraction == "flexible":
        return _final_sentence_number(text)
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
    found, content, braced = _last_box(text)
    if found:  # MATH-style full solution
        return _checked_gold(_value(content, loose=not braced))
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


# ---- numbers: exact for rationals, correct rounding for a decimal against an irrational, else relative 1e-30 -------
#
# math-verify 0.9.0 compares numbers with absolute tolerances: a Float against anything by rounding both to
# ``float_rounding`` (6) decimals (math_verify/grader.py:162-166: 1e-7 equals 2e-7), and other numeric expressions by
# ``(a - b).evalf(chop=True, n=numeric_precision) == 0`` (grader.py:177-179), which chops any difference below about
# 1e-15 to zero: 1/2^99 "equals" 1/2^98, e^-100 equals e^-101. Raising float_rounding/numeric_precision only moves
# the threshold. So when both sides are numbers we decide ourselves (``_numeric_verdict``) and call math-verify's
# public ``verify`` only for everything else (and for a pair where our comparison raises), where its tolerances
# remain: expressions with variables (x + 1/2^99 still "equals" x + 1/2^98), other equations and inequalities,
# matrices, containers mixing kinds (interval vs tuple).
# Mirrored math-verify behaviour: ``x = 5`` against 5 or ``x = 5`` (grader.py:646-671), X\% against X and X/100
# (grader.py:99-102, 160-171), tuples in order and finite sets sorted by value (grader.py:219-262), intervals by
# openness and endpoints (grader.py:265-283).

_MIN_DECIMAL_DIGITS = 5  # a decimal matches an irrational value only with at least this many significant digits
_DECIMAL_LITERAL = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?!\d)")
_EXACT_RTOL = 1e-30  # two exact expressions, at least one irrational: equal up to evaluation error at _EVAL_DIGITS
_EVAL_DIGITS = 50


def _percent_base(expr: Any) -> Any:
    """X for math-verify's parse of X\\% (``X*UnevaluatedExpr(1/100)``, grader.py:99-102), else None."""
    from sympy import Mul, Rational, UnevaluatedExpr

    if isinstance(expr, Mul) and len(expr.args) == 2 and expr.args[1] == UnevaluatedExpr(Rational(1, 100)):
        return expr.args[0]
    return None


def _exact_number(expr: Any) -> Any:
    """The exact value of a finite closed-form number, else None. A decimal is the rational number it writes
    (0.333333 = 333333/10^6): math-verify's Floats become Rationals of their digits."""
    from sympy import Expr, Float, Rational, nan, zoo

    if not isinstance(expr, Expr) or expr.free_symbols or expr.is_number is not True:
        return None
    floats = expr.atoms(Float)
    value = (expr.xreplace({f: Rational(str(f)) for f in floats}) if floats else expr).doit()
    if not isinstance(value, Expr) or value.is_number is not True or value.has(nan, zoo) or value.is_finite is not True:
        return None
    return value


def _written_decimals(*texts: str) -> dict:
    """{value: (decimal places, significant digits)} of the decimals written in ``texts`` ("3.14160": 5 places, 6
    digits; math-verify's Floats forget trailing zeros). A value written twice keeps its longest form."""
    from sympy import Rational

    written: dict = {}
    for text in texts:
        for match in _DECIMAL_LITERAL.finditer(text):
            whole, fraction = match.groups()
            value = Rational(f"{whole or 0}.{fraction}")
            if value not in written or len(fraction) > written[value][0]:
                written[value] = (len(fraction), len((whole + fraction).lstrip("0")))
    return written


def _decimal_digits(expr: Any, written: dict) -> tuple[int, int] | None:
    """(decimal places, significant digits) of ``expr`` when it is a decimal as written: ``3.1416``, ``-3141.59``,
    ``3.14159\\times10^{3}`` (2 places), ``31.4159\\%`` (6 places); None for anything else (``2.5\\pi`` is the exact
    number 5\\pi/2, not a decimal)."""
    from sympy import Float, Integer, Mul, Pow, Rational, UnevaluatedExpr

    factors = expr.args if isinstance(expr, Mul) else (expr,)
    floats = [factor for factor in factors if isinstance(factor, Float)]
    if len(floats) != 1:
        return None
    shift = 0  # the power of ten the decimal is multiplied by
    for factor in factors:
        if factor is floats[0] or factor == Integer(-1):
            continue
        if isinstance(factor, Pow) and factor.base == 10 and factor.exp.is_Integer:
            shift += int(factor.exp)
        elif factor == UnevaluatedExpr(Rational(1, 100)):  # X\% (grader.py:99-102)
            shift -= 2
        else:
            return None
    mantissa = abs(Rational(str(floats[0])))
    if mantissa in written:
        places, digits = written[mantissa]
    else:  # not found in the text (another spelling): its shortest form
        places = 0
        while (mantissa * 10**places).q != 1:
            places += 1
        digits = len(str((mantissa * 10**places).p).lstrip("0"))
    return places - shift, digits


def _rounds_to(decimal: Any, places: int, digits: int, exact: Any) -> bool:
    """Whether ``decimal`` (a Rational, written with ``places`` decimal places and ``digits`` significant digits)
    is ``exact`` correctly rounded to ``places`` decimal places, with at least ``_MIN_DECIMAL_DIGITS`` digits."""
    from sympy import Float, Integer, N, Rational, floor

    if digits < _MIN_DECIMAL_DIGITS:
        return False
    scaled = decimal * Rational(10) ** places  # an integer: the decimal's digits
    if not isinstance(scaled, Integer):
        return False
    nearest = N(exact * Rational(10) ** places, _EVAL_DIGITS + len(str(abs(scaled))))
    if not isinstance(nearest, Float):  # complex, or no numeric value
        return False
    return bool(floor(nearest + Rational(1, 2)) == scaled)  # no ties: an irrational value is never half-way


def _numbers_equal(a: Any, b: Any, written: dict | None = None) -> bool | None:
    """The rule for two numbers (see ``is_correct``); None when either is not a finite closed-form number.
    ``written``: the decimals of the texts, from ``_written_decimals``."""
    from sympy import N, Number, Rational

    value_a, value_b = _exact_number(a), _exact_number(b)
    if value_a is None or value_b is None:
        return None
    if isinstance(value_a, Rational) and isinstance(value_b, Rational):
        return bool(value_a == value_b)  # exact: 1/2^99 != 1/2^98, 1e-30 != 2e-30, 0.5 == 1/2
    for expr, value, other in ((a, value_a, value_b), (b, value_b, value_a)):
        if isinstance(value, Rational) and not isinstance(other, Rational):
            decimal = _decimal_digits(expr, written or {})
            if decimal is not None:  # a decimal against an irrational value: 3.1416 == pi, 3.1415 != pi
                return _rounds_to(value, *decimal, other)
    diff = abs(N(value_a - value_b, _EVAL_DIGITS))
    scale = max(abs(N(value_a, _EVAL_DIGITS)), abs(N(value_b, _EVAL_DIGITS)))
    if not (isinstance(diff, Number) and isinstance(scale, Number)):
        return None
    return bool(diff <= _EXACT_RTOL * scale)  # relative: e^-100 != e^-101, 355/113 != pi, sqrt(8) == 2 sqrt(2)


def _numbers_or_percent_equal(gold: Any, pred: Any, written: dict | None = None) -> bool | None:
    """``_numbers_equal``, where X\\% on one side also equals a bare X on the other (as math-verify: 50\\% == 50)."""
    gold_base, pred_base = _percent_base(gold), _percent_base(pred)
    equal = _numbers_equal(gold, pred, written)
    if equal is None or equal or (gold_base is None) == (pred_base is None):
        return equal
    if gold_base is not None:
        return bool(_numbers_equal(gold_base, pred, written))
    return bool(_numbers_equal(gold, pred_base, written))


def _relations(expr: Any) -> list | None:
    """The equations of ``expr`` in written order (``x = 3 + 4 = 7`` is a chain), or None when it is not one."""
    from sympy import Eq

    if isinstance(expr, Eq):
        return [expr]
    args = getattr(expr, "_unsorted_args", None)  # latex2sympy's And keeps the written order
    if type(expr).__name__ == "And" and args and all(isinstance(arg, Eq) for arg in args):
        return list(args)
    return None


def _sorted_numbers(items: Sequence[Any]) -> list | None:
    from sympy import N

    keyed = []
    for item in items:
        exact = _exact_number(item)
        if exact is None or exact.is_extended_real is not True:
            return None
        keyed.append((N(exact, _EVAL_DIGITS), item))
    return [item for _, item in sorted(keyed, key=lambda pair: pair[0])]


def _numeric_verdict(gold: Any, pred: Any, written: dict | None = None) -> bool | None:
    """Whether two parsed answers that are numbers (or tuples, finite sets or intervals of numbers) are equal;
    None when they are not both of that kind, so that math-verify decides. ``written``: as in ``_numbers_equal``."""
    from sympy import FiniteSet, Interval, Tuple

    gold_relations, pred_relations = _relations(gold), _relations(pred)
    if gold_relations is not None and pred_relations is not None:  # "x = 5" against "x = 5": the values, same name
        if not (gold_relations[0].lhs.is_Symbol and gold_relations[0].lhs == pred_relations[0].lhs):
            return None
        gold, pred = gold_relations[-1].rhs, pred_relations[-1].rhs
    elif pred_relations is not None:  # answer "x = 5" against gold 5 (grader.py:663-667)
        pred = pred_relations[-1].rhs
    elif gold_relations is not None:  # gold assignment "x = 5" against answer 5 (grader.py:646-671)
        if not gold_relations[0].lhs.is_Symbol:
            return None
        gold = gold_relations[-1].rhs
    if isinstance(gold, Interval) and isinstance(pred, Interval):
        if (gold.left_open, gold.right_open) != (pred.left_open, pred.right_open):
            return False
        ends = [_endpoint_verdict(gold.start, pred.start, written), _endpoint_verdict(gold.end, pred.end, written)]
        return None if None in ends else all(ends)
    for kind in (Tuple, FiniteSet):
        if isinstance(gold, kind) and isinstance(pred, kind):
            gold_items, pred_items = list(gold.args), list(pred.args)
            if kind is FiniteSet:
                gold_items, pred_items = _sorted_numbers(gold_items), _sorted_numbers(pred_items)
                if gold_items is None or pred_items is None:
                    return None
            if len(gold_items) != len(pred_items):
                return None
            verdicts = [_numeric_verdict(g, p, written) for g, p in zip(gold_items, pred_items, strict=True)]
            return None if None in verdicts else all(verdicts)
    return _numbers_or_percent_equal(gold, pred, written)


def _endpoint_verdict(gold: Any, pred: Any, written: dict | None = None) -> bool | None:
    if gold.is_infinite or pred.is_infinite:
        return bool(gold == pred)
    return _numbers_equal(gold, pred, written)


def _safe_numeric_verdict(gold: Any, pred: Any, written: dict) -> bool | None:
    """``_numeric_verdict``, where an exception (a sympy corner case) gives None: math-verify decides that pair, as
    its ``verify`` swallows its own errors, and the other pairs are still compared. A timeout is a BaseException and
    still stops the whole check."""
    try:
        return _numeric_verdict(gold, pred, written)
    except Exception:  # noqa: BLE001 - any failure of our comparison falls back to math-verify's
        logger.debug("numeric comparison failed; math-verify decides", exc_info=True)
        return None


def _op_verify(gold_value: str, answer: str) -> bool:
    from math_verify import verify
    from sympy import Basic

    gold = _parsed_gold(gold_value)
    if gold is None:
        return False
    target = _mv_parse(answer)
    written = _written_decimals(gold_value, answer)
    for gold_item in gold:  # every pair, as verify() does (grader.py:887-889)
        for target_item in target:
            verdict = None
            if isinstance(gold_item, Basic) and isinstance(target_item, Basic):
                verdict = _safe_numeric_verdict(gold_item, target_item, written)
            if verdict is None:
                verdict = bool(verify([gold_item], [target_item], timeout_seconds=None))
            if verdict:
                return True
    return False


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
    ``\\dfrac{\\pi}{2}``, ``\\text{13}``, or a full solution whose last ``\\boxed{}`` holds the answer; MATH's
    brace-less ``$\\boxed 2$`` reads as ``\\boxed{2}``).
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


def is_correct(
    completion: Any, gold: str | None, *, timeout_s: float | None = None, answer_extraction: str = "strict"
) -> bool | None:
    """Whether the final answer of ``completion`` equals ``gold``; None iff the gold cannot be parsed.

    ``completion`` is a string or a TRL message list (anything else counts as an empty completion); its answer
    comes from ``extract_answer(..., answer_extraction=answer_extraction)`` ("strict" by default) and is compared
    with math-verify, so expressions compare as mathematics (``\\pi/2`` equals ``\\dfrac{\\pi}{2}``, ``x = 5``
    equals 5). When both sides are numbers (or tuples, finite sets or intervals of numbers) they are compared here,
    never with an absolute tolerance:

    * both rational (integers, fractions, decimals, which are the rational numbers they write): exactly equal.
      "0.5" equals ``\\frac{1}{2}``; ``\\frac{1}{2^{98}}`` does not equal ``\\frac{1}{2^{99}}``, nor 2e-30 1e-30, nor
      0.333333 ``\\frac{1}{3}`` (a rational gold can be written exactly, so an approximation is wrong);
    * a decimal against an irrational (exact) value: equal when the decimal is that value correctly rounded to the
      decimal's written number of decimal places, and the decimal has at least 5 significant digits. Against
      ``\\pi`` = 3.14159265...: "3.14159", "3.1416" and "-3.14159" (for ``-\\pi``) match; "3.14" (3 digits), "3.1415"
      (truncated), "3.1417" and "3.14160" (5 places, where pi rounds to 3.14159) do not; "1.41421" matches
      ``\\sqrt{2}``, "3141.59" and "3141.6" match ``1000\\pi``. Scientific notation counts the places of the value it
      writes ("3.14159e3" has 2); an expression with a decimal in it (``2.5\\pi``) is the exact value it writes;
    * two exact expressions with an irrational value: equal at 50 significant digits (relative 1e-30), so
      ``\\sqrt{8}`` equals ``2\\sqrt{2}`` but ``\\frac{355}{113}`` is not ``\\pi`` and ``e^{-101}`` is not ``e^{-100}``.

    X\\% also equals a bare X (as in math-verify: ``50\\%`` equals both 50 and 0.5). A completion without an answer,
    or a comparison that takes longer than ``timeout_s`` seconds (default ``DEFAULT_TIMEOUT_S``), is False. Safe to
    call from any thread; never raises for bad input (ValueError for an unknown ``answer_extraction``).

    >>> is_correct(r"Half of one is \\boxed{\\frac{1}{2}}", "0.5")
    True
    >>> is_correct([{"role": "assistant", "content": "The answer is 3."}], "#### -3")
    False
    >>> is_correct("The answer is 3.", "see figure") is None
    True
    >>> is_correct(r"\\boxed{\\frac{1}{2^{98}}}", r"\\frac{1}{2^{99}}"), is_correct(r"\\boxed{3.1416}", r"\\pi")
    (False, True)
    >>> is_correct(r"\\boxed{3.14}", r"\\pi"), is_correct(r"\\boxed{3.1415}", r"\\pi")
    (False, False)
    >>> is_correct("The total is 12.", "12"), is_correct("The total is 12.", "12", answer_extraction="flexible")
    (False, True)
    """
    _check_extraction(answer_extraction)
    timeout_s = _timeout(timeout_s)
    value = _gold_value(gold)
    if value is None:
        return None
    status, ok = _bounded("gold_ok", (value,), timeout_s)
    if status != "ok" or not ok:
        return None
    return _answer_matches(
        value, extract_answer(completion_to_text(completion), answer_extraction=answer_extraction), timeout_s
    )


def _answer_matches(gold_value: str, answer: str | None, timeout_s: float) -> bool:
    if answer is None:
        return False
    status, ok = _bounded("verify", (gold_value, answer), timeout_s)
    return status == "ok" and ok is True


def _outcome_rewards(
    name: str, answer_extraction: str, completions: Sequence[Any] | None, answer: Any, kwargs: dict
) -> list[float | None]:
    """The body of ``outcome_reward`` and ``OutcomeReward``; ``name`` is the reward's name in error messages."""
    if answer is None:
        raise ValueError(
            f"{name} needs the gold answers: the dataset must have an `answer` column "
            "(TRL passes dataset columns to reward functions as keyword arguments)."
        )
    if completions is None:
        raise ValueError(f"{name} needs `completions` (one per gold answer).")
    if isinstance(answer, str) or not isinstance(answer, Sequence):
        raise ValueError(f"{name}: `answer` must be a list with one gold per completion, got {type(answer).__name__}.")
    if len(answer) != len(completions):
        raise ValueError(
            f"{name}: got {len(answer)} gold answers for {len(completions)} completions; "
            "the `answer` column must have exactly one entry per completion."
        )
    timeout_s = _timeout(None)
    gold_ok: dict[str, bool] = {}  # one parse per distinct gold per batch (GRPO repeats each gold G times)
    rewards: list[float | None] = []
    no_answer = 0
    for completion, gold in zip(completions, answer, strict=True):
        extracted = extract_answer(completion_to_text(completion), answer_extraction=answer_extraction)
        no_answer += extracted is None
        value = _gold_value(gold)
        if value is not None and value not in gold_ok:
            status, ok = _bounded("gold_ok", (value,), timeout_s)
            gold_ok[value] = status == "ok" and bool(ok)
        if value is None or not gold_ok[value]:
            rewards.append(None)
        else:
            rewards.append(1.0 if _answer_matches(value, extracted, timeout_s) else 0.0)
    log_metric = kwargs.get("log_metric")
    if callable(log_metric) and rewards:
        log_metric(_UNPARSEABLE_METRIC, sum(reward is None for reward in rewards) / len(rewards))
        log_metric(_NO_ANSWER_METRIC.format(mode=answer_extraction), no_answer / len(rewards))
    return check_reward_length(name, rewards, len(completions))


def outcome_reward(
    prompts: Sequence[Any] | None = None,
    completions: Sequence[Any] | None = None,
    completion_ids: Sequence[Any] | None = None,
    *,
    answer: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """TRL reward function: 1.0 when a completion's final answer equals its gold, 0.0 otherwise, None when
    the gold cannot be parsed (so it never earns 1.0). Answers are extracted strictly (``answer_extraction=
    "strict"``: a box, "The answer is ..." or "#### ..."); ``get_outcome_reward("flexible")`` is the lenient one.

    ``answer`` is the dataset's gold column, one string per completion (TRL repeats it per generation).
    When TRL passes ``log_metric``, two fractions of this batch's completions are logged:
    ``outcome/unparseable_gold`` (gold cannot be parsed) and ``outcome/no_answer_strict`` (no answer could be
    extracted). Each check is limited to ``DEFAULT_TIMEOUT_S`` seconds (a timeout is 0.0) and works from any
    thread. Raises ValueError when ``answer`` is missing or its length differs from the number of completions.

    >>> outcome_reward(completions=[r"\\boxed{4}", "The answer is 5", "no idea"], answer=["4", "4", "4"])
    [1.0, 0.0, 0.0]
    """
    return _outcome_rewards("outcome_reward", "strict", completions, answer, kwargs)


class OutcomeReward:
    """``outcome_reward`` for an answer extraction mode (see ``extract_answer``) as a picklable TRL reward function
    whose ``__name__`` is ``outcome_reward_<mode>`` (so TRL logs ``rewards/outcome_reward_flexible/mean``) and whose
    no-answer metric is ``outcome/no_answer_<mode>``. Prefer ``get_outcome_reward``, which gives ``outcome_reward``
    itself for "strict". ``OutcomeReward("strict")`` (the default) is that same reward: named ``outcome_reward``,
    equal to it and hashed like it, so a trainer that looks up its outcome reward by equality finds either.

    >>> reward = OutcomeReward("flexible")
    >>> reward.__name__, reward(completions=["The total is $9{,}500$.", "no idea"], answer=["#### 9,500", "1"])
    ('outcome_reward_flexible', [1.0, 0.0])
    >>> OutcomeReward() == outcome_reward, OutcomeReward().__name__
    (True, 'outcome_reward')
    """

    def __init__(self, answer_extraction: str = "strict") -> None:
        self.answer_extraction = _check_extraction(answer_extraction)
        self.__name__ = "outcome_reward" if answer_extraction == "strict" else f"outcome_reward_{answer_extraction}"

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Any] | None = None,
        *,
        answer: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        return _outcome_rewards(self.__name__, self.answer_extraction, completions, answer, kwargs)

    def __repr__(self) -> str:
        return f"OutcomeReward({self.answer_extraction!r})"

    def __eq__(self, other: object) -> bool:  # stateless: two rewards of one mode are the same reward
        if other is outcome_reward:
            return self.answer_extraction == "strict"
        return isinstance(other, OutcomeReward) and other.answer_extraction == self.answer_extraction

    def __hash__(self) -> int:
        strict = self.answer_extraction == "strict"
        return hash(outcome_reward) if strict else hash((OutcomeReward, self.answer_extraction))


def get_outcome_reward(answer_extraction: str = "strict") -> Callable[..., list[float | None]]:
    """The outcome reward for an answer extraction mode: "strict" gives ``outcome_reward`` itself (same object,
    same name), "flexible" an ``OutcomeReward`` named ``outcome_reward_flexible``. Raises ValueError for another
    mode.

    >>> get_outcome_reward() is outcome_reward, get_outcome_reward("flexible").__name__
    (True, 'outcome_reward_flexible')
    """
    _check_extraction(answer_extraction)
    return outcome_reward if answer_extraction == "strict" else OutcomeReward(answer_extraction)
