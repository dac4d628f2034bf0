"""Answer values normalised for math-verify (part of `procrl.rewards.outcome`): pure regular expressions, linear
time on the capped inputs.

An extracted answer or a gold value becomes the string handed to math-verify: a canonical number ("-1250",
"50\\%", "1\\times10^{-30}": sign, ``$``, thousands separators only in 3-digit groups, trailing period), else the
prepared LaTeX text; None when empty or longer than ``MAX_ANSWER_CHARS`` characters. ``_is_prose`` tells words
("see figure", "N/A") from math.
"""

from __future__ import annotations

import re

#: An extracted answer (or gold value) longer than this many characters is treated as absent/unparseable.
MAX_ANSWER_CHARS: int = 1_000

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# A number: optional sign, optional currency, digits with thousands separators ("," or LaTeX's "{,}") in 3-digit
# groups only (or none), optional decimals, an optional exponent ("1e-30"), optional percent. The lookahead forbids
# stopping inside a longer number, so "1,25" and "12,345,67" are not numbers at all (rather than 1 or 12,345).
_NUMBER_BODY = (
    r"(?P<num>\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?:[eE](?P<exp>[-+]?\d+))?"
    r"(?!\d|[.,]\d|\{,\}\d)(?P<pct>[ \t]*\\?%)?"
)
_NUMBER = re.compile(r"(?P<sign>[-+]?)[ \t]*(?:\\?\$)?[ \t]*(?P<sign2>[-+]?)" + _NUMBER_BODY)
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


def _is_prose(value: str) -> bool:
    """True for a value that is words rather than math ("see figure", "N/A"); ``\\text{...}`` is allowed."""
    if value.strip().lower() in _NON_ANSWERS:
        return True
    stripped = _LATEX_COMMAND.sub(" ", _TEXT_GROUP.sub(" ", value))
    return any(len(word) >= 3 and word.lower() not in _MATH_WORDS for word in _WORD.findall(stripped))
