"""PUM reward functions (rewards/pum_rewards.py) on a tiny random LlamaForSequenceClassification.

The score head is drawn with std 1 so U values are O(1) and differ between prefixes (the identities below compare
values that are far apart). References are computed with the scorer's own per-prefix path `score`, independent
of the one-pass `score_steps` the rewards use.
"""

import math
import pickle

import pytest

from procrl.rewards.pum import PrefixUtilityModel
from procrl.rewards.pum_rewards import PUMReward, PUMStepRewards, get_pum_reward
from procrl.rewards.steps import token_steps
from procrl.step_rewards import StepRewards

PROBLEM = "Tom has 3 apples and buys 5 more. How many apples does he have?"
COMPLETION = "Tom starts with 3 apples.\n\nHe buys 5 more, so 3 + 5 = 8.\n\nThe answer is 8."


@pytest.fixture(scope="module")
def pum(smollm2_tokenizer, tiny_pum_factory):
    return PrefixUtilityModel(tiny_pum_factory(len(smollm2_tokenizer)), smollm2_tokenizer, max_length=1024)


def sampled_ids(tok, text: str, eos: bool = True) -> list[int]:
    """Ids as SmolLM2 samples them: "\\n\\n" as its single token (encode would give the same here), plus EOS."""
    nn = tok.convert_tokens_to_ids("ĊĊ")
    ids: list[int] = []
    for k, part in enumerate(text.split("\n\n")):
        if k:
            ids.append(nn)
        ids += tok.encode(part, add_special_tokens=False)
    return ids + ([tok.eos_token_id] if eos else [])


def test_full_equals_last_and_min_is_at_most_last(pum):
    kw = dict(prompts=["ignored"] * 2, completions=[COMPLETION, "One step only."], question=[PROBLEM] * 2)
    full = PUMReward(pum, "full")(**kw)
    last = PUMReward(pum, "last")(**kw)
    low = PUMReward(pum, "min")(**kw)
    assert full == pytest.approx(last, abs=1e-4)
    assert all(m <= v + 1e-6 for m, v in zip(low, last, strict=True))
    # min over the 3 step prefixes, scored one by one (independent per-prefix path)
    prefixes = [
        "Tom starts with 3 apples.\n\n",
        "Tom starts with 3 apples.\n\nHe buys 5 more, so 3 + 5 = 8.\n\n",
        COMPLETION,
    ]
    assert low[0] == pytest.approx(min(pum.score([PROBLEM] * 3, prefixes)), abs=1e-4)
    # a one-step completion: min == last
    assert low[1] == pytest.approx(last[1], abs=1e-4)
    assert all(isinstance(v, float) and math.isfinite(v) for v in full + last + low)


def test_step_utilities_go_to_the_completions_table(pum):
    columns = {}
    kw = dict(prompts=["ignored"] * 2, completions=[COMPLETION, "   "], question=[PROBLEM] * 2)
    PUMReward(pum, "min")(**kw, log_extra=lambda k, v: columns.setdefault(k, v))
    (name,) = columns
    steps, blank = columns[name]
    prefixes = ["Tom starts with 3 apples.\n\n", "Tom starts with 3 apples.\n\nHe buys 5 more, so 3 + 5 = 8.\n\n"]
    assert name == "pum_utility_min/step_utilities" and blank is None  # no text: not scored
    assert steps == pytest.approx(pum.score([PROBLEM] * 3, [*prefixes, COMPLETION]), abs=1e-4)  # U after each step
    full = {}
    PUMReward(pum, "full")(**kw, log_extra=lambda k, v: full.setdefault(k, v))
    assert full == {}  # one value per completion: no per-step column


def test_trailing_eos_is_stripped(pum, smollm2_tokenizer):
    eos = smollm2_tokenizer.eos_token
    reward = get_pum_reward(pum)
    with_eos, without = reward(completions=[COMPLETION + eos, COMPLETION], question=[PROBLEM] * 2, prompts=[""] * 2)
    assert with_eos == pytest.approx(without, abs=1e-5)


def test_empty_completion_is_none_and_messages_are_accepted(pum):
    reward = PUMReward(pum)
    values = reward(
        prompts=[[{"role": "user", "content": PROBLEM}]] * 3,
        completions=["  \n", [{"role": "assistant", "content": COMPLETION}], COMPLETION],
        question=[PROBLEM] * 3,
    )
    assert values[0] is None
    assert values[1] == pytest.approx(values[2], abs=1e-6)


