"""StepGap reward: hand-computed totals for every label × next-action combination, controls, per-step rewards."""

import pytest

from procrl.rewards.stepgap.reward import (
    StepGapReward,
    StepGapRewardConfig,
    StepGapStepRewards,
    stepgap_total,
    token_jaccard,
)
from procrl.rewards.stepgap.trace import Passage, StepLabel, Trace, TraceStep
from procrl.step_rewards import StepRewards

Q0 = "Lothair II mother"


def _search(query, text=None):
    return TraceStep("inference", text or f"<search> {query} </search>", query, None, [], [Passage("T", "x")])


def _answer(text="<answer> 851 </answer>"):
    return TraceStep("conclusion", text, None, "851", [], [])


ACTIONS = {
    "new_query": _search("Ermengarde of Tours date of death"),
    "same_entity_new_relation": _search("Lothair II father"),  # Jaccard {lothair, ii} / 4 = 0.5: a new query
    "dup_query": _search("lothair II mother?"),  # same tokens as Q0: Jaccard 1.0 >= 0.8
    "answer": _answer(),
    "restate_cc": _answer("<think>Waldrada is his mother</think><answer> 851 </answer>"),
    "retract_cc": _answer("<think>I was wrong: Waldrada is not his mother</think><answer> 851 </answer>"),
}

# (label of step 0, action of step 1) -> total with EM = 0; step 1 is labelled NONE (+0.20) and, being last, gets
# no shaping. Totals = base(step 0) + shaping(step 0) + 0.20.
TABLE = [
    # NONE: no repair shaping; only the duplicate penalty
    (StepLabel("NONE"), "new_query", 0.20 + 0.0 + 0.20),  # 0.40
    (StepLabel("NONE"), "dup_query", 0.20 - 0.05 + 0.20),  # 0.35
    (StepLabel("NONE"), "answer", 0.20 + 0.20),  # 0.40
    # IE: re-search with a different entity or relation = repair
    (StepLabel("IE", entity="Lothair II"), "new_query", -0.10 + 0.10 + 0.20),  # 0.20
    (StepLabel("IE", entity="Lothair II"), "same_entity_new_relation", -0.10 + 0.10 + 0.20),  # 0.20
    (StepLabel("IE"), "dup_query", -0.10 - 0.10 - 0.05 + 0.20),  # -0.05: ignored + duplicate
    (StepLabel("IE"), "answer", -0.10 - 0.10 + 0.20),  # 0.00: answered without re-searching
    # MB: a query naming the bridge = repair
    (StepLabel("MB", bridge="Ermengarde of Tours"), "new_query", -0.05 + 0.10 + 0.20),  # 0.25
    (StepLabel("MB", bridge="Ermengarde of Tours"), "same_entity_new_relation", -0.05 - 0.10 + 0.20),  # 0.05
    (StepLabel("MB", bridge="Ermengarde of Tours"), "dup_query", -0.05 - 0.10 - 0.05 + 0.20),  # 0.00
    (StepLabel("MB", bridge="Ermengarde of Tours"), "answer", -0.05 - 0.10 + 0.20),  # 0.05
    (StepLabel("MB"), "new_query", -0.05 + 0.10 + 0.20),  # 0.25: no bridge named, any new search
    # CC: not restating the contradicted entity, or retracting it = repair
    (StepLabel("CC", entity="Waldrada"), "restate_cc", 0.05 - 0.10 + 0.20),  # 0.15
    (StepLabel("CC", entity="Waldrada"), "answer", 0.05 + 0.10 + 0.20),  # 0.35
    (StepLabel("CC", entity="Waldrada"), "retract_cc", 0.05 + 0.10 + 0.20),  # 0.35
    (StepLabel("CC", entity="Waldrada"), "new_query", 0.05 + 0.10 + 0.20),  # 0.35
    (StepLabel("CC", value="851"), "answer", 0.05 - 0.10 + 0.20),  # 0.15: the value "851" is restated
    (StepLabel("CC"), "answer", 0.05 - 0.10 + 0.20),  # 0.15: nothing named, no retraction -> ignored
    (StepLabel("CC"), "retract_cc", 0.05 + 0.10 + 0.20),  # 0.35
    # ERROR: base 0, no repair shaping; the duplicate penalty still applies
    (StepLabel("ERROR"), "new_query", 0.0 + 0.20),  # 0.20
    (StepLabel("ERROR"), "dup_query", 0.0 - 0.05 + 0.20),  # 0.15
]


