"""Answer extraction and answer values (part of `procrl.rewards.outcome`, docs/architecture.md "Outcome checking"):
the final answer of a completion, and the value handed to math-verify, found with plain regular expressions (linear
time on the capped inputs).

Extraction: the last ``\\boxed{...}``/``\\fbox{...}`` (or brace-less ``\\boxed 2``), else the last "The answer is
...", else the text after the last ``####`` (anywhere in a line), else None: ``answer_extraction="strict"``, the
default. ``"flexible"`` adds the last number of the final sentence, unless it is part of an expression, hedged or a
cut-off list marker. Only the last ``TAIL_CHARS`` (4,000) characters of a completion are searched.

Values: an extracted answer or a gold value becomes the string handed to math-verify: a canonical number ("-1250",
"50\\%", "1\\times10^{-30}": sign, ``$``, thousands separators only in 3-digit groups, trailing period), else the
prepared LaTeX text; None when empty or longer than ``MAX_ANSWER_CHARS`` characters. ``_is_prose`` tells words
("see figure", "N/A") from math.
"""

from __future__ import annotations

import re

__all__ = ["ANSWER_EXTRACTION_MODES", "MAX_ANSWER_CHARS", "TAIL_CHARS", "extract_answer"]

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


#: Only the last TAIL_CHARS characters of a completion are searched for its final answer.
TAIL_CHARS: int = 4_000

#: How ``extract_answer`` finds the final answer of a completion: "strict" (an explicit marker: a box,
#: "The answer is ..." or "#### ...") or "flexible" (also the last number of the final sentence).
ANSWER_EXTRACTION_MODES: tuple[str, ...] = ("strict", "flexible")

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*")
# A brace-less box (``\boxed 2``, ``\boxed \frac12``) holds everything up to the end of its math span or line, as
# in the MATH data set's reference code (``last_boxed_only_string``: ``split("$")[0]``).
_BRACELESS_END = re.compile(r"\$|\\\]|\\\)|\n")
# ... and starts like math: a digit, a sign, a command or a lone letter ("\boxed x = 5"); "\boxed. The answer is 7",
# "\boxed notation" and prose contents are mentions of the command, not boxes.
_BRACELESS_START = re.compile(r"[-+]?[ \t]*(?:\d|\.\d|\\[A-Za-z]|[A-Za-z](?![A-Za-z]))")
_ANSWER_IS = re.compile(r"\bthe\s+(?:final\s+)?answer\s+is\s*:?[ \t]*", re.IGNORECASE)
_HASHES = re.compile(r"(?<!#)####(?!#)[ \t]*(.*)$", re.MULTILINE)  # anywhere in a line: "Adding up: #### 1,000"
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
