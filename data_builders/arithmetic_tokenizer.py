"""A word-level tokenizer for the arithmetic tasks: the vocabulary of `procrl.data_builders.arithmetic` and nothing
else, for small policies trained from scratch (the model organism, docs/architecture.md "SFT warm starts").

Why: the embedded SmolLM2 tokenizer has 49,152 entries, so a from-scratch policy of hidden size 128 spends most of its
parameters and most of its compute in the embedding and the LM head. The task's texts use a few hundred distinct
words; with this tokenizer the same policy is several times faster per step, and nothing else changes (it is saved
as a normal `PreTrainedTokenizerFast` with a chat template, so TRL, vLLM and procrl load it like any other).

Tokens: every word (a run of letters) of the wording module's names, objects and templates, of the prompt templates
and of the traces; each digit alone (numbers are digit sequences, as in SmolLM2); each punctuation character; each
of these also with one leading space (" apples", " 1", " +", as GPT-2-style tokenizers do, which halves the
sequence length); the whitespace runs " ", "\\n" and "\\n\\n"; and the special tokens `<|endoftext|>` (padding), `<|im_start|>`,
`<|im_end|>` (end of turn = EOS) and `<unk>` for anything else. Decoding concatenates the tokens, so
`decode(encode(text)) == text` for every text made only of known pieces. The vocabulary is sorted, so it is the same
on every machine and run.

    >>> tok = arithmetic_tokenizer()
    >>> text = "Sara has 14 apples. 14 + 7 = 21.\\n\\nThe answer is 21."
    >>> ids = tok(text, add_special_tokens=False)["input_ids"]
    >>> tok.decode(ids) == text, len(ids), tok.unk_token_id in ids
    (True, 21, False)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from procrl.data_builders import arithmetic_wording
from procrl.data_builders.prompts import ANSWER_INSTRUCTION, ONE_SHOT_TEMPLATE, ZERO_SHOT_TEMPLATE

__all__ = [
    "CHAT_TEMPLATE",
    "PIECE_PATTERN",
    "SPECIAL_TOKENS",
    "arithmetic_tokenizer",
    "arithmetic_vocabulary",
    "chat_tokenizer",
]

# One piece: a word, one digit or one other character (punctuation, operators), each with an optional leading space;
# or a whitespace run.
PIECE_PATTERN = r" ?[A-Za-z]+| ?\d| ?[^A-Za-z\d\s]|\s+"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>")
# The same turn markup as SmolLM2's template, without its default system message.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_EXTRA_TEXT = (
    "The answer is 0123456789. + - * / = ( ) , ' \" < > : ? ! % $ user assistant system Let Compute",
    ANSWER_INSTRUCTION,
    ZERO_SHOT_TEMPLATE,
    " \n \n\n",
)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _strings(item)


def arithmetic_vocabulary() -> list[str]:
    """The sorted non-special tokens: every piece (`PIECE_PATTERN`) of the wording module's public string
    constants, the prompt templates and `_EXTRA_TEXT`; placeholders such as `{name}` contribute harmless words."""
    texts = [
        s for name in dir(arithmetic_wording) if name.isupper() for s in _strings(getattr(arithmetic_wording, name))
    ]
    texts += [m["content"] for m in ONE_SHOT_TEMPLATE] + list(_EXTRA_TEXT)
    pieces = {piece.strip() for text in texts for piece in re.findall(PIECE_PATTERN, text)} - {""}
    pieces = pieces | {" " + p for p in pieces} | {" ", "\n", "\n\n"}
    return sorted(pieces)


def arithmetic_tokenizer():
    """The task's word-level tokenizer as a `transformers.PreTrainedTokenizerFast` (module docstring): ids 0-3 are
    `SPECIAL_TOKENS`, then `arithmetic_vocabulary()` in order; pad `<|endoftext|>`, EOS `<|im_end|>`, no BOS;
    `CHAT_TEMPLATE`. Save it with `save_pretrained(dir)` next to a model."""
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *arithmetic_vocabulary()])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated")
    core.decoder = decoders.Fuse()
    return chat_tokenizer(core, unk_token="<unk>")


def chat_tokenizer(core: Tokenizer, **special: str) -> PreTrainedTokenizerFast:
    """`core` as a `PreTrainedTokenizerFast` with this module's specials (pad `<|endoftext|>`, EOS `<|im_end|>`,
    `<|im_start|>`; `special` adds e.g. `unk_token`) and `CHAT_TEMPLATE`: what a from-scratch policy's tokenizer
    needs (also `procrl.data_builders.world_tokenizer`)."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
        **special,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
