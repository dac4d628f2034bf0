"""StepGap verifier: the routing table of docs/architecture.md "StepGap" on recorded judge replies and a scripted NLI; NLI backends on a
tiny cross-encoder built from a config; one protocol test against the local `transformers serve` judge."""

from __future__ import annotations

import json
import math

import pytest
import torch

from procrl.judges import Judge, JudgeResult, JudgeServer, OpenAICompatibleJudge, parse_judgement
from procrl.rewards.stepgap.check import CHECK_REPLY_SHAPE, FIELD_MAX_CHARS, REASON_MAX_CHARS
from procrl.rewards.stepgap.nli import CachedNLI, CrossEncoderNLI, JudgeNLI, NLIVerdict, make_nli, map_nli_labels
from procrl.rewards.stepgap.quotes import quote_candidates
from procrl.rewards.stepgap.trace import Passage, StepLabel, Trace, TraceStep
from procrl.rewards.stepgap.verifier import (
    LABELS,
    StepCheck,
    StepGapVerifier,
    find_quote,
    step_check_schema,
    step_claim,
)

# --------------------------------------------------------------------------------------------------------------------
# Fakes: a judge that replays recorded reply texts, and an NLI that answers from a table
# --------------------------------------------------------------------------------------------------------------------


class RecordedJudge(Judge):
    """Replies with a recorded text chosen by a marker found in the request's user message; counts calls."""

    def __init__(self, replies: dict[str, str]):
        super().__init__(name="recorded")
        self.replies = replies
        self.calls: list[int] = []  # number of requests per judge() call

    def judge(self, requests, schema, **kwargs):
        self.calls.append(len(requests))
        return super().judge(requests, schema, **kwargs)

    def _request_payload(self, messages, schema):
        return {"messages": messages, "schema": schema.__name__}

    async def _judge_uncached(self, requests, schemas, finish):
        for j, messages in enumerate(requests):
            user = messages[-1]["content"]
            text = next((reply for marker, reply in self.replies.items() if marker in user), "no reply")
            value, reason = parse_judgement(text, schemas[j])
            finish(j, JudgeResult(value=value, unscored=reason, raw=text, attempts=1))


class ScriptedNLI:
    """Answers `table[(premise, hypothesis)]` (default `default`); records every predict() call."""

    def __init__(self, table=None, default="entailment"):
        self.table = table or {}
        self.default = default
        self.calls: list[list[tuple[str, str]]] = []

    def predict(self, pairs):
        self.calls.append(list(pairs))
        return [self.table.get(p, self.default) for p in pairs]


def reply(**fields) -> str:
    """A recorded judge reply: prose around the JSON, as small models write it."""
    base = {
        "off_target": False,
        "abstains": False,
        "abstention_accurate": False,
        "entity_match": True,
        "quote": "",
        "entity": "",
    }
    return "Here is my check:\n```json\n" + json.dumps(base | fields) + "\n```"


LYON = Passage(title="Lyon", text="Lyon is the third-largest city of France, on the Rhone and the Saone.")
PARIS = Passage(title="Paris", text="Paris is the capital and most populous city of France.")
QUOTE = LYON.text  # 13 words, one sentence: the only candidate quote of LYON (quote_candidates)
PART = "Lyon is the third-largest city of France"  # 8 words, verbatim in LYON but not a candidate


def conclusion(marker: str, evidence=(LYON, PARIS), claim="Lyon is the third-largest city of France.", answer="yes"):
    text = f"<think>{claim} [{marker}]</think>\n<answer>{answer}</answer>"
    return TraceStep(kind="conclusion", text=text, query=None, answer=answer, evidence=list(evidence), retrieved=[])


def inference(marker: str, evidence=(LYON, PARIS), claim="Lyon is the third-largest city of France."):
    text = f"<think>{claim} [{marker}]</think>\n<search>Lyon population</search>"
    return TraceStep(
        kind="inference", text=text, query="Lyon population", answer=None, evidence=list(evidence), retrieved=[]
    )


def trace(*steps) -> Trace:
    return Trace(
        question="Which city is the third-largest of France?", steps=list(steps), answer="Lyon", format_violations=[]
    )


