"""Process advantages (DeepSeekMath §4.1.3): the pure tensor functions against hand-computed values, and
`ProcessGRPOTrainer(advantage_mode=process|mixed)` against TRL's own outcome advantages on the same batch.

Run as a script under torchrun (two CPU ranks), this file writes each rank's advantages for the multi-rank test:
`PYTHONPATH=tests/helpers ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 tests/trainers/test_advantages.py OUT_DIR`.
"""

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from grpo_helpers import grpo_config, spy

from procrl.generation import render_prompts
from procrl.rewards.outcome import extract_answer, outcome_reward
from procrl.rewards.steps import token_steps
from procrl.step_rewards import StepRewards
from procrl.trainers.advantages import (
    OutcomeStepRewards,
    check_step_rewards,
    normalize_step_rewards,
    pad_step_rewards,
    process_advantages,
    token_advantages,
)
from procrl.trainers.grpo import STEP_REWARDS_KEY, ProcessGRPOTrainer
from procrl.utils import completion_to_text

NAN = math.nan
TOL = 1e-3


# ------------------------------------------------------------------------------------------------------------
# Pure functions: the table
# ------------------------------------------------------------------------------------------------------------


def _close(got: torch.Tensor, want) -> bool:
    return got.shape == torch.Size(torch.tensor(want).shape) and torch.allclose(got, torch.tensor(want), atol=TOL)


def _one_step(values):
    return torch.tensor(values, dtype=torch.float32).unsqueeze(1)  # (N, 1): one step per completion


def test_equal_rewards_give_zero_and_finite():
    # mean 0.5, std 0 -> (0.5 - 0.5) / (0 + 1e-4) = 0
    out = normalize_step_rewards(_one_step([0.5, 0.5, 0.5, 0.5]), num_generations=4)
    assert torch.isfinite(out).all()
    assert torch.equal(out, torch.zeros(4, 1))


def test_nan_row_gets_zero_and_statistics_use_finite_values():
    # finite {1, 3}: mean 2, sample std sqrt((1 + 1) / 1) = 1.41421; (1 - 2) / 1.41431 = -0.70706
    out = normalize_step_rewards(_one_step([1.0, NAN, 3.0]), num_generations=3)
    assert out.squeeze(1).tolist() == pytest.approx([-0.7071, 0.0, 0.7071], abs=TOL)
    # inf is treated like NaN (never an infinite or NaN advantage)
    out = normalize_step_rewards(_one_step([1.0, math.inf, 3.0]), num_generations=3)
    assert out.squeeze(1).tolist() == pytest.approx([-0.7071, 0.0, 0.7071], abs=TOL)


@pytest.mark.parametrize(
    "rewards",
    [
        [[2.0]],  # G = 1, one step: no group to compare against
        [[1.0, 2.0, 3.0]],  # G = 1, three steps: still no other completion, so 0 (as TRL's num_generations == 1)
    ],
)
def test_group_of_one_gives_zero(rewards):
    out = normalize_step_rewards(torch.tensor(rewards), num_generations=1)
    assert torch.equal(out, torch.zeros_like(out))


def test_group_with_one_finite_reward_gives_zero():
    # [4, NaN]: one finite value, sample std undefined (TRL's nanstd -> NaN) -> 0, not NaN
    out = normalize_step_rewards(_one_step([4.0, NAN]), num_generations=2)
    assert torch.equal(out, torch.zeros(2, 1))


def test_no_leakage_between_prompts():
    # prompt 0: [1, 0] -> mean 0.5, sample std sqrt(0.5) = 0.70711; 0.5 / 0.70721 = 0.70700
    # prompt 1: [0, 0] -> 0 (a batch-wide mean 0.25 would make these -0.5 / ...)
    out = normalize_step_rewards(_one_step([1.0, 0.0, 0.0, 0.0]), num_generations=2)
    assert out.squeeze(1).tolist() == pytest.approx([0.7070, -0.7070, 0.0, 0.0], abs=TOL)


