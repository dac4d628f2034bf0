"""Tests for procrl.rewards.outcome: answer extraction, gold parsing, math-verify comparison, time limits that
also hold outside the main thread, and the TRL reward-function contract (docs/architecture.md "Outcome checking")."""

from __future__ import annotations

import doctest
import os
import pickle
import signal
import subprocess
import threading
import time

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import procrl.rewards.outcome as outcome_module
from procrl.rewards.outcome import (
    OutcomeReward,
    compare,
    deadline,
    extract_answer,
    get_outcome_reward,
    is_correct,
    outcome_reward,
    parse_gold,
)
from procrl.rewards.outcome import extract as extract_module
from procrl.rewards.outcome import verify as verify_module

# A short GSM8K-style solution: the calculator annotations hold intermediate values (24, 72), the answer is 72.
NATALIA = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n"
    "#### 72"
)
FILLER_400 = "filler " * 57 + "x"  # 400 characters
assert len(FILLER_400) == 400
# sympy evaluates 10^(10^10) as an exact big-integer power in C: effectively endless, and it holds the GIL.
PATHOLOGICAL = r"So the answer is \boxed{10^{10^{10}}}"
# The package and its modules, one job each (their doctests run in test_docstring_examples).
OUTCOME_MODULES = [outcome_module, extract_module, compare, deadline, verify_module]


@pytest.fixture(scope="module", autouse=True)
def _close_worker_processes():
    yield
    deadline._close_workers()


@pytest.fixture(scope="module", autouse=True)
def _generous_default_budget():
    # A valid check takes milliseconds, but the default budget (3 s) is wall-clock time: on a heavily loaded machine
    # a valid check must never run out of it and flip its result. Tests of the time limit pass their own budget.
    default = outcome_module.DEFAULT_TIMEOUT_S
    outcome_module.DEFAULT_TIMEOUT_S = 60.0
    yield
    outcome_module.DEFAULT_TIMEOUT_S = default


# ----------------------------------------------------------------------------------------------------------
# extract_answer: (completion text, expected extracted answer)
# ----------------------------------------------------------------------------------------------------------

EXTRACT_CASES = [
    # a boxed fraction comes back as its LaTeX content
    (r"Half of one is \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
    # the last box wins over an earlier one
    (r"First try \boxed{3}. On reflection \boxed{5}.", "5"),
    # \fbox counts as a box
    (r"\fbox{7}", "7"),
    # nested braces inside the box are kept whole
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}"),
    # escaped braces do not close the box
    (r"\boxed{\{1,2\}}", r"\{1,2\}"),
    # a truncated last box is no answer (not "3", not an earlier box)
    (r"\boxed{2} then \boxed{3", None),
    # "The answer is" with a signed number
    ("Therefore the answer is -3", "-3"),
    # a trailing period is not part of the number
    ("The answer is 12.", "12"),
    # "the answer is:" with currency, thousands separators and decimals
    ("So the answer is: $1,250.00", "1250.00"),
    # thousands separators only in 3-digit groups: "1,25" is not the number 125 (nor 1)
    ("The answer is 1,25", "1,25"),
    # several 3-digit groups
    ("The answer is 1,250,000.", "1250000"),
    # units and an explanation after the number are dropped
    ("The answer is 12 apples because 5 + 7 = 12.", "12"),
    # a hedge is not a number answer
    ("The answer is 3 or 5", "3 or 5"),
    # LaTeX in inline math after "The answer is"
    (r"The answer is $\frac{1}{2}$.", r"\frac{1}{2}"),
    # LaTeX without delimiters runs to the end of the clause
    (r"The final answer is x = \frac{1}{2}, so we are done", r"x = \frac{1}{2}"),
    # the answer on the line after "The answer is", in display math
    ("The answer is\n\n$$\\frac{3}{4}$$", r"\frac{3}{4}"),
    # markdown bold around the number
    ("The answer is **42**", "42"),
    # a percent sign is kept as LaTeX \%
    ("The answer is 50%.", r"50\%"),
    # plain "pi" becomes \pi so math-verify does not read p*i
    ("The answer is pi/2", r"\pi/2"),
    # the last "The answer is" wins
    ("The answer is 4. Wait, no: the answer is 5.", "5"),
    # a box wins over "The answer is"
    (r"\boxed{8} ... the answer is 9", "8"),
    # GSM8K-style #### line
    ("Adding up gives 1,250.\n#### 1,250", "1250"),
    # #### in the middle of a line, as GSM8K-style models write it: "1,000" is 1000
    ("Adding up: #### 1,000", "1000"),
    # five hashes (a markdown heading) are not the #### marker
    ("##### 5", None),
    # MATH's brace-less box: \boxed 2 holds the text up to the closing $
    (r"so the result is $\boxed 2$.", "2"),
    # a brace-less box holding a command: up to the closing $, kept as LaTeX
    (r"$\boxed \frac12$", r"\frac12"),
    # LaTeX's thousands separator {,} in 3-digit groups: 9{,}500 is 9500
    (r"\boxed{9{,}500}", "9500"),
    # an exponent: math-verify alone reads "1e-30" as e - 30 (Euler's number), so it becomes 1 x 10^-30
    ("The answer is 1e-30", r"1\times10^{-30}"),
    # strict mode: a number without an answer marker is no answer
    ("The total is $9{,}500$.", None),
    # "####" after "The answer is": the value after ####, not the text "#### 72"
    ("The answer is: #### 72", "72"),
    # ... on the next line (the line after the phrase is empty, so the next non-empty one counts)
    ("The answer is:\n#### 72", "72"),
    # ... and after a number on the same line: the #### value, not "72 #### 72"
    ("The answer is 72 #### 72", "72"),
    # a prose mention of \boxed (followed by ".") is no box: the later "The answer is 7" applies
    (r"I'll write it in \boxed. The answer is 7", "7"),
    # \boxed followed by a word is a mention, not a box holding "notation"
    (r"Use \boxed notation. The answer is 7", "7"),
    # \boxedtext is another command, not \boxed
    (r"\boxedtext{3}. The answer is 7", "7"),
    # a brace-less box holding prose is no box either
    (r"\boxed (in the end). The answer is 7", "7"),
    # a mention after a real box: the real box is the last box
    (r"\boxed{3}, as the \boxed. command shows", "3"),
    # a brace-less box starting with a lone letter is a box: "x = 5"
    (r"\boxed x = 5", "x = 5"),
    # no "last number anywhere" fallback
    ("I computed 6 * 7 = 42", None),
    # control characters and ANSI escapes are ignored
    ("\x00\x1b[31mThe answer is 7\x1b[0m\x07", "7"),
    # empty text
    ("", None),
]


