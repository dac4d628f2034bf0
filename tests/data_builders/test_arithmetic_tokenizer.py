"""The arithmetic tasks' word-level tokenizer covers every text the generator writes and round-trips it."""

import pytest

from procrl.data_builders.arithmetic_tokenizer import SPECIAL_TOKENS, arithmetic_tokenizer, arithmetic_vocabulary
from procrl.data_builders.datasets import load_math_dataset, resolve_template


@pytest.fixture(scope="module")
def tok():
    return arithmetic_tokenizer()


def test_the_vocabulary_is_sorted_unique_and_after_the_special_tokens(tok):
    vocab = arithmetic_vocabulary()
    assert vocab == sorted(set(vocab)) == arithmetic_vocabulary()
    assert [tok.convert_ids_to_tokens(i) for i in range(len(SPECIAL_TOKENS))] == list(SPECIAL_TOKENS)
    assert len(tok) == len(SPECIAL_TOKENS) + len(vocab)
    assert (tok.pad_token, tok.eos_token, tok.unk_token) == ("<|endoftext|>", "<|im_end|>", "<unk>")
    assert all(str(d) in vocab and f" {d}" in vocab for d in range(10))


@pytest.mark.parametrize(
    "name",
    ["arith-ops3-d2-dist2-train-n60", "arith-ops5-d3-add-sub-mul-div-dist3-expr-test-n60-corrupted",
     "arith-ops2-d1-mul-div-word-dev-n30"],
)  # fmt: skip
@pytest.mark.parametrize("template", ["zero_shot", "one_shot"])
def test_every_generated_chat_round_trips_without_unknown_tokens(tok, name, template):
    for row in load_math_dataset(name, prompt_template=resolve_template(template)):
        messages = [*row["prompt"], {"role": "assistant", "content": row["solution"]}]
        prompt = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
        full = tok.apply_chat_template(messages, tokenize=True, return_dict=False)
        assert full[: len(prompt)] == prompt  # TRL's prompt-completion SFT needs the prompt as a prefix
        assert tok.unk_token_id not in full
        assert tok.decode(full) == tok.apply_chat_template(messages, tokenize=False)


def test_unknown_words_become_unk_and_digits_are_single_tokens(tok):
    ids = tok("Zebra 123", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["<unk>", " 1", "2", "3"]
