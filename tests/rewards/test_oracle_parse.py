"""The steps a completion writes (`procrl.rewards.oracle.parse`): forms, chains, combined steps, numbers, spans, cut
and malformed text."""

import random
from fractions import Fraction

import pytest

from procrl.rewards.oracle.parse import format_number, parse_numbers, parse_steps


def _equations(text, **kwargs):
    return [s.equation for s in parse_steps(text, **kwargs)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("14 + 7 = 21", ["14 + 7 = 21"]),
        ("14+7=21", ["14 + 7 = 21"]),
        ("21 - 9 = 12, 21 − 9 = 12", ["21 - 9 = 12", "21 - 9 = 12"]),  # ASCII and U+2212 minus
        ("3 * 4 = 12; 3 x 4 = 12; 3x4=12; 3 × 4 = 12; 3 · 4 = 12", ["3 * 4 = 12"] * 5),
        ("$3 \\times 4 = 12$ and $12 \\div 4 = 3$", ["3 * 4 = 12", "12 / 4 = 3"]),
        ("12 / 4 = 3 and 12 ÷ 4 = 3", ["12 / 4 = 3", "12 / 4 = 3"]),
        # verbal infix, mixed with symbols
        ("14 plus 7 is 21. 21 minus 9 equals 12.", ["14 + 7 = 21", "21 - 9 = 12"]),
        ("3 times 4 makes 12, 3 multiplied by 4 gives 12, 12 divided by 4 is equal to 3",
         ["3 * 4 = 12", "3 * 4 = 12", "12 / 4 = 3"]),
        ("14 + 7 is 21, so 21 - 9 gives us 12", ["14 + 7 = 21", "21 - 9 = 12"]),
        ("14 + 7, which is 21; 21 - 9 which gives 12", ["14 + 7 = 21", "21 - 9 = 12"]),
        # verbal prefix: the operands in the order the operation reads
        ("Add 7 to 14 to get 21. Then subtract 9 from 21 to get 12.", ["14 + 7 = 21", "21 - 9 = 12"]),
        ("Multiplying 3 by 4 gives 12; divide 12 by 4 and get 3.", ["3 * 4 = 12", "12 / 4 = 3"]),
        ("The sum of 14 and 7 is 21. The difference between 21 and 9 is 12. The product of 3 and 4 is 12. "
         "The quotient of 12 and 4 is 3.", ["14 + 7 = 21", "21 - 9 = 12", "3 * 4 = 12", "12 / 4 = 3"]),
        # chains: the first number after '=' is the result, and the next step starts from it
        ("14 + 7 = 21 - 9 = 12", ["14 + 7 = 21", "21 - 9 = 12"]),
        ("14 + 7 = 21 = 21", ["14 + 7 = 21"]),
        # combined operations: one step, usual precedence, parentheses
        ("14 + 7 - 9 = 12", ["14 + 7 - 9 = 12"]),
        ("14 + 7 * 2 = 28", ["14 + 7 * 2 = 28"]),
        ("(14 + 7) * 2 = 42", ["(14 + 7) * 2 = 42"]),
        # list markers, markdown, step labels are not operands
        ("- 14 + 7 = 21\n- 21 - 9 = 12", ["14 + 7 = 21", "21 - 9 = 12"]),
        ("**14 + 7 = 21**", ["14 + 7 = 21"]),
        ("1) 14 + 7 = 21\n2. 21 - 9 = 12\nStep 3: 12 * 2 = 24", ["14 + 7 = 21", "21 - 9 = 12", "12 * 2 = 24"]),
        # numbers: thousands groups, decimals, currency, attached minus
        ("$1,250 + $250 = $1,500 and 9{,}500 - 500 = 9{,}000", ["1250 + 250 = 1500", "9500 - 500 = 9000"]),
        ("7 / 2 = 3.5 and 0.5 * 4 = 2", ["7 / 2 = 3.5", "0.5 * 4 = 2"]),
        ("2 - 5 = -3, -3 + 10 = 7, 5 - -3 = 8", ["2 - 5 = -3", "-3 + 10 = 7", "5 - -3 = 8"]),
        # no step: no operator, no result, the answer sentence
        ("The answer is 12.", []),
        ("x = 21 and y = 12", []),
        ("14 + 7 =", []),
        ("14 + 7 = twenty-one", []),
        ("He has 14 apples and 7 pears.", []),
        ("14 and 7 make 21", []),  # no operator named
        ("", []),
    ],
)  # fmt: skip
def test_written_forms(text, expected):
    assert _equations(text) == expected


def test_steps_keep_their_spans_and_order():
    text = "First, 14 plus 7 is 21. Then 21 - 9 = 12 - 2 = 10. Add 2 to 10 to get 12."
    steps = parse_steps(text)
    assert [text[s.span[0] : s.span[1]] for s in steps] == [
        "14 plus 7 is 21", "21 - 9 = 12", "12 - 2 = 10", "Add 2 to 10 to get 12"
    ]  # fmt: skip
    ends = [s.span[1] for s in steps]
    assert ends == sorted(set(ends))
    # chained steps share the middle number
    assert steps[1].span[1] > steps[2].span[0]


def test_values_are_exact():
    steps = parse_steps("10 / 3 = 3.33. 10 / 4 = 2.5. 5 / 0 = 0. 2 * 3 + 4 = 10.")
    assert [s.value for s in steps] == [Fraction(10, 3), Fraction(5, 2), None, Fraction(10)]
    assert [s.result for s in steps] == [Fraction(333, 100), Fraction(5, 2), Fraction(0), Fraction(10)]
    assert steps[3].operands == (2, 3, 4) and steps[3].ops == ("*", "+")


def test_a_cut_result_is_dropped_only_when_the_completion_was_cut():
    text = "14 + 7 = 21. 21 - 9 = 1"
    assert _equations(text, truncated=True) == ["14 + 7 = 21"]
    assert _equations(text) == ["14 + 7 = 21", "21 - 9 = 1"]
    assert _equations("14 + 7 = 21", truncated=True) == []
    assert _equations("14 + 7 = 21.", truncated=True) == ["14 + 7 = 21"]
    for cut in range(len(text) + 1):  # every cut point: no error, and never a step past the cut
        assert all(s.span[1] <= cut for s in parse_steps(text[:cut], truncated=True))


def test_numbers_and_their_format():
    assert parse_numbers("14 apples, 1,250 pens, -3 degrees, 2.5 kg, 9{,}500, 1,25 and 14-7") == [
        14, 1250, -3, Fraction(5, 2), 9500, 1, 25, 14, 7
    ]  # fmt: skip
    assert [format_number(Fraction(x)) for x in ("-1/4", "1/3", "12", "-7", "1/8")] == ["-0.25", "1/3", "12", "-7",
                                                                                         "0.125"]  # fmt: skip


def test_random_text_never_raises():
    rng = random.Random(0)
    alphabet = list("0123456789 +-*/x×÷=().,$\n") + ["plus ", "is ", "times ", "add ", " to ", " get ", "\\times"]
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        for step in parse_steps(text, truncated=rng.random() < 0.5):
            assert 0 <= step.span[0] < step.span[1] <= len(text) and len(step.ops) == len(step.operands) - 1 >= 1
