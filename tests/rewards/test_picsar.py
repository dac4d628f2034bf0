"""PiCSAR against independently computed log-probabilities (tiny random Llama over the SmolLM2 vocabulary)."""

import math
import pickle

import pytest
import torch

from procrl.generation import render_prompts
from procrl.rewards.picsar import PiCSARScore, PiCSARScorer, get_picsar_bonus, select_best_of_n


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
