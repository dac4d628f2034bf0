"""Step-checkable arithmetic word problems: seeded chains whose gold solution is a list of `GoldStep`s
(docs/architecture.md "Arithmetic tasks").

A problem is a chain: a start quantity, then `num_ops` operations, step k being `previous result op operand =
result` (`procrl.rewards.oracle.gold.GoldStep`; step k's `a` is step k-1's `result`). The step oracle checks every
step a model writes against them; the `gold_steps` column carries them as JSON.

    >>> config = ArithmeticTaskConfig(num_ops=2, digits=2, operators="+-")
    >>> problem = generate_problems(config, "test", 1, seed=0)[0]
    >>> problem.problem_id, problem.answer
    ('arith/ops2-d2-add-sub-dist0-word/...', '...')
    >>> [s.a for s in problem.gold_steps[1:]] == [s.result for s in problem.gold_steps[:-1]]
    True
    >>> print(ArithmeticProblem.from_steps(config, [GoldStep(14, "+", 7, 21), GoldStep(21, "-", 9, 12)]).gold_trace)
    14 + 7 = 21.
    <BLANKLINE>
    21 - 9 = 12.
    <BLANKLINE>
    The answer is 12.

**Numbers** *(default: digits 2)*. The start and the operands of + and - have `digits` digits (at least 2 when
digits is 1, so no sentence reads "1 apples"). A factor of * and a divisor of / lie in 2..9. Every result lies in
1..10^(digits+1)-1: subtraction only when the result stays >= 1, division only when exact, multiplication and
addition only below the bound. Each step picks its operator uniformly among the allowed ones that fit; a chain in
which none fits is redrawn.

**Splits** (train 80%, dev 10%, test 10%) are disjoint by construction: a problem's split is a function of its
canonical content alone (`canonical_key`: operands and operators, e.g. "14+7-9"; not the names, the phrasing or
the seed), via the first 8 hex digits of its SHA-256 (`split_of`). `generate_problems` draws chains from a stream
seeded by (num_ops, digits, operators, seed) and keeps those of the requested split, without duplicates, until it
has n. So a set is deterministic per (config, split, seed, n), and the first k problems of a set of n are the set of
k (prefix-stable). Configs that differ only in `distractors` or `phrasing` give the same chains in the same order.

**Wording** is a function of the content hash and the config (`procrl.data_builders.arithmetic_wording`): the same
chain reads the same in every seed and split; `problem_id` is `arith/<config tag>/<first 12 hex of the hash>`.

**Traces.** `clean` is the gold trace, one paragraph per step ("14 + 7 = 21.", ..., "The answer is 12.",
joined by "\\n\\n", the step separator of `procrl.rewards.steps.split_steps`). `corrupted` (the "lucky" reasoner)
differs in exactly one place: the result written by one intermediate step k (never the last), chosen uniformly in
0..num_ops-2, becomes result_k + δ, δ uniform in {-2, -1, 1, 2} minus the values that would make it negative; the
next step still starts from the true result_k, so every later step and the final answer stay right. k and δ come
from a `random.Random` seeded with the content hash. A one-step problem has no intermediate step: asking it for a
corrupted trace raises ValueError (refused rather than silently clean).

Determinism rests on `random.Random` with str seeds (hashed with SHA-512) and its `random`, `choice` and `sample`:
the same on every run and machine under one Python version.

**Loading by name**: `load_math_dataset("arith-ops3-d2-test")` (`procrl.data_builders.datasets`); the grammar is
`SPEC_GRAMMAR`, parsed by `parse_arithmetic_spec`.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from itertools import pairwise

from procrl.data_builders.arithmetic_wording import MAX_DISTRACTORS, expression_question, word_question
from procrl.rewards.oracle.gold import OPERATORS, GoldStep, gold_steps_to_json

__all__ = [
    "ARITH_SOURCE",
    "ArithmeticProblem",
    "ArithmeticSetSpec",
    "ArithmeticTaskConfig",
    "OPERATOR_NAMES",
    "PHRASINGS",
    "SPEC_GRAMMAR",
    "SPLITS",
    "TRACE_SEPARATOR",
    "TRACE_VARIANTS",
    "canonical_key",
    "content_hash",
    "generate_problems",
    "is_arithmetic_spec",
    "parse_arithmetic_spec",
    "split_of",
]

ARITH_SOURCE = "arith"
SPLITS = ("train", "dev", "test")
TRACE_VARIANTS = ("clean", "corrupted")
PHRASINGS = ("word", "expression")
OPERATOR_NAMES = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
TRACE_SEPARATOR = "\n\n"
MAX_NUM_OPS, MAX_DIGITS = 8, 3
SMALL_FACTORS = range(2, 10)  # factors of * and divisors of /
_CORRUPTION_DELTAS = (-2, -1, 1, 2)
# a run of this many draws without a new problem of the split means the config's problem space is exhausted
_MAX_FRUITLESS_DRAWS = 20_000


@dataclass(frozen=True)
class ArithmeticTaskConfig:
    """The difficulty knobs of a chain problem (module docstring); `operators` is kept in the order "+-*/".

    Raises:
        ValueError: a knob out of range (the message gives the range).
    """

    num_ops: int = field(default=3, metadata={"help": f"Operations = gold steps, 1..{MAX_NUM_OPS}."})
    digits: int = field(default=2, metadata={"help": f"Digits of the start and of + and - operands, 1..{MAX_DIGITS}."})
    operators: str = field(default="+-", metadata={"help": "Allowed operators, a non-empty subset of '+-*/'."})
    distractors: int = field(
        default=0, metadata={"help": f"Sentences with numbers that play no role, 0..{MAX_DISTRACTORS}."}
    )
    phrasing: str = field(
        default="word", metadata={"help": "'word' (a story) or 'expression' ('Compute ((14 + 7) - 9).')."}
    )

    def __post_init__(self) -> None:
        if not 1 <= self.num_ops <= MAX_NUM_OPS:
            raise ValueError(f"num_ops must be in 1..{MAX_NUM_OPS} (the gold steps), got {self.num_ops}.")
        if not 1 <= self.digits <= MAX_DIGITS:
            raise ValueError(f"digits must be in 1..{MAX_DIGITS} (operand digits), got {self.digits}.")
        if (
            not self.operators
            or set(self.operators) - set(OPERATORS)
            or len(set(self.operators)) != len(self.operators)
        ):
            raise ValueError(f"operators must be distinct characters of '+-*/' (e.g. '+-'), got {self.operators!r}.")
        object.__setattr__(self, "operators", "".join(op for op in OPERATORS if op in self.operators))
        if not 0 <= self.distractors <= MAX_DISTRACTORS:
            raise ValueError(f"distractors must be in 0..{MAX_DISTRACTORS}, got {self.distractors}.")
        if self.phrasing not in PHRASINGS:
            raise ValueError(f"phrasing must be one of {PHRASINGS}, got {self.phrasing!r}.")

    @property
    def tag(self) -> str:
        """The config part of names and problem ids: "ops3-d2-add-sub-dist0-word"."""
        names = "-".join(OPERATOR_NAMES[op] for op in self.operators)
        phrasing = "expr" if self.phrasing == "expression" else self.phrasing
        return f"ops{self.num_ops}-d{self.digits}-{names}-dist{self.distractors}-{phrasing}"

    @property
    def operand_range(self) -> tuple[int, int]:
        """Inclusive range of the start and of + and - operands."""
        return max(2, 10 ** (self.digits - 1)), 10**self.digits - 1

    @property
    def result_bound(self) -> int:
        """Largest allowed value of any result."""
        return 10 ** (self.digits + 1) - 1


def canonical_key(steps: tuple[GoldStep, ...] | list[GoldStep]) -> str:
    """The canonical content of a chain: start, then operator and operand per step.

    >>> canonical_key([GoldStep(14, "+", 7, 21), GoldStep(21, "-", 9, 12)])
    '14+7-9'
    """
    return str(steps[0].a) + "".join(f"{s.op}{s.b}" for s in steps)


def _hash_key(key: str) -> str:
    return hashlib.sha256(f"arith:{key}".encode()).hexdigest()


def _split_of_key(key: str) -> str:
    bucket = int(_hash_key(key)[:8], 16) % 10
    return "train" if bucket < 8 else SPLITS[bucket - 7]


def content_hash(steps: tuple[GoldStep, ...] | list[GoldStep]) -> str:
    """SHA-256 hex digest of `"arith:" + canonical_key(steps)`: the split, the id, the wording and the corruption
    derive from it."""
    return _hash_key(canonical_key(steps))


def split_of(steps: tuple[GoldStep, ...] | list[GoldStep]) -> str:
    """The split a chain belongs to: int(first 8 hex of `content_hash`) mod 10 -> 0-7 train, 8 dev, 9 test.

    >>> split_of([GoldStep(14, "+", 7, 21), GoldStep(21, "-", 9, 12)]) in SPLITS
    True
    """
    return _split_of_key(canonical_key(steps))


@dataclass(frozen=True)
class ArithmeticProblem:
    """One generated problem.

    Attributes:
        problem_id: "arith/<config tag>/<12 hex of the content hash>".
        split: "train", "dev" or "test" (`split_of`).
        question: the problem text; every number in it is written in digits.
        gold_steps: the chain, one `GoldStep` per operation.
        answer: the last step's result as a string.
        numbers: every number of the question, in order of appearance (start, operands, distractors).
        distractor_numbers: the numbers of the distractor sentences (none equals a gold operand or result).
        content_hash: `content_hash(gold_steps)`.
    """

    problem_id: str
    split: str
    question: str
    gold_steps: tuple[GoldStep, ...]
    answer: str
    numbers: tuple[int, ...]
    distractor_numbers: tuple[int, ...]
    content_hash: str

    @classmethod
    def from_steps(cls, config: ArithmeticTaskConfig, steps: tuple[GoldStep, ...] | list[GoldStep]):
        """The problem of a given chain, worded under `config` (its split is whatever `split_of` says).

        Raises:
            ValueError: steps that do not chain (a step's `a` is not the previous result), or that do not fit
                `config` (their count is not num_ops, or an operator is not allowed).
        """
        steps = tuple(steps)
        if len(steps) != config.num_ops or any(s.op not in config.operators for s in steps):
            raise ValueError(f"{list(steps)} is not a chain of {config}: wrong length or operator.")
        if any(later.a != earlier.result for earlier, later in pairwise(steps)):
            raise ValueError(f"{list(steps)}: each step's a must be the previous step's result.")
        digest = content_hash(steps)
        rng = random.Random(digest)  # str seeds are hashed with SHA-512: the same words on every run and machine
        render = word_question if config.phrasing == "word" else expression_question
        question, distractor_numbers = render(rng, steps, config.distractors)
        return cls(
            problem_id=f"{ARITH_SOURCE}/{config.tag}/{digest[:12]}",
            split=split_of(steps),
            question=question,
            gold_steps=steps,
            answer=str(steps[-1].result),
            numbers=tuple(int(x) for x in re.findall(r"\d+", question)),
            distractor_numbers=tuple(distractor_numbers),
            content_hash=digest,
        )

    @property
    def gold_steps_json(self) -> str:
        """The `gold_steps` column value (`gold_steps_to_json`)."""
        return gold_steps_to_json(list(self.gold_steps))

    @property
    def gold_trace(self) -> str:
        """The clean trace: "14 + 7 = 21.\\n\\n21 - 9 = 12.\\n\\nThe answer is 12."."""
        return self.trace("clean")

    def corruption(self) -> tuple[int, int]:
        """(k, written value) of the corrupted trace: step k (0-based, < num_ops - 1) writes this wrong result.

        Raises:
            ValueError: a one-step problem (no intermediate step to corrupt).
        """
        if len(self.gold_steps) < 2:
            raise ValueError(
                f"{self.problem_id} has one step and so no intermediate step to corrupt; corrupted traces need "
                "num_ops >= 2."
            )
        rng = random.Random(f"{self.content_hash}:corrupt")
        k = rng.randrange(len(self.gold_steps) - 1)
        true = self.gold_steps[k].result
        return k, true + rng.choice([d for d in _CORRUPTION_DELTAS if true + d >= 0])

    def trace(self, variant: str = "clean") -> str:
        """The solution trace, `variant` "clean" or "corrupted" (module docstring).

        Raises:
            ValueError: an unknown variant, or "corrupted" for a one-step problem.
        """
        if variant not in TRACE_VARIANTS:
            raise ValueError(f"trace variant must be one of {TRACE_VARIANTS}, got {variant!r}.")
        lines = [f"{s.equation()}." for s in self.gold_steps]
        if variant == "corrupted":
            k, wrong = self.corruption()
            s = self.gold_steps[k]
            lines[k] = f"{s.a} {s.op} {s.b} = {wrong}."
        return TRACE_SEPARATOR.join([*lines, f"The answer is {self.answer}."])


def _step_table(config: ArithmeticTaskConfig) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """Per value 0..result_bound: (the allowed operators that fit it, in "+-*/" order; its divisors in 2..9)."""
    lo, bound, ops = config.operand_range[0], config.result_bound, config.operators
    table = []
    for value in range(bound + 1):
        divisors = tuple(k for k in SMALL_FACTORS if value % k == 0) if value and "/" in ops else ()
        fits = (value + lo <= bound, value - lo >= 1, 2 * value <= bound, bool(divisors))
        table.append((tuple(op for op, fit in zip(OPERATORS, fits, strict=True) if fit and op in ops), divisors))
    return table


def _draw_chain(
    rng: random.Random, config: ArithmeticTaskConfig, table: list[tuple[tuple[str, ...], tuple[int, ...]]]
) -> tuple[str, list[tuple[int, str, int, int]]] | None:
    """One chain from `rng` (module docstring "Numbers") as (canonical key, [(a, op, b, result), ...]), or None when
    no allowed operator fits some step. Plain tuples and `rng.random()` only: this loop is the generator's cost."""
    rand = rng.random
    lo, hi = config.operand_range
    bound = config.result_bound
    value = lo + int(rand() * (hi - lo + 1))
    key, steps = [str(value)], []
    for _ in range(config.num_ops):
        choices, divisors = table[value]
        if not choices:
            return None
        op = choices[int(rand() * len(choices))]
        if op == "+":
            b = lo + int(rand() * (min(hi, bound - value) - lo + 1))
            result = value + b
        elif op == "-":
            b = lo + int(rand() * (min(hi, value - 1) - lo + 1))
            result = value - b
        elif op == "*":
            b = 2 + int(rand() * (min(9, bound // value) - 1))
            result = value * b
        else:
            b = divisors[int(rand() * len(divisors))]
            result = value // b
        steps.append((value, op, b, result))
        key.append(f"{op}{b}")
        value = result
    return "".join(key), steps


def generate_problems(config: ArithmeticTaskConfig, split: str, n: int, *, seed: int = 0) -> list[ArithmeticProblem]:
    """The first `n` distinct problems of `split` in the stream of (config, seed) (module docstring "Splits").

    Cost: about 1/fraction(split) chain draws per problem (10 for dev and test), each O(num_ops).

    Raises:
        ValueError: an unknown split, n < 1, or a problem space too small to give n problems of the split (the
            message says how many it found).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}.")
    if n < 1:
        raise ValueError(f"n must be >= 1 (the number of problems), got {n}.")
    rng = random.Random(f"arith:{config.num_ops}:{config.digits}:{config.operators}:{seed}")
    seen: set[str] = set()
    chains: list[tuple[GoldStep, ...]] = []
    table = _step_table(config)
    fruitless = 0
    while len(chains) < n:
        drawn = _draw_chain(rng, config, table)
        if drawn is not None and drawn[0] not in seen and _split_of_key(drawn[0]) == split:
            seen.add(drawn[0])
            chains.append(tuple(GoldStep(*step) for step in drawn[1]))
            fruitless = 0
            continue
        fruitless += 1
        if fruitless > _MAX_FRUITLESS_DRAWS:
            raise ValueError(
                f"Found only {len(chains)} distinct {split} problems for {config} (seed {seed}) after "
                f"{_MAX_FRUITLESS_DRAWS} draws without a new one; the problem space is too small for n={n}: "
                "ask for fewer, or raise digits or num_ops, or allow more operators."
            )
    return [ArithmeticProblem.from_steps(config, steps) for steps in chains]


SPEC_GRAMMAR = (
    "an arith set is named arith-<part>-<part>-..., parts in any order, each kind at most once, the split required: "
    "ops<N> (operations = gold steps, 1..8, default 3), d<N> (operand digits, 1..3, default 2), "
    "add|sub|mul|div (operators; naming any gives exactly those, default add and sub), "
    "dist<N> (distractor sentences, 0..8, default 0), word|expr (phrasing: a story, or 'Compute ((14 + 7) - 9).'; "
    "default word), "
    "train|dev|test (split), n<N> (problems, default 1000), seed<N> (default 0), "
    "clean|corrupted (the solution trace, default clean); e.g. arith-ops3-d2-test, "
    "arith-ops5-d3-add-sub-mul-dist2-train-n5000-seed1-corrupted"
)
_SPEC_PARTS = (  # (kind, pattern)
    ("num_ops", r"ops(\d+)"),
    ("digits", r"d(\d+)"),
    ("distractors", r"dist(\d+)"),
    ("n", r"n(\d+)"),
    ("seed", r"seed(\d+)"),
    ("phrasing", r"(word|expr)"),
    ("split", r"(train|dev|test)"),
    ("trace", r"(clean|corrupted)"),
)
_OPERATOR_BY_NAME = {name: op for op, name in OPERATOR_NAMES.items()}


@dataclass(frozen=True)
class ArithmeticSetSpec:
    """A named arithmetic set: a config, a split, a size, a seed and the trace variant of the `solution` column.

    Raises:
        ValueError: an unknown split or trace variant, n < 1, seed < 0, or "corrupted" with num_ops == 1.

    >>> spec = parse_arithmetic_spec("arith-test-ops2-mul-add")
    >>> spec.name
    'arith-ops2-d2-add-mul-dist0-word-test-n1000-seed0-clean'
    >>> parse_arithmetic_spec(spec.name) == spec
    True
    """

    config: ArithmeticTaskConfig
    split: str
    n: int = 1000
    seed: int = 0
    trace: str = "clean"

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}.")
        if self.n < 1 or self.seed < 0:
            raise ValueError(f"n must be >= 1 and seed >= 0, got n={self.n}, seed={self.seed}.")
        if self.trace not in TRACE_VARIANTS:
            raise ValueError(f"trace must be one of {TRACE_VARIANTS}, got {self.trace!r}.")
        if self.trace == "corrupted" and self.config.num_ops < 2:
            raise ValueError("corrupted traces need num_ops >= 2 (a one-step problem has no intermediate step).")

    @property
    def name(self) -> str:
        """The canonical name: every part, in the order of `SPEC_GRAMMAR`."""
        return f"{ARITH_SOURCE}-{self.config.tag}-{self.split}-n{self.n}-seed{self.seed}-{self.trace}"

    def problems(self, count: int | None = None) -> list[ArithmeticProblem]:
        """The first `count` (default n) problems of the set; the set is prefix-stable, so any count <= n gives a
        prefix of the full set."""
        return generate_problems(self.config, self.split, self.n if count is None else count, seed=self.seed)


def is_arithmetic_spec(name: str) -> bool:
    """Whether `name` asks for a generated arithmetic set: "arith" or "arith-..." (a local file named so must be
    written "./arith-...")."""
    return name == ARITH_SOURCE or name.startswith(f"{ARITH_SOURCE}-")


def parse_arithmetic_spec(name: str) -> ArithmeticSetSpec:
    """The set named by `name` (`SPEC_GRAMMAR`).

    Raises:
        ValueError: a name outside the grammar (the message gives it), or values out of range.

    >>> spec = parse_arithmetic_spec("arith-ops3-d1-expr-dev-n50")
    >>> spec.config.num_ops, spec.config.digits, spec.config.phrasing, spec.split, spec.n, spec.seed, spec.trace
    (3, 1, 'expression', 'dev', 50, 0, 'clean')
    """
    parts = name.split("-")
    if parts[0] != ARITH_SOURCE or len(parts) < 2:
        raise ValueError(f"{name!r} is not an arith set name: {SPEC_GRAMMAR}.")
    values: dict[str, str] = {}
    operators: list[str] = []
    for part in parts[1:]:
        if part in _OPERATOR_BY_NAME and _OPERATOR_BY_NAME[part] not in operators:
            operators.append(_OPERATOR_BY_NAME[part])
            continue
        kind = next((k for k, pattern in _SPEC_PARTS if re.fullmatch(pattern, part)), None)
        if kind is None or kind in values:
            why = "is repeated" if kind is not None or part in _OPERATOR_BY_NAME else "is not a part"
            raise ValueError(f"{name!r}: {part!r} {why}; {SPEC_GRAMMAR}.")
        values[kind] = re.fullmatch(dict(_SPEC_PARTS)[kind], part).group(1)
    if "split" not in values:
        raise ValueError(f"{name!r} names no split (train, dev or test); {SPEC_GRAMMAR}.")
    try:
        config = ArithmeticTaskConfig(
            num_ops=int(values.get("num_ops", 3)),
            digits=int(values.get("digits", 2)),
            operators="".join(operators) or "+-",
            distractors=int(values.get("distractors", 0)),
            phrasing={"word": "word", "expr": "expression"}[values.get("phrasing", "word")],
        )
        return ArithmeticSetSpec(
            config,
            values["split"],
            n=int(values.get("n", 1000)),
            seed=int(values.get("seed", 0)),
            trace=values.get("trace", "clean"),
        )
    except ValueError as err:
        raise ValueError(f"{name!r}: {err} {SPEC_GRAMMAR}.") from err
