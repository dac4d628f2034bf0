"""The arithmetic steps a completion writes, with their character spans (docs/architecture.md "Step oracle").

A written step is an expression with at least one operator, a sign of equality and a result number:

* symbolic: `14 + 7 = 21`, with `+ - − * x × · / ÷` (and LaTeX `\\times \\cdot \\div`), parentheses, and the usual
  precedence (`14 + 7 * 2 = 28`);
* verbal infix: `14 plus 7 is 21`, `14 minus 9 equals 5`, `3 times 4 makes 12`, `3 multiplied by 4 gives 12`,
  `12 divided by 4 is equal to 3` (operators and equality words mix freely: `14 + 7 is 21`);
* verbal prefix: `add 7 to 14 to get 21` (14 + 7), `subtract 9 from 21 to get 12` (21 - 9), `multiply 3 by 4 to
  get 12`, `divide 12 by 4 to get 3`, `the sum of 14 and 7 is 21`, `the product of 3 and 4 is 12`, `the difference
  between 21 and 9 is 12` (21 - 9), `the quotient of 12 and 4 is 3`.

Equality is `=` or one of the words: is, equals, is equal to, makes, gives (us), yields, results in (each also after
"which" and a comma: `14 + 7, which is 21`), to get, and get, we get. `14 and 7 make 21` names no operator and is no
step.

Numbers: digits with an optional decimal part and thousands separators in 3-digit groups only (`1,250`, LaTeX
`9{,}500`; "1,25" is two numbers), an optional `$` in front, and a minus sign attached to the digits (`-3`) where an
operand or a result may stand. A minus followed by a space is an operator (so a markdown bullet `- 14 + 7 = 21` is
the step `14 + 7 = 21`). Values are exact `fractions.Fraction`s, so `7 / 2 = 3.5` holds and `10 / 3 = 3.33` does not.

Decisions (tested in tests/rewards/test_oracle_parse.py):

* **Chains.** `14 + 7 = 21 - 9 = 12` is two steps, `14 + 7 = 21` and `21 - 9 = 12`: the right side of a sign of
  equality is its first number, and an expression never reaches back past an earlier sign of equality. The spans
  of chained steps share the middle number (`21`); step spans are ordered by their ends, which strictly increase.
  A line break ends an expression, so `= 21` and a next line `- 21 - 9 = 12` (a list) do not chain.
* **Combined operations.** `14 + 7 - 9 = 12` is ONE step with operands (14, 7, 9) and operators (+, -); its value
  is the whole expression's. The intermediate 21 it skips is not a written step.
* **No step.** An expression without an operator (`The answer is 12`, `x = 21`), an expression without a result
  (`14 + 7 =`, a completion cut there) and a result in words (`= twenty-one`) are no steps.
* **Cut numbers.** With `truncated=True` (the completion was cut by the token budget, not ended by the model), a
  result that runs to the very end of the text may be cut mid-number (`21 - 9 = 1|2`) and is not a step.
* **Units.** Units between numbers and operators (`14 apples + 7 apples`) are not parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["WrittenStep", "format_number", "parse_numbers", "parse_steps"]

_NUM = r"\$?(?:\d{1,3}(?:(?:,|\{,\})\d{3})+(?!\d)|\d+)(?:\.\d+)?"
_EQ_WORDS = (
    r"(?:which\s+)?(?:is\s+equal\s+to|equals?|is|makes?|gives?(?:\s+us)?|yields?|results?\s+in)|(?:to|and|we)\s+get"
)
_TOKEN = re.compile(
    rf"""(?P<num>{_NUM})
    |(?P<eq>=|(?:,\s*)?\b(?:{_EQ_WORDS})\b)
    |(?P<op>\+|-|−|\*|×|·|/|÷|\\times|\\cdot|\\div|(?<=[\d\s)])x(?=[\s\d($])
        |\b(?:plus|minus|times|multiplied\s+by|divided\s+by)\b)
    |(?P<lp>\\left\(|\()
    |(?P<rp>\\right\)|\))""",
    re.IGNORECASE | re.VERBOSE,
)
_PREFIX = re.compile(
    rf"""\b(?P<verb>add(?:ing)?|subtract(?:ing)?|multiply(?:ing)?|divid(?:e|ing)
        |the\s+sum\s+of|the\s+product\s+of|the\s+difference\s+(?:between|of)|the\s+quotient\s+of)
    \s+(?P<x>-?{_NUM})\s+(?P<prep>to|from|by|and)\s+(?P<y>-?{_NUM})\s*,?\s*
    (?:=|\b(?:{_EQ_WORDS})\b)\s*(?P<c>-?{_NUM})""",
    re.IGNORECASE | re.VERBOSE,
)
# (verb stem, preposition) -> (operator, whether the operands are written in reverse: "add 7 to 14" is 14 + 7)
_PREFIX_FORMS = {
    ("add", "to"): ("+", True),
    ("add", "and"): ("+", False),
    ("sub", "from"): ("-", True),
    ("mul", "by"): ("*", False),
    ("mul", "and"): ("*", False),
    ("div", "by"): ("/", False),
    ("sum", "and"): ("+", False),
    ("product", "and"): ("*", False),
    ("difference", "and"): ("-", False),
    ("quotient", "and"): ("/", False),
}
_MAX_RUN = 40  # tokens an expression may span (bounds the work on a degenerate run such as "1 + 1 + ... + 1 +")
_OP_WORDS = {"plus": "+", "minus": "-", "times": "*", "multiplied by": "*", "divided by": "/"}
_OP_SYMBOLS = {"+": "+", "-": "-", "−": "-", "*": "*", "×": "*", "·": "*", "x": "*", "\\times": "*",
               "\\cdot": "*", "/": "/", "÷": "/", "\\div": "/"}  # fmt: skip


@dataclass(frozen=True)
class WrittenStep:
    """One step as written: `expression = result`, with its character span in the text.

    Attributes:
        span: `(start, end)`, 0-based end-exclusive character offsets: from the expression's first character to the
            result's last (`text[start:end]`, e.g. "14 + 7 = 21" or "add 7 to 14 to get 21").
        operands: the expression's numbers, left to right as the expression reads (the prefix form "add 7 to 14"
            reads 14 + 7: (14, 7)).
        ops: the operators between them, normalised to `+ - * /` (len(ops) == len(operands) - 1 >= 1).
        expression: the normalised expression, e.g. "(14 + 7) - 9".
        value: the expression's exact value; None for a division by zero.
        result: the number written after the sign of equality.
    """

    span: tuple[int, int]
    operands: tuple[Fraction, ...]
    ops: tuple[str, ...]
    expression: str
    value: Fraction | None
    result: Fraction

    @property
    def equation(self) -> str:
        """`"expression = result"`, normalised (`"14 + 7 = 21"`)."""
        return f"{self.expression} = {format_number(self.result)}"


def format_number(value: Fraction) -> str:
    """An exact value as text: `21`, `3.5`, `-0.25`, or `7/3` when no finite decimal is exact.

    >>> format_number(Fraction(21)), format_number(Fraction(7, 2)), format_number(Fraction(7, 3))
    ('21', '3.5', '7/3')
    """
    if value.denominator == 1:
        return str(value.numerator)
    d = value.denominator
    twos = fives = 0
    while d % 2 == 0:
        d, twos = d // 2, twos + 1
    while d % 5 == 0:
        d, fives = d // 5, fives + 1
    if d != 1:
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)
    scaled = abs(value.numerator) * 10**places // value.denominator
    digits = str(scaled).rjust(places + 1, "0")
    return f"{'-' if value < 0 else ''}{digits[:-places]}.{digits[-places:]}"


def _number(token: str) -> Fraction:
    return Fraction(token.replace("$", "").replace("{,}", "").replace(",", ""))


def parse_numbers(text: str) -> list[Fraction]:
    """Every number written in `text` (as in a written step: thousands groups, decimals, an attached minus).

    >>> [format_number(v) for v in parse_numbers("Tom had $1,250 and -3 pens, then 2.5 more (not 1,25).")]
    ['1250', '-3', '2.5', '1', '25']
    """
    values = []
    for match in re.finditer(rf"-?{_NUM}", text):
        token = match.group()
        negative = token.startswith("-") and (match.start() == 0 or not text[match.start() - 1].isalnum())
        values.append(_number(token.lstrip("-")) * (-1 if negative else 1))
    return values


@dataclass(frozen=True)
class _Tok:
    kind: str  # num, eq, op, lp, rp, other
    text: str
    start: int
    end: int


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    for match in _TOKEN.finditer(text):
        if text[pos : match.start()].strip() or "\n" in text[pos : match.start()]:  # a line break ends an expression
            toks.append(_Tok("other", text[pos : match.start()], pos, match.start()))
        kind = match.lastgroup or "other"
        toks.append(_Tok(kind, match.group(), match.start(), match.end()))
        pos = match.end()
    if text[pos:].strip():
        toks.append(_Tok("other", text[pos:], pos, len(text)))
    return toks


def _op_symbol(tok: _Tok) -> str:
    word = " ".join(tok.text.lower().split())
    return _OP_WORDS.get(word) or _OP_SYMBOLS[tok.text if tok.text in _OP_SYMBOLS else word]


def _apply(a: Fraction | None, op: str, b: Fraction | None) -> Fraction | None:
    """`a op b` exactly; None for a division by zero (or an operand that is already None)."""
    if a is None or b is None or (op == "/" and b == 0):
        return None
    return {"+": a + b, "-": a - b, "*": a * b}[op] if op != "/" else a / b


class _Expression:
    """Recursive descent over a run of tokens: expr := term (+|- term)*, term := factor (*|/ factor)*,
    factor := number | attached-minus number | ( expr )."""

    def __init__(self, toks: list[_Tok]):
        self.toks, self.i = toks, 0
        self.operands: list[Fraction] = []
        self.ops: list[str] = []

    def parse(self) -> tuple[Fraction | None, str] | None:
        out = self._expr()
        return out if out is not None and self.i == len(self.toks) else None

    def _peek_op(self, symbols: str) -> str | None:
        if self.i < len(self.toks) and self.toks[self.i].kind == "op":
            symbol = _op_symbol(self.toks[self.i])
            if symbol in symbols:
                return symbol
        return None

    def _binary(self, symbols: str, operand) -> tuple[Fraction | None, str] | None:
        left = operand()
        while left is not None and (symbol := self._peek_op(symbols)) is not None:
            self.i += 1
            self.ops.append(symbol)
            right = operand()
            if right is None:
                return None
            left = (_apply(left[0], symbol, right[0]), f"{left[1]} {symbol} {right[1]}")
        return left

    def _expr(self):
        return self._binary("+-", self._term)

    def _term(self):
        return self._binary("*/", self._factor)

    def _factor(self):
        if self.i >= len(self.toks):
            return None
        tok = self.toks[self.i]
        if tok.kind == "num":
            self.i += 1
            self.operands.append(_number(tok.text))
            return self.operands[-1], format_number(self.operands[-1])
        nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
        if tok.kind == "op" and tok.text in "-−" and nxt is not None and nxt.kind == "num" and tok.end == nxt.start:
            self.i += 2
            self.operands.append(-_number(nxt.text))
            return self.operands[-1], format_number(self.operands[-1])
        if tok.kind == "lp":
            self.i += 1
            inner = self._expr()
            if inner is None or self.i >= len(self.toks) or self.toks[self.i].kind != "rp":
                return None
            self.i += 1
            return inner[0], f"({inner[1]})"
        return None


def _result_at(toks: list[_Tok], j: int) -> tuple[Fraction, int] | None:
    """The number at token j (an attached minus allowed) and its end offset."""
    if j < len(toks) and toks[j].kind == "num":
        return _number(toks[j].text), toks[j].end
    if j + 1 < len(toks) and toks[j].kind == "op" and toks[j].text in "-−" and toks[j + 1].kind == "num":
        if toks[j].end == toks[j + 1].start:
            return -_number(toks[j + 1].text), toks[j + 1].end
    return None


def _infix_steps(text: str, toks: list[_Tok]) -> list[WrittenStep]:
    steps = []
    for i, tok in enumerate(toks):
        if tok.kind != "eq":
            continue
        found = _result_at(toks, i + 1)
        if found is None:
            continue
        result, end = found
        first = i
        while first > max(0, i - _MAX_RUN) and toks[first - 1].kind in ("num", "op", "lp", "rp"):
            first -= 1
        for s in range(first, i):  # the longest run ending at the sign that parses (trims "**", "1)", "- " bullets)
            parser = _Expression(toks[s:i])
            parsed = parser.parse()
            if parsed is not None and parser.ops:
                span = (toks[s].start, end)
                steps.append(WrittenStep(span, tuple(parser.operands), tuple(parser.ops), parsed[1], parsed[0], result))
                break
    return steps


def _prefix_steps(text: str) -> list[WrittenStep]:
    steps = []
    for match in _PREFIX.finditer(text):
        verb = match.group("verb").lower().split()
        stem = verb[1] if verb[0] == "the" else verb[0][:3]  # add(ing), sub(tract), mul(tiply), div(ide)
        form = _PREFIX_FORMS.get((stem, match.group("prep").lower()))
        if form is None:
            continue
        op, reverse = form
        x, y = (parse_numbers(match.group(g))[0] for g in ("x", "y"))
        a, b = (y, x) if reverse else (x, y)
        value = _apply(a, op, b)
        expression = f"{format_number(a)} {op} {format_number(b)}"
        result = parse_numbers(match.group("c"))[0]
        steps.append(WrittenStep((match.start(), match.end()), (a, b), (op,), expression, value, result))
    return steps


def parse_steps(text: str, *, truncated: bool = False) -> list[WrittenStep]:
    """The steps written in `text`, in order (see the module docstring for the forms and decisions).

    Args:
        text: a completion (any string; never raises on malformed or cut text).
        truncated: the text was cut by a token budget, so a result touching its very end may be cut mid-number and
            is dropped.

    Returns:
        The steps ordered by span end; ends strictly increase (where a prefix form and a symbolic step end on the
        same number, the symbolic one is kept).

    >>> [s.equation for s in parse_steps("14 + 7 = 21 - 9 = 12. Then add 2 to 12 to get 14. The answer is 14.")]
    ['14 + 7 = 21', '21 - 9 = 12', '12 + 2 = 14']
    >>> [s.equation for s in parse_steps("14 plus 7 is 21, and 21 - 9 = 1", truncated=True)]
    ['14 + 7 = 21']
    """
    steps = _infix_steps(text, _tokenize(text))
    ends = {s.span[1] for s in steps}
    steps += [s for s in _prefix_steps(text) if s.span[1] not in ends]
    steps.sort(key=lambda s: (s.span[1], s.span[0]))
    if truncated:
        steps = [s for s in steps if s.span[1] < len(text)]
    return steps