@pytest.mark.parametrize(("label", "action", "expected"), TABLE)
def test_label_action_table(label, action, expected):
    trace = Trace("q", [_search(Q0), ACTIONS[action]], None, [])
    assert stepgap_total(trace, [label, StepLabel("NONE")], em=0.0) == pytest.approx(expected, abs=1e-9)
    assert stepgap_total(trace, [label, StepLabel("NONE")], em=1.0) == pytest.approx(1.0 + expected, abs=1e-9)


def test_last_step_gets_no_shaping_and_lambda():
    trace = Trace("q", [_answer()], "851", [])
    assert stepgap_total(trace, [StepLabel("IE")], em=1.0) == pytest.approx(0.9)  # 1 - 0.10, no ignored penalty
    two = Trace("q", [_search(Q0), ACTIONS["new_query"]], None, [])
    config = StepGapRewardConfig(lam=0.5)
    # 1 + 0.5 * [(-0.10 + 0.10) + 0.20] = 1.10
    assert stepgap_total(two, [StepLabel("IE"), StepLabel("NONE")], 1.0, config) == pytest.approx(1.10)


def test_controls():
    restate = Trace("q", [_search(Q0), ACTIONS["restate_cc"]], None, [])
    labels = [StepLabel("CC", entity="Waldrada"), StepLabel("NONE")]
    assert stepgap_total(restate, labels, 0.0, StepGapRewardConfig(base_cc=0.0)) == pytest.approx(0.10)  # zero-CC
    dup = Trace("q", [_search(Q0), ACTIONS["dup_query"]], None, [])
    off = StepGapRewardConfig(shaping=False)
    assert stepgap_total(dup, [StepLabel("IE"), StepLabel("NONE")], 0.0, off) == pytest.approx(0.10)  # -0.1 + 0.2
    with pytest.raises(ValueError):
        StepGapRewardConfig(duplicate_jaccard=0.0)
    with pytest.raises(ValueError):
        StepGapRewardConfig(lam=float("nan"))


def test_duplicate_against_any_earlier_query():
    # step 2 repeats step 0's query (not step 1's): penalised at step 1 (the step before the duplicate)
    trace = Trace("q", [_search(Q0), _search("Ermengarde death"), _search("Lothair II mother"), _answer()], None, [])
    labels = [StepLabel("NONE")] * 4
    assert stepgap_total(trace, labels, 0.0) == pytest.approx(4 * 0.20 - 0.05)
    assert token_jaccard("", "x") == 0.0


class FakeVerifier:
    def __init__(self, labels):
        self.labels = labels

    def verify_many(self, traces):
        return [self.labels[: len(t.steps)] for t in traces]


COMPLETION = (
    "<search> Lothair II mother </search>\n<information>Doc 1 (Title: Lothair II) x</information>\n"
    "<answer> 20 March 851 </answer>"
)


def test_trl_reward_function_and_metrics():
    logged = {}
    reward = StepGapReward(FakeVerifier([StepLabel("MB", bridge="Ermengarde"), StepLabel("NONE")]))
    out = reward(
        ["Question: q"] * 2,
        [COMPLETION, COMPLETION],
        [[1], [1]],
        golden_answers=[["20 March 851"], []],
        log_metric=lambda k, v: logged.setdefault(k, v),
    )
    # EM 1 + MB (-0.05) + ignored (the answer is no bridge search, -0.10) + NONE 0.20 = 1.05; no gold -> None
    assert out[0] == pytest.approx(1.05) and out[1] is None
    assert logged["stepgap/label_MB"] == 0.5 and logged["stepgap/searches_per_completion"] == 1.0
    assert reward.__name__ == "stepgap_reward"


def test_per_step_labels_go_to_the_completions_table():
    columns = {}
    reward = StepGapReward(FakeVerifier([StepLabel("MB", bridge="Ermengarde"), StepLabel("NONE")]))
    reward(["Question: q"] * 2, [COMPLETION, "I do not know."], [[1], [1]],
           golden_answers=[["20 March 851"], ["x"]], log_extra=lambda k, v: columns.setdefault(k, v))  # fmt: skip
    assert columns == {"stepgap/step_labels": [["MB", "NONE"], []]}  # one row per completion; no steps -> []


