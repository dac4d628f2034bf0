"""Tests of procrl.data_builders.arithmetic: the step-checkable chain problems, their splits, traces and loading.

Expected values are recomputed here from the documented rules (plain Python arithmetic, the SHA-256 bucket rule of
`split_of`, the text of the trace), not read back from the generator.
"""

from __future__ import annotations

import hashlib
import operator
import re

import pytest

from procrl.data_builders.arithmetic import (
    SPEC_GRAMMAR,
    SPLITS,
    ArithmeticProblem,
    ArithmeticSetSpec,
    ArithmeticTaskConfig,
    canonical_key,
    generate_problems,
    parse_arithmetic_spec,
)
from procrl.data_builders.datasets import (
    ONE_SHOT_TEMPLATE,
    SCHEMA_COLUMNS,
    ZERO_SHOT_TEMPLATE,
    build_prompt,
    load_math_dataset,
    parse_eval_set,
)
from procrl.rewards.oracle.gold import GOLD_STEPS_COLUMN, GoldStep, gold_steps_from_json
from procrl.rewards.steps import split_steps

PY_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv}
NUMBER_WORDS = set(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand dozen "
    "half twice double triple once".split()
)
CONFIGS = [
    ArithmeticTaskConfig(num_ops=2, digits=2),
    ArithmeticTaskConfig(num_ops=3, digits=1, operators="+-*/", distractors=2),
    ArithmeticTaskConfig(num_ops=5, digits=3, operators="*/+", phrasing="expression", distractors=1),
    ArithmeticTaskConfig(num_ops=8, digits=2, operators="-+*/", distractors=8),
]
EQUATION = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)\.")


def _bucket_split(steps) -> str:
    """The documented split rule, restated: first 8 hex of sha256("arith:" + key) mod 10 -> 0-7, 8, 9."""
    key = str(steps[0].a) + "".join(f"{s.op}{s.b}" for s in steps)
    bucket = int(hashlib.sha256(f"arith:{key}".encode()).hexdigest()[:8], 16) % 10
    return "train" if bucket < 8 else ("dev" if bucket == 8 else "test")


@pytest.fixture(scope="module")
def problem_sets() -> dict[tuple[int, str], list[ArithmeticProblem]]:
    return {(i, split): generate_problems(c, split, 500, seed=3) for i, c in enumerate(CONFIGS) for split in SPLITS}


# ---------------------------------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------------------------------


def test_deterministic_and_prefix_stable():
    config = CONFIGS[1]
    first = generate_problems(config, "dev", 40, seed=7)
    assert first == generate_problems(config, "dev", 40, seed=7)
    assert generate_problems(config, "dev", 15, seed=7) == first[:15]  # the first k of n are the set of k
    assert [p.problem_id for p in generate_problems(config, "dev", 40, seed=8)] != [p.problem_id for p in first]


def test_splits_disjoint_and_by_content(problem_sets):
    for i in range(len(CONFIGS)):
        keys = {split: {canonical_key(p.gold_steps) for p in problem_sets[i, split]} for split in SPLITS}
        for split in SPLITS:
            assert len(keys[split]) == 500  # no duplicates within a split
            assert len({p.problem_id for p in problem_sets[i, split]}) == 500
            assert all(p.split == split == _bucket_split(p.gold_steps) for p in problem_sets[i, split])
        assert not keys["train"] & keys["dev"] and not keys["train"] & keys["test"] and not keys["dev"] & keys["test"]


def test_split_ignores_seed_names_and_phrasing():
    steps = [GoldStep(14, "+", 7, 21), GoldStep(21, "-", 9, 12)]
    word = ArithmeticProblem.from_steps(ArithmeticTaskConfig(num_ops=2), steps)
    expr = ArithmeticProblem.from_steps(ArithmeticTaskConfig(num_ops=2, phrasing="expression", distractors=3), steps)
    assert word.split == expr.split == _bucket_split(steps)
    assert word.content_hash == expr.content_hash and word.problem_id != expr.problem_id  # the id names the config
    # a chain drawn under another seed is the same problem: same split, same words
    for p in generate_problems(CONFIGS[0], "test", 30, seed=0):
        again = ArithmeticProblem.from_steps(CONFIGS[0], list(p.gold_steps))
        assert again == p


