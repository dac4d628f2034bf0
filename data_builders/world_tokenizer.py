"""A small byte-level BPE tokenizer for the synthetic world's policies trained from scratch (issue 29; the arithmetic
organism's reason, `procrl.data_builders.arithmetic_tokenizer`).

Why: SmolLM2's tokenizer has 49,152 entries, so a from-scratch policy of hidden size 128 spends nearly all of a
training step in the LM head and its logits (measured: 10.7 s per step of 4 episodes on 2 CPU cores). The world's
texts use a few hundred words and the syllables its names are made of; a BPE of `vocab_size` 2,000 trained on the
train split writes an episode in fewer tokens than SmolLM2's (mean 606 against 774 on the default world) and makes the
head 25 times smaller.

Held-out names: the tokenizer is byte-level (GPT-2's pre-tokenizer and byte alphabet, Hugging Face `tokenizers`'
`BpeTrainer`), so every text encodes, without an unknown token, and `decode(encode(text)) == text`; names of the dev
and test splits, which share no name with train, are written with the syllable merges learned from train's names.

Special tokens and chat markup are the arithmetic tokenizer's: `<|endoftext|>` (padding), `<|im_start|>`,
`<|im_end|>` (end of turn = EOS), no BOS, and SmolLM2's turn markup without its default system message. The merges
are a deterministic function of the texts and their order (`tokenizers`' trainer breaks count ties by the pair).

    >>> tok = world_tokenizer(["Burkgror Zysaesin was born in Baexmora."] * 3, vocab_size=300)
    >>> text = "Where was Zysrex Vateisk born?"
    >>> tok.decode(tok(text)["input_ids"]) == text, tok.unk_token_id is None, tok.eos_token
    (True, True, '<|im_end|>')
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from procrl.data_builders.arithmetic_tokenizer import SPECIAL_TOKENS, chat_tokenizer

__all__ = ["DEFAULT_VOCAB_SIZE", "MIN_VOCAB_SIZE", "WORLD_SPECIAL_TOKENS", "episode_texts", "world_tokenizer"]

DEFAULT_VOCAB_SIZE = 2000
WORLD_SPECIAL_TOKENS = tuple(t for t in SPECIAL_TOKENS if t != "<unk>")  # byte-level: nothing is unknown
MIN_VOCAB_SIZE = len(pre_tokenizers.ByteLevel.alphabet()) + len(WORLD_SPECIAL_TOKENS)  # 256 bytes + the specials


def world_tokenizer(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """A byte-level BPE of at most `vocab_size` tokens (specials and the 256 byte symbols included) trained on `texts`
    (module docstring), as a `PreTrainedTokenizerFast` with a chat template; save it with `save_pretrained(dir)` and
    name the folder in a scratch spec (`scratch:llama,...,tokenizer=DIR`).

    Raises:
        ValueError: `vocab_size` below 256 + 3 (the byte alphabet and the special tokens must fit).
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size={vocab_size} is below {MIN_VOCAB_SIZE} (256 bytes + the special tokens); use e.g. 2000"
        )
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(WORLD_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    return chat_tokenizer(core)


def episode_texts(corpus_rows: Iterable[dict], episode_rows: Iterable[dict]) -> list[str]:
    """The texts a world tokenizer is trained on: each passage's title and text, each episode's prompt messages and
    segments (`procrl.data_builders.world_episodes.episode_rows`), in order."""
    texts = [t for row in corpus_rows for t in (row["title"], row["text"])]
    for row in episode_rows:
        texts += [m["content"] for m in row["prompt"]] + [s["text"] for s in row["segments"]]
    return texts