def test_batch_without_steps_logs_no_label_shares():
    logged = {}
    reward = StepGapReward(FakeVerifier([]))
    out = reward(["Question: q"] * 2, ["I do not know.", ""], [[1], [1]], golden_answers=[["x"], ["y"]],
                 log_metric=lambda k, v: logged.setdefault(k, v))  # fmt: skip
    assert out == [0.0, 0.0]  # EM 0, no steps: no base or shaping terms
    assert logged["stepgap/steps_per_completion"] == 0.0 and logged["stepgap/searches_per_completion"] == 0.0
    assert not [k for k in logged if k.startswith("stepgap/label_")]  # neither 0 (a fake share) nor NaN


def test_step_rewards_boundaries():
    steps = [_search(Q0), _search("Ermengarde of Tours"), _answer()]
    steps[0].token_span, steps[1].token_span, steps[2].token_span = (0, 5), (20, 26), (40, 48)
    trace = Trace("q", steps, "851", [])
    labels = [StepLabel("IE"), StepLabel("NONE"), StepLabel("NONE")]
    scorer = StepGapStepRewards(FakeVerifier(labels))
    (got,) = scorer(["q"], ["unused"], [list(range(49))], golden_answers=[["851"]], search_trace=[trace])
    # step 0: -0.10 + 0.10 (re-search) = 0.0; step 1: 0.20; step 2: 0.20 + EM 1.0; last boundary = 49 (EOS)
    assert got == StepRewards(
        values=[pytest.approx(0.0), pytest.approx(0.2), pytest.approx(1.2)], boundaries=[5, 26, 49]
    )
    # a step without tokens of its own is merged into the next one
    steps[1].token_span = (5, 5)
    (got,) = scorer(["q"], ["unused"], [list(range(49))], golden_answers=[["851"]], search_trace=[trace])
    assert got.boundaries == [5, 49] and got.values[1] == pytest.approx(0.2 + 1.2)


# ----------------------------------------------------------------------------------------------------------------
# Format violations: malformed steps are FORMAT (never judged, never paid the no-gap bonus)
# ----------------------------------------------------------------------------------------------------------------

INFO = "<information>Doc 1 (Title: Lothair II) His mother was Ermengarde.</information>"

# completion -> (format violations, kind and malformed flag per step, credited answer)
PARSE_ROWS = [
    ("<search> q </search>" + INFO + "<answer> Paris </answer>", [], [("inference", False), ("conclusion", False)],
     "Paris"),  # well formed
    ("<answer>Paris</answer><search> capital </search>", ["search_after_answer"], [("conclusion", True)], "Paris"),
    ("<answer>Paris</answer><answer>Lyon</answer>", ["multiple_answers"], [("conclusion", True)], "Paris"),
    ("<answer>Paris</answer>\n<information>x</information>", ["information_after_answer"], [("conclusion", True)],
     "Paris"),
    ("<think>x</think><search> who is", ["unclosed_search", "no_answer"], [("inference", True)], None),  # truncated
    ("<answer> Paris <search> capital </search> </answer>", ["search_inside_answer"], [("conclusion", True)], None),
    ("<answer> Paris <answer> Lyon </answer>", ["answer_inside_answer"], [("conclusion", True)], None),
    ("<answer> Paris <information> fake </information> </answer>", ["information_inside_answer"],
     [("conclusion", True)], None),
    ("<answer> Paris", ["unclosed_answer"], [("conclusion", True)], None),  # truncated inside the answer
    ("<search>  </search><answer> Paris </answer>", ["empty_search"], [("inference", True), ("conclusion", False)],
     "Paris"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "violations", "steps", "answer"), PARSE_ROWS)
def test_parser_flags_format_violations(text, violations, steps, answer):
    from procrl.rewards.stepgap.trace import parse_trace

    t = parse_trace("q", text)
    assert t.format_violations == violations
    assert [(s.kind, s.malformed) for s in t.steps] == steps
    assert t.answer == answer


class RecordingVerifier:
    """Labels every step it is asked about with `label` (IE for steps whose text holds `ie_marker`) and records
    the step texts it saw."""

    def __init__(self, label="NONE", ie_marker=None):
        self.label, self.ie_marker, self.seen = label, ie_marker, []

    def verify_many(self, traces):
        self.seen += [s.text for t in traces for s in t.steps]
        return [
            [StepLabel("IE" if self.ie_marker and self.ie_marker in s.text else self.label) for s in t.steps]
            for t in traces
        ]


MALFORMED = "<search> Ermengarde of"  # unclosed search at truncation