@pytest.mark.parametrize(("text", "expected"), EXTRACT_CASES)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


# answer_extraction="flexible": (completion text, expected extracted answer)
FLEXIBLE_EXTRACT_CASES = [
    # the last number of the final sentence; 9{,}500 is LaTeX for 9,500
    ("The total is $9{,}500$.", "9500"),
    # the last number of the final sentence is 7, not the earlier 3 and 4
    ("We have 3 apples and 4 pears, so 7 fruits in all.", "7"),
    # plain thousands separator and a unit after the number
    ("In total she pays 9,500 dollars", "9500"),
    # thousands separators only in 3-digit groups: "1,25" is no number (not 1, not 25, not 125)
    ("The total is 1,25.", None),
    # only the final sentence counts: it has no number
    ("The total is 12. Hope this helps!", None),
    # an exponent is not a number of the sentence: 5, not 2
    ("The area is 5 m^{2}.", "5"),
    # LaTeX arguments hold no number here: nothing in \frac{1}{2}
    (r"The total is $\frac{1}{2}$.", None),
    # a sign is kept
    ("Adding up gives -3.", "-3"),
    # the explicit markers still come first: the box, not the final 4
    (r"\boxed{3}. Then 4.", "3"),
    # empty text
    ("", None),
    # --- the last number must stand alone; else None, never a piece of something else ---
    # a simple fraction is read whole: 3/4, not its denominator 4
    ("Thus 3/4 of them.", r"\frac{3}{4}"),
    # ... with its sign: -1/2
    ("It is -1/2.", r"-\frac{1}{2}"),
    # a hedge between two values (as strict mode's "3 or 5"): neither 1/2 nor 2
    ("It is 0.5 or 1/2.", None),
    # ... between two integers: not 6
    ("Answer: 5 or 6", None),
    # ... a hedge word after the number: not 6
    ("He needs 6 or more.", None),
    # an operand of a subtraction: not 3
    ("The result is 10 - 3.", None),
    # ... also written "10 -3" (a minus right after a number is binary, not a sign)
    ("The result is 10 -3.", None),
    # ... of a multiplication, spaced or tight, with a number or a variable: not 4, not 6
    ("So 3 * 4.", None),
    # ... tight with a variable
    ("The total is 6*x.", None),
    # ... LaTeX \times inside math
    (r"So $3 \times 4$.", None),
    # an operator after the number: 7 is the left operand of "+ x"
    ("The sum is 3 + 4 = 7 + x.", None),
    # the value after a final "=" is the result, not an operand: 42 (an existing flexible reward row)
    ("I computed 6 * 7 = 42", "42"),
    # a mixed number "1 1/2" is not 1/2 (a number right after another number)
    ("She needs 1 1/2 cups.", None),
    # a hyphenated unit: 5 is part of "5-gallon", not the answer
    ("He buys 3 5-gallon buckets", None),
    # a date-like 3/4/2023: 2023 follows "/", and 4/2023 is not a simple fraction
    ("She bought it on 3/4/2023", None),
    # markdown emphasis is not multiplication: 42
    ("Total is *42* apples", "42"),
    # ... bold: 42
    ("Total is **42**.", "42"),
    # a completion cut off after a list marker: "2." is the next item's number, not the answer 2
    ("1. Compute 3+4=7.\n2.", None),
    # ... or after a "Step N" heading: not 3
    ("We add them.\n\n**Step 3", None),
    # ... a heading with a title: not 2
    ("## Step 2: Compute the total", None),
    # a number in parentheses after another number is ambiguous (an aside? the answer?): None, neither 12 nor 2023
    ("12 (2023 prices).", None),
    # parentheses without an earlier number: 42
    ("The count is (42).", "42"),
]


