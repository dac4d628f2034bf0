"""StepGap NLI probabilities and thresholds: `NLIThresholds` on hand-computed distributions, `JudgeNLI` reading the
judge's choice probabilities, `CachedNLI` keeping probabilities, and the verifier's stage D/E decisions under
thresholds."""

from __future__ import annotations

import json
import math

import pytest

from procrl.judges import Judge, JudgeResult, parse_judgement
from procrl.rewards.stepgap.nli import CachedNLI, JudgeNLI, NLIThresholds, NLIVerdict
from procrl.rewards.stepgap.nli_rule import nli_probabilities, normalize_probs
from procrl.rewards.stepgap.trace import Passage, Trace, TraceStep
from procrl.rewards.stepgap.verifier import StepGapVerifier


def dist(e, n, c):
    return {"entailment": e, "neutral": n, "contradiction": c}


@pytest.mark.parametrize(
    "probs, entail_min, contradict_min, expected",
    [
        # argmax (no thresholds)
        (dist(0.5, 0.2, 0.3), None, None, "entailment"),
        (dist(0.2, 0.3, 0.5), None, None, "contradiction"),
        (dist(0.2, 0.5, 0.3), None, None, "neutral"),
        # ties go to the earlier of entailment, neutral, contradiction
        (dist(0.4, 0.4, 0.2), None, None, "entailment"),
        (dist(0.2, 0.4, 0.4), None, None, "neutral"),
        (dist(0.4, 0.2, 0.4), None, None, "entailment"),
        # entail_min: P(e) = 0.5 < 0.6 -> not entailed; P(c) 0.3 is not the argmax -> neutral, not contradiction
        (dist(0.5, 0.2, 0.3), 0.6, None, "neutral"),
        (dist(0.8, 0.05, 0.15), 0.9, None, "neutral"),
        # ... with contradict_min 0.4: P(c) 0.3 < 0.4 -> neutral; with 0.3: contradiction
        (dist(0.5, 0.2, 0.3), 0.6, 0.4, "neutral"),
        (dist(0.5, 0.2, 0.3), 0.6, 0.3, "contradiction"),
        # entail_min below the argmax: P(e) 0.2 >= 0.2 but contradiction is likelier -> contradiction (argmax)
        (dist(0.2, 0.3, 0.5), 0.2, None, "contradiction"),
        (dist(0.3, 0.0, 0.7), 0.3, None, "contradiction"),
        (dist(0.3, 0.5, 0.2), 0.3, None, "entailment"),  # P(e) >= 0.3 and >= P(c), neutral likelier
        # contradict_min only: entailment still by argmax; P(c) 0.5 < 0.6 -> neutral
        (dist(0.2, 0.3, 0.5), None, 0.6, "neutral"),
        (dist(0.5, 0.2, 0.3), None, 0.3, "entailment"),
        (dist(0.1, 0.6, 0.3), None, 0.3, "contradiction"),  # P(c) 0.3 >= 0.3 though neutral is likelier
        # unnormalised input is renormalised: 2/(2+1+1) = 0.5 >= 0.5
        (dist(2.0, 1.0, 1.0), 0.5, None, "entailment"),
        # a label missing from the judge's top log-probs counts 0: e = 0.3/0.4 = 0.75
        ({"entailment": 0.3, "contradiction": 0.1}, 0.7, None, "entailment"),
        (dist(1.0, 0.0, 0.0), 1.0, 1.0, "entailment"),
        (dist(0.0, 0.0, 1.0), 1.0, 1.0, "contradiction"),
    ],
)
def test_thresholds_by_hand(probs, entail_min, contradict_min, expected):
    assert NLIThresholds(entail_min, contradict_min).decide(probs) == expected