def test_token_advantages_are_suffix_sums_of_normalised_step_rewards():
    # G = 2. Completion A: 3 steps, rewards [1, 0, 1], ends [2, 3, 5] (5 tokens). Completion B: 1 step [0], 4 tokens.
    # All steps of the group: [1, 0, 1, 0]: mean 0.5, sample std sqrt(4 × 0.25 / 3) = 0.57735;
    # r~ = ±0.5 / 0.57745 = ±0.86588. A: r~ = [+.8659, -.8659, +.8659]; B: [-.8659].
    # A's tokens: t0, t1 (step 0): .8659 - .8659 + .8659 = .8659; t2 (step 1): -.8659 + .8659 = 0;
    #             t3, t4 (step 2): .8659; t5 (padding): 0.   B's tokens t0..t3: -.8659; t4, t5: 0.
    values, ends = pad_step_rewards(
        [StepRewards([1.0, 0.0, 1.0], [2, 3, 5]), StepRewards([0.0], [4])]
    )  # (2, 3), B's row NaN/0-padded
    assert ends.tolist() == [[2, 3, 5], [4, 0, 0]]
    out = process_advantages(values, ends, num_generations=2, num_tokens=6)
    a = 0.86588
    assert out[0].tolist() == pytest.approx([a, a, 0.0, a, a, 0.0], abs=TOL)
    assert out[1].tolist() == pytest.approx([-a, -a, -a, -a, 0.0, 0.0], abs=TOL)


def test_nan_step_inside_a_completion_counts_zero():
    # A: [2, NaN] ends [1, 3]; B: [0] ends [2]. Finite steps {2, 0}: mean 1, std sqrt(2) = 1.41421;
    # r~ = ±1 / 1.41431 = ±0.70706, NaN step -> 0. A: t0 = .7071 + 0, t1, t2 = 0. B: t0, t1 = -.7071.
    values, ends = pad_step_rewards([StepRewards([2.0, NAN], [1, 3]), StepRewards([0.0], [2])])
    out = process_advantages(values, ends, num_generations=2, num_tokens=3)
    assert _close(out, [[0.7071, 0.0, 0.0], [-0.7071, -0.7071, 0.0]])


def test_not_applicable_completion_gets_zero_on_every_token():
    # None -> all-NaN row: excluded from the statistics ([1, 0]: ±0.7070) and 0 everywhere
    values, ends = pad_step_rewards([StepRewards([1.0], [2]), None, StepRewards([0.0], [1])])
    out = process_advantages(values, ends, num_generations=3, num_tokens=2)
    assert _close(out, [[0.7070, 0.7070], [0.0, 0.0], [-0.7070, 0.0]])


def test_token_advantages_by_hand():
    # r~ = [1, -2, .5], ends [2, 3, 5]: t0, t1 -> 1 - 2 + .5 = -.5; t2 -> -1.5; t3, t4 -> .5; t5 -> 0
    out = token_advantages(torch.tensor([[1.0, -2.0, 0.5]]), torch.tensor([[2, 3, 5]]), num_tokens=6)
    assert _close(out, [[-0.5, -0.5, -1.5, 0.5, 0.5, 0.0]])


@pytest.mark.parametrize(
    "values, boundaries",
    [
        ([], []),  # no step: return None instead
        ([1.0], [2, 3]),  # one value, two boundaries
        ([1.0, 2.0], [3, 3]),  # not strictly increasing
        ([1.0], [0]),  # a step with no token
        ([1.0], [1.5]),  # not a token index
    ],
)
def test_step_rewards_validation(values, boundaries):
    with pytest.raises(ValueError, match="StepRewards"):
        StepRewards(values, boundaries)


def test_check_step_rewards_names_the_scorer():
    ids = [[5, 6, 2], [7, 2]]
    with pytest.raises(ValueError, match="'my_scorer'.*1 entries for 2"):
        check_step_rewards("my_scorer", [None], ids)
    with pytest.raises(ValueError, match="'my_scorer'.*3 tokens but its last step ends at token 2"):
        check_step_rewards("my_scorer", [StepRewards([1.0], [2]), None], ids)
    with pytest.raises(ValueError, match="expected StepRewards"):
        check_step_rewards("my_scorer", [[1.0], None], ids)
    assert check_step_rewards("my_scorer", [StepRewards([1.0], [3]), None], ids)[1] is None


