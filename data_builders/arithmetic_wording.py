"""The words of the arithmetic word problems (`procrl.data_builders.arithmetic`): names, objects, sentence templates.

Every number a template receives is written as digits, and no template holds a number word, so every number of a
question is a run of digits (`re.findall(r"\\d+", question)` finds them all). Names and objects hold no digits.
Sentences use the name, never a pronoun, so no template depends on a gender.

Rendering is a pure function of its `random.Random`: the generator seeds it with the problem's content hash, so the
same problem gets the same words in every set, seed and split. Words are drawn in a fixed order (name, object,
sentences, question, then distractors), so a problem with distractors reads as the same problem without them plus
the distractor sentences.
"""

from __future__ import annotations

import random

from procrl.rewards.oracle.gold import GoldStep

__all__ = ["NAMES", "OBJECTS", "OPERATION_TEMPLATES", "expression_question", "word_question"]

NAMES = tuple(
    "Sara Omar Lena Ravi Mia Kenji Ana Tom Priya Lucas Zoe Diego Amara Felix Hana Noah Ines Kwame Lily Mateo Nadia "
    "Oscar Yuki Sam Elena Jonas Aisha Ben Chloe Ivan Leila Marco Nora Pablo Rosa Theo Uma Victor Wei Zara".split()
)
OBJECTS = tuple(
    "apples,marbles,stickers,pencils,coins,cards,books,shells,stamps,beads,cookies,oranges,buttons,feathers,crayons,"
    "pebbles,balloons,candies,grapes,cupcakes,postcards,ribbons,seeds,tickets,erasers,lemons,muffins,toy cars,"
    "paper clips,bottle caps".split(",")
)
START_TEMPLATES = (
    "{name} has {n} {obj}.",
    "{name} starts with {n} {obj}.",
    "At first, {name} has {n} {obj}.",
    "{name} owns {n} {obj}.",
    "In the morning, {name} has {n} {obj}.",
)
CONNECTORS = ("Then", "After that,", "Next,", "Later,")
# One clause per operation; it follows a connector, so it never starts a sentence.
OPERATION_TEMPLATES: dict[str, tuple[str, ...]] = {
    "+": (
        "{name} gets {n} more {obj}.",
        "{name} buys {n} more {obj}.",
        "{name} finds {n} more {obj}.",
        "{name} receives {n} more {obj} as a gift.",
        "{name} collects {n} more {obj}.",
        "{name} wins {n} more {obj}.",
    ),
    "-": (
        "{name} gives away {n} {obj}.",
        "{name} loses {n} {obj}.",
        "{name} sells {n} {obj}.",
        "{name} gives {n} {obj} to a friend.",
        "{name} donates {n} {obj}.",
        "{name} trades away {n} {obj}.",
    ),
    "*": (
        "{name} ends up with {n} times as many {obj} as before.",
        "{name} gets enough new {obj} to have {n} times as many as before.",
        "the number of {obj} {name} has becomes {n} times as large.",
    ),
    "/": (
        "{name} splits the {obj} equally into {n} boxes and keeps only the first box.",
        "{name} shares the {obj} equally among {n} people, including {name}, and keeps just {name}'s share.",
        "{name} divides the {obj} into {n} equal piles and keeps a single pile.",
    ),
}
QUESTION_TEMPLATES = (
    "How many {obj} does {name} have now?",
    "How many {obj} does {name} have in the end?",
    "How many {obj} does {name} have at the end?",
)
# Numbers that play no role; `{other}` is an object other than the counted one. Each is used at most once a problem.
DISTRACTOR_TEMPLATES = (
    "{name}'s brother is {k} years old.",
    "{name} lives {k} minutes away from school.",
    "{name}'s cousin has {k} {other}.",
    "{name}'s school has {k} classrooms.",
    "The shop near {name}'s home is open {k} hours a week.",
    "{name} read {k} pages of a book yesterday.",
    "{name}'s street has {k} houses.",
    "{name}'s favorite number is {k}.",
    "{name}'s friend owns {k} {other}.",
    "It is {k} degrees outside.",
)
EXPRESSION_VARIABLES = ("x", "y", "z", "u", "v", "w", "p", "q")
DISTRACTOR_RANGE = (2, 99)  # inclusive; distractor numbers also avoid every number of the gold steps
MAX_DISTRACTORS = min(len(DISTRACTOR_TEMPLATES), len(EXPRESSION_VARIABLES))


def _distractor_numbers(rng: random.Random, steps: tuple[GoldStep, ...], count: int) -> list[int]:
    if not count:
        return []
    gold = {steps[0].a} | {s.b for s in steps} | {s.result for s in steps}
    pool = [k for k in range(DISTRACTOR_RANGE[0], DISTRACTOR_RANGE[1] + 1) if k not in gold]
    return rng.sample(pool, count)


def _insert(rng: random.Random, sentences: list[str], extra: list[str]) -> list[str]:
    """`sentences` with each of `extra` at a random position (anywhere before the end)."""
    out = list(sentences)
    for sentence in extra:
        out.insert(rng.randint(0, len(out)), sentence)
    return out


def word_question(rng: random.Random, steps: tuple[GoldStep, ...], distractors: int) -> tuple[str, list[int]]:
    """A story: a start quantity, one sentence per step, distractor sentences, then the question.

    Returns:
        (question, distractor numbers in drawing order).

    >>> word_question(random.Random(0), (GoldStep(14, "+", 7, 21), GoldStep(21, "-", 9, 12)), 0)[0]
    'Elena owns 14 erasers. Next, Elena gets 7 more erasers. Later, Elena donates 9 erasers. How many ...'
    """
    name, obj = rng.choice(NAMES), rng.choice(OBJECTS)
    sentences = [rng.choice(START_TEMPLATES).format(name=name, n=steps[0].a, obj=obj)]
    for step in steps:
        clause = rng.choice(OPERATION_TEMPLATES[step.op]).format(name=name, n=step.b, obj=obj)
        sentences.append(f"{rng.choice(CONNECTORS)} {clause}")
    question = rng.choice(QUESTION_TEMPLATES).format(name=name, obj=obj)
    numbers = _distractor_numbers(rng, steps, distractors)
    templates = rng.sample(DISTRACTOR_TEMPLATES, distractors)
    others = rng.sample([o for o in OBJECTS if o != obj], distractors)
    extra = [t.format(name=name, k=k, other=o) for t, k, o in zip(templates, numbers, others, strict=True)]
    return " ".join([*_insert(rng, sentences, extra), question]), numbers


def expression_question(rng: random.Random, steps: tuple[GoldStep, ...], distractors: int) -> tuple[str, list[int]]:
    """ "Compute ((14 + 7) - 9)." (every operation in parentheses, left to right), after one "Let x = 37." per
    distractor.

    >>> expression_question(random.Random(0), (GoldStep(14, "+", 7, 21), GoldStep(21, "-", 9, 12)), 0)[0]
    'Compute ((14 + 7) - 9).'
    """
    expression = str(steps[0].a)
    for step in steps:
        expression = f"({expression} {step.op} {step.b})"
    numbers = _distractor_numbers(rng, steps, distractors)
    variables = rng.sample(EXPRESSION_VARIABLES, distractors)
    extra = [f"Let {v} = {k}." for v, k in zip(variables, numbers, strict=True)]
    return " ".join([*extra, f"Compute {expression}."]), numbers
