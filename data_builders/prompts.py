"""Prompt templates of the math tasks: the shipped one-shot and zero-shot templates, checks, rendering.

Kept short (~90 tokens): a 135M chat model generates only 96 tokens in the demo. Only the `{question}` placeholder
is substituted (plain string replacement), so other braces, e.g. LaTeX, stay as written. `procrl.data_builders.datasets`
re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ANSWER_INSTRUCTION",
    "ONE_SHOT_TEMPLATE",
    "ZERO_SHOT_TEMPLATE",
    "PromptTemplate",
    "build_prompt",
    "resolve_template",
    "validate_template",
]


ANSWER_INSTRUCTION = 'Reason in a few short steps, then end with "The answer is <number>."'

ZERO_SHOT_TEMPLATE = "{question}\n" + ANSWER_INSTRUCTION


# One worked example as a finished chat exchange (user question, assistant solution, end of turn), then the new
# question. Measured on the embedded SmolLM2-135M-Instruct, greedy, 32 SVAMP problems at 96 new tokens: with the
# example pasted into a single user message ("Question: ... Solution: ...") 75% of completions never stop (the
# model writes the next "Question:" itself); as a chat exchange 3% do, because the example turn ends with the
# end-of-turn token the model then imitates.
ONE_SHOT_TEMPLATE: tuple[dict[str, str], ...] = (
    {
        "role": "user",
        "content": "A baker makes 4 trays of 6 muffins and sells 15 of them. How many muffins are left?\n"
        + ANSWER_INSTRUCTION,
    },
    {
        "role": "assistant",
        "content": "The baker makes 4 * 6 = 24 muffins. He sells 15, so 24 - 15 = 9 muffins are left. The answer is 9.",
    },
    {"role": "user", "content": ZERO_SHOT_TEMPLATE},
)

_PLACEHOLDER = "{question}"

PromptTemplate = str | Sequence[dict[str, str]]


def validate_template(template: PromptTemplate) -> PromptTemplate:
    """Return `template` unchanged, or raise `ValueError` when it has no `{question}` placeholder.

    A template is a string (the one user message) or a sequence of chat messages (e.g. few-shot turns) whose
    last message is a user message containing `{question}`.
    """
    if isinstance(template, str):
        ok = _PLACEHOLDER in template
    else:
        try:
            ok = bool(template) and template[-1]["role"] == "user" and _PLACEHOLDER in template[-1]["content"]
        except (TypeError, KeyError, IndexError):
            ok = False
    if not ok:
        raise ValueError(
            f"prompt_template must be a string containing the placeholder {_PLACEHOLDER!r} (where the problem text "
            "goes), or a list of chat messages whose last (user) message contains it; "
            f"got {template!r}."
        )
    return template


def resolve_template(name: str) -> str:
    """A prompt template by name: "one_shot" / "zero_shot" -> the shipped templates; any other string is itself a
    custom template with a `{question}` field.

    >>> resolve_template("zero_shot") == ZERO_SHOT_TEMPLATE, resolve_template("Q: {question}")
    (True, 'Q: {question}')
    """
    return {"one_shot": ONE_SHOT_TEMPLATE, "zero_shot": ZERO_SHOT_TEMPLATE}.get(name, name)


def build_prompt(question: str, template: PromptTemplate = ONE_SHOT_TEMPLATE) -> list[dict[str, str]]:
    """Chat prompt for `question`: `template`'s messages (or one user message for a string template) with every
    `{question}` replaced by `question`.

    >>> build_prompt("What is 2 + 3?", "Q: {question} A:")
    [{'role': 'user', 'content': 'Q: What is 2 + 3? A:'}]
    >>> [m["role"] for m in build_prompt("What is 2 + 3?")]
    ['user', 'assistant', 'user']
    """
    validate_template(template)
    messages = [{"role": "user", "content": template}] if isinstance(template, str) else template
    return [{"role": m["role"], "content": m["content"].replace(_PLACEHOLDER, question)} for m in messages]