def test_normalize_rejects_a_partial_group():
    with pytest.raises(ValueError, match="groups of num_generations=2"):
        normalize_step_rewards(torch.zeros(3, 1), num_generations=2)


def test_outcome_step_rewards_is_one_step_holding_the_outcome():
    out = OutcomeStepRewards()(
        prompts=["p"] * 3,
        completions=["The answer is 4", "The answer is 5", "x"],
        completion_ids=[[5, 6, 2], [7, 2], []],
        answer=["4", "4", "4"],
    )
    # correct -> 1.0 over all 3 tokens; wrong -> 0.0 over 2 tokens; an empty completion has no step -> None
    assert out == [StepRewards([1.0], [3]), StepRewards([0.0], [2]), None]
    assert OutcomeStepRewards()(prompts=["p"], completions=["x"], completion_ids=[[1]], answer=["N/A"]) == [None]


# ------------------------------------------------------------------------------------------------------------
# The trainer
# ------------------------------------------------------------------------------------------------------------

QUESTIONS = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8")]
# TRL repeats each prompt num_generations = 4 times: rows 0-3 have gold 5, rows 4-7 gold 8.
TEXTS = [
    "Two plus three.\n\nThe answer is 5",  # correct, 2 steps
    "The answer is 5",  # correct, 1 step
    "Hmm.\n\nTwo and three make seven.\n\nThe answer is 7",  # wrong, 3 steps
    "no idea",  # no answer: `answer_or_none` gives None
    "Four and four.\n\nThe answer is 8",  # correct
    "The answer is 1",  # wrong
    "Add them.\n\nThe answer is 2",  # wrong
    "The answer is 3",  # wrong
]


def answer_or_none(completions, answer, **kwargs):
    """Outcome reward that is None (not applicable) when no answer can be extracted."""
    texts = [completion_to_text(c) for c in completions]
    checked = outcome_reward(completions=completions, answer=answer)
    return [None if extract_answer(t) is None else r for t, r in zip(texts, checked, strict=True)]


class StepCharRewards:
    """Toy step scorer: steps from the SAMPLED ids via `token_steps`, reward = characters of the stripped step / 10
    (so rewards differ between steps and completions); None when the completion has no step."""

    __name__ = "step_char_rewards"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        out = []
        for ids in completion_ids:
            steps, bounds = token_steps(ids, self.tokenizer)
            out.append(StepRewards([len(s.stripped) / 10 for s in steps], bounds) if steps else None)
        return out


class IndexedRollout:
    """Returns fixed completion texts (tokenized + EOS), chosen by the GLOBAL row index, so every rank of a
    multi-process run gets the same completions as the one-process run."""

    def __init__(self, texts):
        self.texts = texts

    def __call__(self, prompts, trainer):
        tok = trainer.processing_class
        start = trainer.accelerator.process_index * len(prompts)
        texts = self.texts[start : start + len(prompts)]
        ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
        return {
            "prompt_ids": render_prompts(tok, prompts),
            "completion_ids": ids,
            "logprobs": [[0.0] * len(c) for c in ids],
            "completion_logps": [[-1.0] * len(c) for c in ids],
        }


def _inputs(num_generations=4, questions=QUESTIONS):
    return [
        {"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in questions for _ in range(num_generations)
    ]


def _config(output_dir, **overrides):
    return grpo_config(
        output_dir,
        **{"per_device_train_batch_size": 8, "max_completion_length": 32, "temperature": 1.0, "shuffle_dataset": False,
           **overrides},
    )  # fmt: skip


def _trainer(tmp_path, model, tokenizer, reward_funcs, step_reward_func=None, texts=TEXTS, **config):
    trainer = ProcessGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=_config(tmp_path, **config),
        train_dataset=Dataset.from_list(_inputs(1)),
        processing_class=tokenizer,
        rollout_func=IndexedRollout(texts),
        step_reward_func=step_reward_func,
    )
    trainer.model.train()  # `_generate_and_score_completions` reads train/eval mode from the model
    return trainer