def run_one(step, judge_reply, nli=None, **kwargs) -> tuple[StepLabel, ScriptedNLI]:
    """Label one step; `constrain_quotes=False` (a free-quote schema) where a case needs a non-candidate quote."""
    nli = nli or ScriptedNLI()
    verifier = StepGapVerifier(RecordedJudge({"[m]": judge_reply}), nli, progress=False, **kwargs)
    (label,) = verifier.verify(trace(step))
    return label, nli


# --------------------------------------------------------------------------------------------------------------------
# Routing table (docs/architecture.md "StepGap"): one case per branch
# --------------------------------------------------------------------------------------------------------------------

CLAIM = "Lyon is the third-largest city of France. [m] The answer is yes."  # step_claim of conclusion("m")
ICLAIM = "Lyon is the third-largest city of France. [m]"  # step_claim of inference("m")
BOTH = f"Lyon: {LYON.text}\nParis: {PARIS.text}"  # the premise "all prior evidence"


@pytest.mark.parametrize(
    "step, judge_reply, nli_answer, expected, expected_pairs",
    [
        # judge reply without JSON -> unscored -> ERROR, no NLI
        (conclusion("m"), "I think the step is fine.", None, "ERROR", []),
        # JSON missing a required boolean -> schema mismatch -> ERROR
        (conclusion("m"), '{"off_target": false, "abstains": false}', None, "ERROR", []),
        # A: drift -> CC, before anything else (even with an abstention flagged)
        (conclusion("m"), reply(off_target=True, abstains=True, abstention_accurate=True), None, "CC", []),
        # B: accurate abstention -> NONE; inaccurate -> CC
        (conclusion("m"), reply(abstains=True, abstention_accurate=True), None, "NONE", []),
        (conclusion("m"), reply(abstains=True, abstention_accurate=False), None, "CC", []),
        # C: evidence about another entity -> IE; no evidence at all -> IE
        (conclusion("m"), reply(entity_match=False, quote=QUOTE), None, "IE", []),
        (conclusion("m", evidence=()), reply(), None, "IE", []),
        # D on a conclusion with a verified quote: NLI(quote => claim)
        (conclusion("m"), reply(quote=QUOTE), "entailment", "NONE", [(QUOTE, CLAIM)]),
        (conclusion("m"), reply(quote=QUOTE), "neutral", "MB", [(QUOTE, CLAIM)]),
        (conclusion("m"), reply(quote=QUOTE), "contradiction", "CC", [(QUOTE, CLAIM)]),
        (conclusion("m"), reply(quote=QUOTE), None, "ERROR", [(QUOTE, CLAIM)]),
        # under the step's schema a quote must be one of its candidates; a reply that breaks it (a backend that
        # ignored the schema) is read as a plain StepCheck: a paraphrase or the prompt's placeholder is no quote
        # (stage E), a verbatim part of a candidate is a quote (stage D), and null stays a mismatch -> ERROR
        (conclusion("m"), reply(quote="Lyon is the largest city of France"), "entailment", "NONE", [(BOTH, CLAIM)]),
        (conclusion("m"), reply(quote=PART), "entailment", "NONE", [(PART, CLAIM)]),
        (conclusion("m"), reply(quote="<5-20 words copied from the evidence>"), "neutral", "IE", [(BOTH, CLAIM)]),
        (conclusion("m"), reply(quote=None), "entailment", "ERROR", []),
        # the candidate of the other passage is a valid quote too
        (conclusion("m"), reply(quote=PARIS.text), "neutral", "MB", [(PARIS.text, CLAIM)]),
        # E: no quote -> NLI(all prior evidence => claim)
        (conclusion("m"), reply(quote=""), "entailment", "NONE", [(BOTH, CLAIM)]),
        (conclusion("m"), reply(quote=""), "neutral", "IE", [(BOTH, CLAIM)]),
        (conclusion("m"), reply(quote=""), "contradiction", "IE", [(BOTH, CLAIM)]),
        # D on an inference step with a quote (the paper checks every quoted step)
        (inference("m"), reply(quote=QUOTE), "neutral", "MB", [(QUOTE, ICLAIM)]),
        (inference("m"), reply(quote=QUOTE), "entailment", "NONE", [(QUOTE, ICLAIM)]),
        # E on an inference step without a quote: only earlier evidence naming the step's entity is the premise
        (inference("m"), reply(entity="Lyon"), "entailment", "NONE", [(f"Lyon: {LYON.text}", ICLAIM)]),
        (inference("m"), reply(entity="lyon"), "neutral", "IE", [(f"Lyon: {LYON.text}", ICLAIM)]),
        # ... no evidence names the entity -> IE without NLI; no entity given -> all earlier evidence
        (inference("m"), reply(entity="Marseille"), None, "IE", []),
        (inference("m"), reply(entity=""), "entailment", "NONE", [(BOTH, ICLAIM)]),
        # a copied placeholder of the reply shape names no entity: all earlier evidence, never IE for want of it
        (inference("m"), reply(entity="<entity>"), "entailment", "NONE", [(BOTH, ICLAIM)]),
    ],
)
def test_routing_table(step, judge_reply, nli_answer, expected, expected_pairs):
    nli = ScriptedNLI(default=nli_answer)
    label, _ = run_one(step, judge_reply, nli)
    assert label.label == expected, label
    assert [p for call in nli.calls for p in call] == expected_pairs