@pytest.mark.parametrize(
    "bad",
    [
        None,
        {},
        {"maybe": 1.0},
        {"entailment": 0.5, "maybe": 0.5},
        dist(-0.1, 0.6, 0.5),
        dist(math.nan, 0.5, 0.5),
        dist(math.inf, 0.0, 0.0),
        dist(0.0, 0.0, 0.0),
        dist(True, False, False),
        dist("0.5", 0.5, 0.0),
        [0.5, 0.3, 0.2],
    ],
)
def test_invalid_distributions_are_unscored(bad):
    assert normalize_probs(bad) is None
    assert NLIThresholds().decide(bad) is None and NLIThresholds(0.5, 0.5).decide(bad) is None


@pytest.mark.parametrize("value", [0, 0.0, -0.1, 1.01, math.nan, True, "0.5"])
def test_thresholds_are_validated(value):
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        NLIThresholds(entail_min=value)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        NLIThresholds(contradict_min=value)


class ProbJudge(Judge):
    """Replies to an NLI request by the hypothesis: (reply text, probs) from a table; None = no reply."""

    def __init__(self, table):
        super().__init__(name="prob")
        self.table = table
        self.calls = 0

    def _request_payload(self, messages, schema):
        return {"messages": messages}

    async def _judge_uncached(self, requests, schemas, finish):
        self.calls += 1
        for j, messages in enumerate(requests):
            hypothesis = messages[-1]["content"].split("HYPOTHESIS:\n", 1)[1]
            text, probs = self.table.get(hypothesis, (None, None))
            value, reason = parse_judgement(text, schemas[j])
            finish(j, JudgeResult(value=value, unscored=reason, raw=text, attempts=1, probs=probs if value else None))


def test_judge_nli_reads_choice_probabilities_and_falls_back_to_one_hot():
    table = {
        "h1": ('{"label": "neutral"}', {"label": {"entailment": 0.2, "neutral": 0.5, "contradiction": 0.3}}),
        "h2": ('{"label": "entailment"}', None),  # no log-probs: one-hot of the label
        "h3": ('{"label": "contradiction"}', {"label": {"bogus": 1.0}}),  # unusable probs: one-hot
        "h4": ('{"label": "Neutral"}', None),  # not coerced: unscored
        "h5": ('{"label": "entailment"}', {"label": {"entailment": 0.6, "neutral": 0.2}}),  # renormalised
    }
    nli = JudgeNLI(ProbJudge(table))
    pairs = [("p", f"h{i}") for i in range(1, 7)]
    got = nli.predict_proba(pairs)
    assert got[0] == pytest.approx(dist(0.2, 0.5, 0.3))
    assert got[1] == dist(1.0, 0.0, 0.0) and got[2] == dist(0.0, 0.0, 1.0)
    assert got[3] is None and got[5] is None  # h6 has no reply
    assert got[4] == pytest.approx(dist(0.75, 0.25, 0.0))
    assert nli.predict(pairs) == ["neutral", "entailment", "contradiction", None, "entailment", None]
    # with entail_min 0.8, h5's P(e) = 0.75 is not enough; P(c) 0 < P(n) 0.25 -> neutral
    assert nli.predict(pairs, NLIThresholds(entail_min=0.8))[4] == "neutral"


def test_cached_nli_memoises_probabilities():
    judge = ProbJudge({"h1": ('{"label": "neutral"}', {"label": dist(0.1, 0.6, 0.3)})})
    cached = CachedNLI(JudgeNLI(judge))
    first = cached.predict_proba([("p", "h1"), ("p", "h2"), ("p", "h1")])
    assert first[0] == first[2] == pytest.approx(dist(0.1, 0.6, 0.3)) and first[1] is None and judge.calls == 1
    judge.table["h2"] = ('{"label": "entailment"}', None)
    assert cached.predict([("p", "h1"), ("p", "h2")]) == ["neutral", "entailment"]
    assert judge.calls == 2 and set(cached.memo) == {("p", "h1"), ("p", "h2")}  # only h2 (unscored) asked again
    assert cached.predict([("p", "h1")], NLIThresholds(contradict_min=0.3)) == ["contradiction"]
    assert judge.calls == 2  # thresholds need no new judgement
    # a backend that only gives labels is read as one-hots
    assert CachedNLI(LabelNLI("contradiction")).predict_proba([("p", "h")]) == [dist(0.0, 0.0, 1.0)]