def _expected_process(step_rewards, num_generations, num_tokens):
    """Independent reference: plain Python statistics (sample stdev) and explicit suffix sums, per token."""
    rows = []
    for g in range(0, len(step_rewards), num_generations):
        group = step_rewards[g : g + num_generations]
        finite = [v for s in group if s is not None for v in s.values if math.isfinite(v)]
        mean = statistics.fmean(finite) if finite else 0.0
        std = statistics.stdev(finite) if len(finite) > 1 else math.nan
        for s in group:
            row = [0.0] * num_tokens
            if s is not None and not math.isnan(std) and num_generations > 1:
                norm = [(v - mean) / (std + 1e-4) if math.isfinite(v) else 0.0 for v in s.values]
                for t in range(num_tokens):
                    row[t] = sum(r for r, end in zip(norm, s.boundaries, strict=True) if t < end)
            rows.append(row)
    return torch.tensor(rows)


def test_config_validation(tmp_path):
    assert _config(tmp_path).advantage_mode == "outcome"
    with pytest.raises(ValueError, match="advantage_mode='steps' is not one of"):
        _config(tmp_path, advantage_mode="steps")
    with pytest.raises(ValueError, match="process_alpha"):
        _config(tmp_path, advantage_mode="mixed", process_alpha=-1.0)
    with pytest.raises(ValueError, match="process_alpha"):
        _config(tmp_path, advantage_mode="mixed", process_alpha=math.nan)


def test_step_scorer_is_required_refused_and_never_a_reward_func(tmp_path, tiny_llama, tokenizer):
    with pytest.raises(ValueError, match="advantage_mode='process' needs a step scorer"):
        _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward], advantage_mode="process")
    with pytest.raises(ValueError, match="only used with advantage_mode"):
        _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward], step_reward_func=OutcomeStepRewards())
    scorer = StepCharRewards(tokenizer)
    with pytest.raises(ValueError, match="'step_char_rewards' is also one of reward_funcs"):
        _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward, scorer], scorer, advantage_mode="mixed")


def test_one_outcome_step_equals_trl_outcome_advantages(tmp_path, tiny_llama, tokenizer):
    """With one step per completion whose reward is the outcome, the per-token process advantages equal what
    TRL's own code computes for the outcome reward (its defaults: sum_then_normalize, scale_rewards=group)."""
    config = dict(multi_objective_aggregation="sum_then_normalize", scale_rewards="group")
    outcome = _trainer(tmp_path, tiny_llama, tokenizer, [answer_or_none], **config)
    want = outcome._generate_and_score_completions(_inputs())  # TRL's path: advantages (B,)
    # rewards: group 0 [1, 1, 0, None] -> nonzero; group 1 [1, 0, 0, 0] -> nonzero; row 3 unscorable -> 0
    assert want["advantages"].dim() == 1 and want["advantages"][3] == 0.0
    assert (want["advantages"][[0, 1, 2, 4, 5, 6, 7]].abs() > 0.1).all()
    process = _trainer(
        tmp_path,
        tiny_llama,
        tokenizer,
        [answer_or_none],
        OutcomeStepRewards(answer_or_none),
        advantage_mode="process",
        **config,
    )
    got = process._generate_and_score_completions(_inputs())
    assert torch.equal(got["completion_ids"], want["completion_ids"])
    adv, mask = got["advantages"], got["completion_mask"].bool()
    assert adv.shape == mask.shape  # (B, T), aligned with completion_mask
    expected = want["advantages"].unsqueeze(1).expand_as(adv)
    # float32 statistics over (B,) rewards vs (B, S) step rewards: other kernels, so equal up to rounding
    assert torch.allclose(adv[mask], expected[mask], atol=1e-5, rtol=0)
    assert (adv[~mask] == 0).all()  # padding


