"""ProcessGRPOTrainer on vLLM (issue 14): how `generation_backend` resolves (fast), and GRPO steps on TRL's colocated
engine (CPU build) for a tiny fp32 Llama saved to disk (slow: one engine for the module)."""

from __future__ import annotations

import importlib.util
import logging
import math
import types

import pytest
import torch
from datasets import Dataset
from grpo_helpers import grpo_config, max_diff, spy, temperature_logps

import procrl.generation.vllm_engine as vllm_engine
import procrl.trainers.rollout as rollout_module
import procrl.trainers.vllm_colocate as vllm_colocate
from procrl.evals.accuracy import evaluate
from procrl.generation import draws_raw_distribution, render_prompts, sequence_logps
from procrl.rewards.outcome import outcome_reward
from procrl.trainers.grpo import ProcessGRPOConfig
from procrl.trainers.rollout import needs_completion_logps, trl_sampling_fields

VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None
QUESTIONS = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8")]


def _config(tmp_path, **fields):
    return ProcessGRPOConfig(output_dir=str(tmp_path), report_to="none", **fields)


# --- config resolution (fast) -----------------------------------------------------------------------------------


@pytest.fixture()
def vllm_here(monkeypatch):
    """Pretend vLLM is installed as the build given by `set(build)`: "cpu", "cuda", "broken" or None (missing)."""
    state = {"build": "cpu"}

    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        if name != "vllm":
            return real_find_spec(name, *args)
        return None if state["build"] is None else object()

    def on_cpu():
        if state["build"] == "broken":
            raise ImportError("vLLM cannot be imported (RuntimeError: bad wheel); install it ...")
        return state["build"] == "cpu"

    monkeypatch.delenv("PROCRL_GENERATION_BACKEND", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(vllm_engine, "vllm_on_cpu", on_cpu)
    monkeypatch.setattr(vllm_engine.torch.cuda, "is_available", lambda: False)
    return types.SimpleNamespace(set=lambda build: state.update(build=build))


@pytest.mark.parametrize(
    "build, backend, reason",
    [
        ("cpu", "vllm", "vLLM CPU build"),
        ("cuda", "transformers", "CUDA build and this run is on the CPU"),
        ("broken", "transformers", "does not import"),
        (None, "transformers", "not installed"),
    ],
)
def test_auto_resolves_to_vllm_where_its_build_runs(tmp_path, vllm_here, caplog, build, backend, reason):
    vllm_here.set(build)
    with caplog.at_level(logging.INFO, logger="procrl.trainers.vllm_colocate"):
        config = _config(tmp_path)
    assert (config.generation_backend, config.use_vllm) == (backend, backend == "vllm")
    assert config.vllm_mode == "colocate"  # TRL's default stays
    assert f"generation_backend auto -> {backend}" in caplog.text and reason in caplog.text


def test_explicit_backends_and_use_vllm(tmp_path, vllm_here):
    vllm_here.set(None)  # auto would pick transformers: use_vllm: true asks for vLLM all the same
    assert _config(tmp_path, use_vllm=True).generation_backend == "vllm"
    config = _config(tmp_path, generation_backend="transformers")
    assert (config.generation_backend, config.use_vllm) == ("transformers", False)
    vllm_here.set("cpu")
    assert _config(tmp_path, generation_backend="vllm").use_vllm is True


def test_bad_backend_settings_say_how_to_fix(tmp_path, vllm_here, monkeypatch):
    with pytest.raises(ValueError, match="conflicts with generation_backend: transformers. Set generation_backend"):
        _config(tmp_path, use_vllm=True, generation_backend="transformers")
    with pytest.raises(ValueError, match="not one of .* use auto"):
        _config(tmp_path, generation_backend="sglang")
    with pytest.raises(ValueError, match="vllm_dtype='fp8' is not one of"):
        _config(tmp_path, vllm_dtype="fp8")
    for size in (0, -1.0, math.nan):
        with pytest.raises(ValueError, match="vllm_kv_cache_gib=.* must be > 0"):
            _config(tmp_path, vllm_kv_cache_gib=size)

    def missing():
        raise ImportError("vLLM cannot be imported (ModuleNotFoundError); install it with `make install` ...")

    monkeypatch.setattr(vllm_colocate, "import_vllm", missing)
    with pytest.raises(ImportError, match="make install"):
        _config(tmp_path, generation_backend="vllm")


def test_transformers_generation_kwargs_are_refused_on_vllm(tmp_path, vllm_here):
    with pytest.raises(ValueError, match=r"\['min_new_tokens'\] are transformers names.*min_new_tokens -> min_tokens"):
        _config(tmp_path, generation_backend="vllm", generation_kwargs={"min_new_tokens": 4})
    assert _config(tmp_path, generation_backend="vllm", generation_kwargs={"min_tokens": 4}).use_vllm
    assert not _config(tmp_path, generation_backend="transformers", generation_kwargs={"min_new_tokens": 4}).use_vllm


def test_the_environment_variable_decides_what_auto_means(tmp_path, vllm_here, monkeypatch):
    vllm_here.set("cpu")
    monkeypatch.setenv("PROCRL_GENERATION_BACKEND", "transformers")
    assert _config(tmp_path).generation_backend == "transformers"
    assert _config(tmp_path, generation_backend="vllm").use_vllm is True  # an explicit setting wins
    vllm_here.set(None)
    monkeypatch.setenv("PROCRL_GENERATION_BACKEND", "vllm")
    assert _config(tmp_path).generation_backend == "vllm"
    monkeypatch.setenv("PROCRL_GENERATION_BACKEND", "sglang")
    with pytest.raises(ValueError, match="PROCRL_GENERATION_BACKEND='sglang' must be 'vllm' or 'transformers'"):
        _config(tmp_path)


def test_the_grpo_test_helper_pins_transformers(tmp_path):
    assert grpo_config(tmp_path).generation_backend == "transformers"


def test_raw_sampler_detection():
    trainer = types.SimpleNamespace(
        repetition_penalty=1.0,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=None,
        max_completion_length=8,
        args=types.SimpleNamespace(generation_kwargs=None, vllm_structured_outputs_regex=None),
    )
    fields = trl_sampling_fields(trainer)
    assert fields == {
        "n": 1,
        "repetition_penalty": 1.0,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
        "max_tokens": 8,
        "logprobs": 0,
    }
    assert draws_raw_distribution(fields) and draws_raw_distribution({**fields, "seed": 3, "stop_token_ids": [2]})
    for change in (
        {"temperature": 0.7},
        {"top_p": 0.9},
        {"top_k": 5},
        {"min_p": 0.1},
        {"repetition_penalty": 1.1},
        {"min_tokens": 2},
        {"presence_penalty": 0.5},
        {"some_future_field": 1},  # unknown: counted as changing the distribution
    ):
        assert not draws_raw_distribution({**fields, **change}), change
    trainer.args.generation_kwargs = {"temperature": 0.5, "min_tokens": 1}  # TRL: generation_kwargs win
    assert trl_sampling_fields(trainer)["temperature"] == 0.5


def _is_args(**changes):
    """The fields `resolve_importance_sampling` reads, set as an fp32 colocated CPU run at T = 0.7 (auto: off)."""
    values = dict(
        vllm_importance_sampling_correction=None,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_dtype="auto",
        bf16=False,
        fp16=False,
        vllm_structured_outputs_regex=None,
        repetition_penalty=1.0,
        temperature=0.7,
        top_p=1.0,
        top_k=0,
        min_p=None,
        generation_kwargs=None,
    )
    return types.SimpleNamespace(**{**values, **changes})


FP32_POLICY = torch.nn.Linear(2, 2)  # engine_dtype "auto" on CPU = the policy's parameter dtype
BF16_POLICY = torch.nn.Linear(2, 2).to(torch.bfloat16)


@pytest.mark.parametrize(
    "changes, model, on_cpu, expected",
    [
        ({}, FP32_POLICY, True, False),  # the colocated fp32 CPU engine is the policy: no extra forward
        ({"temperature": 1.0}, FP32_POLICY, True, False),  # temperature alone never matters (the loss applies it)
        ({}, None, True, True),  # policy dtype unknown: vLLM's own auto would downcast to bf16
        ({"vllm_dtype": "float32"}, None, True, False),  # ... unless the engine dtype is given
        ({}, BF16_POLICY, True, True),  # a bf16 policy: the engine runs bf16 kernels
        ({"bf16": True}, FP32_POLICY, True, True),  # bf16 autocast (and the engine auto -> bfloat16)
        ({"vllm_dtype": "bfloat16"}, FP32_POLICY, True, True),
        ({"top_p": 0.9}, FP32_POLICY, True, True),  # truncated sampler: vLLM's processed log-probs differ
        ({"top_k": 20}, FP32_POLICY, True, True),
        ({"repetition_penalty": 1.1}, FP32_POLICY, True, True),
        ({"generation_kwargs": {"min_tokens": 4}}, FP32_POLICY, True, True),
        (
            {"temperature": 1.0, "generation_kwargs": {"temperature": 0.3}},
            FP32_POLICY,
            True,
            True,
        ),  # sampler 0.3, loss 1
        ({"generation_kwargs": {"temperature": 0.7}}, FP32_POLICY, True, False),  # the same temperature, restated
        # a grammar: TRL's ratio would compare the masked sampler with the free policy (vllm_colocate warns): off
        ({"vllm_structured_outputs_regex": "[0-9]+"}, FP32_POLICY, True, False),
        ({"generation_kwargs": {"structured_outputs": {"regex": "[0-9]+"}}}, FP32_POLICY, True, False),
        ({}, FP32_POLICY, False, True),  # GPU build: TRL's default
        ({"vllm_mode": "server"}, FP32_POLICY, True, True),  # another process's engine
        ({"use_vllm": False}, FP32_POLICY, True, False),  # no vLLM: TRL never computes it
        ({"vllm_importance_sampling_correction": True}, FP32_POLICY, True, True),  # explicit values are kept
        ({"vllm_importance_sampling_correction": False, "bf16": True}, FP32_POLICY, True, False),
    ],
)
def test_importance_sampling_auto(monkeypatch, changes, model, on_cpu, expected):
    monkeypatch.setattr(rollout_module, "vllm_on_cpu", lambda: on_cpu)
    args = _is_args(**changes)
    on, reason = rollout_module.resolve_importance_sampling(args, model)
    assert on is expected and reason
    assert args.vllm_importance_sampling_correction is expected  # set for TRL, which copies it in __init__


def test_importance_sampling_auto_is_refined_with_the_policy(monkeypatch):
    monkeypatch.setattr(rollout_module, "vllm_on_cpu", lambda: True)
    args = _is_args()
    assert rollout_module.resolve_importance_sampling(args)[0] is True  # the config: policy dtype unknown, TRL's True
    assert rollout_module.resolve_importance_sampling(args, FP32_POLICY)[0] is False  # the trainer: an fp32 policy
    assert rollout_module.resolve_importance_sampling(args, BF16_POLICY)[0] is True  # still auto: refined again
    explicit = _is_args(vllm_importance_sampling_correction=False)
    assert rollout_module.resolve_importance_sampling(explicit, BF16_POLICY) == (False, "set explicitly")


def test_importance_sampling_auto_reaches_trl(tmp_path, tiny_llama, tokenizer):
    from procrl.trainers.grpo import ProcessGRPOTrainer

    # transformers generation: no vLLM sampler, so auto resolves to off (TRL never runs the extra forward)
    args = grpo_config(tmp_path)
    assert args.vllm_importance_sampling_correction is False  # resolved by the config already (a bool for TRL)
    trainer = ProcessGRPOTrainer(
        model=tiny_llama, reward_funcs=[outcome_reward], args=args, train_dataset=_dataset(), processing_class=tokenizer
    )
    assert trainer.vllm_importance_sampling_correction is False and args.vllm_importance_sampling_correction is False


# --- GRPO on TRL's colocated vLLM engine (slow) ------------------------------------------------------------------


def _dataset(n_repeat=2):
    rows = [{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in QUESTIONS] * n_repeat
    return Dataset.from_list(rows)


@pytest.fixture(scope="module")
def vllm_trainer(tmp_path_factory, smollm2_tokenizer, tiny_llama_factory):
    """One ProcessGRPOTrainer on vLLM for the module: a tiny fp32 Llama with head size 32 (the CPU attention kernels
    take 32, 64, 80, ...), saved with the SmolLM2 tokenizer, 0.5 GiB of KV cache, learning rate 0.05 so one step
    visibly moves the weights (`token_parity` gives the completions different rewards)."""
    if not VLLM_INSTALLED:
        pytest.skip("vLLM is not installed")
    from procrl.trainers.grpo import ProcessGRPOTrainer

    path = tmp_path_factory.mktemp("tiny-vllm-policy")
    model = tiny_llama_factory(len(smollm2_tokenizer), hidden_size=64, num_attention_heads=2, num_key_value_heads=1)
    model.save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    args = grpo_config(
        tmp_path_factory.mktemp("grpo-vllm-out"),
        generation_backend="vllm",
        vllm_kv_cache_gib=0.5,
        max_steps=2,
        learning_rate=5e-2,
        max_completion_length=12,
        # auto would turn it off (fp32 colocated engine = the policy); TRL's IS metrics are this module's sync check
        vllm_importance_sampling_correction=True,
    )
    side = smollm2_tokenizer.padding_side
    smollm2_tokenizer.padding_side = "left"
    trainer = ProcessGRPOTrainer(
        model=policy,
        reward_funcs=[outcome_reward, token_parity],
        args=args,
        train_dataset=_dataset(),
        processing_class=smollm2_tokenizer,
    )
    yield trainer
    smollm2_tokenizer.padding_side = side


def token_parity(completion_ids, **kwargs):
    """A reward that differs between completions of a random model (the outcome reward is 0 for all: no gradient)."""
    return [sum(t % 2 for t in ids) / len(ids) for ids in completion_ids]


def reads_logps(completions, completion_logps, **kwargs):
    """Names `completion_logps`: the rollout must compute them (procrl.utils.reads_completion_logps)."""
    return [0.0] * len(completions)


def _prompts(n_repeat=2):
    return [[{"role": "user", "content": q}] for q, _ in QUESTIONS] * n_repeat


@pytest.mark.slow  # starts a vLLM engine
def test_rollout_logprobs_agree_with_a_policy_forward(vllm_trainer):
    trainer = vllm_trainer
    trainer.vllm_generation.sync_weights()  # whatever ran before: engine = policy
    policy = trainer.accelerator.unwrap_model(trainer.model)
    tokenizer = trainer.processing_class
    prompts = _prompts()
    # no reward reads completion_logps (outcome, token_parity): T = 0.7 is not raw, so none are computed
    assert not needs_completion_logps(trainer)
    rescores = spy(vllm_colocate.colocate_engine(trainer), "rescore")
    assert "completion_logps" not in trainer.rollout_func(prompts, trainer) and rescores == []
    # a reader among the rewards: logprobs are the sampler's, completion_logps rescored on the engine
    trainer.reward_funcs.append(reads_logps)
    try:
        out = trainer.rollout_func(prompts, trainer)
    finally:
        trainer.reward_funcs.remove(reads_logps)
    assert len(rescores) == 1
    assert out["prompt_ids"] == render_prompts(tokenizer, prompts, None)
    assert all(0 < len(ids) <= 12 for ids in out["completion_ids"])
    assert all(ids[-1] in trainer.eos_token_ids or len(ids) == 12 for ids in out["completion_ids"])
    assert max_diff(out["logprobs"], temperature_logps(policy, out["prompt_ids"], out["completion_ids"], 0.7)) < 1e-3
    assert (
        max_diff(out["completion_logps"], temperature_logps(policy, out["prompt_ids"], out["completion_ids"], 1)) < 1e-3
    )
    # the rows' seeds differ (4 prompts, 2 distinct): not every repeat of a prompt gets the same completion
    assert out["completion_ids"][0] != out["completion_ids"][2] or out["completion_ids"][1] != out["completion_ids"][3]
    # T = 1, nothing else: vLLM's own log-probs are raw, used for both fields (no policy forward)
    forwards = []
    hook = policy.register_forward_hook(lambda *_: forwards.append(1))
    trainer.temperature = 1.0
    try:
        raw = trainer.rollout_func(prompts, trainer)
    finally:
        trainer.temperature = 0.7
        hook.remove()
    assert forwards == []
    assert raw["logprobs"] == raw["completion_logps"]
    assert max_diff(raw["logprobs"], temperature_logps(policy, raw["prompt_ids"], raw["completion_ids"], 1)) < 1e-3


def _greedy_run(trainer, engine=None):
    """evaluate() on the four prompts; returns (EvalResult as a dict without wall time, completion ids, raw logps)."""
    seen = {}

    def recorder(completions, completion_ids, completion_logps, **kwargs):
        seen.update(ids=[list(r) for r in completion_ids], logps=[list(r) for r in completion_logps])
        return [0.0] * len(completions)

    policy = trainer.accelerator.unwrap_model(trainer.model)
    result = evaluate(
        policy,
        trainer.processing_class,
        _dataset(),
        name="tiny",
        outcome_func=outcome_reward,
        reward_funcs=[recorder],
        max_new_tokens=12,
        progress=False,
        engine=engine,
    ).to_dict()
    result.pop("wall_time_s")
    return result, seen["ids"], seen["logps"]


@pytest.fixture(scope="module")
def trained(vllm_trainer):
    """Two GRPO steps on vLLM, with spies on TRL's sync trigger, TRL's parameter walk and the rollout."""
    from procrl.trainers.vllm_colocate import colocate_engine

    trainer = vllm_trainer
    engine = colocate_engine(trainer)
    records = {"syncs": [], "rollouts": []}
    named_params = spy(trainer.vllm_generation, "_iter_named_params")
    sync = trainer.vllm_generation.sync_weights

    def recorded_sync():
        records["syncs"].append(trainer.state.global_step)
        sync()

    trainer.vllm_generation.sync_weights = recorded_sync
    rollout = trainer.rollout_func

    def recorded_rollout(prompts, trainer_):
        out = rollout(prompts, trainer_)
        policy = trainer_.accelerator.unwrap_model(trainer_.model)
        # the policy at generation time (the weights the engine should hold), T = 0.7
        expected = temperature_logps(policy, out["prompt_ids"], out["completion_ids"], 0.7)
        records["rollouts"].append((trainer_.state.global_step, max_diff(out["logprobs"], expected)))
        return out

    trainer.rollout_func = recorded_rollout
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    try:
        trainer.train()
    finally:
        trainer.vllm_generation.sync_weights, trainer.rollout_func = sync, rollout
    records["changed"] = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    records["named_params_calls"] = len(named_params)
    records["stale"] = max_diff(
        engine.rescore(*_rescore_inputs(trainer)),
        sequence_logps(trainer.model, *_sequences(trainer), pad_token_id=trainer.processing_class.pad_token_id),
    )
    return records


def _rescore_inputs(trainer):
    prompt_ids = render_prompts(trainer.processing_class, _prompts(1), None)
    completions = [[int(t) for t in trainer.processing_class.encode(" The answer is 5.")] for _ in prompt_ids]
    return prompt_ids, completions


def _sequences(trainer):
    prompt_ids, completions = _rescore_inputs(trainer)
    return [p + c for p, c in zip(prompt_ids, completions, strict=True)], [len(p) for p in prompt_ids]


@pytest.mark.slow  # trains on vLLM
def test_weights_are_synced_after_every_optimizer_step(vllm_trainer, trained):
    trainer = vllm_trainer
    assert trainer.state.global_step == 2 and trained["changed"]
    assert trained["syncs"] == [0, 1]  # TRL syncs before each generation whose global_step changed
    # each step's rollout came from the weights of that step: the sampler's log-probs equal the policy's
    assert [step for step, _ in trained["rollouts"]] == [0, 1]
    assert all(diff < 1e-3 for _, diff in trained["rollouts"]), trained["rollouts"]
    for logs in trainer.state.log_history[:2]:  # TRL's own view: |policy - sampler| log-probs and the IS ratio
        assert logs["sampling/sampling_logp_difference/max"] < 1e-3
        assert abs(logs["sampling/importance_sampling_ratio/mean"] - 1) < 1e-3
    # after the last step the engine still holds step 1's weights; one more sync makes it the policy again
    assert trained["stale"] > 1e-2
    trainer.vllm_generation.sync_weights()
    hf, hf_ids, hf_logps = _greedy_run(trainer)
    vllm_result, vllm_ids, vllm_logps = _greedy_run(trainer, engine=vllm_colocate.colocate_engine(trainer))
    assert vllm_ids == hf_ids  # the engine's greedy output is the policy's
    assert max_diff(vllm_logps, hf_logps) < 1e-3
    assert vllm_result == hf  # evaluate() reports the same with either engine


@pytest.mark.slow  # trains on vLLM
def test_cpu_sync_walks_trl_parameter_iterator(trained):
    """Guards the private TRL API the CPU sync uses: fails if `_iter_named_params` is no longer what feeds it."""
    assert trained["named_params_calls"] == len(trained["syncs"]) == 2
