"""ProcessGRPOTrainer on a tiny random Llama over the real SmolLM2 vocabulary (CPU, a few seconds a step)."""

import math
import types

import pytest
import torch
from datasets import Dataset
from grpo_helpers import grpo_config, spy

from procrl.generation import render_prompts, sequence_logps
from procrl.rewards.outcome import outcome_reward
from procrl.rewards.picsar import get_picsar_bonus
from procrl.trainers import PINNED_TRL, check_trl_version
from procrl.trainers.grpo import ProcessGRPOTrainer, pearson
from procrl.trainers.rollout import ProcessRollout, needs_completion_logps

QUESTIONS = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8")]


def _dataset(n_repeat=2):
    rows = [{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in QUESTIONS] * n_repeat
    return Dataset.from_list(rows)


def reads_completion_logps(completions, completion_logps, **kwargs):
    """A reward that fails loudly unless the rollout's raw log-probs arrive, one row per completion."""
    assert len(completion_logps) == len(completions)
    return [float(sum(row)) for row in completion_logps]


def test_config_defaults_work_on_cpu(tmp_path):
    config = grpo_config(tmp_path)
    assert config.bf16 is False  # auto, with PROCRL_CPU_BF16=0 (tests/conftest.py); TRL's None would raise on CPU
    assert config.multi_objective_aggregation == "normalize_then_sum"
    with pytest.raises(ValueError, match="bf16"):  # an explicit value is left to transformers' own check
        grpo_config(tmp_path, bf16=True)


def test_tools_are_refused_at_construction(tmp_path, tiny_llama, tokenizer):
    """TRL's tool loop would misalign completion_logps (vLLM itself is no longer refused: test_grpo_vllm.py)."""

    def search(query: str) -> str:
        """Look something up.

        Args:
            query: what to look up.
        """
        return query

    with pytest.raises(ValueError, match="tools/environment_factory"):
        ProcessGRPOTrainer(
            model=tiny_llama,
            reward_funcs=[outcome_reward],
            args=grpo_config(tmp_path),
            train_dataset=_dataset(),
            processing_class=tokenizer,
            tools=[search],
        )


@pytest.mark.slow  # trains
def test_training_step_updates_parameters_and_logs_metrics(tmp_path, tiny_llama, tokenizer):
    trainer = ProcessGRPOTrainer(
        model=tiny_llama,
        reward_funcs=[outcome_reward, reads_completion_logps],
        args=grpo_config(tmp_path, reward_weights=[1.0, 0.1]),
        train_dataset=_dataset(),
        processing_class=tokenizer,
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "no parameter changed after one GRPO step"
    logs = trainer.state.log_history[0]
    for key in (
        "task/accuracy",
        "hacking/truncated_frac",
        "hacking/reward_minus_accuracy",
        "rewards/outcome_reward/mean",
    ):
        assert key in logs, key


@pytest.mark.slow  # trains
def test_calculate_rewards_override_is_called(tmp_path, tiny_llama, tokenizer):
    """Guards the private override: fails if TRL (pinned 1.16.*) stops calling `_calculate_rewards`."""
    trainer = ProcessGRPOTrainer(
        model=tiny_llama,
        reward_funcs=[outcome_reward],
        args=grpo_config(tmp_path),
        train_dataset=_dataset(),
        processing_class=tokenizer,
    )
    calls = spy(trainer, "_calculate_rewards")
    trainer.train()
    assert len(calls) == 1
    assert "task/accuracy" in trainer.state.log_history[0]


def test_another_trl_minor_version_is_refused_at_import_with_the_fix():
    check_trl_version(f"{PINNED_TRL}.0")  # the installed, pinned one passes (import procrl.trainers ran it too)
    check_trl_version(f"{PINNED_TRL}.3.dev0")
    for installed in ("1.17.0", "1.15.2", "2.16.0", None):
        with pytest.raises(ImportError) as info:
            check_trl_version(installed)
        message = str(info.value)
        assert (installed or "TRL is not installed") in message  # the installed version ...
        assert f"TRL {PINNED_TRL}.*" in message  # ... the pinned one ...
        assert f'pip install "trl=={PINNED_TRL}.*"' in message  # ... and the fix


def logps_from_kwargs(completions, **kwargs):
    """Reads completion_logps from **kwargs, so it must say so."""
    return [float(sum(row)) for row in kwargs["completion_logps"]]


logps_from_kwargs.needs_logps = True


def test_rollout_computes_raw_logps_only_for_a_reader(tiny_llama):
    # which rewards make the vLLM rollouts compute completion_logps (a rescoring pass a step on a tempered sampler)
    cases = [
        ([outcome_reward], None, False),  # the outcome check reads the text only
        ([outcome_reward, reads_completion_logps], None, True),  # names the parameter
        ([outcome_reward, get_picsar_bonus()], None, True),  # PiCSAR declares needs_logps
        ([outcome_reward, logps_from_kwargs], None, True),  # **kwargs reader, declared
        ([outcome_reward, tiny_llama], None, False),  # a reward model: forward(input_ids, ...) reads no log-probs
        ([outcome_reward], logps_from_kwargs, True),  # the step scorer counts too
        ([max], None, True),  # no readable signature (a builtin): assumed a reader rather than left without
    ]
    for funcs, step_scorer, expected in cases:
        trainer = types.SimpleNamespace(reward_funcs=funcs, step_reward_func=step_scorer)
        assert needs_completion_logps(trainer) is expected, (funcs, step_scorer)


@pytest.mark.slow  # trains
@pytest.mark.parametrize(
    "bonus, expected_forwards",
    [
        # the raw log-probs come from the generation's own logits: only the loss forward (with grad) remains
        ("reads_completion_logps", [True]),
        # PiCSAR reuses them for the reasoning term; its answer term is one no-grad forward before the loss
        ("picsar_bonus", [False, True]),
    ],
)
def test_no_extra_policy_forward_for_completion_logps(tmp_path, tiny_llama, tokenizer, bonus, expected_forwards):
    bonus_func = reads_completion_logps if bonus == "reads_completion_logps" else get_picsar_bonus()
    # completions that always contain an answer, so PiCSAR's answer term runs on this random tiny model
    trainer = ProcessGRPOTrainer(
        model=tiny_llama,
        reward_funcs=[outcome_reward, bonus_func],
        args=grpo_config(tmp_path),
        train_dataset=_dataset(),
        processing_class=tokenizer,
    )
    model = trainer.model
    state = {"generating": False, "outside": []}
    original_generate = model.generate

    def generate(*args, **kwargs):
        state["generating"] = True
        try:
            return original_generate(*args, **kwargs)
        finally:
            state["generating"] = False

    model.generate = generate
    model.register_forward_hook(
        lambda *_: None if state["generating"] else state["outside"].append(torch.is_grad_enabled())
    )
    if bonus == "picsar_bonus":
        trainer.rollout_func = AnswerSuffixRollout(trainer.rollout_func)
    trainer.train()
    assert state["outside"] == expected_forwards


def test_rollout_logps_match_a_separate_forward_and_trl(tmp_path, tiny_llama, tokenizer):
    trainer = ProcessGRPOTrainer(
        model=tiny_llama,
        reward_funcs=[outcome_reward],
        args=grpo_config(tmp_path, max_completion_length=12),
        train_dataset=_dataset(),
        processing_class=tokenizer,
    )
    prompts = [row["prompt"] for row in _dataset()]
    torch.manual_seed(3)
    out = ProcessRollout()(prompts, trainer)
    assert set(out) >= {"prompt_ids", "completion_ids", "logprobs", "completion_logps"}
    assert [len(r) for r in out["completion_logps"]] == [len(c) for c in out["completion_ids"]]
    assert out["prompt_ids"] == render_prompts(tokenizer, prompts)
    # raw (T = 1) log-probs equal an independent teacher-forced pass
    sequences = [p + c for p, c in zip(out["prompt_ids"], out["completion_ids"], strict=True)]
    separate = sequence_logps(tiny_llama, sequences, [len(p) for p in out["prompt_ids"]])
    for got, want in zip(out["completion_logps"], separate, strict=True):
        assert got == pytest.approx(want, abs=1e-4)
    # the sampling-temperature log-probs equal what TRL's loss computes: importance ratios are 1 at step 0
    for prompt_ids, completion_ids, logprobs in zip(
        out["prompt_ids"], out["completion_ids"], out["logprobs"], strict=True
    ):
        ids = torch.tensor([prompt_ids + completion_ids])
        trl_logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, torch.ones_like(ids), len(completion_ids), batch_size=1
        )
        ratios = torch.exp(trl_logps[0] - torch.tensor(logprobs))
        assert torch.allclose(ratios, torch.ones_like(ratios), atol=1e-3)


class AnswerSuffixRollout:
    """Wraps a rollout and appends "The answer is 5" + EOS to every sampled completion (log-probs padded with
    -1.0), so an answer can always be extracted from a random model's output."""

    def __init__(self, rollout):
        self.rollout = rollout

    def __call__(self, prompts, trainer):
        out = self.rollout(prompts, trainer)
        tok = trainer.processing_class
        suffix = tok(" The answer is 5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        eos = set(trainer.eos_token_ids)
        for i, ids in enumerate(out["completion_ids"]):
            keep = len(ids) - 1 if ids and ids[-1] in eos else len(ids)
            out["completion_ids"][i] = ids[:keep] + suffix
            for key in ("logprobs", "completion_logps"):
                out[key][i] = out[key][i][:keep] + [-1.0] * len(suffix)
        return out


class FixedRollout:
    """A rollout that returns given completion texts (tokenized + EOS) instead of sampling."""

    def __init__(self, texts, logps=None):
        self.texts, self.logps = texts, logps

    def __call__(self, prompts, trainer):
        tok = trainer.processing_class
        completion_ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in self.texts]
        gen = torch.Generator().manual_seed(0)
        logps = self.logps or [(-torch.rand(len(c), generator=gen)).tolist() for c in completion_ids]
        return {
            "prompt_ids": render_prompts(tok, prompts),
            "completion_ids": completion_ids,
            "logprobs": [[0.0] * len(c) for c in completion_ids],
            "completion_logps": logps,
        }


def constant_one(completions, **kwargs):
    return [1.0] * len(completions)


def completion_tokens(completion_ids, **kwargs):
    return [float(len(ids)) for ids in completion_ids]


@pytest.mark.slow  # trains
@pytest.mark.parametrize(
    "reward_funcs, weights",
    [
        ([outcome_reward, constant_one], [0.0, 1.0]),  # outcome present with weight 0: its raw column is used
        ([constant_one], [1.0]),  # outcome absent: the trainer runs the outcome check itself
    ],
)
def test_task_accuracy_is_independent_of_reward_weights(tmp_path, tiny_llama, tokenizer, reward_funcs, weights):
    # answers: rows 0-3 -> "5", rows 4-7 -> "8" (TRL repeats each prompt num_generations times)
    texts = [
        "The answer is 5",
        "The answer is 5",
        "The answer is 7",
        "no idea",
        "The answer is 8",
        "The answer is 1",
        "The answer is 2",
        "The answer is 3",
    ]  # 3 of 8 correct
    trainer = ProcessGRPOTrainer(
        model=tiny_llama,
        reward_funcs=reward_funcs,
        args=grpo_config(tmp_path, reward_weights=weights, per_device_train_batch_size=8, shuffle_dataset=False),
        train_dataset=_dataset(n_repeat=1),
        processing_class=tokenizer,
        rollout_func=FixedRollout(texts),
    )
    trainer.train()
    logs = trainer.state.log_history[0]
    assert logs["task/accuracy"] == pytest.approx(3 / 8)
    assert logs["reward"] == pytest.approx(1.0)  # weighted reward says nothing about correctness
    assert logs["hacking/reward_minus_accuracy"] == pytest.approx(1.0 - 3 / 8)
    assert logs["hacking/truncated_frac"] == 0.0
    assert "hacking/bonus_length_corr" not in logs  # a constant bonus has no defined correlation


@pytest.mark.slow  # trains
def test_bonus_length_correlation_is_logged(tmp_path, tiny_llama, tokenizer):
    texts = [
        "The answer is 5",
        "5",
        "It is 5. The answer is 5",
        "The answer is 7",
        "8",
        "The answer is 8",
        "so",
        "Four and four. The answer is 8",
    ]
    trainer = ProcessGRPOTrainer(
        model=tiny_llama,
        reward_funcs=[outcome_reward, completion_tokens],  # a "bonus" equal to the length: correlation exactly 1
        args=grpo_config(tmp_path, reward_weights=[1.0, 0.1], per_device_train_batch_size=8, shuffle_dataset=False),
        train_dataset=_dataset(n_repeat=1),
        processing_class=tokenizer,
        rollout_func=FixedRollout(texts),
    )
    trainer.train()
    assert trainer.state.log_history[0]["hacking/bonus_length_corr"] == pytest.approx(1.0)


def test_bonus_cannot_dominate_an_all_wrong_group(tmp_path, tiny_llama, tokenizer):
    # group 0 (gold 5): all wrong, different reasonings; group 1 (gold 8): exactly one correct
    texts = [
        "The answer is 3",
        "I add them. The answer is 4",
        "Two plus three is six. The answer is 6",
        "The answer is 7",
        "The answer is 8",
        "The answer is 1",
        "So 4 and 4. The answer is 2",
        "The answer is 3",
    ]
    trainer = ProcessGRPOTrainer(
        model=tiny_llama,
        reward_funcs=[outcome_reward, get_picsar_bonus()],
        args=grpo_config(tmp_path, reward_weights=[1.0, 0.1], per_device_train_batch_size=8, shuffle_dataset=False),
        train_dataset=_dataset(n_repeat=1),
        processing_class=tokenizer,
        rollout_func=FixedRollout(texts),
    )
    inputs = [dict(row) for row in _dataset(n_repeat=1) for _ in range(4)]
    advantages = trainer._generate_and_score_completions(inputs)["advantages"]
    bonus = trainer.reward_funcs[1]
    logps = FixedRollout(texts)([x["prompt"] for x in inputs], trainer)["completion_logps"]  # same seed: same values
    scores = bonus(
        prompts=[x["prompt"] for x in inputs], completions=texts, completion_ids=None, completion_logps=logps
    )
    assert len(set(round(s, 6) for s in scores[:4])) == 4  # the bonus really varies inside the all-wrong group
    all_wrong = advantages[:4].abs().max().item()
    correct = advantages[4].item()
    assert correct > 0
    assert all_wrong <= 0.25 * correct


def test_pearson_matches_hand_computation():
    x, y = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([2.0, 1.0, 4.0, 3.0])
    # by hand: dx = [-1.5, -.5, .5, 1.5], dy = [-.5, -1.5, 1.5, .5]; Σ dx·dy = 4 × 0.75 = 3; Σ dx² = Σ dy² = 5
    assert pearson(x, y) == pytest.approx(3 / 5)
    assert pearson(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 2.0])) is None
    assert pearson(torch.tensor([1.0]), torch.tensor([1.0])) is None
    assert not math.isnan(pearson(x, -x))