@pytest.mark.parametrize(("text", "expected"), FLEXIBLE_EXTRACT_CASES)
def test_extract_answer_flexible(text, expected):
    assert extract_answer(text, answer_extraction="flexible") == expected


def test_unknown_extraction_mode_is_rejected():
    for call in (
        lambda: extract_answer("x", answer_extraction="loose"),
        lambda: is_correct("x", "1", answer_extraction="loose"),
        lambda: get_outcome_reward("loose"),
    ):
        with pytest.raises(ValueError, match="strict"):
            call()


def test_extract_answer_searches_only_the_tail():
    # a box 100,000 characters before the end is outside the 4,000-character window; one at the end is found
    assert extract_answer(r"\boxed{3}" + "x" * 100_000) is None
    assert extract_answer("x" * 100_000 + r"\boxed{3}") == "3"


# ----------------------------------------------------------------------------------------------------------
# parse_gold: (gold, expected numeric value of the first parsed item, or None when unparseable)
# ----------------------------------------------------------------------------------------------------------

GOLD_CASES = [
    # GSM8K solution: calculator annotations (24, 72) are ignored, the #### value is the answer
    (NATALIA, 72),
    # the sign after #### is kept
    ("#### -3", -3),
    # currency, thousands separator and decimals after ####
    ("#### $1,250.00", 1250),
    # 400 characters of filler on the lines after "#### 42"
    ("#### 42\n" + FILLER_400, 42),
    # 400 characters of filler on the same line after "#### 42"
    ("#### 42 " + FILLER_400, 42),
    # plain integer
    ("27", 27),
    # plain decimal
    ("27.0", 27),
    # MATH-style fraction
    (r"\frac{1}{2}", 0.5),
    # MATH-style percent: 50% = 0.5
    (r"50\%", 0.5),
    # \dfrac with pi
    (r"\dfrac{\pi}{2}", float(sympy.pi / 2)),
    # a number inside \text (math-verify alone makes it the symbol "13")
    (r"\text{13}", 13),
    # a full MATH solution: its last box is the answer
    (r"We get $x=2$, so the sum is \boxed{5}.", 5),
    # prose: unparseable (math-verify alone would read it as a product of symbols s*e*e*f*i*g*u*r*e)
    ("see figure", None),
    # a placeholder
    ("N/A", None),
    # empty
    ("", None),
    # whitespace only
    ("   \n", None),
    # not a string
    (None, None),
    # "####" with nothing after it
    ("Some text\n####", None),
    # MATH training solution with a brace-less box: the same gold as \boxed{2} (it used to be unparseable)
    (r"The sum is $\boxed 2$.", 2),
    # a brace-less box holding \frac12 = 1/2
    (r"so $\boxed \frac12$", 0.5),
    # scientific notation is a number (1 x 10^-30), not e - 30
    ("1e-30", 1e-30),
]


@pytest.mark.parametrize(("gold", "expected"), GOLD_CASES)
def test_parse_gold(gold, expected):
    parsed = parse_gold(gold)
    if expected is None:
        assert parsed is None
    else:
        assert isinstance(parsed, list) and parsed
        assert float(sympy.N(parsed[0].doit())) == pytest.approx(expected)


# ----------------------------------------------------------------------------------------------------------
# is_correct / outcome_reward: (completion, gold, expected reward)
# ----------------------------------------------------------------------------------------------------------