@pytest.mark.parametrize(
    "judge_reply, nli_answer, expected, expected_pairs",
    [
        # the quote is checked with case and whitespace normalised, surrounding quote marks dropped
        (
            reply(quote='"LYON is the  third-largest city of France"'),
            "neutral",
            "MB",
            [("LYON is the  third-largest city of France", CLAIM)],
        ),
        # a quote that is not in the evidence counts as no quote -> E: NLI(all prior evidence => claim)
        (reply(quote="Lyon is the largest city of France"), "entailment", "NONE", [(BOTH, CLAIM)]),
        (reply(quote="Lyon is the largest city of France"), "contradiction", "IE", [(BOTH, CLAIM)]),
        (reply(quote="<5-20 words copied from the evidence>"), "neutral", "IE", [(BOTH, CLAIM)]),
        # a verbatim quote of 4 words (< 5) is no quote either
        (reply(quote="the third-largest city of"), "neutral", "IE", [(BOTH, CLAIM)]),
    ],
)
def test_free_quotes_are_filtered_by_find_quote(judge_reply, nli_answer, expected, expected_pairs):
    # constrain_quotes=False: the plain StepCheck schema (a free quote), as a judge that ignores schemas would answer
    nli = ScriptedNLI(default=nli_answer)
    label, _ = run_one(conclusion("m"), judge_reply, nli, constrain_quotes=False)
    assert label.label == expected, label
    assert [p for call in nli.calls for p in call] == expected_pairs


def test_inference_step_with_quote_is_no_gap_when_configured():
    # The other reading of docs/architecture.md "StepGap" ("an inference step with a quote is no gap"): NONE, no NLI call.
    nli = ScriptedNLI(default="contradiction")
    label, _ = run_one(inference("m"), reply(quote=QUOTE), nli, inference_quote_nli=False)
    assert label.label == "NONE" and nli.calls == []
    # a conclusion with a quote still goes to stage D
    label, _ = run_one(conclusion("m"), reply(quote=QUOTE), nli, inference_quote_nli=False)
    assert label.label == "CC"


def test_label_carries_entity_value_bridge_and_reason():
    label, _ = run_one(
        conclusion("m"), reply(quote=QUOTE, entity="Lyon", value="third", bridge=" "), ScriptedNLI(default="neutral")
    )
    assert (label.label, label.entity, label.value, label.bridge) == ("MB", "Lyon", "third", None)
    assert label.reason.startswith("D:")


def test_step_without_claim_text_is_none():
    step = TraceStep(
        kind="inference", text="<search>Lyon</search>", query="Lyon", answer=None, evidence=[LYON], retrieved=[]
    )
    label, nli = run_one(step, reply(quote=QUOTE), ScriptedNLI(default="contradiction"))  # marker "[m]" absent
    assert label.label == "ERROR"  # the recorded judge had no reply for it: unscored
    nli = ScriptedNLI(default="contradiction")
    verifier = StepGapVerifier(RecordedJudge({"Lyon": reply()}), nli, progress=False)
    assert verifier.verify(trace(step))[0].label == "NONE" and nli.calls == []
    # the first search of a rollout has no evidence yet: a bare search is still no gap (not "C: no evidence")
    first = TraceStep(
        kind="inference", text="<search>Lyon</search>", query="Lyon", answer=None, evidence=[], retrieved=[]
    )
    assert verifier.verify(trace(first))[0].label == "NONE"
    # ... but drift is still caught by stage A
    drift = StepGapVerifier(RecordedJudge({"Lyon": reply(off_target=True)}), nli, progress=False)
    assert drift.verify(trace(first))[0].label == "CC"


