"""The StepGap oracle on hand-written episodes of a hand-written world: one case per gap type (NONE, CC, IE through a
near-namesake's passage and through no evidence, MB), the repair or not of the next step, abstentions, the
verifier interface and the reward built on it; and the world reader (names, claims, asks, refused schemas)."""

from __future__ import annotations

import pytest

from procrl.retrieval import format_passages
from procrl.rewards.stepgap.oracle import OracleRepair, StepGapOracle
from procrl.rewards.stepgap.oracle_world import OracleWorld, oracle_key
from procrl.rewards.stepgap.reward import StepGapReward, label_steps
from procrl.rewards.stepgap.trace import Passage, StepLabel, parse_trace

RELATIONS = {
    "author": {"subject": "work", "object": "person", "cues": ["author", "wrote", "written"]},
    "place of birth": {"subject": "person", "object": "city", "cues": ["place of birth", "birthplace", "born"]},
    "employer": {"subject": "person", "object": "organisation", "cues": ["employer", "worked for"]},
    "country": {"subject": "city", "object": "country", "cues": ["country"]},
}
W, W2 = "The Velmor Chronicles", "The Velmar Chronicles"  # a work and its near-namesake (one letter)
P, P2, B = "Varel Omundsk", "Varel Tamis Omundsk", "Brael Zounthim"  # the author, his near-namesake, another person
PASSAGES = {
    W: (f"{W} is a novel written by {P}.", [(W, "author", P)]),
    W2: (f"{W2} is a novel by {B}.", [(W2, "author", B)]),
    P: (f"{P} was born in Kelvik. Omundsk worked for the Vornel Guild.", [(P, "place of birth", "Kelvik"),
                                                                          (P, "employer", "Vornel Guild")]),
    P2: (f"{P2} was born in Drumora.", [(P2, "place of birth", "Drumora")]),
    B: (f"{B} was born in Drumora.", [(B, "place of birth", "Drumora")]),
    "Kelvik": ("Kelvik is a city in Thalonia.", [("Kelvik", "country", "Thalonia")]),
    "Quirra Lantern Fair": (f"{P} gave a reading from {W} at the Quirra Lantern Fair.", []),  # names, states nothing
}  # fmt: skip
QUESTION = f"Where was the author of {W} born?"
CHAIN = [[W, "author", P], [P, "place of birth", "Kelvik"]]


@pytest.fixture(scope="module")
def oracle():
    rows = [{"title": t, "text": text, "facts": facts} for t, (text, facts) in PASSAGES.items()]
    return StepGapOracle.from_rows(rows, [{"question": QUESTION, "evidences": CHAIN}], RELATIONS)


def _info(*titles):
    return "<information>" + format_passages([Passage(t, PASSAGES[t][0]) for t in titles]) + "</information>\n"


def _trace(*parts, question=QUESTION):
    return parse_trace(question, "".join(parts))


SEARCH_W = f"<think>I need the author of {W}.</think>\n<search>author of {W}</search>\n"
SEARCH_P = f"<think>{W} was written by {P}.</think>\n<search>{P} place of birth</search>\n"


def test_the_gold_episode_has_no_gap(oracle):
    trace = _trace(
        SEARCH_W, _info(W), SEARCH_P, _info(P), f"<think>{P} was born in Kelvik.</think><answer>Kelvik</answer>"
    )
    verdicts = oracle.label_trace(trace)
    assert [v.label for v in verdicts] == ["NONE", "NONE", "NONE"]
    assert verdicts[0].claims == () and verdicts[0].ask == (W, "author")  # a plan: it claims nothing
    assert [c.status for c in verdicts[1].claims] == ["states"]  # the text claim; the query presumes the same
    assert verdicts[2].decisive.subject == P and verdicts[2].decisive.value == "Kelvik"
    assert all(v.repair is None and v.repaired is None for v in verdicts)