class LabelNLI:
    def __init__(self, label):
        self.label = label

    def predict(self, pairs):
        return [self.label for _ in pairs]


def test_nli_probabilities_checks_the_count():
    class Short:
        def predict_proba(self, pairs):
            return []

    with pytest.raises(RuntimeError, match="returned 0 results for 1 pairs"):
        nli_probabilities(Short(), [("p", "h")])


# --------------------------------------------------------------------------------------------------------------------
# The verifier's stage D/E decisions under thresholds
# --------------------------------------------------------------------------------------------------------------------

LYON = Passage(title="Lyon", text="Lyon is the third-largest city of France, on the Rhone and the Saone.")


class FixedProbNLI:
    def __init__(self, probs):
        self.probs = probs

    def predict_proba(self, pairs):
        return [self.probs for _ in pairs]


class CheckJudge(Judge):
    def __init__(self, quote):
        super().__init__(name="check")
        self.reply = json.dumps(
            {
                "off_target": False,
                "abstains": False,
                "abstention_accurate": False,
                "entity_match": True,
                "quote": quote,
                "entity": "",
            }
        )

    def _request_payload(self, messages, schema):
        return {"messages": messages}

    async def _judge_uncached(self, requests, schemas, finish):
        for j in range(len(requests)):
            value, reason = parse_judgement(self.reply, schemas[j])
            finish(j, JudgeResult(value=value, unscored=reason, raw=self.reply, attempts=1))


def label_of(quote, probs, thresholds=None):
    step = TraceStep(
        kind="conclusion",
        text="<think>Lyon is the third-largest city of France.</think><answer>Lyon</answer>",
        query=None,
        answer="Lyon",
        evidence=[LYON],
        retrieved=[],
    )
    verifier = StepGapVerifier(CheckJudge(quote), FixedProbNLI(probs), nli_thresholds=thresholds, progress=False)
    (label,) = verifier.verify(Trace(question="q", steps=[step], answer="Lyon", format_violations=[]))
    return label


@pytest.mark.parametrize(
    "quote, probs, thresholds, expected",
    [
        # D (a quote): argmax entailment -> NONE; entail_min 0.7 > 0.6 -> P(c) 0.1 < P(n) 0.3 -> neutral -> MB
        (LYON.text, dist(0.6, 0.3, 0.1), None, "NONE"),
        (LYON.text, dist(0.6, 0.3, 0.1), NLIThresholds(entail_min=0.7), "MB"),
        # D: argmax contradiction -> CC; contradict_min 0.5 > 0.45 -> neutral -> MB
        (LYON.text, dist(0.15, 0.4, 0.45), None, "CC"),
        (LYON.text, dist(0.15, 0.4, 0.45), NLIThresholds(contradict_min=0.5), "MB"),
        # E (no quote): entailment -> NONE, anything else -> IE
        ("", dist(0.6, 0.3, 0.1), None, "NONE"),
        ("", dist(0.6, 0.3, 0.1), NLIThresholds(entail_min=0.7), "IE"),
        # an unusable distribution is ERROR, never a guess
        (LYON.text, {"entailment": -1.0}, None, "ERROR"),
    ],
)
def test_verifier_decides_with_thresholds(quote, probs, thresholds, expected):
    label = label_of(quote, probs, thresholds)
    assert label.label == expected, label
    if expected != "ERROR":
        e, n, c = (normalize_probs(probs)[k] for k in ("entailment", "neutral", "contradiction"))
        assert label.reason.endswith(f"(P(e/n/c) {e:.2f}/{n:.2f}/{c:.2f})")


def test_verifier_rejects_bad_thresholds():
    with pytest.raises(ValueError, match="NLIThresholds"):
        StepGapVerifier(None, None, nli_thresholds=0.5)


def test_nli_verdict_schema_is_strict_json_enum():
    schema = NLIVerdict.model_json_schema()
    assert schema["properties"]["label"]["enum"] == ["entailment", "neutral", "contradiction"]
    assert schema["additionalProperties"] is False and schema["required"] == ["label"]
