"""PiCSAR against independently computed log-probabilities (tiny random Llama over the SmolLM2 vocabulary)."""

import math
import pickle

import pytest
import torch

from procrl.data_builders.arithmetic_tokenizer import arithmetic_tokenizer
from procrl.generation import render_prompts
from procrl.rewards.picsar import (
    DEFAULT_INSTRUCTION,
    PiCSARScore,
    PiCSARScorer,
    get_picsar_bonus,
    select_best_of_n,
)


def _manual_logps(model, ids, start):
    """log p(ids[t] | ids[:t]) for t >= start by a plain single-sequence forward (no padding)."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    logps = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
    return logps[start - 1 :].tolist()


@pytest.fixture()
def scorer(tiny_llama, smollm2_tokenizer):
    return PiCSARScorer(model=tiny_llama, tokenizer=smollm2_tokenizer)


def test_answer_term_scores_exactly_the_answer_tokens(scorer, tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    # byte-level BPE: "The answer is 42" encodes " 42" with its space; piecewise, "42" keeps its own tokens
    answer_ids = tok("42", add_special_tokens=False)["input_ids"]
    (got,) = scorer.answer_logps(["What is 6 x 7?"], ["The answer is "], ["42"])
    assert len(got) == len(answer_ids)
    context = scorer._context_ids(tok, "What is 6 x 7?", "The answer is ")
    assert tok.decode(context).endswith("The answer is <sep>\nFinal answer: ")
    want = _manual_logps(tiny_llama, context + answer_ids, len(context))
    assert got == pytest.approx(want, abs=1e-4)


def test_reasoning_term_has_one_entry_per_completion_token(scorer, tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "What is 1 + 1?"}]]
    texts = ["2 + 3 = 5. The answer is 5", "The answer is 2"]
    completion_ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    scores = scorer.score(prompts, texts, completion_ids=completion_ids)
    for score, ids, prompt in zip(scores, completion_ids, prompts, strict=True):
        assert len(score.reasoning_logps) == len(ids)  # EOS included
        prompt_ids = render_prompts(tok, [prompt])[0]
        assert list(score.reasoning_logps) == pytest.approx(
            _manual_logps(tiny_llama, prompt_ids + ids, len(prompt_ids)), abs=1e-4
        )
    # given completion_logps (the rollout's), they are used as they are: no forward pass for the reasoning term
    given = [[-0.5] * len(ids) for ids in completion_ids]
    scores = scorer.score(prompts, texts, completion_ids=completion_ids, completion_logps=given)
    assert [list(s.reasoning_logps) for s in scores] == given


def test_mean_and_sum_by_hand():
    s = PiCSARScore(reasoning_logps=(-1.0, -2.0, -3.0), answer_logps=(-0.5, -1.5), answer="7")
    assert s.sum == pytest.approx(-8.0)
    assert s.mean == pytest.approx(-2.0 + -1.0)


def test_reward_returns_none_without_an_answer_and_raw_means_otherwise(scorer):
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}]] * 2
    texts = ["I am not sure", "The answer is 5"]
    logps = [[-1.0, -1.0], [-0.2, -0.4, -0.6]]
    values = scorer(prompts=prompts, completions=texts, completion_ids=None, completion_logps=logps)
    assert values[0] is None
    (answer_term,) = scorer.answer_logps(["What is 2 + 3?"], ["The answer is 5"], ["5"])
    assert values[1] == pytest.approx(-0.4 + sum(answer_term) / len(answer_term), abs=1e-6)
    assert all(v is None or math.isfinite(v) for v in values)


def test_message_list_completions_work(scorer):
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}]]
    as_messages = scorer(
        prompts=prompts,
        completions=[[{"role": "assistant", "content": "The answer is 5"}]],
        completion_logps=[[-0.1, -0.2]],
    )
    as_text = scorer(prompts=prompts, completions=["The answer is 5"], completion_logps=[[-0.1, -0.2]])
    assert as_messages == pytest.approx(as_text)


def test_select_best_of_n_uses_the_sum():
    short_confident = PiCSARScore((-0.5, -0.5), (-0.1,), "3")  # sum -1.1, mean -0.6
    long_confident = PiCSARScore(tuple([-0.2] * 10), (-0.1,), "4")  # sum -2.1, mean -0.3
    assert select_best_of_n([short_confident, long_confident]) == 0
    assert select_best_of_n([short_confident, long_confident], normalize="mean") == 1
    assert select_best_of_n([None, None]) is None


def test_bonus_is_picklable_and_named():
    bonus = get_picsar_bonus()
    bonus.bind_policy(torch.nn.Linear(1, 1), object())
    clone = pickle.loads(pickle.dumps(bonus))
    assert clone.__name__ == "picsar_bonus"
    assert clone.model is None  # a live model never travels; the receiving trainer binds its own


def test_pickled_scorer_keeps_a_named_evaluator_and_refuses_a_model_object(tiny_llama, smollm2_tokenizer):
    named = PiCSARScorer(evaluator="some/evaluator-model")
    named.evaluator, named.evaluator_tokenizer = tiny_llama, smollm2_tokenizer  # as after loading it once
    clone = pickle.loads(pickle.dumps(named))
    assert clone.evaluator == "some/evaluator-model" and clone.evaluator_tokenizer is None  # reloads by name
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(PiCSARScorer(evaluator=tiny_llama, evaluator_tokenizer=smollm2_tokenizer))


def test_wrong_length_completion_logps_raises(scorer):
    with pytest.raises(ValueError, match="completion_logps"):
        scorer(
            prompts=[[{"role": "user", "content": "x"}]] * 2,
            completions=["The answer is 1"] * 2,
            completion_logps=[[-1.0]],
        )


# ----------------------------------------------------------------------------------------------------------
# The answer term's instruction and separator (`procrl select --picsar-instruction/--picsar-separator`)
# ----------------------------------------------------------------------------------------------------------


def test_an_empty_instruction_renders_the_problem_alone(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    scorer = PiCSARScorer(model=tiny_llama, tokenizer=tok, instruction="")
    context = scorer._context_ids(tok, "What is 6 x 7?", "6 x 7 = 42.")
    head = tok.apply_chat_template([{"role": "user", "content": "What is 6 x 7?"}], add_generation_prompt=True,
                                   tokenize=False)  # fmt: skip
    assert tok.decode(context) == head + "6 x 7 = 42.<sep>\nFinal answer: "  # no instruction, no blank line
    default = PiCSARScorer(model=tiny_llama, tokenizer=tok)._context_ids(tok, "What is 6 x 7?", "6 x 7 = 42.")
    assert "When you see a reasoning followed by <sep>, output the final answer.\n\nWhat is 6 x 7?" in tok.decode(
        default
    )


def test_join_space_scores_the_separators_trailing_space_with_the_answer(tiny_llama, smollm2_tokenizer):
    tok = smollm2_tokenizer
    joined = PiCSARScorer(model=tiny_llama, tokenizer=tok, separator="\nThe answer is ", join_space=True)
    (got,) = joined.answer_logps(["What is 6 x 7?"], ["6 x 7 = 42."], ["42"])
    context = joined._context_ids(tok, "What is 6 x 7?", "6 x 7 = 42.", "\nThe answer is")
    answer_ids = tok(" 42", add_special_tokens=False)["input_ids"]  # the moved space is scored with the answer
    assert tok.decode(context).endswith("6 x 7 = 42.\nThe answer is") and len(got) == len(answer_ids)
    assert got == pytest.approx(_manual_logps(tiny_llama, context + answer_ids, len(context)), abs=1e-4)
    # without it: the separator keeps its space and exactly "42"'s own tokens are scored
    apart = PiCSARScorer(model=tiny_llama, tokenizer=tok, separator="\nThe answer is ")
    (got,) = apart.answer_logps(["What is 6 x 7?"], ["6 x 7 = 42."], ["42"])
    context = apart._context_ids(tok, "What is 6 x 7?", "6 x 7 = 42.")
    assert tok.decode(context).endswith("6 x 7 = 42.\nThe answer is ")
    assert len(got) == len(tok("42", add_special_tokens=False)["input_ids"])
    # a separator without trailing whitespace: join_space changes nothing
    plain = [PiCSARScorer(model=tiny_llama, tokenizer=tok, separator=":", join_space=j) for j in (True, False)]
    one, two = (s.answer_logps(["q"], ["r"], ["42"])[0] for s in plain)
    assert one == pytest.approx(two, abs=1e-6)


def test_the_organisms_settings_score_its_own_answer_tokens(tiny_llama_factory):
    # the arith word-level tokenizer (the SFT organism's): the default instruction is mostly unknown words, the
    # organism's settings are all known tokens, and the answer is scored as the organism writes it (" 1", "1")
    tok = arithmetic_tokenizer()
    words = tok(DEFAULT_INSTRUCTION, add_special_tokens=False)["input_ids"]
    assert words.count(tok.unk_token_id) >= 5  # "When you see a reasoning followed by <sep>, ..."
    model = tiny_llama_factory(len(tok), seed=3)
    scorer = PiCSARScorer(model=model, tokenizer=tok, instruction="", separator="\n\nThe answer is ", join_space=True)
    question = (
        "Zara owns 3 marbles. Later, Zara receives 8 more marbles as a gift. How many marbles does Zara have now?"
    )
    trace = "3 + 8 = 11.\n\nThe answer is 11."  # an arith-ops2-d1 problem and its gold trace
    context = scorer._context_ids(tok, question, trace, "\n\nThe answer is")
    answer_ids = tok(" 11", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(answer_ids) == [" 1", "1"]
    assert tok.unk_token_id not in context + answer_ids
    assert tok.decode(context) == (
        f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{trace}\n\nThe answer is"
    )
    (got,) = scorer.answer_logps([question], [trace], ["11"])
    assert got == pytest.approx(_manual_logps(model, context + answer_ids, len(context)), abs=1e-4)
    # the same text without join_space: a lone " " token, then "1" (no space), which the organism never writes
    apart = PiCSARScorer(model=model, tokenizer=tok, instruction="", separator="\n\nThe answer is ")
    assert tok.convert_ids_to_tokens(apart._context_ids(tok, question, trace)[-1:]) == [" "]
    assert len(apart.answer_logps([question], [trace], ["11"])[0]) == 2  # "1", "1"
    # through score(): the same answer term, None without an answer
    ids = tok(trace, add_special_tokens=False)["input_ids"]
    prompt = [{"role": "user", "content": question}]
    scores = scorer.score([prompt, prompt], [trace, "3 + 8"], completion_logps=[[-0.1] * len(ids), [-0.1]])
    assert scores[1] is None and list(scores[0].answer_logps) == pytest.approx(got, abs=1e-6)


def test_get_picsar_bonus_passes_join_space():
    assert get_picsar_bonus(separator="x ", join_space=True).join_space is True
    assert get_picsar_bonus().join_space is False