@pytest.mark.slow  # trains
def test_bf16_auto_on_a_bf16_cpu_autocasts_the_loss_and_not_the_after_evaluation(
    tmp_path, tiny_llama, tokenizer, monkeypatch
):
    monkeypatch.setenv("PROCRL_CPU_BF16", "1")  # a CPU with native bf16, whatever this one is
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    args = grpo_config(tmp_path)
    assert args.bf16 is True and args.use_cpu is True  # transformers takes bf16 without a GPU only with use_cpu
    trainer = ProcessGRPOTrainer(
        model=tiny_llama, reward_funcs=[outcome_reward], args=args, train_dataset=_dataset(), processing_class=tokenizer
    )
    assert trainer.accelerator.mixed_precision == "bf16" and trainer.accelerator.native_amp
    dtypes = []
    tiny_llama.model.layers[0].mlp.register_forward_hook(lambda module, inputs, output: dtypes.append(output.dtype))
    trainer.train()
    assert torch.bfloat16 in dtypes and next(tiny_llama.parameters()).dtype == torch.float32  # autocast, fp32 weights
    ids = torch.tensor([[1, 2, 3]])
    dtypes.clear()
    trainer.accelerator.unwrap_model(trainer.model)(input_ids=ids)  # accelerate keeps its autocast wrapper ...
    assert dtypes == [torch.bfloat16]
    dtypes.clear()
    # ... so the job's 'after' evaluation and the PUM probe unwrap without it, in the precision of 'before'
    trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)(input_ids=ids)
    assert dtypes == [torch.float32]
