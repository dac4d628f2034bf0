"""The rules `procrl.generation` owns for everyone: the engine settings (`EngineArguments`: one spelling, one help text,
composed by GRPO, the offline commands and the PUM-Math builder), the raw-distribution rule
(`draws_raw_distribution`, `sampled_logprobs_are_raw`) and the EOS part of the stop rule (`eos_length`,
`completion_lengths`). Expected values are hand-derived from the rules' definitions."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import procrl.generation.engines as engines
from procrl.data_builders.pum_math import PUMMathConfig
from procrl.evals.offline import OfflineSamplingConfig
from procrl.generation import (
    EngineArguments,
    SamplingParams,
    completion_lengths,
    draws_raw_distribution,
    make_engine_from,
    sampled_logprobs_are_raw,
)
from procrl.generation.sampling import eos_length
from procrl.trainers.grpo import ProcessGRPOConfig

# ----------------------------------------------------------------------------------------------------------------
# EngineArguments


def test_every_command_has_the_engine_fields_with_one_help_text():
    engine = {f.name: (f.default, f.metadata["help"]) for f in dataclasses.fields(EngineArguments)}
    assert list(engine) == ["generation_backend", "vllm_kv_cache_gib", "vllm_dtype"]
    assert [default for default, _ in engine.values()] == ["auto", 1.0, "auto"]
    for cls in (ProcessGRPOConfig, OfflineSamplingConfig, PUMMathConfig):
        assert issubclass(cls, EngineArguments)
        fields = {f.name: (f.default, f.metadata["help"]) for f in dataclasses.fields(cls)}
        assert {name: fields[name] for name in engine} == engine, cls
    assert "engine" not in {f.name for f in dataclasses.fields(PUMMathConfig)}  # renamed to generation_backend


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"generation_backend": "sglang"}, "generation_backend='sglang' is not one of auto, vllm, transformers"),
        ({"vllm_kv_cache_gib": 0}, "vllm_kv_cache_gib=0 must be > 0"),
        ({"vllm_kv_cache_gib": float("nan")}, "vllm_kv_cache_gib=nan must be > 0"),
        ({"vllm_kv_cache_gib": True}, "vllm_kv_cache_gib=True must be > 0"),
        ({"vllm_dtype": "fp8"}, "vllm_dtype='fp8' is not one of auto, float32, bfloat16, float16"),
    ],
)
def test_engine_problems_name_the_field_and_the_fix(changes, problem):
    assert EngineArguments().engine_problems() == []
    (found,) = EngineArguments(**changes).engine_problems()
    assert found.startswith(problem)
    with pytest.raises(ValueError, match=problem.split("=")[0]):
        PUMMathConfig(**changes)


class Built:
    def __init__(self, kind, model, **kwargs):
        self.kind, self.model, self.kwargs = kind, model, kwargs


@pytest.mark.parametrize("backend", ["vllm", "transformers"])
@pytest.mark.parametrize("vllm_dtype", ["auto", "bfloat16"])
def test_make_engine_routes_the_settings_to_the_engine(monkeypatch, backend, vllm_dtype):
    """vLLM gets the KV cache and `vllm_dtype` (else the caller's dtype); transformers gets the caller's dtype and
    none of the vLLM-only settings."""
    monkeypatch.setattr(engines, "VLLMEngine", lambda model, **kw: Built("vllm", model, **kw))
    monkeypatch.setattr(engines, "TransformersEngine", lambda model, **kw: Built("transformers", model, **kw))
    args = EngineArguments(generation_backend=backend, vllm_kv_cache_gib=0.5, vllm_dtype=vllm_dtype)
    built = make_engine_from(args, "some/model", dtype="float32", device="cpu", batch_size=4)
    assert (built.kind, built.model) == (backend, "some/model")
    if backend == "vllm":
        dtype = "float32" if vllm_dtype == "auto" else vllm_dtype
        assert built.kwargs == {"dtype": dtype, "kv_cache_gib": 0.5, "device": "cpu", "batch_size": 4}
    else:
        assert built.kwargs == {"dtype": "float32", "device": "cpu", "batch_size": 4}


# ----------------------------------------------------------------------------------------------------------------
# The raw-distribution rule


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "min_tokens": 0},
        {"top_k": 0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0},
        {"min_p": None, "repetition_penalty": None, "logit_bias": {}, "bad_words": [], "structured_outputs": None},
        {"n": 4, "seed": 3, "max_tokens": 9, "logprobs": 0, "stop": ["\n\n"], "stop_token_ids": [2]},
        {"ignore_eos": True, "include_stop_str_in_output": True, "prompt_logprobs": 0, "detokenize": False},
    ],
)
def test_raw_samplers(fields):
    assert draws_raw_distribution(fields)
    assert sampled_logprobs_are_raw("processed_logprobs", fields)


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.7},
        {"temperature": 0.0},
        {"top_p": 0.9},
        {"top_k": 5},
        {"min_p": 0.05},
        {"repetition_penalty": 1.1},
        {"presence_penalty": 0.5},
        {"frequency_penalty": 0.1},
        {"min_tokens": 2},
        {"logit_bias": {3: 1.0}},
        {"bad_words": ["x"]},
        {"allowed_token_ids": [1, 2]},
        {"structured_outputs": object()},
        {"some_future_field": None},  # unknown: counts as changing the distribution, even when None
    ],
)
def test_samplers_that_change_the_distribution(change):
    fields = {"temperature": 1.0, "top_p": 1.0, **change}
    assert not draws_raw_distribution(fields)
    assert not sampled_logprobs_are_raw("processed_logprobs", fields)
    assert sampled_logprobs_are_raw("raw_logprobs", fields)  # vLLM's raw mode: raw whatever the sampler


def test_sampling_params_ask_the_same_rule():
    assert SamplingParams(temperature=1.0).vllm_fields() == {
        "temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 256, "min_tokens": 0, "stop": None,
    }  # fmt: skip
    assert SamplingParams(top_k=5, stop=("\n",), max_new_tokens=8, min_new_tokens=1).vllm_fields() == {
        "temperature": 1.0, "top_p": 1.0, "top_k": 5, "max_tokens": 8, "min_tokens": 1, "stop": ["\n"],
    }  # fmt: skip
    assert draws_raw_distribution(SamplingParams(temperature=1.0, stop=("\n",), max_new_tokens=3).vllm_fields())
    for other in ({"temperature": 0.7}, {"top_p": 0.5}, {"top_k": 2}, {"min_new_tokens": 1}, {"temperature": 0}):
        assert not draws_raw_distribution(SamplingParams(**other).vllm_fields()), other


# ----------------------------------------------------------------------------------------------------------------
# The EOS part of the stop rule


def test_eos_length_and_its_batched_form():
    assert eos_length([5, 7, 2, 9, 2], eos_ids=[2]) == 3  # the first EOS ends it, and is kept
    assert eos_length([5, 3, 7], eos_ids=[2, 3]) == 2  # any of several EOS ids
    assert eos_length([5, 7], eos_ids=[2]) is None and eos_length([], eos_ids=[2]) is None
    rows = torch.tensor([[5, 7, 2, 9], [2, 0, 0, 0], [5, 6, 7, 8], [4, 3, 2, 1]])
    assert completion_lengths(rows, [2]) == [3, 1, 4, 3]  # T = 4 where no EOS
    assert completion_lengths(rows, [2, 3]) == [3, 1, 4, 2]
