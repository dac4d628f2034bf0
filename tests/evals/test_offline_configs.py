"""The offline commands' settings share one base (`OfflineSamplingConfig`, which starts with the engine fields of
`procrl.generation.EngineArguments`): `procrl select` / `procrl beam` add the PUM (`OfflineConfig`), `procrl frs`
(`OfflineFRSConfig`) overrides defaults and help texts and adds its own sampling and output settings (its FRS and
judge settings are `FRSArguments` and `JudgeArguments`, parsed beside it)."""

from __future__ import annotations

import dataclasses

import pytest

from procrl.evals.beam_search import BeamConfig
from procrl.evals.frs.offline import OfflineFRSConfig
from procrl.evals.offline import OfflineConfig, OfflineSamplingConfig
from procrl.evals.selection import SelectConfig
from procrl.generation import EngineArguments

SHARED = ["generation_backend", "vllm_kv_cache_gib", "vllm_dtype", "model", "dataset", "split", "start", "end",
          "prompt_template", "temperature", "top_p", "max_new_tokens", "batch_size", "seed", "device",
          "no_progress"]  # fmt: skip

FRS_DEFAULTS = {
    "generation_backend": "auto", "vllm_kv_cache_gib": 1.0, "vllm_dtype": "auto",
    "model": "default", "dataset": "gsm8k", "split": None, "start": 0, "end": 50, "prompt_template": "one_shot",
    "temperature": 0.7, "top_p": 1.0, "max_new_tokens": 256, "batch_size": 32, "seed": 0, "device": None,
    "no_progress": False, "top_k": 0,
    "bootstrap_resamples": 1000, "traces_from": None, "output_dir": "outputs/frs",
}  # fmt: skip


def _names(cls):
    return [f.name for f in dataclasses.fields(cls)]


def test_every_offline_config_starts_with_the_shared_fields():
    assert _names(OfflineSamplingConfig) == SHARED
    assert _names(OfflineConfig) == [*SHARED, "pum"]
    for cls in (SelectConfig, BeamConfig, OfflineFRSConfig):
        assert _names(cls)[: len(SHARED)] == SHARED
    assert issubclass(OfflineFRSConfig, OfflineSamplingConfig) and not issubclass(OfflineFRSConfig, OfflineConfig)
    assert "pum" not in _names(OfflineFRSConfig)  # procrl frs has no --pum flag


def test_frs_defaults_and_help_texts():
    assert dataclasses.asdict(OfflineFRSConfig()) == FRS_DEFAULTS
    assert list(FRS_DEFAULTS) == _names(OfflineFRSConfig)
    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(OfflineFRSConfig)}
    assert helps["max_new_tokens"] == "token budget of one trace"
    assert helps["batch_size"] == "traces per generate call"
    assert helps["seed"] == "sampling seed and FRS hash seed"
    assert all(helps.values())
    base = OfflineConfig()
    assert (base.dataset, base.end, base.pum) == ("svamp", 100, None)


def test_frs_validates_as_the_other_offline_commands():
    for cls in (OfflineFRSConfig, OfflineConfig):
        with pytest.raises(ValueError, match=r"^--batch-size \(0\) and --max-new-tokens \(256\) must be >= 1"):
            cls(batch_size=0)
    with pytest.raises(ValueError, match=r"^--bootstrap-resamples must be >= 0"):
        OfflineFRSConfig(bootstrap_resamples=-1)


@pytest.mark.parametrize("cls", [OfflineConfig, OfflineFRSConfig, SelectConfig])
def test_generation_backend_is_validated_with_a_fix(cls):
    extra = {"scorer": "random"} if cls is SelectConfig else {}
    for backend in ("auto", "vllm", "transformers"):
        assert cls(generation_backend=backend, **extra).generation_backend == backend
    with pytest.raises(ValueError, match=r"generation_backend='tgi' is not one of auto, vllm, transformers; use auto"):
        cls(generation_backend="tgi", **extra)
    with pytest.raises(ValueError, match=r"vllm_kv_cache_gib=0 must be > 0 \(GiB\)"):
        cls(vllm_kv_cache_gib=0, **extra)
    with pytest.raises(ValueError, match=r"vllm_dtype='fp8' is not one of auto, float32, bfloat16, float16"):
        cls(vllm_dtype="fp8", **extra)
    engine_help = {f.name: f.metadata["help"] for f in dataclasses.fields(EngineArguments)}
    assert {f.name: f.metadata["help"] for f in dataclasses.fields(cls) if f.name in engine_help} == engine_help