def test_gold_steps_hold_chain_and_stay_bounded(problem_sets):
    for (i, _), problems in problem_sets.items():
        config = CONFIGS[i]
        lo, hi, bound = max(2, 10 ** (config.digits - 1)), 10**config.digits - 1, 10 ** (config.digits + 1) - 1
        for p in problems:
            steps = p.gold_steps
            assert len(steps) == config.num_ops
            assert lo <= steps[0].a <= hi
            for k, s in enumerate(steps):
                assert s.op in config.operators
                assert s.result == PY_OPS[s.op](s.a, s.b) and 1 <= s.result <= bound
                if s.op == "/":
                    assert s.a % s.b == 0 and 2 <= s.b <= 9
                elif s.op == "*":
                    assert 2 <= s.b <= 9
                else:
                    assert lo <= s.b <= hi
                if k:
                    assert s.a == steps[k - 1].result
            assert p.answer == str(steps[-1].result)


def test_question_numbers_are_digits_and_ground_the_operands(problem_sets):
    for (i, _), problems in problem_sets.items():
        config = CONFIGS[i]
        for p in problems:
            in_text = [int(x) for x in re.findall(r"\d+", p.question)]
            assert list(p.numbers) == in_text
            assert not NUMBER_WORDS & set(re.findall(r"[a-z]+", p.question.lower()))
            gold = [p.gold_steps[0].a] + [s.b for s in p.gold_steps]
            assert len(p.distractor_numbers) == config.distractors == len(set(p.distractor_numbers))
            assert not set(p.distractor_numbers) & ({s.result for s in p.gold_steps} | set(gold))
            # removing the distractor numbers leaves exactly the start and the operands, in order
            assert [x for x in in_text if x not in p.distractor_numbers] == gold
            assert sorted(x for x in in_text if x in p.distractor_numbers) == sorted(p.distractor_numbers)


def test_distractors_add_sentences_to_the_same_problems():
    plain = ArithmeticTaskConfig(num_ops=4, digits=2, operators="+-*")
    noisy = ArithmeticTaskConfig(num_ops=4, digits=2, operators="+-*", distractors=3)
    for a, b in zip(generate_problems(plain, "train", 50), generate_problems(noisy, "train", 50), strict=True):
        assert a.gold_steps == b.gold_steps
        sentences_a = re.split(r"(?<=[.?]) ", a.question)
        sentences_b = re.split(r"(?<=[.?]) ", b.question)
        extra = list(sentences_b)
        for sentence in sentences_a:  # a's sentences appear in b in order
            extra = extra[extra.index(sentence) + 1 :] if sentence in extra else pytest.fail(sentence)
        assert len(sentences_b) == len(sentences_a) + 3


def test_phrasings_exact_text():
    steps = [GoldStep(14, "+", 7, 21), GoldStep(21, "-", 9, 12), GoldStep(12, "*", 3, 36), GoldStep(36, "/", 4, 9)]
    config = ArithmeticTaskConfig(num_ops=4, operators="+-*/")
    expr = ArithmeticProblem.from_steps(ArithmeticTaskConfig(num_ops=4, operators="+-*/", phrasing="expression"), steps)
    assert expr.question == "Compute ((((14 + 7) - 9) * 3) / 4)."
    assert expr.numbers == (14, 7, 9, 3, 4) and expr.answer == "9"
    word = ArithmeticProblem.from_steps(config, steps)
    assert word.numbers == (14, 7, 9, 3, 4)
    assert word.question.endswith(" have now?") or word.question.endswith((" in the end?", " at the end?"))
    assert " 3 times as " in word.question and re.search(r" 4 (boxes|people|equal piles)", word.question)
    assert re.fullmatch(r"arith/ops4-d2-add-sub-mul-div-dist0-word/[0-9a-f]{12}", word.problem_id)
    with pytest.raises(ValueError, match="wrong length or operator"):
        ArithmeticProblem.from_steps(ArithmeticTaskConfig(num_ops=4), steps)  # * and / not allowed
    with pytest.raises(ValueError, match="wrong length"):
        ArithmeticProblem.from_steps(config, steps[:3])
    with pytest.raises(ValueError, match="previous step's result"):
        ArithmeticProblem.from_steps(config, [*steps[:3], GoldStep(35, "/", 5, 7)])