def test_process_and_mixed_advantages_on_the_trainer_path(tmp_path, tiny_llama, tokenizer):
    alpha = 0.5
    scorer = StepCharRewards(tokenizer)
    outcome = _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward])
    out_o = outcome._generate_and_score_completions(_inputs())
    process = _trainer(tmp_path, tiny_llama, tokenizer, [outcome_reward], scorer, advantage_mode="process")
    out_p = process._generate_and_score_completions(_inputs())
    mixed = _trainer(
        tmp_path, tiny_llama, tokenizer, [outcome_reward], scorer, advantage_mode="mixed", process_alpha=alpha
    )
    out_m = mixed._generate_and_score_completions(_inputs())

    ids = [row[m.bool()].tolist() for row, m in zip(out_p["completion_ids"], out_p["completion_mask"], strict=True)]
    step_rewards = scorer(prompts=None, completions=None, completion_ids=ids)
    assert [len(s.values) for s in step_rewards] == [2, 1, 3, 1, 2, 1, 2, 1]  # "\n\n" splits, from sampled ids
    num_tokens = out_p["completion_ids"].size(1)
    mask = out_p["completion_mask"].bool()
    want = _expected_process(step_rewards, 4, num_tokens)
    assert torch.allclose(out_p["advantages"], want, atol=1e-5)
    # one value per step of the 3-step completion (values closer than 1e-4 count as one: equal need not be bitwise)
    values = sorted(out_p["advantages"][2][mask[2]].tolist())
    assert 1 + sum(b - a > 1e-4 for a, b in zip(values[:-1], values[1:], strict=True)) == 3
    mixed_want = want + alpha * out_o["advantages"].unsqueeze(1) * mask
    assert torch.allclose(out_m["advantages"], mixed_want, atol=1e-5)

    # the step scorer is not counted in the scalar reward: TRL's `reward` is the outcome reward alone (3 of 8)
    for trainer in (process, mixed):
        assert scorer not in trainer.reward_funcs
        assert trainer._metrics["train"]["reward"] == pytest.approx([3 / 8])
        metrics = trainer._metrics["train"]
        assert metrics["process/not_applicable"] == [0.0]
        assert metrics["process/steps_per_completion"] == pytest.approx([13 / 8])
        assert metrics["process/unscored_steps"] == [0.0]
    # the per-token advantages that reach the loss are logged under procrl's keys, over the completion tokens;
    # TRL's completions table keeps TRL's own (outcome) advantage per completion, untouched
    for trainer, expected in ((process, want), (mixed, mixed_want)):
        metrics, tokens = trainer._metrics["train"], expected[mask]
        assert metrics["process/advantage_mean"] == pytest.approx([tokens.mean().item()], abs=1e-5)
        assert metrics["process/advantage_std"] == pytest.approx([tokens.std().item()], abs=1e-5)
        assert metrics["process/advantage_min"] == pytest.approx([tokens.min().item()], abs=1e-5)
        assert metrics["process/advantage_max"] == pytest.approx([tokens.max().item()], abs=1e-5)
        assert list(trainer._logs["advantages"]) == pytest.approx(out_o["advantages"].tolist(), abs=1e-5)
    # the step rewards travelled with the batch rows and were taken out again
    inputs = _inputs()
    process._generate_and_score_completions(inputs)
    assert not any(STEP_REWARDS_KEY in row for row in inputs)


@pytest.mark.slow  # trains
def test_generate_and_score_override_is_called(tmp_path, tiny_llama, tokenizer):
    """Guards the private override (TRL pinned to 1.16.*): fails if TRL stops calling
    `_generate_and_score_completions` (trl/trainer/grpo_trainer.py:2324, from `_prepare_inputs` :1541) or stops
    passing its `advantages` to the loss (:3055-3059)."""
    trainer = _trainer(
        tmp_path, tiny_llama, tokenizer, [outcome_reward], StepCharRewards(tokenizer), advantage_mode="mixed"
    )
    generate_calls, reward_calls = spy(trainer, "_generate_and_score_completions"), spy(trainer, "_calculate_rewards")
    seen = []
    original = trainer._compute_loss

    def compute_loss(model, inputs):
        seen.append(tuple(inputs["advantages"].shape))
        return original(model, inputs)

    trainer._compute_loss = compute_loss
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert len(generate_calls) == 1
    assert len(reward_calls) == 1
    assert len(seen) == 1 and len(seen[0]) == 2 and seen[0][0] == 8  # (B, T) reached the loss
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())
    logs = trainer.state.log_history[0]
    for key in ("process/not_applicable", "process/steps_per_completion", "process/step_reward_mean"):
        assert key in logs, key
    assert "process/advantage_mean" in logs


