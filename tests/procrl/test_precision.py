"""`bf16: auto` (procrl.generation.runtime) and the CPU feature behind it (procrl.experiment.provenance): the rule is tested on
given /proc/cpuinfo texts and a mocked GPU check, so nothing here depends on the CPU the suite runs on."""

from __future__ import annotations

import pytest
import torch
from grpo_helpers import grpo_config

from procrl.experiment.provenance import machine_info
from procrl.generation import runtime
from procrl.generation.runtime import CPU_BF16_ENV, cpu_bf16, cpu_bf16_feature, resolve_bf16, resolve_dtype
from procrl.trainers.pum_training import PUMTrainingConfig

# flags lines as /proc/cpuinfo prints them (trimmed)
AMX = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"


@pytest.mark.parametrize(
    "cpuinfo, feature",
    [
        (AMX, "amx_bf16"),  # AMX first: it is the faster of the two
        (ZEN4, "avx512_bf16"),  # AMD EPYC Zen 4: AVX512-BF16 without AMX
        (AVX2, None),  # AVX2 only: bf16 is emulated
        ("flags\t\t: avx512f avx512bw\n", None),  # AVX-512 without its BF16 extension
        ("model name\t: x\n", None),  # no flags line at all
        ("", None),
    ],
)
def test_cpu_bf16_feature(cpuinfo, feature):
    assert cpu_bf16_feature(cpuinfo) == feature


@pytest.mark.parametrize(
    "env, cpuinfo, expected",
    [
        (None, ZEN4, True),  # unset: the CPU's features decide
        ("auto", AVX2, False),
        ("0", AMX, False),  # forced off on a bf16 CPU (the test suite's setting)
        ("1", AVX2, True),  # forced on where it is emulated
    ],
)
def test_cpu_bf16_env_overrides_the_features(monkeypatch, env, cpuinfo, expected):
    if env is None:
        monkeypatch.delenv(CPU_BF16_ENV, raising=False)
    else:
        monkeypatch.setenv(CPU_BF16_ENV, env)
    on, reason = cpu_bf16(cpuinfo)
    assert on is expected and reason


def test_cpu_bf16_env_typo_says_how_to_fix(monkeypatch):
    monkeypatch.setenv(CPU_BF16_ENV, "yes")
    with pytest.raises(ValueError, match="use 1 .* 0 .* or auto"):
        cpu_bf16(AMX)


@pytest.fixture
def cpu_with(monkeypatch):
    """Pretend to be a CPU-only machine whose /proc/cpuinfo is the given text (PROCRL_CPU_BF16 unset)."""

    def pretend(cpuinfo: str) -> None:
        monkeypatch.delenv(CPU_BF16_ENV, raising=False)
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
        monkeypatch.setattr(runtime, "cpu_bf16_feature", lambda _=None: cpu_bf16_feature(cpuinfo))

    return pretend


@pytest.mark.parametrize(
    "value, fp16, cpuinfo, expected",
    [
        ("auto", False, ZEN4, True),  # native bf16: autocast
        (" Auto", False, ZEN4, True),  # any case and spacing
        ("auto", False, AVX2, False),  # emulated: fp32
        (None, False, AMX, True),  # None is auto (TRL's spelling)
        ("auto", True, AMX, False),  # never with fp16
        ("false", False, AMX, False),  # an explicit value is kept
        ("True", False, AVX2, True),
        (False, False, ZEN4, False),
    ],
)
def test_resolve_bf16_on_a_cpu(cpu_with, value, fp16, cpuinfo, expected):
    cpu_with(cpuinfo)
    assert resolve_bf16(value, fp16=fp16)[0] is expected


def pretend_accelerator(monkeypatch, kind: str) -> None:
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device(kind))


def test_resolve_bf16_on_a_gpu_follows_its_support(monkeypatch):
    pretend_accelerator(monkeypatch, "cuda")
    for supported in (True, False):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda s=supported: s)
        assert resolve_bf16("auto") == (supported, "CUDA GPU " + ("with bf16" if supported else "without bf16: fp32"))
    # use_cpu on a GPU machine: the CPU rule (forced off here)
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    assert resolve_bf16("auto", use_cpu=True)[0] is False


def test_resolve_bf16_on_another_accelerator_is_trls_default(monkeypatch):
    pretend_accelerator(monkeypatch, "xpu")  # an XPU host with an AMX CPU must not fall back to the CPU rule
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    assert resolve_bf16("auto") == (True, "xpu accelerator: TRL's default")


@pytest.mark.parametrize("launcher, expected", [("bf16", True), ("no", False), ("fp16", False)])
def test_resolve_bf16_follows_the_launchers_mixed_precision(cpu_with, monkeypatch, launcher, expected):
    cpu_with(ZEN4 if not expected else AVX2)  # the launcher's choice wins over the CPU's features either way
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launcher)
    assert resolve_bf16("auto") == (expected, f"ACCELERATE_MIXED_PRECISION={launcher}")


@pytest.mark.parametrize("value", ["maybe", 3])
def test_resolve_bf16_refuses_other_values(value):
    with pytest.raises(ValueError, match="use auto"):
        resolve_bf16(value)


@pytest.mark.parametrize("cpuinfo, dtype", [(ZEN4, torch.bfloat16), (AVX2, torch.float32)])
def test_vllm_engine_dtype_auto_follows_the_same_rule(cpu_with, cpuinfo, dtype):
    cpu_with(cpuinfo)
    assert resolve_dtype("auto", torch.device("cpu"), cpu_bf16_auto=True) == dtype  # procrl's vLLM engines
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32  # transformers engines stay fp32 on a CPU
    assert resolve_dtype("float32", torch.device("cpu"), cpu_bf16_auto=True) == torch.float32  # explicit: kept


@pytest.mark.parametrize("make", [lambda out: grpo_config(out), lambda out: PUMTrainingConfig(output_dir=str(out))])
def test_training_configs_resolve_auto(tmp_path, cpu_with, make, caplog):
    cpu_with(ZEN4)
    with caplog.at_level("INFO", logger="procrl"):
        config = make(tmp_path)
    # bf16 autocast on a CPU needs use_cpu (transformers refuses bf16 without a GPU otherwise)
    assert config.bf16 is True and config.use_cpu is True
    assert "bf16 on: CPU with native bf16 (avx512_bf16)" in caplog.text
    cpu_with(AVX2)
    config = make(tmp_path)
    assert config.bf16 is False and config.use_cpu is False


def test_machine_info_records_the_bf16_feature():
    assert machine_info()["cpu_bf16"] in (None, "amx_bf16", "avx512_bf16")
