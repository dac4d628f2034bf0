"""Gold parsing and answer checking (part of `procrl.rewards.outcome`): ``parse_gold`` and ``is_correct``.

``parse_gold`` reads a gold answer: GSM8K solutions (``#### N``, ``<<48/2=24>>`` annotations ignored), plain
numbers, MATH-style LaTeX. Prose golds ("see figure", "N/A") are unparseable, never reward 1.0. ``is_correct``
extracts the completion's answer (`procrl.rewards.outcome.extract`) and compares it with math-verify
(`procrl.rewards.outcome.compare`), within a time limit (`procrl.rewards.outcome.deadline`).
"""

from __future__ import annotations

import re
from typing import Any

from procrl.rewards.outcome import deadline
from procrl.rewards.outcome.extract import _check_extraction, _last_box, extract_answer
from procrl.rewards.outcome.normalize import _clean, _is_prose, _value
from procrl.utils import completion_to_text

__all__ = ["is_correct", "parse_gold"]

_CALCULATOR = re.compile(r"<<[^<>\n]*>>")


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
    status, parsed = deadline._bounded("parse_gold", (value,), deadline._timeout(timeout_s))
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
    timeout_s = deadline._timeout(timeout_s)
    value = _gold_value(gold)
    if value is None:
        return None
    status, ok = deadline._bounded("gold_ok", (value,), timeout_s)
    if status != "ok" or not ok:
        return None
    return _answer_matches(
        value, extract_answer(completion_to_text(completion), answer_extraction=answer_extraction), timeout_s
    )


def _answer_matches(gold_value: str, answer: str | None, timeout_s: float) -> bool:
    if answer is None:
        return False
    status, ok = deadline._bounded("verify", (gold_value, answer), timeout_s)
    return status == "ok" and ok is True