# ---------------------------------------------------------------------------------------------------------------------
# Traces
# ---------------------------------------------------------------------------------------------------------------------


def test_clean_trace_text_and_steps():
    steps = [GoldStep(14, "+", 7, 21), GoldStep(21, "-", 9, 12)]
    problem = ArithmeticProblem.from_steps(ArithmeticTaskConfig(num_ops=2), steps)
    assert problem.gold_trace == "14 + 7 = 21.\n\n21 - 9 = 12.\n\nThe answer is 12."
    assert problem.trace() == problem.gold_trace
    # one step of split_steps per gold step, plus the answer
    assert [s.text.strip() for s in split_steps(problem.gold_trace)] == [
        "14 + 7 = 21.",
        "21 - 9 = 12.",
        "The answer is 12.",
    ]


def test_corrupted_trace_has_one_wrong_intermediate(problem_sets):
    for (_, split), problems in problem_sets.items():
        if split != "dev":
            continue
        for p in problems:
            clean, corrupted = p.trace("clean").split("\n\n"), p.trace("corrupted").split("\n\n")
            assert len(clean) == len(corrupted) == len(p.gold_steps) + 1
            assert corrupted[-1] == clean[-1] == f"The answer is {p.answer}."
            differing = [k for k in range(len(clean)) if clean[k] != corrupted[k]]
            assert len(differing) == 1 and differing[0] < len(p.gold_steps) - 1  # never the last step
            k = differing[0]
            a, op, b, written = EQUATION.fullmatch(corrupted[k]).groups()
            true = p.gold_steps[k]
            assert (int(a), op, int(b)) == (true.a, true.op, true.b)
            assert int(written) != true.result and abs(int(written) - true.result) <= 2
            assert EQUATION.fullmatch(corrupted[k + 1]).group(1) == str(true.result)  # continues from the truth
            assert p.corruption() == (k, int(written))
            assert p.trace("corrupted") == p.trace("corrupted")


def test_corrupted_refused_for_one_step():
    problem = generate_problems(ArithmeticTaskConfig(num_ops=1), "train", 1)[0]
    with pytest.raises(ValueError, match="num_ops >= 2"):
        problem.trace("corrupted")
    with pytest.raises(ValueError, match="num_ops >= 2"):
        parse_arithmetic_spec("arith-ops1-test-corrupted")
    with pytest.raises(ValueError, match="trace variant"):
        problem.trace("lucky")


# ---------------------------------------------------------------------------------------------------------------------
# Configs and names
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_ops": 0},
        {"num_ops": 9},
        {"digits": 0},
        {"digits": 4},
        {"operators": ""},
        {"operators": "+x"},
        {"operators": "++"},
        {"distractors": -1},
        {"distractors": 9},
        {"phrasing": "story"},
    ],
)
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        ArithmeticTaskConfig(**kwargs)


def test_config_operators_canonical():
    assert ArithmeticTaskConfig(operators="/*-").operators == "-*/"
    assert ArithmeticTaskConfig(operators="/*-") == ArithmeticTaskConfig(operators="-*/")


def test_too_small_problem_space_raises():
    with pytest.raises(ValueError, match="Found only"):
        generate_problems(ArithmeticTaskConfig(num_ops=1, digits=1, operators="+"), "test", 400)


def test_parse_spec_defaults_order_and_round_trip():
    spec = parse_arithmetic_spec("arith-test")
    assert spec == ArithmeticSetSpec(ArithmeticTaskConfig(), "test", n=1000, seed=0, trace="clean")
    full = parse_arithmetic_spec("arith-corrupted-seed4-n20-dev-expr-dist2-div-mul-d3-ops5")
    assert full.config == ArithmeticTaskConfig(
        num_ops=5, digits=3, operators="*/", distractors=2, phrasing="expression"
    )
    assert (full.split, full.n, full.seed, full.trace) == ("dev", 20, 4, "corrupted")
    assert full.name == "arith-ops5-d3-mul-div-dist2-expr-dev-n20-seed4-corrupted"
    assert parse_arithmetic_spec(full.name) == full
    assert ":" not in full.name and "/" not in full.name and "," not in full.name


