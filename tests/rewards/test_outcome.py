"""Tests for procrl.rewards.outcome: answer extraction, gold parsing, math-verify comparison, time limits that
also hold outside the main thread, and the TRL reward-function contract (DESIGN §3 "Outcome checking")."""

from __future__ import annotations

import doctest
import pickle
import signal
import threading
import time

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import procrl.rewards.outcome as outcome_module
from procrl.rewards.outcome import extract_answer, is_correct, outcome_reward, parse_gold

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


@pytest.fixture(scope="module", autouse=True)
def _close_worker_processes():
    yield
    outcome_module._close_workers()


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
    assert calls == [("outcome/unparseable_gold", 0.5)]  # 2 of 4 golds


def test_no_metric_without_log_metric():
    # a non-callable log_metric is ignored rather than called
    assert outcome_reward(completions=["x"], answer=["1"], log_metric=None) == [0.0]


# ----------------------------------------------------------------------------------------------------------
# Time limits
# ----------------------------------------------------------------------------------------------------------


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
    thread.join(60)
    assert not thread.is_alive(), "the check did not return"
    assert "error" not in box, box.get("error")
    return box["value"], box["elapsed"]


def test_pathological_answer_in_a_thread_is_bounded():
    # 1 s budget + worker start (~0.5 s) + 2 s grace at most; a thread-based timeout would hang here forever
    value, elapsed = _in_thread(lambda: is_correct(PATHOLOGICAL, "3", timeout_s=1.0))
    assert value is False
    assert elapsed < 10


def test_outcome_reward_in_a_thread(monkeypatch):
    # a wall-clock budget: with 1 s the valid checks could run out of time on a loaded machine
    monkeypatch.setattr(outcome_module, "DEFAULT_TIMEOUT_S", 2.0)
    completions = [PATHOLOGICAL, r"\boxed{\frac{1}{2}}", "The answer is 2", "x"]
    value, elapsed = _in_thread(lambda: outcome_reward(completions=completions, answer=["3", "0.5", "3", "see figure"]))
    assert value == [0.0, 1.0, 0.0, None]
    assert elapsed < 10


def test_concurrent_threads_get_their_own_workers():
    # 4 threads x 5 checks at once: every answer is judged right, and at most 4 workers stay idle afterwards
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(rf"\boxed{{{i}}}", str(i if i % 2 else i + 1)) for i in range(20)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda job: is_correct(*job), jobs))
    assert results == [i % 2 == 1 for i in range(20)]
    assert len(outcome_module._IDLE) <= outcome_module._MAX_IDLE_WORKERS


def test_parse_gold_in_a_thread():
    # the parse runs in a worker process and comes back pickled
    value, _ = _in_thread(lambda: parse_gold(NATALIA))
    assert value[0] == 72


def test_stuck_worker_is_killed_and_replaced(monkeypatch):
    # a negative grace makes the caller give up (0.2 s) before the worker stops itself (1 s): the caller kills it
    monkeypatch.setattr(outcome_module, "_GRACE_S", -0.8)
    value, elapsed = _in_thread(lambda: is_correct(PATHOLOGICAL, "3", timeout_s=1.0))
    assert value is False
    assert elapsed < 10
    monkeypatch.setattr(outcome_module, "_GRACE_S", 2.0)
    value, _ = _in_thread(lambda: is_correct(r"\boxed{3}", "3"))  # a fresh worker takes over
    assert value is True


def test_pathological_answer_in_the_main_thread_restores_sigalrm():
    assert threading.current_thread() is threading.main_thread()
    fired = []

    def outer_handler(signum, frame):
        fired.append(signum)

    previous = signal.signal(signal.SIGALRM, outer_handler)
    signal.setitimer(signal.ITIMER_REAL, 100.0)  # an enclosing alarm (pytest-timeout style)
    try:
        start = time.monotonic()
        assert is_correct(PATHOLOGICAL, "3", timeout_s=0.5) is False
        assert time.monotonic() - start < 5
        assert signal.getsignal(signal.SIGALRM) is outer_handler
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 90 < remaining <= 100  # the enclosing alarm is still pending, minus the time used
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
    result = doctest.testmod(outcome_module)
    assert result.attempted >= 8 and result.failed == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(list("0123456789,.$-+{}\\ \n#:%") + ["\\boxed{", "\\fbox{", "The answer is ", "\x00", "\x1b["]),
        max_size=30,
    ).map("".join)
)
def test_arbitrary_text_never_raises(text):
    answer = extract_answer(text)
    assert answer is None or isinstance(answer, str)
    assert outcome_reward(completions=[text], answer=["3"])[0] in (0.0, 1.0)