@pytest.mark.parametrize(
    "removed, judge_reply, nli_answer, expected",
    [
        ("A", reply(off_target=True, quote=QUOTE), "entailment", "NONE"),  # drift ignored; the quote entails
        ("B", reply(abstains=True, quote=QUOTE), "entailment", "NONE"),  # abstention ignored, checked as a claim
        ("C", reply(entity_match=False, quote=QUOTE), "entailment", "NONE"),  # no IE, no quote -> E entails
        ("D", reply(quote=QUOTE), "contradiction", "NONE"),  # quote accepted without asking the NLI
        ("E", reply(quote=""), "neutral", "NONE"),  # no quote and no E -> NONE
    ],
)
def test_ablation_skips_one_stage(removed, judge_reply, nli_answer, expected):
    full, _ = run_one(conclusion("m"), judge_reply, ScriptedNLI(default=nli_answer))
    stages = [s for s in "ABCDE" if s != removed]
    ablated, _ = run_one(conclusion("m"), judge_reply, ScriptedNLI(default=nli_answer), stages=stages)
    assert ablated.label == expected and full.label != expected  # the removed stage decided the full label


def test_verify_many_makes_one_judge_call_and_one_nli_call():
    judge = RecordedJudge(
        {
            "[a]": reply(quote=QUOTE),
            "[b]": reply(entity_match=False),
            "[c]": reply(quote=""),
            "[d]": reply(entity="Lyon"),
        }
    )
    nli = ScriptedNLI(default="neutral")
    verifier = StepGapVerifier(judge, nli, progress=False)
    traces = [trace(inference("a"), conclusion("b")), trace(), trace(inference("d"), inference("c"), conclusion("c"))]
    labels = verifier.verify_many(traces)
    assert [[lab.label for lab in row] for row in labels] == [["MB", "IE"], [], ["IE", "IE", "IE"]]
    assert judge.calls == [5] and len(nli.calls) == 1 and len(nli.calls[0]) == 4  # a, d, c, c go to NLI
    # verify() is the one-trace case and agrees
    assert [lab.label for lab in verifier.verify(traces[2])] == ["IE", "IE", "IE"]


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown stages"):
        StepGapVerifier(None, None, stages="ABX")
    with pytest.raises(ValueError, match="min_quote_words"):
        StepGapVerifier(None, None, min_quote_words=6, max_quote_words=5)


def test_step_claim_and_find_quote():
    assert (
        step_claim(conclusion("m", answer="Lyon")) == "Lyon is the third-largest city of France. [m]"
    )  # answer in text
    bare = TraceStep(
        kind="conclusion", text="<answer> Lyon </answer>", query=None, answer="Lyon", evidence=[], retrieved=[]
    )
    assert step_claim(bare) == "The answer is Lyon."
    assert find_quote("Lyon is the third-largest city of France...", [LYON]) == PART
    assert find_quote(PART + " " + "x " * 13, [LYON]) is None  # 21 words
    assert find_quote("capital and most populous city", [LYON, PARIS]) == "capital and most populous city"
    assert find_quote("capital and most populous city", [LYON]) is None


VALID = {
    "off_target": False,
    "abstains": True,
    "abstention_accurate": False,
    "entity_match": True,
    "quote": "",
    "entity": "",
}