REWARD_CASES = [
    # numbers compare as numbers: 1/2 == 0.5
    (r"Half of one is \boxed{\frac{1}{2}}", "0.5", 1.0),
    # the last box wins: 5 is the answer, not 3
    (r"Maybe \boxed{3} ... no, \boxed{5}", "3", 0.0),
    # \fbox answer
    (r"\fbox{7}", "7", 1.0),
    # a truncated box is no answer, even though it starts with the right digit
    (r"The result is \boxed{3", "3", 0.0),
    # GSM8K gold keeps its sign
    ("The answer is -3", "#### -3", 1.0),
    # ... so a positive 3 is wrong
    ("The answer is 3", "#### -3", 0.0),
    # GSM8K gold with currency and separators vs a plain number
    ("The answer is 1250", "#### $1,250.00", 1.0),
    # ... and vs a boxed number with a separator
    (r"\boxed{1,250}", "#### $1,250.00", 1.0),
    # gold with 400 characters of filler after "#### 42"
    (r"\boxed{42}", "#### 42\n" + FILLER_400, 1.0),
    # calculator annotations are ignored: the answer is 72 ...
    (r"\boxed{72}", NATALIA, 1.0),
    # ... not the intermediate 24 from <<48/2=24>>
    ("The answer is 24", NATALIA, 0.0),
    # \text{13} gold vs 13
    (r"\boxed{13}", r"\text{13}", 1.0),
    # \text{13} gold vs 13.0: compared as numbers
    (r"\boxed{13.0}", r"\text{13}", 1.0),
    # 50% gold vs 50
    (r"\boxed{50}", r"50\%", 1.0),
    # \dfrac{\pi}{2} vs \pi/2
    (r"\boxed{\pi/2}", r"\dfrac{\pi}{2}", 1.0),
    # ... and vs plain "pi/2"
    ("The answer is pi/2", r"\dfrac{\pi}{2}", 1.0),
    # trailing period after the number
    ("The answer is 12.", "12", 1.0),
    # "1,25" is not 125 after "The answer is" ...
    ("The answer is 1,25", "125", 0.0),
    # ... nor inside a box
    (r"\boxed{1,25}", "125", 0.0),
    # 27.0 and 27 are the same number
    (r"\boxed{27}", "27.0", 1.0),
    # a wrong number
    (r"\boxed{2}", r"\frac{1}{2}", 0.0),
    # a hedge between two values is wrong
    ("The answer is 3 or 5", "3", 0.0),
    # no last-number fallback: 42 written in passing is not an answer
    ("I computed 6 * 7 = 42", "42", 0.0),
    # unparseable gold gives None, even for a completion that writes the same words
    (r"\boxed{see figure}", "see figure", None),
    # unparseable gold gives None for any completion
    ("The answer is 3", "see figure", None),
    # a message-list completion (TRL conversational format)
    ([{"role": "assistant", "content": r"So \boxed{4}"}], "4", 1.0),
    # a message list with a wrong answer
    ([{"role": "assistant", "content": "The answer is 5"}], "4", 0.0),
    # --- numbers are compared exactly (rationals) or relatively, never with an absolute tolerance ---
    # the case: 1/2^98 - 1/2^99 = 1/2^99 ~ 1.6e-30, which math-verify's evalf(chop=True) rounds to 0
    (r"\boxed{\frac{1}{2^{98}}}", r"\frac{1}{2^{99}}", 0.0),
    # ... while the same value is right
    (r"\boxed{\frac{1}{2^{99}}}", r"\frac{1}{2^{99}}", 1.0),
    # a decimal is the rational it writes: 0.5 = 5/10 = 1/2 exactly
    (r"\boxed{0.5}", r"\frac12", 1.0),
    # 2e-30 = 2/10^30 and 1e-30 = 1/10^30 are different rationals
    (r"\boxed{2e-30}", "1e-30", 0.0),
    # ... and 1e-30 is 10^-30 exactly
    (r"\boxed{1e-30}", r"10^{-30}", 1.0),
    # 2e-7 vs 1e-7: math-verify rounds both decimals to 6 places (0 == 0); exactly they differ
    (r"\boxed{0.0000002}", "0.0000001", 0.0),
    # a rational gold needs the exact value: 0.333333 = 333333/10^6 is not 1/3
    (r"\boxed{0.333333}", r"\frac{1}{3}", 0.0),
    # --- a decimal against an irrational value: correctly rounded to its written places, >= 5 significant digits ---
    # pi = 3.14159265... rounded to 5 places is 3.14159: correct
    (r"\boxed{3.14159}", r"\pi", 1.0),
    # pi rounded to 4 places is 3.1416 (5 significant digits): correct (1e-6 relative used to reject it)
    (r"\boxed{3.1416}", r"\pi", 1.0),
    # sqrt(2) = 1.41421356... rounded to 5 places is 1.41421: correct (1e-6 relative used to reject it)
    (r"\boxed{1.41421}", r"\sqrt{2}", 1.0),
    # 3.14 is pi correctly rounded, but has only 3 significant digits: wrong
    (r"\boxed{3.14}", r"\pi", 0.0),
    # 3.1415 is pi truncated; rounded to 4 places it is 3.1416: wrong
    (r"\boxed{3.1415}", r"\pi", 0.0),
    # 3.1417 is not pi rounded to 4 places (3.1416): wrong
    (r"\boxed{3.1417}", r"\pi", 0.0),
    # the written places count, trailing zero included: 3.14160 has 5, and pi to 5 places is 3.14159: wrong
    (r"\boxed{3.14160}", r"\pi", 0.0),
    # negative: -sqrt(2) = -1.41421356... rounded to 5 places is -1.41421: correct
    (r"\boxed{-1.41421}", r"-\sqrt{2}", 1.0),
    # ... -1.41422 is not: wrong
    (r"\boxed{-1.41422}", r"-\sqrt{2}", 0.0),
    # large magnitude: 1000 pi = 3141.5926... rounded to 2 places is 3141.59: correct
    (r"\boxed{3141.59}", r"1000\pi", 1.0),
    # ... rounded to 1 place is 3141.6 (5 significant digits): correct
    (r"\boxed{3141.6}", r"1000\pi", 1.0),
    # ... 3141.5 is truncated (rounded it is 3141.6): wrong
    (r"\boxed{3141.5}", r"1000\pi", 0.0),
    # scientific notation: 3.14159e3 = 3141.59 has 2 places, = 1000 pi rounded: correct
    ("The answer is 3.14159e3", r"1000\pi", 1.0),
    # small magnitude: pi/1000 = 0.00314159... rounded to 7 places is 0.0031416 (5 significant digits): correct
    (r"\boxed{0.0031416}", r"\frac{\pi}{1000}", 1.0),
    # a decimal inside an expression is the exact number it writes: 2.5 pi = 5 pi / 2 exactly
    (r"\boxed{2.5\pi}", r"\frac{5\pi}{2}", 1.0),
    # the rule is symmetric: a decimal gold 3.1416 and the exact answer pi
    (r"\boxed{\pi}", "3.1416", 1.0),
    # two exact values, one irrational: equal only to 50 digits; 355/113 - pi = 2.7e-7, wrong
    (r"\boxed{\frac{355}{113}}", r"\pi", 0.0),
    # relative, not absolute: e^-101 / e^-100 = 0.37, although the difference (2.3e-44) is tiny
    (r"\boxed{e^{-101}}", r"e^{-100}", 0.0),
    # exact irrational values that are equal: sqrt(8) = 2 sqrt(2)
    (r"\boxed{\sqrt{8}}", r"2\sqrt{2}", 1.0),
    # "x = value" is compared by its value (as math-verify does), with the same exact rule
    (r"\boxed{x = \frac{1}{2^{98}}}", r"\frac{1}{2^{99}}", 0.0),
    # ... and the same right value is right
    (r"\boxed{x = \frac{1}{2^{99}}}", r"\frac{1}{2^{99}}", 1.0),
    # two assignments of one variable compare their values: x = 1/2^98 is not x = 1/2^99
    (r"\boxed{x = \frac{1}{2^{98}}}", r"x = \frac{1}{2^{99}}", 0.0),
    # ... x = 0.5 is x = 1/2
    (r"\boxed{x = 0.5}", r"x = \frac{1}{2}", 1.0),
    # interval endpoints: 1/2^98 != 1/2^99
    (r"\boxed{(\frac{1}{2^{98}}, 1)}", r"(\frac{1}{2^{99}}, 1)", 0.0),
    # set elements: {1, 1/2^98} != {1, 1/2^99}
    (r"\boxed{\{1, \frac{1}{2^{98}}\}}", r"\{1, \frac{1}{2^{99}}\}", 0.0),
    # a set in another order is the same set
    (r"\boxed{\{\frac{1}{2^{99}}, 1\}}", r"\{1, \frac{1}{2^{99}}\}", 1.0),
    # a percent also equals its value: 50% = 0.5
    (r"\boxed{0.5}", r"50\%", 1.0),
    # --- #### anywhere in a line, brace-less boxes ---
    # "#### 1,000" in the middle of a line, gold 1000
    ("Adding up: #### 1,000", "1000", 1.0),
    # a brace-less box in the completion equals the braced gold
    (r"so it is $\boxed 2$", r"\boxed{2}", 1.0),
    # a brace-less gold (MATH training solution) equals a braced answer
    (r"\boxed{2}", r"The sum is $\boxed 2$.", 1.0),
    # ... and a wrong answer against it is wrong (the gold is parsed, not skipped)
    (r"\boxed{3}", r"The sum is $\boxed 2$.", 0.0),
    # brace-less \frac12 = 1/2 on both sides
    (r"$\boxed \frac12$", r"$\boxed \frac12$ is the answer", 1.0),
    # ... and against 0.5
    (r"\boxed{0.5}", r"$\boxed \frac12$", 1.0),
    # strict extraction (the default): a number without a marker is no answer
    ("The total is $9{,}500$.", "9500", 0.0),
    # "The answer is: #### 72" is 72, against the GSM8K solution (it used to be the text "#### 72": 0.0)
    ("The answer is: #### 72", NATALIA, 1.0),
    # ... on the next line, against a plain gold
    ("The answer is:\n#### 72", "72", 1.0),
    # ... after a number on the same line
    ("The answer is 72 #### 72", "#### 72", 1.0),
    # a prose mention of \boxed does not hide the later answer (it used to give no answer: 0.0)
    (r"I'll write it in \boxed. The answer is 7", "7", 1.0),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), REWARD_CASES)
