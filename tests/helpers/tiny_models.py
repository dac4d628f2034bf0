"""Tiny random models built from configs (CPU only), for the fixtures in tests/conftest.py and for test scripts
that run under torchrun (importable: pyproject adds tests/helpers to pytest's pythonpath)."""

from __future__ import annotations

import torch


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
