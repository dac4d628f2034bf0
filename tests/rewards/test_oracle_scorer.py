"""The oracle as GRPO rewards (`procrl.rewards.oracle.scorer`): ProcessAcc and Φ_K per completion, and the bounded
step scorer's values and token boundaries with the real SmolLM2 tokenizer."""

import math
import pickle
import random

import pytest

from procrl.rewards.oracle import (
    OracleReward,
    OracleStepRewards,
    gold_steps_from_json,
    oracle_labels,
    oracle_process_reward,
)
from procrl.step_rewards import StepRewards

QUESTION = "Sam has 14 marbles. He wins 7 more, then gives 9 away. How many marbles does he have now?"
GOLD_JSON = '[[14,"+",7,21],[21,"-",9,12]]'
GOLD = gold_steps_from_json(GOLD_JSON)
CORRECT = "14 + 7 = 21. 21 - 9 = 12. The answer is 12."


def _ids(tok, text, eos=True):
    return tok.encode(text, add_special_tokens=False) + ([tok.eos_token_id] if eos else [])


def _score(tok, texts, penalty=0.5, eos=True, **columns):
    ids = [_ids(tok, t, eos) for t in texts]
    columns = {"question": [QUESTION] * len(texts), "gold_steps": [GOLD_JSON] * len(texts), **columns}
    return ids, OracleStepRewards(penalty, tok)(prompts=None, completions=texts, completion_ids=ids, **columns)


def test_scalar_rewards():
    texts = [CORRECT, "14 + 7 = 22. 22 - 9 = 13.", "14 + 7 - 9 = 12.", "2 + 2 = 4. 14 + 7 = 21. 21 - 9 = 12.", ""]
    columns = {"question": [QUESTION] * 5, "gold_steps": [GOLD_JSON] * 5}
    assert oracle_process_reward(completions=texts, **columns) == [1.0, 0.0, 0.5, 1.0, 0.0]
    assert OracleReward(0.5)(completions=texts, **columns) == [1.0, -0.5, 0.5, 0.5, 0.0]
    # conversational completions; an unparseable or empty gold gives None
    chat = [[{"role": "assistant", "content": CORRECT}]] * 3
    assert oracle_process_reward(completions=chat, question=[QUESTION] * 3, gold_steps=[GOLD_JSON, "nonsense", "[]"]) == [
        1.0, None, None
    ]  # fmt: skip


def test_no_gold_steps_column_is_a_clear_error(smollm2_tokenizer):
    message = r"the step oracle needs problems with gold steps \(procrl.data_builders.arithmetic\)"
    for func in (oracle_process_reward, OracleReward(), OracleStepRewards(tokenizer=smollm2_tokenizer)):
        with pytest.raises(ValueError, match=message):
            func(prompts=["q"], completions=[CORRECT], completion_ids=[[1, 2]], question=[QUESTION])
    with pytest.raises(ValueError, match="one entry per completion"):
        oracle_process_reward(completions=[CORRECT] * 2, question=[QUESTION] * 2, gold_steps=[GOLD_JSON])


def test_the_prompt_stands_in_for_a_missing_question():
    prompt = [{"role": "user", "content": QUESTION}]
    assert oracle_process_reward(prompts=[prompt], completions=[CORRECT], gold_steps=[GOLD_JSON]) == [1.0]