def test_reward_table(completion, gold, expected):
    assert outcome_reward(completions=[completion], answer=[gold]) == [expected]
    assert is_correct(completion, gold) == (None if expected is None else expected == 1.0)


MALFORMED_COMPLETIONS = [
    # empty completion
    "",
    # 100,000 characters without an answer
    "7" * 100_000,
    # the right answer boxed 100,000 characters before the end: outside the searched tail
    r"\boxed{3}" + "x" * 100_000,
    # unbalanced braces around a box that never closes
    "}}}{{{" + r"\boxed{{3}" + "{" * 50,
    # a lone closing brace and stray backslashes
    "} \\ \\boxed \\",
    # control characters and an ANSI escape only
    "\x00\x1b[2J\x07\x08\x7f",
    # None instead of a completion
    None,
    # a number instead of a completion
    3,
    # a message list without an assistant message
    [{"role": "user", "content": r"\boxed{3}"}],
]


@pytest.mark.parametrize("completion", MALFORMED_COMPLETIONS)
def test_malformed_completion_is_zero(completion):
    assert outcome_reward(completions=[completion], answer=["3"]) == [0.0]
    assert is_correct(completion, "3") is False


def test_control_characters_do_not_hide_an_answer():
    # control characters are stripped, the answer around them still counts
    assert outcome_reward(completions=["\x00The answer is \x1b[1m3\x1b[0m\x07"], answer=["3"]) == [1.0]


