"""Shared fixtures: the embedded default tokenizer and tiny random models built from configs (CPU only)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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


def tiny_llama_config(vocab_size: int, **overrides):
    """The config of every tiny test model: 2 layers, hidden 32, bos 1, eos = pad = 2 (as for SmolLM2)."""
    from transformers import LlamaConfig

    fields = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    return LlamaConfig(**{**fields, **overrides})


def make_tiny_llama(vocab_size: int, seed: int = 0, **overrides):
    """A 2-layer Llama with random weights: fast enough for trainer tests on CPU."""
    from transformers import LlamaForCausalLM

    config = tiny_llama_config(vocab_size, tie_word_embeddings=True, **overrides)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def make_tiny_pum(vocab_size: int, seed: int = 0):
    """A 2-layer LlamaForSequenceClassification (num_labels=1, pad == eos as for SmolLM2) whose score head is drawn
    with std 1, so U values are O(1) and differ between prefixes."""
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(seed)
    model = LlamaForSequenceClassification(tiny_llama_config(vocab_size, num_labels=1)).eval()
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)
    return model


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


@pytest.fixture()
def tokenizer(smollm2_tokenizer):
    """The SmolLM2 tokenizer with left padding, as GRPO generation pads prompts (the trainer tests)."""
    smollm2_tokenizer.padding_side = "left"
    return smollm2_tokenizer