def test_step_values_and_token_boundaries(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids, (out,) = _score(tok, [CORRECT])
    assert isinstance(out, StepRewards) and out.values == [0.5, 0.5] and out.boundaries[-1] == len(ids[0])
    # step 0 ends with the tokens of its result, before the period; the EOS belongs to the last step
    assert tok.decode(ids[0][: out.boundaries[0]]) == "14 + 7 = 21"
    assert tok.decode(ids[0][out.boundaries[0] : out.boundaries[1]], skip_special_tokens=True) == (
        ". 21 - 9 = 12. The answer is 12."
    )
    # an error costs the penalty at the step that makes it, a later recovery still earns its results
    _, (slip,) = _score(tok, ["14 + 7 = 22. 14 + 7 = 21. 21 - 9 = 12."], penalty=0.25)
    assert slip.values == [-0.25, 0.5, 0.5]


def test_completions_without_steps(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids, outs = _score(tok, ["The answer is 12.", ""])
    assert outs[0] == StepRewards(values=[0.0], boundaries=[len(ids[0])])
    assert outs[1] == StepRewards(values=[0.0], boundaries=[1])  # the EOS alone
    scorer = OracleStepRewards(tokenizer=tok)
    none = scorer(completion_ids=[[], _ids(tok, CORRECT)], question=[QUESTION] * 2, gold_steps=[GOLD_JSON, "[[1]]"])
    assert none == [None, None]  # no ids; a gold that does not parse


def test_a_truncated_completion(smollm2_tokenizer):
    tok = smollm2_tokenizer
    text = "14 + 7 = 21. 21 - 9 = 1"  # cut inside "12": no EOS at the end
    ids, (cut,) = _score(tok, [text], eos=False)
    assert cut.values == [0.5] and cut.boundaries == [len(ids[0])]
    _, (ended,) = _score(tok, [text], eos=True)  # the model ended there: its last step is wrong
    assert ended.values == [0.5, -0.5]
    ids, (mid,) = _score(tok, ["14 + 7 = 21. 21 - 9 ="], eos=False)
    assert mid.values == [0.5] and mid.boundaries == [len(ids[0])]


def test_padding_and_repeats_do_not_raise_the_cumulative_reward(smollm2_tokenizer):
    tok = smollm2_tokenizer
    question = QUESTION + " (Sam is 2 years older than his 2 cousins.)"
    padded = "2 + 2 = 4. " * 15 + "14 + 7 = 21. " * 5 + "21 - 9 = 12. " * 5 + "The answer is 12."
    _, (clean, pad, rep) = _score(
        tok, [CORRECT, padded, "14 + 7 = 21. " * 12], question=[question] * 3
    )  # fmt: skip
    assert math.fsum(pad.values) == pytest.approx(math.fsum(clean.values)) == pytest.approx(1.0)
    assert len(pad.values) == 25 and max(pad.values) == 0.5 and pad.values.count(0.0) == 23
    assert math.fsum(rep.values) == pytest.approx(0.5)


def test_cumulative_reward_is_bounded_for_random_long_completions(smollm2_tokenizer):
    tok = smollm2_tokenizer
    pool = ["14 + 7 = 21. ", "14 + 7 = 22. ", "21 - 9 = 12. ", "22 - 9 = 13. ", "2 + 2 = 4. ", "14 + 9 = 23.\n\n",
            "21 - 8 = 13. ", "14 plus 7 is 21. ", "The answer is 12. ", "Hmm, ", "14 + 7 - 9 = 12. ", "add 9 to 14 "
            "to get 23. ", "21-9=12", "**21 - 9 = 12**\n", "(14 + 7) - 9 = 12, ", "😀 "]  # fmt: skip
    rng = random.Random(0)
    for trial in range(60):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 60)))
        penalty = rng.choice([0.0, 0.5, 1.0])
        eos = rng.random() < 0.7
        ids, (out,) = _score(tok, [text], penalty=penalty, eos=eos)
        if not ids[0]:
            assert out is None
            continue
        assert out.boundaries[-1] == len(ids[0]) and all(
            b > a for a, b in zip([0, *out.boundaries[:-1]], out.boundaries, strict=True)
        )
        partial = [math.fsum(out.values[: k + 1]) for k in range(len(out.values))]
        assert all(-penalty - 1e-9 <= p <= 1 + 1e-9 for p in partial), (trial, text)
        decoded = tok.decode(ids[0], skip_special_tokens=True)
        labels = oracle_labels(decoded, QUESTION, GOLD, truncated=not eos)
        assert partial[-1] == pytest.approx(labels.score(penalty))
        assert len(out.values) == max(1, len(labels.steps))


class _PieceTokenizer:
    """A tokenizer whose ids are fixed text pieces (so one token can straddle a whole step)."""

    eos_token_id = 0
    pad_token_id = 0

    def __init__(self, pieces):
        self.pieces = ["<eos>", *pieces]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.pieces[i] for i in ids if not (skip_special_tokens and i == 0))


def test_a_token_that_straddles_a_step_merges_its_value():
    tok = _PieceTokenizer(["14 + 7 = 2", "1. 21 - 8 = 13. 21 - 9 = 1", "2."])
    ids = [1, 2, 3, 0]
    (out,) = OracleStepRewards(tokenizer=tok)(completion_ids=[ids], question=[QUESTION], gold_steps=[GOLD_JSON])
    # step values +0.5 (21), -0.5 (the invented 8), +0.5 (12); no token starts inside step 1's chunk
    # (". 21 - 8 = 13"), so step 1 merges into step 0 and their values add up; the sum stays Φ_K = 0.5
    assert out == StepRewards(values=[0.0, 0.5], boundaries=[2, 4])


def test_settings_and_binding(smollm2_tokenizer):
    with pytest.raises(ValueError, match="penalty must be a number >= 0"):
        OracleStepRewards(-0.1)
    with pytest.raises(ValueError, match="penalty must be a number >= 0"):
        OracleReward(float("nan"))
    scorer = OracleStepRewards()
    with pytest.raises(ValueError, match="needs a tokenizer"):
        scorer(completion_ids=[[1]], question=[QUESTION], gold_steps=[GOLD_JSON])
    scorer.bind_policy(None, smollm2_tokenizer)
    assert scorer.tokenizer is smollm2_tokenizer and scorer.__name__ == "oracle_step_rewards"
    copy = pickle.loads(pickle.dumps(OracleStepRewards(0.25)))
    assert copy.penalty == 0.25 and copy.tokenizer is None