# answer_extraction="flexible": (completion, gold, expected reward)
FLEXIBLE_REWARD_CASES = [
    # the case: no marker, the last number of the final sentence is 9{,}500 = 9500
    ("The total is $9{,}500$.", "#### 9,500", 1.0),
    # the same number against a plain gold
    ("The total is 9,500.", "9500", 1.0),
    # 3-digit groups only: "9,50" is not a number, so there is no answer
    ("The total is 9,50.", "950", 0.0),
    # only the final sentence counts: "Done!" has no number
    ("I computed 6 * 7 = 42. Done!", "42", 0.0),
    # the final sentence's last number is 42
    ("I computed 6 * 7 = 42", "42", 1.0),
    # a marker wins over the final sentence: the box says 3
    (r"\boxed{3}. The total is 4.", "4", 0.0),
    # a fraction read whole: 3/4 = 0.75 exactly
    ("Thus 3/4 of them.", "0.75", 1.0),
    # 3 is an operand of "10 - 3", not an answer (it used to pay against gold 3)
    ("The result is 10 - 3.", "3", 0.0),
    # a hedge pays for neither value (it used to pay 6)
    ("Answer: 5 or 6", "6", 0.0),
    # a cut-off list marker is no answer (it used to pay 2)
    ("1. Compute 3+4=7.\n2.", "2", 0.0),
    # a number in parentheses after another number: None, so neither 2023 ...
    ("12 (2023 prices).", "2023", 0.0),
    # ... nor 12 is paid
    ("12 (2023 prices).", "12", 0.0),
    # unparseable gold is still None
    ("The total is 3.", "see figure", None),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), FLEXIBLE_REWARD_CASES)
def test_flexible_reward_table(completion, gold, expected):
    assert get_outcome_reward("flexible")(completions=[completion], answer=[gold]) == [expected]
    assert is_correct(completion, gold, answer_extraction="flexible") == (None if expected is None else expected == 1.0)


def test_no_answer_metric_names_the_mode():
    completions, answer = [r"\boxed{1}", "The total is 2.", "no idea"], ["1", "2", "3"]
    for func, mode, rewards, no_answer in [
        (outcome_reward, "strict", [1.0, 0.0, 0.0], 2 / 3),  # only the box is an answer
        (get_outcome_reward("flexible"), "flexible", [1.0, 1.0, 0.0], 1 / 3),  # "no idea" has no number
    ]:
        calls = []
        assert (
            func(completions=completions, answer=answer, log_metric=lambda k, v, c=calls: c.append((k, v))) == rewards
        )
        assert calls == [(f"task/no_answer_{mode}", pytest.approx(no_answer))]


def test_strings_and_message_lists_in_one_batch():
    completions = [r"\boxed{1}", [{"role": "assistant", "content": r"\boxed{2}"}], "The answer is 4"]
    assert outcome_reward(prompts=["p"] * 3, completions=completions, answer=["1", "2", "3"]) == [1.0, 1.0, 0.0]


def test_unparseable_gold_metric():
    calls = []
    rewards = outcome_reward(
        completions=[r"\boxed{1}", r"\boxed{1}", r"\boxed{2}", "x"],
        answer=["1", "see figure", "2", ""],
        log_metric=lambda name, value: calls.append((name, value)),
        trainer_state=object(),  # other TRL kwargs are accepted and ignored
        log_extra=lambda *args: None,
    )
    assert rewards == [1.0, None, 1.0, None]
    # 2 of 4 golds cannot be parsed (None; the trainer's task/unparseable_gold counts them); 1 of 4 completions ("x")
    # has no answer
    assert calls == [("task/no_answer_strict", 0.25)]


def test_no_metric_without_log_metric():
    # a non-callable log_metric is ignored rather than called
    assert outcome_reward(completions=["x"], answer=["1"], log_metric=None) == [0.0]


# ----------------------------------------------------------------------------------------------------------
# Time limits
# ----------------------------------------------------------------------------------------------------------


