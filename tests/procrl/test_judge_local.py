"""The in-process judge's constrained path (`procrl.judges.local` + `procrl.judges.constrained`): schema-valid
replies on random tiny models, per-token alternatives and choice probabilities against hand-computed values on a
tiny model with fixed logits, mixed schemas in one batch, matcher failures typed."""

from __future__ import annotations

import copy
import json
import logging
import math
from typing import Literal

import pytest
import torch
from pydantic import BaseModel, ConfigDict, Field
from tiny_models import make_tiny_llama, tiny_llama_config
from transformers import LlamaForCausalLM

from procrl.judges import TransformersJudge
from procrl.judges.constrained import JSONSchemaLogitsProcessor, json_grammar, llg_tokenizer, token_alternatives


class Scores(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    faithfulness: int = Field(ge=1, le=5)
    utility: int = Field(ge=1, le=5)


class Label(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    label: Literal["entailment", "neutral", "contradiction"]


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    off_target: bool
    abstains: bool
    quote: str = Field(max_length=24)
    reason: str = Field(max_length=16)


class Score(BaseModel):
    score: int = Field(ge=1, le=5)  # no extra="forbid": the grammar still closes the object


class Unsupported(BaseModel):
    """A schema llguidance refuses ("Unknown format")."""

    code: str = Field(json_schema_extra={"format": "no-such-format"})


def req(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def compact(value: BaseModel) -> str:
    """The reply layout the grammar enforces: json.dumps separators, fields in schema order."""
    return json.dumps(value.model_dump(), separators=(", ", ": "))


# --------------------------------------------------------------------------------------------------------------------
# Schema-valid replies from random weights
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("schema", [Scores, Label, Check])
def test_constrained_replies_are_schema_valid_on_random_models(schema, seed, smollm2_tokenizer):
    model = make_tiny_llama(len(smollm2_tokenizer), seed=seed)
    judge = TransformersJudge(
        "tiny", model=model, tokenizer=smollm2_tokenizer, max_new_tokens=160, batch_size=3, top_logprobs=3
    )
    results = judge.judge([req("a"), req("bb bb"), req("a much longer request " * 5)], schema, progress=False)
    assert all(r.ok and r.followed_schema for r in results), [(r.unscored, r.raw) for r in results]
    assert all(isinstance(r.value, schema) and r.attempts == 1 for r in results)
    if schema is not Check:  # no free text: the reply is exactly the compact layout
        assert all(r.raw == compact(r.value) for r in results)
    # probabilities for the closed choices (two bounded ints, a Literal, two bools)
    expected_fields = {Scores: {"faithfulness", "utility"}, Label: {"label"}, Check: {"off_target", "abstains"}}
    for r in results:
        assert r.probs is not None and set(r.probs) == expected_fields[schema], r.probs
        for dist in r.probs.values():
            assert sum(dist.values()) == pytest.approx(1.0, abs=1e-6)
    assert judge.stats.with_probs == 3 and judge.stats.schema_ignored == 0


def test_unconstrained_replies_from_random_weights_are_typed_failures(smollm2_tokenizer):
    model = make_tiny_llama(len(smollm2_tokenizer), seed=0)
    judge = TransformersJudge("tiny", model=model, tokenizer=smollm2_tokenizer, max_new_tokens=12, constrained=False)
    results = judge.judge([req("a"), req("b")], Scores, progress=False)
    assert all(not r.ok and r.unscored in {"invalid_json", "empty"} for r in results)


def test_free_object_schema_gets_no_extra_keys(smollm2_tokenizer):
    # `Score` allows extra keys in JSON Schema terms; the grammar closes the object, so the reply ends after "score".
    assert '"additionalProperties": false' in json.dumps(json.loads(json_grammar(Score)))
    model = make_tiny_llama(len(smollm2_tokenizer), seed=3)
    judge = TransformersJudge("tiny", model=model, tokenizer=smollm2_tokenizer, max_new_tokens=40, top_logprobs=0)
    (result,) = judge.judge([req("x")], Score, progress=False)
    assert result.ok and result.raw == compact(result.value) and result.probs is None


# --------------------------------------------------------------------------------------------------------------------
# Fixed logits: alternatives and probabilities computed by hand
# --------------------------------------------------------------------------------------------------------------------

# Logits at EVERY position: the five digit tokens of SmolLM2 ("1".."5" are ids 33..37) get these values, every
# other token -30 (exp(-30) ~ 1e-13: negligible next to the digits wherever the grammar allows digits).
DIGIT_LOGITS = {"1": 0.0, "2": 1.0, "3": 2.5, "4": 1.5, "5": -1.0}


class FixedLogitsLM(LlamaForCausalLM):
    """A tiny Llama whose logits are the same fixed vector at every position and for every input."""

    def __init__(self, config, fixed: torch.Tensor):
        super().__init__(config)
        self.register_buffer("fixed", fixed)

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = self.fixed.to(out.logits.dtype).expand_as(out.logits).clone()
        return out


@pytest.fixture
def fixed_lm(smollm2_tokenizer):
    fixed = torch.full((len(smollm2_tokenizer),), -30.0)
    for digit, logit in DIGIT_LOGITS.items():
        fixed[smollm2_tokenizer.convert_tokens_to_ids(digit)] = logit
    torch.manual_seed(0)
    return FixedLogitsLM(tiny_llama_config(len(smollm2_tokenizer), tie_word_embeddings=True), fixed).eval()


def hand_softmax(logits: dict[str, float]) -> dict[str, float]:
    z = sum(math.exp(v) for v in logits.values())
    return {k: math.exp(v) / z for k, v in logits.items()}


def test_fixed_logits_give_hand_computed_alternatives_and_probs(fixed_lm, smollm2_tokenizer):
    judge = TransformersJudge("fixed", model=fixed_lm, tokenizer=smollm2_tokenizer, max_new_tokens=80)
    (result,) = judge.judge([req("grade this")], Scores, progress=False)
    # Greedy under the grammar: the argmax digit "3" for both fields.
    assert result.ok and result.raw == '{"faithfulness": 3, "utility": 3}'
    expected = hand_softmax(DIGIT_LOGITS)  # renormalised over the five digits (the grammar masks the rest)
    assert expected["3"] == pytest.approx(0.5871, abs=1e-4)  # exp(2.5) / (1 + e + e^2.5 + e^1.5 + e^-1)
    assert set(result.probs) == {"faithfulness", "utility"}
    for field in ("faithfulness", "utility"):
        assert set(result.probs[field]) == set(expected)
        for digit, p in expected.items():
            assert result.probs[field][digit] == pytest.approx(p, abs=1e-5)


def test_token_alternatives_at_the_score_position(fixed_lm, smollm2_tokenizer):
    """The recorded top-5 at the digit position are the five digits with log-probs log_softmax over them."""
    eos = [smollm2_tokenizer.eos_token_id]
    prompt = torch.tensor([smollm2_tokenizer("hello")["input_ids"]])
    processor = JSONSchemaLogitsProcessor(smollm2_tokenizer, [Score], eos, top_k=5)
    out = fixed_lm.generate(
        input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, do_sample=False,
        eos_token_id=eos, pad_token_id=eos[0], logits_processor=[processor],
    )  # fmt: skip
    ids = out[0, prompt.shape[1] :].tolist()
    assert ids[-1] == eos[0]
    tokens = token_alternatives(ids, processor.top_logprobs, 0, llg_tokenizer(smollm2_tokenizer, eos))
    text = smollm2_tokenizer.decode(ids, skip_special_tokens=True)
    assert text == '{"score": 3}' and "".join(t for t, _ in tokens) == text
    assert len(tokens) == len(ids) - 1  # EOS left out
    (position,) = [i for i, (t, _) in enumerate(tokens) if t == "3"]
    alternatives = dict(tokens[position][1])
    log_z = math.log(sum(math.exp(v) for v in DIGIT_LOGITS.values()))
    assert set(alternatives) == set(DIGIT_LOGITS)
    for digit, logit in DIGIT_LOGITS.items():
        assert alternatives[digit] == pytest.approx(logit - log_z, abs=1e-5)
    # Forced structure tokens (one allowed token) have log-prob 0 and no other alternative.
    assert all(alts == [(t, 0.0)] for t, alts in tokens[:position] if len(alts) == 1)


def test_token_alternatives_split_utf8(smollm2_tokenizer):
    """A character spread over several byte-level tokens belongs to the token that completes it."""
    ids = smollm2_tokenizer("a🙂b", add_special_tokens=False)["input_ids"]
    assert len(ids) == 4  # "a", two byte tokens of the emoji, "b"
    steps = [(torch.tensor([[0.0]]), torch.tensor([[i]])) for i in ids]
    tokens = token_alternatives(ids, steps, 0, llg_tokenizer(smollm2_tokenizer, [smollm2_tokenizer.eos_token_id]))
    assert [t for t, _ in tokens] == ["a", "", "🙂", "b"]
    assert tokens[0][1] == [("a", 0.0)]
    lltok = llg_tokenizer(smollm2_tokenizer, [smollm2_tokenizer.eos_token_id])
    assert token_alternatives(ids, steps[:2], 0, lltok) is None  # fewer recorded steps than tokens


def test_unconstrained_alternatives_are_the_raw_distribution(smollm2_tokenizer):
    """Free generation records log_softmax of the raw logits: the chosen tokens' log-probs match a separate
    teacher-forced forward pass over prompt + reply."""
    model = make_tiny_llama(len(smollm2_tokenizer), seed=5)
    eos = [smollm2_tokenizer.eos_token_id]
    prompt = smollm2_tokenizer("check me", add_special_tokens=False)["input_ids"]
    processor = JSONSchemaLogitsProcessor(smollm2_tokenizer, None, eos, top_k=2, batch_size=1)
    x = torch.tensor([prompt])
    out = model.generate(
        input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=8, do_sample=False,
        eos_token_id=eos, pad_token_id=eos[0], logits_processor=[processor],
    )  # fmt: skip
    ids = out[0, len(prompt) :].tolist()
    with torch.no_grad():
        logps = torch.log_softmax(model(out).logits[0, len(prompt) - 1 : -1].float(), dim=-1)
    for pos, token in enumerate(ids):
        values, alt_ids = processor.top_logprobs[pos]
        assert alt_ids[0, 0].item() == token  # greedy: the chosen token is the top alternative
        assert values[0, 0].item() == pytest.approx(logps[pos, token].item(), abs=1e-4)


# --------------------------------------------------------------------------------------------------------------------
# Batches, failures, cache, prompts
# --------------------------------------------------------------------------------------------------------------------


def test_batch_with_different_schemas(fixed_lm, smollm2_tokenizer):
    judge = TransformersJudge("fixed", model=fixed_lm, tokenizer=smollm2_tokenizer, max_new_tokens=80, batch_size=4)
    schemas = [Score, Label, Scores, Label]
    results = judge.judge([req("a"), req("b"), req("c"), req("d")], schemas, progress=False)
    assert all(r.ok for r in results), [(r.unscored, r.raw) for r in results]
    assert [type(r.value) for r in results] == schemas
    assert results[0].raw == '{"score": 3}' and results[2].raw == '{"faithfulness": 3, "utility": 3}'
    assert results[1].value == results[3].value and results[1].raw == compact(results[1].value)
    expected = hand_softmax(DIGIT_LOGITS)
    assert results[0].probs["score"]["3"] == pytest.approx(expected["3"], abs=1e-5)
    assert set(results[1].probs) == {"label"} and sum(results[1].probs["label"].values()) == pytest.approx(1.0)


def test_schema_llguidance_refuses_is_typed_and_spares_the_batch(fixed_lm, smollm2_tokenizer, caplog):
    judge = TransformersJudge("fixed", model=fixed_lm, tokenizer=smollm2_tokenizer, max_new_tokens=30, batch_size=3)
    with caplog.at_level(logging.WARNING, logger="procrl.judges.constrained"):
        results = judge.judge([req("a"), req("b"), req("c")], [Score, Unsupported, Score], progress=False)
    # The refused row ends at once (forced EOS): an empty reply, unscored; its neighbours are unaffected.
    assert results[1].unscored == "empty" and results[1].raw == ""
    assert [r.raw for r in (results[0], results[2])] == ['{"score": 3}'] * 2
    assert any("no-such-format" in rec.getMessage() for rec in caplog.records)


def test_matcher_error_mid_reply_ends_the_row(smollm2_tokenizer, caplog):
    """A token the grammar did not allow (a model that ignored the mask) puts the matcher in an error state: the
    row is logged and forced to EOS; other rows keep their masks."""
    eos = [smollm2_tokenizer.eos_token_id]
    processor = JSONSchemaLogitsProcessor(smollm2_tokenizer, [Score, Score], eos, top_k=1)
    vocab = len(smollm2_tokenizer)
    prompt = torch.zeros((2, 3), dtype=torch.long)
    processor(prompt, torch.zeros((2, vocab)))  # first step: nothing consumed yet
    bad = smollm2_tokenizer.convert_tokens_to_ids("x")  # a reply must start with "{"
    brace = smollm2_tokenizer.convert_tokens_to_ids("{")
    with caplog.at_level(logging.WARNING, logger="procrl.judges.constrained"):
        scores = processor(torch.cat([prompt, torch.tensor([[bad], [brace]])], dim=1), torch.zeros((2, vocab)))
    assert processor.errors[0] is not None and processor.errors[1] is None
    assert torch.isfinite(scores[0]).nonzero().flatten().tolist() == eos  # row 0: only EOS left
    assert scores[0, eos[0]] == 0.0
    # row 1: still masked by its grammar: after "{" only the start of '"score": ' (SmolLM2 has no '"s' token)
    allowed = torch.isfinite(scores[1]).nonzero().flatten().tolist()
    assert allowed and all('"score": '.startswith(smollm2_tokenizer.decode([i])) for i in allowed)
    assert any("row 0 ends early" in rec.getMessage() for rec in caplog.records)
    # a finished row's later (padding) tokens are not consumed: no new error
    processor(torch.cat([prompt, torch.tensor([[bad, eos[0]], [brace, eos[0]]])], dim=1), torch.zeros((2, vocab)))
    processor(torch.cat([prompt, torch.tensor([[bad, eos[0], 7], [brace, eos[0], 7]])], dim=1), torch.zeros((2, vocab)))
    assert processor.errors[1] is None


def test_reply_cut_by_the_token_budget_is_typed(smollm2_tokenizer):
    model = make_tiny_llama(len(smollm2_tokenizer), seed=0)
    judge = TransformersJudge("tiny", model=model, tokenizer=smollm2_tokenizer, max_new_tokens=3)
    (result,) = judge.judge([req("a")], Scores, progress=False)
    assert not result.ok and result.unscored == "invalid_json" and result.raw.startswith("{")


def test_cache_payload_names_constrained_and_top_logprobs(fixed_lm, smollm2_tokenizer, tmp_path):
    on = TransformersJudge("fixed", model=fixed_lm, tokenizer=smollm2_tokenizer, max_new_tokens=30, cache_dir=tmp_path)
    off = TransformersJudge(
        "fixed", model=fixed_lm, tokenizer=smollm2_tokenizer, max_new_tokens=30, cache_dir=tmp_path, constrained=False
    )
    fewer = TransformersJudge(
        "fixed", model=fixed_lm, tokenizer=smollm2_tokenizer, max_new_tokens=30, cache_dir=tmp_path, top_logprobs=2
    )
    payloads = [j._request_payload(req("a"), Score) for j in (on, off, fewer)]
    assert (payloads[0]["constrained"], payloads[1]["constrained"]) == (True, False)
    assert payloads[1]["grammar"] is None and payloads[0]["grammar"]["library"] == "llguidance"
    assert (payloads[0]["top_logprobs"], payloads[2]["top_logprobs"]) == (5, 2)
    (first,) = on.judge([req("a")], Score, progress=False)
    (again,) = on.judge([req("a")], Score, progress=False)
    assert again.cached and again.value == first.value
    assert again.probs["score"] == pytest.approx(first.probs["score"], abs=1e-9)
    (other,) = fewer.judge([req("a")], Score, progress=False)
    assert not other.cached  # another top_logprobs is another request


def test_no_chat_template_gets_a_plain_prompt(fixed_lm, smollm2_tokenizer):
    tokenizer = copy.deepcopy(smollm2_tokenizer)
    tokenizer.chat_template = None
    seen = []
    original = fixed_lm.generate

    def spy(**kwargs):
        seen.append(kwargs["input_ids"][0][kwargs["attention_mask"][0].bool()].tolist())
        return original(**kwargs)

    fixed_lm.generate = spy
    judge = TransformersJudge("fixed", model=fixed_lm, tokenizer=tokenizer, max_new_tokens=30)
    (result,) = judge.judge(
        [[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]], Score, progress=False
    )
    assert tokenizer.decode(seen[0]) == "system: S\nuser: U\nassistant:"
    assert result.ok and result.raw == '{"score": 3}'


def test_bad_arguments_raise(smollm2_tokenizer):
    with pytest.raises(ValueError, match="top_logprobs"):
        TransformersJudge("x", top_logprobs=-1)
    with pytest.raises(ValueError, match="eos_ids"):
        JSONSchemaLogitsProcessor(smollm2_tokenizer, [Score], [])
    processor = JSONSchemaLogitsProcessor(smollm2_tokenizer, [Score], [2])
    with pytest.raises(ValueError, match="built for 1 rows"):
        processor(torch.zeros((2, 3), dtype=torch.long), torch.zeros((2, len(smollm2_tokenizer))))