# ------------------------------------------------------------------------------------------------------------
# Two CPU ranks: groups spread over ranks are gathered before normalisation
# ------------------------------------------------------------------------------------------------------------

# 3 prompts × G = 2 = 6 rows; 3 rows per rank, so the group of rows 2-3 is split between rank 0 and rank 1.
# Rank 0's completions have up to 3 steps, rank 1's at most 2: rows are NaN-padded to a common step count.
RANK_QUESTIONS = [("What is 1 + 1?", "2"), ("What is 2 + 2?", "4"), ("What is 3 + 3?", "6")]
RANK_TEXTS = [
    "One and one.\n\nThe answer is 2",
    "The answer is 3",
    "Two and two.\n\nStill two and two.\n\nThe answer is 4",
    "Four.\n\nThe answer is 4",
    "The answer is 6",
    "Three twice.\n\nThe answer is 9",
]


def _rank_advantages(out_dir, tokenizer, model, per_device):
    trainer = ProcessGRPOTrainer(
        model=model,
        reward_funcs=[outcome_reward],
        args=_config(out_dir, per_device_train_batch_size=per_device, num_generations=2, advantage_mode="mixed"),
        train_dataset=Dataset.from_list(_inputs(1, RANK_QUESTIONS)),
        processing_class=tokenizer,
        rollout_func=IndexedRollout(RANK_TEXTS),
        step_reward_func=StepCharRewards(tokenizer),
    )
    trainer.model.train()
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    rows = _inputs(2, RANK_QUESTIONS)[rank * per_device : (rank + 1) * per_device]
    out = trainer._generate_and_score_completions(rows)
    return [a[m.bool()].tolist() for a, m in zip(out["advantages"], out["completion_mask"], strict=True)], world


@pytest.mark.slow  # torchrun
def test_two_cpu_ranks_give_the_same_advantages_as_one(tmp_path, tokenizer, tiny_llama):
    helpers = str(Path(__file__).resolve().parent.parent / "helpers")  # grpo_helpers, tiny_models for the script
    pythonpath = os.pathsep.join(p for p in (helpers, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "ACCELERATE_USE_CPU": "True", "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath}
    torchrun = Path(sys.executable).parent / "torchrun"
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node", "2", __file__, str(tmp_path / "ranks")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    two = []
    for rank in (0, 1):
        result = json.loads((tmp_path / "ranks" / f"rank{rank}.json").read_text())
        assert result["world"] == 2
        two.extend(result["advantages"])
    one, world = _rank_advantages(tmp_path / "one", tokenizer, tiny_llama, per_device=6)
    assert world == 1
    assert len(two) == len(one) == 6
    for got, want in zip(two, one, strict=True):  # float32 statistics over other batch shapes: up to rounding
        assert got == pytest.approx(want, abs=1e-5)
    assert any(abs(a) > 0.1 for row in one[2:4] for a in row)  # the split group has a real signal


if __name__ == "__main__":  # one rank of the two-process test (see the module docstring)
    from tiny_models import make_tiny_llama  # tests/helpers is on PYTHONPATH (see the test above)
    from transformers import AutoTokenizer

    from procrl.models import resolve_model

    out_dir = Path(sys.argv[1])
    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    tok.padding_side = "left"
    advantages, world = _rank_advantages(out_dir, tok, make_tiny_llama(len(tok)), per_device=3)
    rank = int(os.environ.get("RANK", "0"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"world": world, "advantages": advantages}))