# The only time bounds here are the limits the module promises (a check stops after timeout_s; a caller outside the
# main thread gives up on its worker after timeout_s + _GRACE_S), each with this much slack for a loaded machine.
BOUND_SLACK_S = 30.0
PATHOLOGICAL_ANSWER = extract_answer(PATHOLOGICAL)  # "10^{10^{10}}"


def _in_thread(fn):
    box = {}

    def target():
        start = time.monotonic()
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            box["error"] = exc
        box["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(300)  # only catches a hang (a thread-based timeout would never return)
    assert not thread.is_alive(), "the check did not return"
    assert "error" not in box, box.get("error")
    return box["value"], box["elapsed"]


def _idle_worker():
    """Make sure a started worker process is idle in the pool (the next one handed out), so that a timed call
    measures the check and not a worker start (which may take up to _STARTUP_TIMEOUT_S); return it."""
    value, _ = _in_thread(lambda: is_correct(r"\boxed{1}", "1"))
    assert value is True
    with deadline._POOL_LOCK:
        return deadline._IDLE[-1]  # _run_in_worker takes _IDLE.pop()


def test_pathological_answer_in_a_thread_is_bounded():
    # in a worker process: stopped by the worker's own timer after 1 s, or killed by the caller after 1 s + grace;
    # a thread-based timeout would hang here forever (sympy holds the GIL in C)
    _idle_worker()
    value, elapsed = _in_thread(lambda: is_correct(PATHOLOGICAL, "3", timeout_s=1.0))
    assert value is False
    assert elapsed < 1.0 + deadline._GRACE_S + BOUND_SLACK_S


def test_outcome_reward_in_a_thread(monkeypatch):
    # one batch from a thread: only the pathological check gets a short budget (1 s); the valid ones keep the
    # module's generous default, so on a loaded machine none of them can run out of time and flip its reward
    bounded, statuses = deadline._bounded, []

    def per_check_budget(op, args, timeout_s):
        result = bounded(op, args, 1.0 if PATHOLOGICAL_ANSWER in args else timeout_s)
        statuses.append((PATHOLOGICAL_ANSWER in args, result[0]))
        return result

    monkeypatch.setattr(deadline, "_bounded", per_check_budget)
    _idle_worker()
    completions = [PATHOLOGICAL, r"\boxed{\frac{1}{2}}", "The answer is 2", "x"]
    value, elapsed = _in_thread(lambda: outcome_reward(completions=completions, answer=["3", "0.5", "3", "see figure"]))
    assert value == [0.0, 1.0, 0.0, None]
    assert (True, "timeout") in statuses  # the pathological check really ran out of its budget ...
    assert all(status == "ok" for pathological, status in statuses if not pathological)  # ... and no other did
    assert elapsed < 1.0 + deadline._GRACE_S + BOUND_SLACK_S


def test_concurrent_threads_get_their_own_workers():
    # 4 threads x 5 checks at once: every answer is judged right, and at most 4 workers stay idle afterwards
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(rf"\boxed{{{i}}}", str(i if i % 2 else i + 1)) for i in range(20)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda job: is_correct(*job), jobs))
    assert results == [i % 2 == 1 for i in range(20)]
    assert len(deadline._IDLE) <= deadline._MAX_IDLE_WORKERS


def test_parse_gold_in_a_thread():
    # the parse runs in a worker process and comes back pickled
    value, _ = _in_thread(lambda: parse_gold(NATALIA))
    assert value[0] == 72


