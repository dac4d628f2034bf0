"""math-verify operations (part of `procrl.rewards.outcome`): the only code that runs sympy, always under a time
limit (`procrl.rewards.outcome.deadline` runs them, by name, from ``_OPS``).

Both sides go through math-verify (``parse`` with ``LatexExtractionConfig`` on ``\\boxed{<answer>}``, then
``verify(gold, answer)``); we never compare symbolically ourselves. Two numbers (also inside tuples, finite sets and
intervals) are compared here instead, because math-verify's numeric comparison has absolute tolerances (it pays
1/2^98 for 1/2^99): exactly when both are rational, a decimal against an irrational value by correct rounding, two
exact values relatively at 50 digits (the rules are in ``procrl.rewards.outcome.is_correct``). math-verify's own
timeouts are always disabled (see `procrl.rewards.outcome.deadline` for why).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from math_verify import LatexExtractionConfig, parse, verify
from sympy import (
    Basic,
    Eq,
    Expr,
    FiniteSet,
    Float,
    Integer,
    Interval,
    MatrixBase,
    Mul,
    N,
    Number,
    Pow,
    Rational,
    Tuple,
    UnevaluatedExpr,
    floor,
    nan,
    zoo,
)

from procrl.utils import get_logger

logger = get_logger("rewards.outcome")


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that its timeouts are off; they are off on purpose (we bound the work)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())


def _mv_parse(value: str) -> list:
    config = [LatexExtractionConfig(boxed_match_priority=0)]
    return parse("\\boxed{" + value + "}", extraction_config=config, parsing_timeout=None)


@functools.lru_cache(maxsize=4096)
def _parsed_gold(value: str) -> tuple | None:
    """math-verify's parse of a gold value (a tuple, for the cache); None when it yields no sympy object."""
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
    if isinstance(expr, Mul) and len(expr.args) == 2 and expr.args[1] == UnevaluatedExpr(Rational(1, 100)):
        return expr.args[0]
    return None


def _exact_number(expr: Any) -> Any:
    """The exact value of a finite closed-form number, else None. A decimal is the rational number it writes
    (0.333333 = 333333/10^6): math-verify's Floats become Rationals of their digits."""
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
    if isinstance(expr, Eq):
        return [expr]
    args = getattr(expr, "_unsorted_args", None)  # latex2sympy's And keeps the written order
    if type(expr).__name__ == "And" and args and all(isinstance(arg, Eq) for arg in args):
        return list(args)
    return None


def _sorted_numbers(items: Sequence[Any]) -> list | None:
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