def test_problem_falls_back_to_prompt_with_warning(pum, caplog):
    reward = PUMReward(pum)
    with caplog.at_level("WARNING"):
        fallback = reward(prompts=[[{"role": "user", "content": PROBLEM}]], completions=[COMPLETION])
    assert "question" in caplog.text
    assert fallback == pytest.approx(reward(prompts=["x"], completions=[COMPLETION], question=[PROBLEM]), abs=1e-6)


def test_wrong_lengths_raise_naming_the_function(pum):
    with pytest.raises(ValueError, match="pum_utility_min"):
        PUMReward(pum, "min")(prompts=["a"], completions=["a", "b"], question=[PROBLEM])
    with pytest.raises(ValueError, match="mode"):
        PUMReward(pum, "mean")


def test_names_and_pickling_by_path(tmp_path):
    reward = PUMReward(str(tmp_path), "last")
    assert reward.__name__ == "pum_utility_last" and PUMReward(str(tmp_path)).__name__ == "pum_utility"
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.path == str(tmp_path) and copy.__name__ == "pum_utility_last" and copy._pum is None


def test_model_object_does_not_pickle(pum):
    with pytest.raises(TypeError, match="path"):
        pickle.dumps(PUMReward(pum))


def test_step_increments_sum_and_boundaries(pum, smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids = sampled_ids(tok, COMPLETION)
    ids_no_eos = sampled_ids(tok, COMPLETION, eos=False)
    scorer = PUMStepRewards(pum)
    out = scorer(
        prompts=["p"] * 3, completions=[COMPLETION] * 3, completion_ids=[ids, ids_no_eos, []], question=[PROBLEM] * 3
    )
    assert out[2] is None  # no ids -> not applicable
    steps, bounds = token_steps(ids, tok)
    assert isinstance(out[0], StepRewards) and len(steps) == 3
    assert out[0].boundaries == bounds and bounds[-1] == len(ids)  # EOS belongs to the last step
    # Hand identity: increments telescope to U(full) - U(empty), both scored independently by `score`.
    u_full, u_empty = pum.score([PROBLEM, PROBLEM], [COMPLETION, ""])
    assert sum(out[0].values) == pytest.approx(u_full - u_empty, abs=1e-4)
    # first increment: U(step 1) - U(empty)
    (u1,) = pum.score([PROBLEM], ["Tom starts with 3 apples.\n\n"])
    assert out[0].values[0] == pytest.approx(u1 - u_empty, abs=1e-4)
    # with or without the sampled EOS: same values; boundaries differ only in the last step's end
    assert out[1].values == pytest.approx(out[0].values, abs=1e-6)
    assert out[1].boundaries == bounds[:-1] + [bounds[-1] - 1]


def test_step_scorer_binds_the_policy_tokenizer(pum, smollm2_tokenizer):
    scorer = PUMStepRewards(pum)
    scorer.bind_policy(None, smollm2_tokenizer)
    assert scorer.tokenizer is smollm2_tokenizer
    with pytest.raises(ValueError, match="pum_step_increments"):
        scorer(prompts=["p"], completion_ids=[[5, 6]], question=[PROBLEM, PROBLEM])


# ----------------------------------------------------------------------------------------------------------
# Completions longer than the PUM's budget
# ----------------------------------------------------------------------------------------------------------

STEP0, STEP1, STEP2 = "Tom starts with 3 apples.\n\n", "He buys 5 more, so 3 + 5 = 8.\n\n", "The answer is 8."


def budget_pum(tiny_pum, tok, extra: int) -> PrefixUtilityModel:
    """A PUM whose budget keeps the prompt, STEP0 and `extra` more tokens (counted with plain `encode`)."""
    from procrl.rewards.pum import render_prompt_ids

    prompt = len(render_prompt_ids(tok, PROBLEM))
    keep = prompt + len(tok.encode(STEP0, add_special_tokens=False)) + extra
    return PrefixUtilityModel(tiny_pum, tok, max_length=keep + 1)


@pytest.fixture(scope="module")
def tiny_pum_model(smollm2_tokenizer, tiny_pum_factory):
    return tiny_pum_factory(len(smollm2_tokenizer))


def test_scalar_rewards_are_none_for_a_completion_past_the_budget(pum, tiny_pum_model, smollm2_tokenizer):
    tok = smollm2_tokenizer
    n1, n2 = (len(tok.encode(s, add_special_tokens=False)) for s in (STEP1, STEP2))
    assert n1 > 3 and n2 > 0
    exact = STEP0 + STEP1  # fits exactly: budget = prompt + STEP0 + STEP1 tokens
    cut_last = COMPLETION  # STEP0 + STEP1 + STEP2: cut inside the last step (STEP2 gone)
    cut_early = STEP0 + "He buys 5 more."  # kept: STEP0 + 3 tokens of a 4+ token step (cut inside an earlier step)
    fits = "Three."  # a short completion
    small = budget_pum(tiny_pum_model, tok, n1)
    early = budget_pum(tiny_pum_model, tok, 3)
    r = small.render(PROBLEM, exact)
    assert r.truncated_tokens == 0 and len(r.input_ids) == small.max_length - 1  # exactly at the budget
    assert small.render(PROBLEM, cut_last).complete == [True, True, False]
    assert early.render(PROBLEM, cut_early).complete == [True, False]
    logged: dict[str, list[float]] = {}

    def log_metric(key, value):
        logged.setdefault(key, []).append(value)

    # references: the unbudgeted scorer's independent per-prefix path
    u_exact, u_fits, u_step0 = pum.score([PROBLEM] * 3, [exact, fits, STEP0])
    for mode in ("full", "last", "min"):
        got = PUMReward(small, mode)(
            prompts=[""] * 4, completions=[exact, cut_last, fits, "  "], question=[PROBLEM] * 4, log_metric=log_metric
        )
        assert got[1] is None and got[3] is None  # past the budget; no text
        want_exact = min(u_step0, u_exact) if mode == "min" else u_exact
        assert got[0] == pytest.approx(want_exact, abs=1e-4) and got[2] == pytest.approx(u_fits, abs=1e-4)
        (cut,) = PUMReward(early, mode)(prompts=[""], completions=[cut_early], question=[PROBLEM])
        assert cut is None  # the last scored value (U after STEP0) is not a stand-in for the completion's
    # one of the three completions with text is unscored, in each of the three calls that had log_metric
    assert logged == {"process/unscored_completions": [pytest.approx(1 / 3)] * 3}


def test_step_increments_past_the_budget_are_nan(pum, tiny_pum_model, smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids = sampled_ids(tok, COMPLETION)  # steps STEP0, STEP1, STEP2 + EOS
    u_empty, u0, u1 = pum.score([PROBLEM] * 3, ["", STEP0, STEP0 + STEP1])  # independent, unbudgeted
    _, bounds = token_steps(ids, tok)
    # cut inside step 1 (3 of its tokens kept): step 0 scored, steps 1 and 2 unscored
    (got,) = PUMStepRewards(budget_pum(tiny_pum_model, tok, 3))(
        prompts=["p"], completions=[COMPLETION], completion_ids=[ids], question=[PROBLEM]
    )
    assert got.boundaries == bounds and len(got.values) == 3
    assert got.values[0] == pytest.approx(u0 - u_empty, abs=1e-4)
    assert math.isnan(got.values[1]) and math.isnan(got.values[2])
    # cut inside the last step: steps 0 and 1 scored
    n1 = len(tok.encode(STEP1, add_special_tokens=False))
    (got,) = PUMStepRewards(budget_pum(tiny_pum_model, tok, n1 + 2))(
        prompts=["p"], completions=[COMPLETION], completion_ids=[ids], question=[PROBLEM]
    )
    assert got.values[:2] == pytest.approx([u0 - u_empty, u1 - u0], abs=1e-4) and math.isnan(got.values[2])
    # cut inside the first step: a StepRewards of NaN (unscored steps), not None (not applicable)
    (got,) = PUMStepRewards(budget_pum(tiny_pum_model, tok, -3))(
        prompts=["p"], completions=[COMPLETION], completion_ids=[ids], question=[PROBLEM]
    )
    assert isinstance(got, StepRewards) and all(math.isnan(v) for v in got.values)


class FixedRollout:
    """The trainer's rollout: fixed completion texts (tokenized + EOS) with neutral log-probs."""

    def __init__(self, texts):
        self.texts = texts

    def __call__(self, prompts, trainer):
        from procrl.generation import render_prompts

        tok = trainer.processing_class
        ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in self.texts[: len(prompts)]]
        return {
            "prompt_ids": render_prompts(tok, prompts),
            "completion_ids": ids,
            "logprobs": [[0.0] * len(c) for c in ids],
            "completion_logps": [[-1.0] * len(c) for c in ids],
        }


def test_unscored_steps_get_no_advantage_on_the_trainer_path(tmp_path, tiny_llama, tokenizer, tiny_pum_model, pum):
    """NaN increments through `ProcessGRPOTrainer(advantage_mode="process")`: left out of the group statistics,
    zero r~, and counted in `process/unscored_steps` (the trainer's metric)."""
    import statistics

    from datasets import Dataset
    from grpo_helpers import grpo_config

    from procrl.rewards.outcome import outcome_reward
    from procrl.trainers.grpo import ProcessGRPOTrainer

    texts = [COMPLETION, "Three.", "Add.\n\nSo 8.", "The answer is 8."]  # 3, 1, 2 and 1 steps
    small = budget_pum(tiny_pum_model, tokenizer, 3)  # COMPLETION: step 0 kept, steps 1-2 cut; the others fit
    assert small.render(PROBLEM, texts[0]).complete == [True, False, False]
    assert all(small.render(PROBLEM, t).truncated_tokens == 0 for t in texts[1:])
    scorer = PUMStepRewards(small)
    # one dict aliased by all four rows (a plain list dataset repeated by TRL's sampler): the trainer's per-row step
    # rewards must not overwrite each other (each row gets its own dict)
    inputs = [{"prompt": [{"role": "user", "content": PROBLEM}], "question": PROBLEM, "answer": "8"}] * 4
    trainer = ProcessGRPOTrainer(
        model=tiny_llama,
        reward_funcs=[outcome_reward],
        args=grpo_config(tmp_path, max_completion_length=32, temperature=1.0, shuffle_dataset=False,
                         advantage_mode="process"),
        train_dataset=Dataset.from_list(inputs[:1]),
        processing_class=tokenizer,
        rollout_func=FixedRollout(texts),
        step_reward_func=scorer,
    )  # fmt: skip
    trainer.model.train()
    out = trainer._generate_and_score_completions(inputs)
    assert trainer._metrics["train"]["process/unscored_steps"] == [pytest.approx(2 / 7)]  # 2 of 3 + 1 + 2 + 1 steps
    # expected by hand: increments from the unbudgeted scorer's `score`, NaN for the two cut steps of row 0
    rows = []
    for text in texts:
        pieces = text.split("\n\n")
        prefixes = [""] + ["\n\n".join(pieces[: k + 1]) + ("\n\n" if k + 1 < len(pieces) else "") for k in
                           range(len(pieces))]  # fmt: skip
        u = pum.score([PROBLEM] * len(prefixes), prefixes)
        rows.append([u[k + 1] - u[k] for k in range(len(pieces))])
    rows[0][1:] = [math.nan, math.nan]
    finite = [v for row in rows for v in row if not math.isnan(v)]
    mean, std = statistics.fmean(finite), statistics.stdev(finite)
    mask = out["completion_mask"].bool()
    for b, (text, row) in enumerate(zip(texts, rows, strict=True)):
        ids = out["completion_ids"][b][mask[b]].tolist()
        _, bounds = token_steps(ids, tokenizer)
        norm = [0.0 if math.isnan(v) else (v - mean) / (std + 1e-4) for v in row]
        want = [sum(r for r, end in zip(norm, bounds, strict=True) if t < end) for t in range(len(ids))]
        assert out["advantages"][b][mask[b]].tolist() == pytest.approx(want, abs=1e-3), text
    # row 0's cut steps carry no advantage of their own: its tokens after step 0 get 0
    _, bounds0 = token_steps(out["completion_ids"][0][mask[0]].tolist(), tokenizer)
    assert (out["advantages"][0][bounds0[0] : int(mask[0].sum())] == 0).all()
