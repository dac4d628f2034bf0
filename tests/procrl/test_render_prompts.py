"""procrl.generation.render_prompts on a tokenizer without a chat template (a base model such as Gemma 3 270M): chat
prompts become plain "role: content" lines ending in "assistant:", the same text `plain_chat_template` gives the
judge server; with a chat template nothing changes."""

from __future__ import annotations

from tiny_models import make_tiny_chat_tokenizer  # tests/helpers

from procrl.generation import plain_chat_template, render_prompts


def test_a_base_tokenizer_renders_messages_as_plain_lines():
    tokenizer = make_tiny_chat_tokenizer()
    messages = [[{"role": "user", "content": "what is 2 + 3 ?"}], [{"role": "user", "content": "2 + 2"}]]
    with_template = render_prompts(tokenizer, messages)
    assert plain_chat_template(tokenizer) is None  # it has one: unchanged
    assert with_template == [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True,
                                                           return_dict=True)["input_ids"] for m in messages]  # fmt: skip
    tokenizer.chat_template = None
    ids = render_prompts(tokenizer, messages)
    expected = tokenizer("user: what is 2 + 3 ?\nassistant:")["input_ids"]  # the tokenizer's own special tokens
    assert ids[0] == expected and len(ids) == 2
    assert tokenizer.decode(ids[1]).replace(" ", "") == tokenizer.decode(
        tokenizer("user: 2 + 2\nassistant:")["input_ids"]
    ).replace(" ", "")
