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


TINY_CHAT_TEMPLATE = (  # SmolLM2's, without its default system turn
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TINY_WORDS = (
    "system user assistant What is the answer The Q A how many apples pens has buys more left so".split()
    + [str(d) for d in range(10)]
    + list("+-*/=.?,:#")
)


def make_tiny_chat_tokenizer(words=TINY_WORDS):
    """A word-level tokenizer of a few dozen tokens with a chat template: `<unk>` 0, bos `<|im_start|>` 1, eos = pad
    `<|im_end|>` 2 (the ids of `tiny_llama_config`), then `words`; whitespace splits words, punctuation and digits
    are single tokens. Its logits are ~1000x smaller than a real vocabulary's, so a training step takes milliseconds."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    special = ["<unk>", "<|im_start|>", "<|im_end|>"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate([*special, *words])}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(), pre_tokenizers.Digits(individual_digits=True)]
    )
    backend.decoder = decoders.WordPiece(prefix="##")
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


def save_tiny_bert(folder, texts, seed: int = 0, num_labels: int | None = None):
    """A 1-layer BERT (hidden 16) with a word-level vocabulary of `texts` (lower-cased words and punctuation; others
    are [UNK]) saved with its tokenizer to `folder`: an encoder (`BertModel`) or, with `num_labels`, a
    `BertForSequenceClassification`. Returns `folder` as str."""
    import re

    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizer

    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(vocab)})
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=128)  # fmt: skip
    torch.manual_seed(seed)
    model = BertModel(config) if num_labels is None else BertForSequenceClassification(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