@pytest.mark.parametrize(
    "name",
    [
        "arith",  # no split
        "arith-ops3",  # no split
        "arith-ops3-test-dev",  # two splits
        "arith-ops3-ops4-test",  # repeated
        "arith-add-add-test",  # repeated operator
        "arith-foo-test",  # unknown part
        "arith-ops9-test",  # out of range
        "arith-d0-test",
        "arith-test-n0",
        "arith-ops-test",  # no value
        "arith--test",
        "arith-+--test",
    ],
)
def test_bad_spec_names_say_the_grammar(name):
    with pytest.raises(ValueError) as err:
        parse_arithmetic_spec(name)
    assert SPEC_GRAMMAR in str(err.value)
    with pytest.raises(ValueError, match="arith-<part>"):
        load_math_dataset(name)


# ---------------------------------------------------------------------------------------------------------------------
# Loading by name (procrl.data_builders.datasets)
# ---------------------------------------------------------------------------------------------------------------------


def test_load_math_dataset_by_name():
    name = "arith-ops3-d2-dist1-test-n40"
    ds = load_math_dataset(name, start=5, end=25, prompt_template=ZERO_SHOT_TEMPLATE)
    assert tuple(ds.column_names) == (*SCHEMA_COLUMNS, GOLD_STEPS_COLUMN)
    assert len(ds) == 20
    problems = parse_arithmetic_spec(name).problems()[5:25]
    for row, p in zip(ds, problems, strict=True):
        assert row["problem_id"] == p.problem_id and row["source"] == "arith"
        assert row["question"] == p.question and row["answer"] == p.answer
        assert row["prompt"] == build_prompt(p.question, ZERO_SHOT_TEMPLATE)
        assert row["solution"] == p.gold_trace
        assert tuple(gold_steps_from_json(row[GOLD_STEPS_COLUMN])) == p.gold_steps
    everything = load_math_dataset(name)  # end=None: all n; the default template
    assert len(everything) == 40
    assert everything["problem_id"][5:25] == ds["problem_id"]
    assert everything[5]["prompt"] == build_prompt(problems[0].question, ONE_SHOT_TEMPLATE)


def test_load_corrupted_and_eval_set_spec():
    name, start, end, tokens = parse_eval_set("arith-ops2-d1-add-mul-corrupted-dev-n30:10:20:64")
    assert (name, start, end, tokens) == ("arith-ops2-d1-add-mul-corrupted-dev-n30", 10, 20, 64)
    ds = load_math_dataset(name, start=start, end=end)
    problems = parse_arithmetic_spec(name).problems()
    assert ds["solution"] == [p.trace("corrupted") for p in problems[10:20]]
    assert all(s != p.gold_trace for s, p in zip(ds["solution"], problems[10:20], strict=True))


def test_load_errors():
    with pytest.raises(ValueError, match="out of range"):
        load_math_dataset("arith-test-n10", end=11)
    with pytest.raises(ValueError, match="split"):
        load_math_dataset("arith-test-n10", split="train")
    assert len(load_math_dataset("arith-test-n10", split="test")) == 10


def test_other_sets_keep_their_columns():
    assert tuple(load_math_dataset("svamp", end=2).column_names) == SCHEMA_COLUMNS


def test_a_mixture_of_arith_sets_interleaves_their_rows_round_robin():
    a = load_math_dataset("arith-ops1-d2-train-n2")
    b = load_math_dataset("arith-ops3-d2-train-n4")
    mixed = load_math_dataset("arith-ops1-d2-train-n2+arith-ops3-d2-train-n4")
    expected = [a[0], b[0], a[1], b[1], b[2], b[3]]
    assert [r["problem_id"] for r in mixed] == [r["problem_id"] for r in expected]
    assert mixed[1]["gold_steps"] == b[0]["gold_steps"]
    assert [r["problem_id"] for r in load_math_dataset("arith-ops1-d2-train-n2+arith-ops3-d2-train-n4", start=3, end=5)] == [
        expected[3]["problem_id"], expected[4]["problem_id"]]  # fmt: skip
    with pytest.raises(ValueError, match="split"):
        load_math_dataset("arith-ops1-d2-train-n2+arith-ops3-d2-test-n4", split="train")
