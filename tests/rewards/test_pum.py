"""PUM rendering and scoring (rewards/pum/) on a tiny random LlamaForSequenceClassification.

The tiny model's score head is drawn with std 1 (not the 0.02 init), so U values are O(1) and differ between
prefixes: the 1e-4 agreement checks below compare values that are far apart, not all close to 0.
"""

import math

import pytest
import torch

from procrl.rewards.pum import PrefixUtilityModel, render_prefix, render_prompt_ids, strip_trailing_eos

PROBLEM = "Tom has 3 apples and buys 5 more. He gives 2 away. How many apples does he have?"
STEPS = [
    "Tom starts with 3 apples.\n\n",
    "He buys 5 more, so 3 + 5 = 8.\n\n",
    "He gives 2 away: 8 - 2 = 6.\n\n",
    "The answer is 6.",
]


@pytest.fixture(scope="module")
def tiny_pum(smollm2_tokenizer, tiny_pum_factory):
    return tiny_pum_factory(len(smollm2_tokenizer))


@pytest.fixture()
def scorer(tiny_pum, smollm2_tokenizer):
    return PrefixUtilityModel(tiny_pum, smollm2_tokenizer, max_length=1024, batch_size=8)


def plain_score(model, ids) -> float:
    """The reference: plain transformers, one unpadded sequence, `model(input_ids).logits`."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, 0].item()


def enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


# ----------------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------------


def test_render_layout_prompt_then_prefix_pieces_without_end_of_turn(smollm2_tokenizer):
    tok = smollm2_tokenizer
    r = render_prefix(tok, PROBLEM, STEPS, max_length=1024)
    chat = tok.apply_chat_template([{"role": "user", "content": PROBLEM}], add_generation_prompt=True, tokenize=False)
    prompt = enc(tok, chat)
    pieces = [enc(tok, s) for s in STEPS]
    assert r.input_ids == prompt + sum(pieces, [])
    assert r.prompt_length == len(prompt)
    # boundary k = prompt length + tokens of pieces 0..k
    expected, total = [], len(prompt)
    for piece in pieces:
        total += len(piece)
        expected.append(total)
    assert r.boundaries == expected and r.truncated_tokens == 0
    assert tok.decode(r.input_ids[r.boundaries[0] : r.boundaries[1]]) == STEPS[1]
    # no end-of-turn after the prefix: <|im_end|> (id 2) appears only inside the prompt (after system and user)
    assert r.input_ids[-1] != tok.eos_token_id
    assert r.input_ids.count(tok.eos_token_id) == prompt.count(tok.eos_token_id) == 2


def test_string_prefix_is_split_into_steps_like_the_pieces(smollm2_tokenizer):
    tok = smollm2_tokenizer
    # Why piecewise: SmolLM2 encodes "\n\n" as one token at a step's end but as two before the next word.
    assert enc(tok, "a\n\nb") != enc(tok, "a\n\n") + enc(tok, "b")
    as_text = render_prefix(tok, PROBLEM, "".join(STEPS), max_length=1024)
    as_pieces = render_prefix(tok, PROBLEM, STEPS, max_length=1024)
    assert as_text == as_pieces
    # a shorter prefix's ids are a strict prefix of the trajectory's ids
    two = render_prefix(tok, PROBLEM, "".join(STEPS[:2]), max_length=1024)
    assert two.input_ids == as_pieces.input_ids[: as_pieces.boundaries[1]]


def test_trailing_eos_is_stripped(smollm2_tokenizer):
    tok = smollm2_tokenizer
    plain = render_prefix(tok, PROBLEM, "".join(STEPS), max_length=1024)
    with_eos = render_prefix(tok, PROBLEM, "".join(STEPS) + "<|im_end|>", max_length=1024)
    assert with_eos == plain
    assert strip_trailing_eos("x<|im_end|>\n<|im_end|>", tok) == "x"
    # as the last of given pieces: the piece becomes empty and repeats the previous boundary
    pieces = render_prefix(tok, PROBLEM, [*STEPS, "<|im_end|>"], max_length=1024)
    assert pieces.input_ids == plain.input_ids and pieces.boundaries == [*plain.boundaries, plain.boundaries[-1]]


def test_truncation_keeps_the_problem_and_cuts_the_prefix_end(smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompt = render_prompt_ids(tok, PROBLEM)
    n0, n1 = len(enc(tok, STEPS[0])), len(enc(tok, STEPS[1]))  # 8 and 17 tokens
    full = len(prompt) + n0 + n1
    # fits exactly: max_length - 1 == full length
    r = render_prefix(tok, PROBLEM, STEPS[:2], max_length=full + 1)
    assert r.truncated_tokens == 0 and r.complete == [True, True]
    # one token over: step 0 (ends at prompt + 6) is whole, step 1 lost its last token
    r = render_prefix(tok, PROBLEM, STEPS[:2], max_length=full)
    assert r.truncated_tokens == 1 and len(r.input_ids) == full - 1
    assert r.complete == [True, False]
    # budget = prompt + 3 tokens: 8 + 17 - 3 = 22 tokens cut, both boundaries clipped to the budget
    r = render_prefix(tok, PROBLEM, STEPS[:2], max_length=len(prompt) + 3 + 1)
    assert r.truncated_tokens == n0 + n1 - 3
    assert r.input_ids == prompt + enc(tok, STEPS[0])[:3]
    assert r.boundaries == [len(prompt) + 3, len(prompt) + 3] and r.complete == [False, False]
    # budget ends exactly at step 0's end: step 0 whole, step 1 and the empty piece after it cut
    r = render_prefix(tok, PROBLEM, [STEPS[0], "", STEPS[1], ""], max_length=len(prompt) + n0 + 1)
    assert r.boundaries == [len(prompt) + n0] * 4 and r.complete == [True, True, False, False]
    # the problem itself is never cut
    with pytest.raises(ValueError, match="never cut"):
        render_prefix(tok, PROBLEM, STEPS, max_length=len(prompt))
    with pytest.raises(ValueError, match="max_length"):
        render_prefix(tok, PROBLEM, STEPS, max_length=1)


# ----------------------------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------------------------


def test_one_pass_equals_plain_per_prefix_scoring(scorer, tiny_pum, smollm2_tokenizer):
    r = scorer.render(PROBLEM, STEPS)
    one_pass = scorer.score_prefixes(PROBLEM, STEPS, include_empty=True)
    # reference: one plain forward per prefix (the empty prefix = the prompt), each prefix rendered on its own
    reference = [plain_score(tiny_pum, r.input_ids[: r.prompt_length])]
    for k in range(len(STEPS)):
        alone = render_prefix(smollm2_tokenizer, PROBLEM, STEPS[: k + 1], max_length=1024).input_ids
        assert alone == r.input_ids[: r.boundaries[k]]
        reference.append(plain_score(tiny_pum, alone))
    assert len(one_pass) == len(STEPS) + 1
    assert max(abs(a - b) for a, b in zip(one_pass, reference, strict=True)) < 1e-4
    assert max(reference) - min(reference) > 0.1  # the values really differ
    assert scorer.score_prefixes(PROBLEM, STEPS) == pytest.approx(one_pass[1:], abs=1e-5)


# Step scoring under truncation. `steps` index STEPS (None = an empty step); `budget(L, e)` is max_length - 1 from
# the prompt length L and the steps' token ends e (e[k] = L + tokens of steps 0..k, counted with `enc`); `scored`
# is by hand: step k is scored iff e[k] <= max_length - 1, i.e. its last token was kept.
TRUNCATION_CASES = {
    "fits_exactly": ([0, 1, 2, 3], lambda L, e: e[3], [True, True, True, True]),
    "cut_inside_last_step": ([0, 1, 2, 3], lambda L, e: e[3] - 1, [True, True, True, False]),
    "cut_inside_earlier_step": ([0, 1, 2, 3], lambda L, e: e[0] + 2, [True, False, False, False]),
    "cut_at_a_step_end": ([0, 1, 2, 3], lambda L, e: e[1], [True, True, False, False]),
    "cut_inside_first_step": ([0, 1], lambda L, e: L + 2, [False, False]),
    "empty_step_after_the_cut": ([0, 1, None, 2], lambda L, e: e[0] + 3, [True, False, False, False]),
    "empty_step_before_the_cut": ([0, None, 1, 2], lambda L, e: e[0] + 3, [True, True, False, False]),
    "empty_step_at_the_budget": ([0, 1, None, 2], lambda L, e: e[1], [True, True, True, False]),
}


@pytest.mark.parametrize("case", list(TRUNCATION_CASES))
def test_steps_cut_by_the_budget_are_unscored(case, tiny_pum, smollm2_tokenizer):
    tok = smollm2_tokenizer
    index, budget_of, scored = TRUNCATION_CASES[case]
    steps = ["" if k is None else STEPS[k] for k in index]
    L = len(render_prompt_ids(tok, PROBLEM))
    counts = [len(enc(tok, s)) for s in steps]
    assert min(c for c in counts if c) > 3  # "inside a step" cases cut 2 or 3 tokens into a step of more
    ends = [L + sum(counts[: k + 1]) for k in range(len(steps))]
    max_length = budget_of(L, ends) + 1
    pum = PrefixUtilityModel(tiny_pum, tok, max_length=max_length, batch_size=8)
    values = pum.score_prefixes(PROBLEM, steps, include_empty=True)
    # independent reference: each prefix alone, unbudgeted, through plain transformers
    u_empty = plain_score(tiny_pum, render_prompt_ids(tok, PROBLEM))
    reference = [plain_score(tiny_pum, render_prefix(tok, PROBLEM, steps[: k + 1], None).input_ids) for k in
                 range(len(steps))]  # fmt: skip
    assert len(values) == len(steps) + 1
    assert abs(values[0] - u_empty) < 1e-4  # U(x, ∅): the prompt is never cut
    for k, (value, ref, whole) in enumerate(zip(values[1:], reference, scored, strict=True)):
        if whole:
            assert abs(value - ref) < 1e-4, (case, k)
        else:
            assert math.isnan(value), (case, k)
    for k, step in enumerate(steps):  # a scored empty step is a copy of the value before it
        if not step and scored[k]:
            assert values[k + 1] == values[k]
    # batched with a shorter trajectory (step 0 alone: scored iff it fits, as in the long one)
    batch = pum.score_steps([PROBLEM, PROBLEM], [steps, [STEPS[0]]])
    assert [not math.isnan(v) for v in batch[0]] == scored
    assert index[0] == 0 and (abs(batch[1][0] - reference[0]) < 1e-4 if scored[0] else math.isnan(batch[1][0]))


def test_score_steps_batches_trajectories_like_single_ones(scorer):
    other = ["Half of 10 is 5.\n\n", "Five plus one is 6.\n\n", "So 6."]
    batched = scorer.score_steps([PROBLEM, "What is 10 / 2 + 1?"], [STEPS, other])
    alone = [scorer.score_prefixes(PROBLEM, STEPS), scorer.score_prefixes("What is 10 / 2 + 1?", other)]
    for row, ref in zip(batched, alone, strict=True):
        assert len(row) == len(ref)
        assert max(abs(a - b) for a, b in zip(row, ref, strict=True)) < 1e-4
    # an empty step repeats the previous value (a copy, so exactly equal); no steps give []
    values = scorer.score_prefixes(PROBLEM, [STEPS[0], "", STEPS[1]])
    assert values[1] == values[0]
    assert scorer.score_prefixes(PROBLEM, []) == []
    # a first empty step repeats U(x, ∅); in a batch with other trajectories (other rows, other shapes) too
    first_empty = scorer.score_prefixes(PROBLEM, ["", STEPS[0]], include_empty=True)
    assert first_empty[1] == first_empty[0]
    rows = scorer.score_steps([PROBLEM, PROBLEM], [other, [STEPS[0], "", "", STEPS[1], ""]])
    assert rows[1][1] == rows[1][0] and rows[1][2] == rows[1][0] and rows[1][4] == rows[1][3]
    assert abs(rows[1][0] - values[0]) < 1e-4 and abs(rows[1][3] - values[2]) < 1e-4


def test_pooling_is_padding_invariant_with_pad_equal_to_eos(scorer, tiny_pum, smollm2_tokenizer):
    target = "".join(STEPS[:2])
    ids = scorer.render(PROBLEM, target).input_ids
    assert smollm2_tokenizer.pad_token_id == smollm2_tokenizer.eos_token_id == 2
    assert 2 in ids[:-1] and ids[-1] != 2  # end-of-turn tokens inside the prompt, none at the end
    alone = scorer.score([PROBLEM], [target])[0]
    reference = plain_score(tiny_pum, ids)
    problems = [PROBLEM, "A much longer problem statement " * 6 + "?", "Short?"]
    prefixes = [target, "".join(STEPS), "x"]  # the target is padded in both batches (one longer, one shorter row)
    right = scorer.score(problems, prefixes, padding_side="right")[0]
    left = scorer.score(problems, prefixes, padding_side="left")[0]
    for value in (alone, right, left):
        assert abs(value - reference) < 1e-4


# ----------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------


def test_from_pretrained_full_checkpoint_roundtrip(tmp_path, tiny_pum, smollm2_tokenizer):
    tiny_pum.save_pretrained(tmp_path)
    smollm2_tokenizer.save_pretrained(tmp_path)
    loaded = PrefixUtilityModel.from_pretrained(tmp_path, device="cpu")
    expected = PrefixUtilityModel(tiny_pum, smollm2_tokenizer).score([PROBLEM], ["".join(STEPS)])
    assert loaded.score([PROBLEM], ["".join(STEPS)]) == pytest.approx(expected, abs=1e-6)


def test_from_pretrained_raises_without_a_trained_head(tmp_path, tiny_llama, smollm2_tokenizer):
    # a causal LM checkpoint: score.weight is missing -> it would be a random head
    tiny_llama.save_pretrained(tmp_path / "lm")
    smollm2_tokenizer.save_pretrained(tmp_path / "lm")
    with pytest.raises(ValueError, match="no trained score head"):
        PrefixUtilityModel.from_pretrained(tmp_path / "lm", device="cpu")


def test_lora_adapter_needs_the_head(tmp_path, tiny_llama, smollm2_tokenizer):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    base_dir = tmp_path / "lm"
    tiny_llama.save_pretrained(base_dir)
    smollm2_tokenizer.save_pretrained(base_dir)

    def adapter(task_type, name):
        torch.manual_seed(0)
        base = AutoModelForSequenceClassification.from_pretrained(base_dir, num_labels=1)
        peft_model = get_peft_model(base, LoraConfig(task_type=task_type, r=4, target_modules=["q_proj", "v_proj"]))
        with torch.no_grad():
            for n, p in peft_model.named_parameters():
                if "lora_B" in n or "modules_to_save" in n:
                    p.normal_(0.0, 0.5)  # as if trained: the adapter changes the scores
        peft_model.save_pretrained(tmp_path / name)
        return peft_model.eval()

    # SEQ_CLS: PEFT saves `score` as a module to save -> loads, and equals the in-memory PEFT model
    trained = adapter("SEQ_CLS", "seq_cls")
    expected = PrefixUtilityModel(trained, smollm2_tokenizer).score_prefixes(PROBLEM, STEPS)
    loaded = PrefixUtilityModel.from_pretrained(tmp_path / "seq_cls", device="cpu")
    assert loaded.score_prefixes(PROBLEM, STEPS) == pytest.approx(expected, abs=1e-5)
    # an adapter without the head on a causal-LM base: the head would be random -> raises
    adapter("FEATURE_EXTRACTION", "no_head")
    with pytest.raises(ValueError, match="no score-head weights"):
        PrefixUtilityModel.from_pretrained(tmp_path / "no_head", device="cpu")