def test_step_check_minimal_reply_and_field_order():
    check, reason = parse_judgement(json.dumps(VALID), StepCheck)
    assert reason is None and (check.entity, check.value, check.bridge, check.reason) == ("", "", "", "")
    # entity is required (stage E narrows an inference step's premise by it)
    assert parse_judgement(json.dumps({k: v for k, v in VALID.items() if k != "entity"}), StepCheck)[1] == (
        "schema_mismatch"
    )
    # the schema's field order is the prompt's reply shape (small judges copy it key by key)
    assert list(StepCheck.model_fields) == list(json.loads(CHECK_REPLY_SHAPE))
    assert list(StepCheck.model_json_schema()["properties"]) == list(json.loads(CHECK_REPLY_SHAPE))
    assert set(StepCheck.model_json_schema()["required"]) == {*list(VALID)}
    # bounds at the limit are accepted (48 characters for entity/value/bridge, 96 for reason)
    assert (FIELD_MAX_CHARS, REASON_MAX_CHARS) == (48, 96)
    at_limit = VALID | {"entity": "e" * 48, "value": "v" * 48, "bridge": "b" * 48, "reason": "r" * 96}
    assert parse_judgement(json.dumps(at_limit), StepCheck)[1] is None


@pytest.mark.parametrize(
    "change",
    [
        {"off_target": 0},  # booleans as integers: lax pydantic would take 0/1
        {"abstains": 1},
        {"entity_match": "true"},  # booleans as strings
        {"abstention_accurate": "false"},
        {"off_target": 0.0},  # as a float
        {"entity_match": None},
        {"entity": 3},  # a number where a string is required
        {"reason": 1.5},
        {"quote": 12345},
        {"entity": "e" * 49},  # over-long strings
        {"value": "v" * 49},
        {"bridge": "b" * 49},
        {"reason": "r" * 97},
        {"quote": "q" * 301},
        {"extra": "x"},  # an unknown key
    ],
)
def test_step_check_is_strict(change):
    assert parse_judgement(json.dumps(VALID | change), StepCheck) == (None, "schema_mismatch")


@pytest.mark.parametrize("missing", ["off_target", "abstains", "abstention_accurate", "entity_match", "quote"])
def test_step_check_required_fields(missing):
    body = {k: v for k, v in VALID.items() if k != missing}
    assert parse_judgement(json.dumps(body), StepCheck) == (None, "schema_mismatch")


def test_step_check_schema_allows_only_candidates():
    candidates = quote_candidates([LYON, PARIS])
    assert candidates == (LYON.text, PARIS.text)  # one sentence each, 13 and 9 words
    schema = step_check_schema(candidates)
    assert schema is step_check_schema(candidates)  # cached per candidate tuple
    assert schema.__name__ == "StepCheck" and issubclass(schema, StepCheck)
    assert list(schema.model_fields) == list(StepCheck.model_fields)
    assert schema.model_json_schema()["properties"]["quote"]["enum"] == [LYON.text, PARIS.text, ""]
    for quote in (LYON.text, PARIS.text, ""):
        assert parse_judgement(json.dumps(VALID | {"quote": quote}), schema)[0].quote == quote
    for quote in (PART, LYON.text.lower(), " " + LYON.text, "<entity>", "<5-20 words copied from the evidence>"):
        assert parse_judgement(json.dumps(VALID | {"quote": quote}), schema) == (None, "schema_mismatch")
    # still strict in the other fields
    assert parse_judgement(json.dumps(VALID | {"off_target": 0}), schema) == (None, "schema_mismatch")
    # a step without evidence can only say ""
    empty = step_check_schema(())
    assert empty.model_json_schema()["properties"]["quote"]["const"] == ""  # a one-value Literal is a JSON const
    assert parse_judgement(json.dumps(VALID | {"quote": PART}), empty) == (None, "schema_mismatch")
    with pytest.raises(ValueError, match="tuple of non-empty strings"):
        step_check_schema(("", "x"))


class SchemaRecordingJudge(RecordedJudge):
    def __init__(self, replies):
        super().__init__(replies)
        self.schemas = []

    async def _judge_uncached(self, requests, schemas, finish):
        self.schemas += list(schemas)
        await super()._judge_uncached(requests, schemas, finish)