# completion -> (R with gold "851" by hand, FORMAT steps); the verifier says NONE (IE where marked "IE")
REWARD_ROWS = [
    # clean: EM 1 + NONE 0.20 + NONE 0.20
    ("<search> Lothair II mother </search>" + INFO + "<answer> 851 </answer>", 1.40, 0),
    # a search after the answer: EM 1 (credited) + NONE 0.20 + FORMAT -0.10 (not NONE +0.20)
    ("<search> Lothair II mother </search>" + INFO + "<answer> 851 </answer><search> more </search>", 1.10, 1),
    # unclosed search at truncation: no answer, EM 0 + NONE 0.20 + FORMAT -0.10
    ("<search> Lothair II mother </search>" + INFO + MALFORMED, 0.10, 1),
    # an action tag inside the answer: not credited, EM 0 + FORMAT -0.10
    ("<answer> 851 <information> Doc 1 </information> </answer>", -0.10, 1),
    # IE then a malformed search: no repair (-0.10 ignored, not +0.10): -0.10 - 0.10 + FORMAT -0.10
    ("<search> IE Lothair II mother </search>" + INFO + MALFORMED, -0.30, 1),
    # after a FORMAT step a new search earns no repair bonus: FORMAT -0.10 + 0; NONE 0.20; NONE 0.20; EM 1
    ("<search> who is <search> Ermengarde of Tours </search>" + INFO + "<answer> 851 </answer>", 1.30, 1),
    # ... but the duplicate penalty still applies: FORMAT -0.10 - 0.05; NONE 0.20; NONE 0.20; EM 1
    ("<search> Lothair II mother <search> Lothair II mother </search>" + INFO + "<answer> 851 </answer>", 1.25, 1),
]


@pytest.mark.parametrize(("text", "expected", "num_format"), REWARD_ROWS)
def test_format_violations_cost_and_are_never_judged(text, expected, num_format):
    from procrl.rewards.stepgap.trace import parse_trace

    verifier = RecordingVerifier(ie_marker="IE")
    logged = {}
    (got,) = StepGapReward(verifier)(["Question: q"], [text], [[1]], golden_answers=[["851"]],
                                     log_metric=lambda k, v: logged.setdefault(k, v))  # fmt: skip
    assert got == pytest.approx(expected, abs=1e-9)
    trace = parse_trace("q", text)
    assert sum(s.malformed for s in trace.steps) == num_format
    assert verifier.seen == [s.text for s in trace.steps if not s.malformed]  # malformed steps never judged
    assert logged["stepgap/format_violations"] == num_format  # one completion
    assert logged["stepgap/label_FORMAT"] == pytest.approx(num_format / len(trace.steps))


def test_a_malformed_step_is_format_whatever_its_label():
    step = _search("Lothair II mother", "<search> Lothair II mother")
    step.malformed = True
    trace = Trace("q", [step, _answer()], "851", [])
    # NONE given for the malformed step still pays FORMAT: -0.10 + NONE 0.20 (the answer: no duplicate) = 0.10
    assert stepgap_total(trace, [StepLabel("NONE"), StepLabel("NONE")], em=0.0) == pytest.approx(0.10)
    config = StepGapRewardConfig(base_format=-0.3)
    assert stepgap_total(trace, [StepLabel("NONE"), StepLabel("NONE")], 0.0, config) == pytest.approx(-0.10)
    assert stepgap_total(trace, [StepLabel("FORMAT"), StepLabel("NONE")], 0.0, config) == pytest.approx(-0.10)
    # a configurable penalty, never a bonus
    assert StepGapRewardConfig(base_format=0.0).base("FORMAT") == 0.0
    with pytest.raises(ValueError, match="base_format"):
        StepGapRewardConfig(base_format=0.05)


def test_step_rewards_put_format_on_the_malformed_turn():
    from procrl.rewards.stepgap.trace import parse_trace

    text = "<search> Lothair II mother </search>" + INFO + "<answer> 851 </answer><search> more </search>"
    trace = parse_trace("q", text)
    trace.steps[0].token_span, trace.steps[1].token_span = (0, 6), (20, 30)
    (got,) = StepGapStepRewards(RecordingVerifier())(["q"], [text], [list(range(40))], golden_answers=[["851"]],
                                                     search_trace=[trace])  # fmt: skip
    # step 0: NONE 0.20; the conclusion: FORMAT -0.10 + EM 1.0, on the tokens to the end (the trailing search too)
    assert got == StepRewards(values=[pytest.approx(0.20), pytest.approx(0.90)], boundaries=[6, 40])