def test_stuck_worker_is_killed_and_replaced():
    # a worker that cannot answer at all (stopped with SIGSTOP, the observable stand-in for one stuck in C code):
    # the caller gives up after timeout_s + _GRACE_S, kills it and never reuses it; a fresh worker takes over
    stuck = _idle_worker()
    os.kill(stuck.proc.pid, signal.SIGSTOP)
    try:
        value, elapsed = _in_thread(lambda: is_correct(r"\boxed{3}", "3", timeout_s=1.0))
        # killed by the caller: its exit status, once it has exited (the module's own wait for it gives up after
        # 10 s; the timeout here only guards against a worker nobody killed)
        try:
            returncode = stuck.proc.wait(timeout=BOUND_SLACK_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the stuck worker was still running {BOUND_SLACK_S} s after the call returned: not killed")
    finally:
        if stuck.proc.poll() is None:  # only if the module failed to kill it
            os.kill(stuck.proc.pid, signal.SIGKILL)
            stuck.proc.wait()
    assert value is None  # its first step, parsing the gold, timed out: a gold that cannot be parsed in time
    assert returncode == -signal.SIGKILL  # killed by the caller
    assert stuck not in deadline._IDLE
    assert elapsed < 1.0 + deadline._GRACE_S + BOUND_SLACK_S
    value, _ = _in_thread(lambda: is_correct(r"\boxed{3}", "3"))
    assert value is True


def test_pathological_answer_in_the_main_thread_restores_sigalrm():
    assert threading.current_thread() is threading.main_thread()
    fired = []

    def outer_handler(signum, frame):
        fired.append(signum)

    previous = signal.signal(signal.SIGALRM, outer_handler)
    signal.setitimer(signal.ITIMER_REAL, 600.0)  # an enclosing alarm (pytest-timeout style), far beyond this test
    try:
        start = time.monotonic()
        assert is_correct(PATHOLOGICAL, "3", timeout_s=0.5) is False
        assert time.monotonic() - start < 0.5 + BOUND_SLACK_S
        assert signal.getsignal(signal.SIGALRM) is outer_handler
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        # still pending, minus the time the check used (at least its 0.5 s budget: it never finishes on its own)
        assert 0 < remaining <= 600.0 - 0.25
        assert fired == []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------------------------------------
# Reward-function contract
# ----------------------------------------------------------------------------------------------------------


def test_pickle_keeps_name():
    restored = pickle.loads(pickle.dumps(outcome_reward))
    assert restored is outcome_reward
    assert restored.__name__ == "outcome_reward"


def test_reward_factory_names_and_pickles():
    assert get_outcome_reward() is outcome_reward  # strict: the plain function, same name
    assert get_outcome_reward("strict") is outcome_reward
    flexible = get_outcome_reward("flexible")
    restored = pickle.loads(pickle.dumps(flexible))
    assert isinstance(restored, OutcomeReward) and restored.__name__ == flexible.__name__ == "outcome_reward_flexible"
    assert restored == flexible and restored != outcome_reward  # one mode, one reward (the trainer looks it up)
    assert restored(completions=["The total is 7."], answer=["7"]) == [1.0]
    with pytest.raises(ValueError, match="outcome_reward_flexible"):
        flexible(completions=["a", "b"], answer=["1"])


def test_strict_outcome_reward_class_is_outcome_reward():
    # OutcomeReward defaults to strict, and a strict one is outcome_reward: same name (same TRL column and metrics),
    # equal and hashed alike, so a lookup by equality (train_grpo's outcome_func) finds either
    strict = OutcomeReward()
    assert strict.answer_extraction == "strict" and strict.__name__ == "outcome_reward"
    assert strict == outcome_reward and outcome_reward == strict and hash(strict) == hash(outcome_reward)
    assert OutcomeReward("strict") == strict and strict != OutcomeReward("flexible")
    assert strict in [outcome_reward] and outcome_reward in [strict] and len({strict, outcome_reward}) == 1
    restored = pickle.loads(pickle.dumps(strict))
    assert restored == outcome_reward and restored.__name__ == "outcome_reward"
    # it pays as outcome_reward does: no marker, no answer; a box, the answer
    completions, answer = ["The total is 7.", r"\boxed{7}"], ["7", "7"]
    assert strict(completions=completions, answer=answer) == outcome_reward(completions=completions, answer=answer)
    assert strict(completions=completions, answer=answer) == [0.0, 1.0]


def test_numeric_comparison_error_falls_back_to_math_verify(monkeypatch):
    # an exception in our numeric comparison gives None for that pair (math-verify decides), never "error"/False
    calls = []

    def broken(*args):
        calls.append(args)
        raise RuntimeError("a sympy corner case")

    monkeypatch.setattr(compare, "_numeric_verdict", broken)
    # main thread: checked in this process, where the patch applies (worker processes load the module anew)
    assert threading.current_thread() is threading.main_thread()
    assert is_correct(r"\boxed{0.5}", r"\frac{1}{2}") is True  # math-verify: 0.5 == 1/2
    assert calls  # the comparison was reached, and raised
    assert is_correct(r"\boxed{3}", "4") is False  # math-verify: 3 != 4
    assert outcome_reward(completions=[r"\boxed{72}", r"\boxed{24}"], answer=[NATALIA, NATALIA]) == [1.0, 0.0]


def test_missing_answer_column():
    with pytest.raises(ValueError, match="answer"):
        outcome_reward(prompts=["p"], completions=["x"], completion_ids=[[1]])


def test_wrong_length_answer_list():
    with pytest.raises(ValueError, match="outcome_reward"):
        outcome_reward(completions=["a", "b"], answer=["1"])


def test_bad_timeout_is_rejected():
    with pytest.raises(ValueError, match="timeout_s"):
        is_correct("x", "1", timeout_s=0)


def test_docstring_examples():
    # the package and each of its modules (conftest.py leaves them to this test: the generous budget above applies)
    results = [doctest.testmod(module) for module in OUTCOME_MODULES]
    assert sum(r.attempted for r in results) >= 8 and sum(r.failed for r in results) == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(
            list("0123456789,.$-+{}\\ \n#:%/*()=")
            + ["\\boxed{", "\\boxed", "\\fbox{", "The answer is ", " or ", "Step ", "\x00", "\x1b["]
        ),
        max_size=30,
    ).map("".join)
)
def test_arbitrary_text_never_raises(text):
    for mode in ("strict", "flexible"):
        answer = extract_answer(text, answer_extraction=mode)
        assert answer is None or isinstance(answer, str)
    assert outcome_reward(completions=[text], answer=["3"])[0] in (0.0, 1.0)