def test_check_steps_sends_one_schema_per_step():
    long = Passage(title="Long", text=" ".join(f"w{i}" for i in range(30)) + ".")  # one 30-word sentence
    judge = SchemaRecordingJudge({"[a]": reply(quote=PARIS.text), "[b]": reply(quote="w15 w16 w17 w18 w19 w20 w21")})
    verifier = StepGapVerifier(judge, ScriptedNLI(default="neutral"), progress=False)
    labels = verifier.verify(trace(inference("a", evidence=(PARIS,)), conclusion("b", evidence=(LYON, long))))
    first, second = (s.model_json_schema()["properties"]["quote"]["enum"] for s in judge.schemas)
    assert first == [PARIS.text, ""]
    # 30 words -> two chunks of 15 words
    assert second == [
        LYON.text,
        " ".join(f"w{i}" for i in range(15)),
        " ".join(f"w{i}" for i in range(15, 30)) + ".",
        "",
    ]
    assert judge.calls == [2]
    # the second quote is not a candidate (the judge ignored the schema) but a verbatim span: read as a plain
    # StepCheck, it passes find_quote and goes to stage D
    assert [lab.label for lab in labels] == ["MB", "MB"]
    # constrain_quotes=False sends the plain StepCheck
    judge = SchemaRecordingJudge({"[a]": reply()})
    StepGapVerifier(judge, ScriptedNLI(), progress=False, constrain_quotes=False).verify(trace(inference("a")))
    assert judge.schemas == [StepCheck]


# --------------------------------------------------------------------------------------------------------------------
# NLI backends
# --------------------------------------------------------------------------------------------------------------------