# (step 2's think + query, the next step, label of step 2, does the next step repair it?)
CC_STEP = f"<think>{W} was written by {B}.</think>\n<search>{B} place of birth</search>\n"
CASES = {
    # CC: the evidence (W's passage) states another author; repair = retract (not claiming B as the author again)
    "cc_ignored": (CC_STEP, f"<search>{B} birthplace</search>", "CC", False),  # the query presumes B again
    "cc_retracted_by_phrase": (CC_STEP, f"<think>I was wrong about {B}.</think><search>{B}</search>", "CC", True),
    "cc_repaired_by_the_right_author": (CC_STEP, f"<search>{P} birthplace</search>", "CC", True),
    "cc_built_on": (CC_STEP, f"<think>{B} was born in Drumora.</think><answer>Drumora</answer>", "CC", False),
    # MB: the evidence (the fair) names W but states no author; repair = a search naming the bridge (W)
    "mb_bridge_searched": (SEARCH_P, f"<search>{W} author</search>", "MB", True),
    "mb_ignored": (SEARCH_P, "<answer>Kelvik</answer>", "MB", False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_gap_labels_and_repairs(oracle, case):
    step, nxt, label, repaired = CASES[case]
    first = _info("Quirra Lantern Fair") if label == "MB" else _info(W)
    trace = _trace(SEARCH_W, first, step, _info(P), nxt)
    verdict = oracle.label_trace(trace)[1]
    assert verdict.label == label
    assert verdict.repaired is repaired
    if label == "CC":
        assert verdict.decisive.evidence_value == P
        assert verdict.repair == OracleRepair("retract", W, B)
        assert verdict.step_label(oracle.world) == StepLabel(
            "CC", entity=B, value=B, reason=verdict.step_label().reason
        )
    else:  # the fair names W and P but states no fact: relevant without stating
        assert verdict.decisive.status == "relevant" and verdict.repair == OracleRepair("bridge_search", W, P, W)
        assert verdict.step_label().bridge == W


def test_ie_through_a_near_namesake_passage(oracle):
    # the search for the author found the near-namesake work; the step takes its author for W's
    step = f"<think>{W} was written by {B}.</think>\n<search>{B} birthplace</search>\n"
    for nxt, repaired in [(f"<search>author of {W}</search>", True), (f"<search>{B} born</search>", False)]:
        verdict = oracle.label_trace(_trace(SEARCH_W, _info(W2), step, _info(B), nxt))[1]
        assert verdict.label == "IE" and verdict.decisive.status == "other_entity"
        assert verdict.decisive.other_entity == W2  # the passage is about the near-namesake, not W
        assert verdict.repair == OracleRepair("research", W, B) and verdict.repaired is repaired
        assert verdict.ask == (B, "place of birth")


@pytest.mark.parametrize(
    "conclusion",
    [
        "<think>He was born in Drumora.</think><answer>Drumora</answer>",  # the answer claim (P, born, Drumora)
        f"<think>{P2} was born in Drumora.</think><answer>Drumora</answer>",  # the near-namesake read as P
    ],
)
def test_ie_when_the_answer_comes_from_the_near_namesake_person(oracle, conclusion):
    trace = _trace(SEARCH_W, _info(W), SEARCH_P, _info(P2, "Quirra Lantern Fair"), conclusion)
    verdict = oracle.label_trace(trace)[2]
    assert verdict.label == "IE" and verdict.decisive.other_entity == P2 and verdict.repaired is None
    assert (verdict.decisive.subject, verdict.decisive.value) == (P, "Drumora")
    assert oracle.verify(trace)[2] == StepLabel("IE", entity=P, value="Drumora", reason=verdict.step_label().reason)


def test_ie_without_evidence_and_a_bare_first_search(oracle):
    # a claim before any search has no evidence (IE); a bare search naming the question's entity claims nothing
    trace = _trace(SEARCH_P, _info(P), "<answer>Kelvik</answer>")
    assert [v.label for v in oracle.label_trace(trace)] == ["IE", "NONE"]
    assert oracle.label_trace(trace)[0].decisive.status == "unrelated"
    assert oracle.label_trace(_trace(f"<search>{W}</search>", _info(W), f"<search>{P}</search>"))[0].label == "NONE"


def test_the_missing_bridge_of_an_early_answer(oracle):
    # W's passage names P (the bridge) but not P's birthplace: answering now is MB, bridge P
    verdict = oracle.label_trace(_trace(SEARCH_W, _info(W), "<answer>Kelvik</answer>"))[1]
    assert verdict.label == "MB" and verdict.repair.bridge == P


def test_a_wrong_answer_against_the_evidence_is_cc(oracle):
    for answer, entity in [("Drumora", "Drumora"), ("Paris", None)]:  # entity: only a name of the world
        trace = _trace(SEARCH_W, _info(W), SEARCH_P, _info(P), f"<answer>{answer}</answer>")
        verdict = oracle.label_trace(trace)[2]
        assert verdict.label == "CC" and verdict.decisive.evidence_value == "Kelvik"
        label = verdict.step_label(oracle.world)
        assert (label.label, label.entity, label.value) == ("CC", entity, answer)


def test_abstentions(oracle):
    unsettled = _trace(SEARCH_W, _info(W), "<answer>unknown</answer>")
    settled = _trace(SEARCH_W, _info(W), SEARCH_P, _info(P), "<answer>cannot be determined</answer>")
    assert oracle.label_trace(unsettled)[1].label == "NONE"  # accurate: P's birthplace was never read
    assert oracle.label_trace(settled)[2].label == "CC"  # inaccurate: every hop was stated


def test_malformed_next_step_never_repairs(oracle):
    trace = _trace(SEARCH_W, _info(W), CC_STEP, _info(P), f"<search>{P} birthplace")  # unclosed search
    assert oracle.label_trace(trace)[1].repaired is False


def test_unknown_question_is_error_not_a_guess(oracle, caplog):
    trace = _trace(SEARCH_W, _info(W), "<answer>Kelvik</answer>", question="Who painted the Mona Lisa?")
    assert [lab.label for lab in oracle.verify(trace)] == ["ERROR", "ERROR"]
    assert "not in the world" in caplog.text


def test_the_oracle_is_a_verifier_for_the_reward(oracle):
    gold = "".join([SEARCH_W, _info(W), SEARCH_P, _info(P), "<answer>Kelvik</answer>"])
    early = "".join([SEARCH_W, _info(W), "<answer>Kelvik</answer>"])
    prompt = [{"role": "user", "content": f"Answer.\nQuestion: {QUESTION}"}]
    reward = StepGapReward(oracle)
    totals = reward([prompt, prompt], [gold, early], golden_answers=[["Kelvik"], ["Kelvik"]])
    # gold: EM 1 + 3 x NONE 0.20; early: EM 1 + NONE 0.20 + MB -0.05 (the last step gets no shaping)
    assert totals == [pytest.approx(1.6), pytest.approx(1.15)]
    labels = label_steps(oracle, [parse_trace(QUESTION, early)])
    assert [lab.label for lab in labels[0]] == ["NONE", "MB"] and labels[0][1].bridge == P


def test_chains_are_checked_against_the_world(oracle):
    world = oracle.world
    with pytest.raises(ValueError, match="not a world fact"):
        StepGapOracle(world, {QUESTION: [[W, "author", B]]})
    with pytest.raises(ValueError, match="hop 1 starts at"):
        StepGapOracle(world, {QUESTION: [[W, "author", P], ["Kelvik", "country", "Thalonia"]]})
    with pytest.raises(ValueError, match="non-empty list"):
        StepGapOracle(world, {QUESTION: []})


# -- the world reader -------------------------------------------------------------------------------------------------


def test_names_are_read_longest_first(oracle):
    world = oracle.world
    assert world.mentions(f"{P2} met {P}; the velmor chronicles") == [P2, P, W]
    assert world.mentions("Omundsk's novel") == []  # a surname alone is no name of the world
    assert oracle_key("Omundsk's") == "omundsk"
    assert world.is_about(Passage(P2, PASSAGES[P2][0]), P) is False  # the near-namesake's passage
    assert world.is_about(Passage(W, PASSAGES[W][0]), P) is True  # a fact with P


def test_claims_pair_each_name_with_the_nearest_related_one(oracle):
    world = oracle.world
    text = f"{P}, the author of {W}, was born in Kelvik, in Thalonia. {B} worked for the Vornel Guild."
    assert world.claims(text) == [
        (W, "author", P),
        (P, "place of birth", "Kelvik"),
        ("Kelvik", "country", "Thalonia"),
        (B, "employer", "Vornel Guild"),
    ]
    assert world.claims(f"I need the author of {W}.") == []


def test_asks(oracle):
    world = oracle.world
    assert world.ask(f"{W} author") == (W, "author")
    assert world.ask(f"where was {P} born") == (P, "place of birth")
    assert world.ask("born in Kelvik?") == ("Kelvik", None)  # no cue fits a city
    assert world.ask("birthplace") == (None, "place of birth") and world.ask(None) == (None, None)


@pytest.mark.parametrize(
    "facts, relations, message",
    [
        ({"x": [("A", "born", "B")]}, RELATIONS, "not in the schema"),
        ({"x": [(P, "place of birth", "Kelvik"), (P, "place of birth", "Drumora")]}, RELATIONS, "is both"),
        ({"x": [(W, "author", P), (P, "country", "Thalonia")]}, RELATIONS, "is both a person and a city"),
        ({}, {**RELATIONS, "home": {"subject": "person", "object": "city"}}, "one relation per pair of kinds"),
        ({}, {"author": {"subject": "work"}}, "needs 'subject' and 'object'"),
    ],
)
def test_world_refuses_inconsistent_data(facts, relations, message):
    with pytest.raises(ValueError, match=message):
        OracleWorld(facts, relations)


def test_a_completion_without_steps_has_no_verdicts(oracle):
    trace = _trace("I do not know where.")
    assert trace.steps == [] and oracle.label_trace(trace) == [] and oracle.verify(trace) == []