def tiny_cross_encoder(tmp_path, id2label):
    """A 2-layer BERT classifier with random weights over a 40-word WordPiece vocabulary."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    words = "the of is a in city capital france lyon paris born died river largest third most populous and was".split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *[f"w{i}" for i in range(20)]]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=3,
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )
    torch.manual_seed(0)
    return BertForSequenceClassification(config).eval(), tokenizer


PAIRS = [
    ("lyon is the third largest city of france", "lyon is in france"),
    ("paris is the capital", "paris was born"),
    ("the river of lyon", "the capital of france is paris and lyon is the third most populous city"),
    ("france", "lyon died"),
    ("a city in france", "the largest city"),
]


@pytest.mark.parametrize(
    "id2label",
    [
        {0: "CONTRADICTION", 1: "ENTAILMENT", 2: "NEUTRAL"},  # cross-encoder/nli-deberta-v3-large's order
        {0: "entailment", 1: "neutral", 2: "contradiction"},  # MNLI order
    ],
)
def test_cross_encoder_reads_labels_by_name_and_batching_is_exact(tmp_path, id2label):
    model, tokenizer = tiny_cross_encoder(tmp_path, id2label)
    # Reference, computed independently: one pair at a time, argmax -> id2label name, lower-cased.
    expected = []
    for premise, hypothesis in PAIRS:
        with torch.no_grad():
            logits = model(**tokenizer(premise, hypothesis, return_tensors="pt")).logits[0]
        expected.append(id2label[int(logits.argmax())].lower())
    batched = CrossEncoderNLI("tiny", batch_size=4, model=model, tokenizer=tokenizer).predict(PAIRS)
    single = CrossEncoderNLI("tiny", batch_size=1, model=model, tokenizer=tokenizer).predict(PAIRS)
    assert batched == single == expected
    assert set(expected) <= {"entailment", "neutral", "contradiction"}


def test_cross_encoder_probabilities_are_the_softmax_of_its_logits(tmp_path):
    id2label = {0: "CONTRADICTION", 1: "ENTAILMENT", 2: "NEUTRAL"}
    model, tokenizer = tiny_cross_encoder(tmp_path, id2label)
    nli = CrossEncoderNLI("tiny", batch_size=2, model=model, tokenizer=tokenizer)
    got = nli.predict_proba(PAIRS)
    for (premise, hypothesis), probs in zip(PAIRS, got, strict=True):
        # reference: one pair alone, exp(logit) / sum(exp(logits)) per class, named by id2label
        with torch.no_grad():
            logits = model(**tokenizer(premise, hypothesis, return_tensors="pt")).logits[0].tolist()
        total = sum(math.exp(x) for x in logits)
        expected = {id2label[i].lower(): math.exp(x) / total for i, x in enumerate(logits)}
        assert set(probs) == {"entailment", "neutral", "contradiction"}
        assert probs == pytest.approx(expected, abs=1e-5)  # batched with padding vs alone: a tolerance
    assert nli.predict(PAIRS) == [max(p, key=p.get) for p in got]


def test_cross_encoder_label_order_matters(tmp_path):
    # Same weights, two id2label orders: each prediction moves with its class name.
    a = {0: "contradiction", 1: "entailment", 2: "neutral"}
    model, tokenizer = tiny_cross_encoder(tmp_path, a)
    first = CrossEncoderNLI("tiny", model=model, tokenizer=tokenizer).predict(PAIRS)
    swapped = {0: "entailment", 1: "contradiction", 2: "neutral"}
    second = CrossEncoderNLI("tiny", model=model, tokenizer=tokenizer, label_map=swapped).predict(PAIRS)
    swap = {"entailment": "contradiction", "contradiction": "entailment", "neutral": "neutral"}
    assert second == [swap[x] for x in first]


@pytest.mark.parametrize(
    "id2label",
    [
        {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"},
        {0: "entailment", 1: "not_entailment"},
        {0: "entailment", 1: "neutral", 2: "neutral contradiction"},
        {0: "entailment", 1: "neutral", 2: "neutral"},
    ],
)
def test_unmappable_labels_raise(id2label):
    with pytest.raises(ValueError, match="id2label"):
        map_nli_labels(id2label)


def test_unloadable_cross_encoder_falls_back_to_judge(tmp_path):
    judge = RecordedJudge({})
    assert isinstance(make_nli(str(tmp_path / "missing"), judge), JudgeNLI)
    with pytest.raises((OSError, ValueError)):
        make_nli(str(tmp_path / "missing"), None)


def test_judge_nli_parses_and_unscored_is_none():
    judge = RecordedJudge({"HYPOTHESIS:\nh1": '{"label": "entailment"}', "HYPOTHESIS:\nh2": '{"label": "Entailment"}'})
    nli = CachedNLI(JudgeNLI(judge))
    # "Entailment" is not coerced: unscored; h3 has no reply
    assert nli.predict([("p", "h1"), ("p", "h2"), ("p", "h3"), ("p", "h1")]) == ["entailment", None, None, "entailment"]
    assert judge.calls == [3]  # one call; the repeated pair is asked once
    assert nli.predict([("p", "h1"), ("p", "h2")]) == ["entailment", None]
    assert judge.calls == [3, 1]  # only the unscored pair is asked again


@pytest.mark.parametrize("label", ["Entailment", " neutral", "NEUTRAL", "contradict", "", 1, True, None])
def test_nli_verdict_is_never_coerced(label):
    assert parse_judgement(json.dumps({"label": label}), NLIVerdict) == (None, "schema_mismatch")
    assert parse_judgement('{"label": "neutral", "why": "x"}', NLIVerdict) == (None, "schema_mismatch")


# --------------------------------------------------------------------------------------------------------------------
# Integration: the local `transformers serve` judge (protocol only: a 135M model is a weak judge)
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_integration_local_judge_server(default_model_path):
    # The embedded judge server (vLLM, docs/architecture.md "Local servers") is sent each step's schema: the replies follow it
    # (one JSON document, a quote among the step's candidates or ""), and the closed choices come with probabilities.
    # vLLM is a declared dependency: a server that does not start is a failure, with its log tail, never a skip.
    server = JudgeServer("default", num_threads=1, startup_timeout_s=240)
    server.start()
    try:
        judge = OpenAICompatibleJudge(server.base_url, server.model_id, max_tokens=256, timeout_s=300, max_retries=0)
        verifier = StepGapVerifier(judge, JudgeNLI(judge), progress=False)
        traces = [trace(inference("x"), conclusion("y")), trace(conclusion("z", evidence=()))]
        checks = verifier.check_steps(traces)
        labels = verifier.route(traces, checks)
    finally:
        server.stop()
    steps = [step for t in traces for step in t.steps]
    results = [r for row in checks for r in row]
    assert [r.unscored for r in results] == [None, None, None] and all(r.followed_schema for r in results)
    for step, result in zip(steps, results, strict=True):
        assert result.value.quote in (*quote_candidates(step.evidence), "")  # never a paraphrase or placeholder
        assert set(result.probs) >= {"off_target", "abstains", "abstention_accurate", "entity_match"}
    assert results[2].value.quote == ""  # no evidence: the only choice
    assert all(lab.label in LABELS and lab.label != "ERROR" for row in labels for lab in row), labels
    stats = judge.stats.as_dict()
    assert stats["unscored"] == 0 and stats["schema_ignored"] == 0 and stats["with_probs"] == stats["requests"] >= 3
