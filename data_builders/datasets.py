"""Math problem sets in one schema: the shipped GSM8K test, SVAMP and MATH500 files, or any local/Hub dataset.

Every loader returns a `datasets.Dataset` with exactly these columns (in this order):

- `prompt`: chat messages, `[{"role": "user", "content": <question inside the prompt template>}]`
- `answer`: the gold answer as the source gives it. GSM8K keeps its full solution ending in `#### N`
  (the outcome reward parses `####` itself); SVAMP's float becomes a clean number string (27.0 -> "27",
  2.5 -> "2.5"); MATH500 gives its `answer` field.
- `problem_id`: a stable string, `<source>/<the source's own id>` where it has one ("svamp/chal-1",
  "math500/test/precalculus/807.json"), else `<source>/<split>/<0-based row in the file>` ("gsm8k/test/17").
  Ids do not depend on `start`/`end`, so slices of one set never share an id.
- `source`: "gsm8k", "svamp", "math500", or the file stem / directory name / Hub name of other data.
- `question`: the plain problem text (no template).
- `solution`: the reference solution text, "" when the source has none (SVAMP).

Generated arithmetic sets (`procrl.data_builders.arithmetic`), named like "arith-ops3-d2-test" (grammar:
`procrl.data_builders.arithmetic.SPEC_GRAMMAR`), have these columns plus `gold_steps` (`ARITH_FEATURES`): the gold
steps as JSON, read by the step oracle. Their `source` is "arith", `answer` the final result, `solution` the clean
or (name part `corrupted`) corrupted trace.

    >>> ds = load_math_dataset("svamp", start=0, end=2)
    >>> ds[0]["problem_id"], ds[0]["answer"]
    ('svamp/chal-1', '51')
    >>> ds[0]["prompt"][0]["role"]
    'user'

The shipped files live in `data/` next to this module (package data of `procrl.data_builders`); see
`data/SOURCE.md` for their origin, license and conversion.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import datasets

from procrl.data_builders.arithmetic import ARITH_SOURCE, is_arithmetic_spec, parse_arithmetic_spec
from procrl.data_builders.prompts import (
    ANSWER_INSTRUCTION,
    ONE_SHOT_TEMPLATE,
    ZERO_SHOT_TEMPLATE,
    PromptTemplate,
    build_prompt,
    resolve_template,
    validate_template,
)
from procrl.rewards.oracle.gold import GOLD_STEPS_COLUMN
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "ANSWER_INSTRUCTION",
    "ARITH_FEATURES",
    "BUILTIN_DATASETS",
    "BuiltinDataset",
    "ONE_SHOT_TEMPLATE",
    "SCHEMA_COLUMNS",
    "SCHEMA_FEATURES",
    "ZERO_SHOT_TEMPLATE",
    "build_prompt",
    "builtin_data_file",
    "format_answer",
    "load_math_dataset",
    "parse_eval_set",
    "resolve_template",
    "validate_template",
]

# --------------------------------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------------------------------

SCHEMA_COLUMNS = ("prompt", "answer", "problem_id", "source", "question", "solution")

SCHEMA_FEATURES = datasets.Features(
    {
        "prompt": datasets.List({"role": datasets.Value("string"), "content": datasets.Value("string")}),
        "answer": datasets.Value("string"),
        "problem_id": datasets.Value("string"),
        "source": datasets.Value("string"),
        "question": datasets.Value("string"),
        "solution": datasets.Value("string"),
    }
)
# the arith sets' columns: the schema, then the gold steps as JSON (procrl.rewards.oracle.gold)
ARITH_FEATURES = datasets.Features({**SCHEMA_FEATURES, GOLD_STEPS_COLUMN: datasets.Value("string")})


def format_answer(value: Any) -> str:
    """Gold answer as a string: strings unchanged, integral floats without ".0", other numbers as Python prints them.

    >>> [format_answer(v) for v in (27.0, 2.5, 3, "#### 18", -0.0)]
    ['27', '2.5', '3', '#### 18', '0']
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):  # bool is an int; keep it out of the number branch
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return str(int(value))
        return repr(value)
    raise ValueError(f"Cannot use {value!r} ({type(value).__name__}) as a gold answer: expected a string or a number.")


# --------------------------------------------------------------------------------------------------------------------
# Built-in sets: one explicit registry of the shipped files and how a raw record maps into the schema.
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltinDataset:
    """A shipped JSONL file. `convert(record, row)` returns the schema fields except `prompt` (row is 0-based)."""

    filename: str
    split: str
    convert: Callable[[dict[str, Any], int], dict[str, str]]


def _gsm8k_fields(record: dict[str, Any], row: int) -> dict[str, str]:
    # GSM8K has no ids: the 0-based line number in test.jsonl is the id. Its answer field is the solution.
    return {
        "answer": record["answer"],
        "problem_id": f"gsm8k/test/{row}",
        "source": "gsm8k",
        "question": record["question"],
        "solution": record["answer"],
    }


def _svamp_fields(record: dict[str, Any], row: int) -> dict[str, str]:
    # SVAMP splits each problem into Body and Question; joined with one space, as in Kojima et al.'s zero_shot_cot.
    return {
        "answer": format_answer(record["Answer"]),
        "problem_id": f"svamp/{record['ID']}",
        "source": "svamp",
        "question": f"{record['Body'].strip()} {record['Question'].strip()}",
        "solution": "",
    }


def _math500_fields(record: dict[str, Any], row: int) -> dict[str, str]:
    return {
        "answer": record["answer"],
        "problem_id": f"math500/{record['unique_id']}",
        "source": "math500",
        "question": record["problem"],
        "solution": record["solution"],
    }


BUILTIN_DATASETS: dict[str, BuiltinDataset] = {
    "gsm8k": BuiltinDataset("gsm8k_test.jsonl", "test", _gsm8k_fields),
    "svamp": BuiltinDataset("svamp.jsonl", "all", _svamp_fields),
    "math500": BuiltinDataset("math500_test.jsonl", "test", _math500_fields),
}


def builtin_data_file(filename: str) -> Traversable:
    """The shipped file `data/<filename>` of `procrl.data_builders`, found through `importlib.resources`.

    This works for an editable install (the source folder) and a normal one (site-packages) alike.
    """
    resource = files("procrl.data_builders").joinpath("data", filename)
    if not resource.is_file():
        raise FileNotFoundError(
            f"Shipped data file {filename!r} is missing from the procrl.data_builders package ({resource}); "
            "reinstall procrl (`pip install -e .` or `pip install .`)."
        )
    return resource


# --------------------------------------------------------------------------------------------------------------------
# Loader
# --------------------------------------------------------------------------------------------------------------------

_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def load_math_dataset(
    name_or_path: str,
    *,
    split: str | None = None,
    start: int = 0,
    end: int | None = None,
    prompt_template: PromptTemplate = ONE_SHOT_TEMPLATE,
    question_column: str = "question",
    answer_column: str = "answer",
    id_column: str | None = None,
    solution_column: str | None = None,
    source: str | None = None,
) -> datasets.Dataset:
    """Load rows `[start:end)` of a math problem set in the procrl schema (see the module docstring).

    Args:
        name_or_path: a built-in name ("gsm8k": the GSM8K test split, "svamp", "math500"), which reads the
            shipped file; a generated arithmetic set, "arith-..." (`procrl.data_builders.arithmetic.SPEC_GRAMMAR`,
            e.g. "arith-ops3-d2-test"), whose rows also carry `gold_steps`; otherwise a local
            .json/.jsonl/.parquet/.csv file, a local directory, or a Hub dataset name, read with
            `datasets.load_dataset`. Built-in and arith names win over a same-named file or folder: write
            "./gsm8k" to load a local folder called gsm8k.
        split: split to read; default "train" for other data. Built-ins accept None or their shipped split
            ("test" for gsm8k and math500, "all" for svamp); arith sets None or the split their name gives.
        start, end: 0-based row range `[start, end)` in file order; `end=None` means to the last row (for an
            arith set, its `n<N>` problems).
        prompt_template: a user-message string containing `{question}`, or chat messages (few-shot turns) whose
            last user message contains it (default: ONE_SHOT_TEMPLATE).
        question_column, answer_column: columns of other data that hold the problem text and the gold answer.
            Ignored for built-ins.
        id_column: column with a per-row id (problem_id becomes "<source>/<id>"); None uses
            "<source>/<split>/<row>".
        solution_column: column with a reference solution; None gives "" for every row.
        source: value of the `source` column for other data; default: the file stem, directory name or Hub name.

    Raises:
        ValueError: a template without `{question}`, a missing column, an out-of-range or empty row range,
            an unknown split of a built-in, an empty question, or an arith name outside its grammar.
    """
    validate_template(prompt_template)
    if name_or_path in BUILTIN_DATASETS or is_arithmetic_spec(name_or_path):
        load = _load_arithmetic if is_arithmetic_spec(name_or_path) else _load_builtin
        dataset = load(name_or_path, split, start, end, prompt_template)
        if (question_column, answer_column, id_column, solution_column) != ("question", "answer", None, None):
            logger.warning("Column arguments are ignored for the built-in data set %r.", name_or_path)
    else:
        dataset = _load_external(
            name_or_path,
            split=split or "train",
            start=start,
            end=end,
            prompt_template=prompt_template,
            question_column=question_column,
            answer_column=answer_column,
            id_column=id_column,
            solution_column=solution_column,
            source=source,
        )
    logger.info("Loaded %d problems from %r (rows %d..%d).", len(dataset), name_or_path, start, start + len(dataset))
    return dataset


def _load_builtin(
    name: str, split: str | None, start: int, end: int | None, template: PromptTemplate
) -> datasets.Dataset:
    spec = BUILTIN_DATASETS[name]
    if split not in (None, spec.split):
        raise ValueError(
            f"The built-in data set {name!r} ships only the {spec.split!r} split; got split={split!r}. "
            "Pass split=None, or a local file / Hub name to load other splits."
        )
    with builtin_data_file(spec.filename).open("r", encoding="utf-8") as handle:
        lines = [line for line in handle.read().splitlines() if line.strip()]
    start, end = _check_range(start, end, len(lines), name)
    rows = []
    for row in range(start, end):
        fields = spec.convert(json.loads(lines[row]), row)
        rows.append({"prompt": build_prompt(fields["question"], template), **fields})
    return datasets.Dataset.from_list(rows, features=SCHEMA_FEATURES)


def _load_arithmetic(
    name: str, split: str | None, start: int, end: int | None, template: PromptTemplate
) -> datasets.Dataset:
    """One arith set, or a mixture `name1+name2+...` of arith sets (e.g. several difficulty levels for SFT): their
    rows interleaved round-robin (one of each in turn while it lasts), then rows `[start, end)` of the mixture."""
    if "+" in name:
        parts = [_load_arithmetic(part, split, 0, None, template) for part in name.split("+")]
        rows = [part[i] for i in range(max(len(p) for p in parts)) for part in parts if i < len(part)]
        start, end = _check_range(start, end, len(rows), name)
        return datasets.Dataset.from_list(rows[start:end], features=ARITH_FEATURES)
    spec = parse_arithmetic_spec(name)
    if split not in (None, spec.split):
        raise ValueError(
            f"The arith set {name!r} is of the {spec.split!r} split (its name says so); got split={split!r}. "
            "Pass split=None, and name the split in the set's name (arith-...-train, -dev or -test)."
        )
    start, end = _check_range(start, end, spec.n, name)
    rows = [
        {
            "prompt": build_prompt(problem.question, template),
            "answer": problem.answer,
            "problem_id": problem.problem_id,
            "source": ARITH_SOURCE,
            "question": problem.question,
            "solution": problem.trace(spec.trace),
            GOLD_STEPS_COLUMN: problem.gold_steps_json,
        }
        for problem in spec.problems(end)[start:]  # prefix-stable: the first `end` problems are rows [0, end)
    ]
    return datasets.Dataset.from_list(rows, features=ARITH_FEATURES)


def _load_external(
    name_or_path: str,
    *,
    split: str,
    start: int,
    end: int | None,
    prompt_template: PromptTemplate,
    question_column: str,
    answer_column: str,
    id_column: str | None,
    solution_column: str | None,
    source: str | None,
) -> datasets.Dataset:
    path = Path(name_or_path)
    if path.is_file():
        builder = _FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise ValueError(
                f"Cannot load {name_or_path!r}: unsupported file type {path.suffix!r} "
                f"(supported: {', '.join(sorted(_FILE_BUILDERS))}, or a directory, or a Hub dataset name)."
            )
        if path.stat().st_size == 0:  # the json builder fails on it with a bare StopIteration
            raise ValueError(f"{name_or_path!r} is an empty file: no problems to load.")
        raw = datasets.load_dataset(builder, data_files={split: str(path)}, split=split)
        default_source = path.stem
    elif path.is_dir():
        raw = datasets.load_dataset(str(path), split=split)
        default_source = path.resolve().name
    else:
        raw = datasets.load_dataset(name_or_path, split=split)
        default_source = name_or_path
    source = source or default_source

    for argument, column in (
        ("question_column", question_column),
        ("answer_column", answer_column),
        ("id_column", id_column),
        ("solution_column", solution_column),
    ):
        if column is not None and column not in raw.column_names:
            raise ValueError(
                f"Column {column!r} not found in {name_or_path!r} (split {split!r}); its columns are "
                f"{raw.column_names}. Set `{argument}=` to the column that holds it."
            )

    start, end = _check_range(start, end, len(raw), name_or_path)
    return raw.select(range(start, end)).map(
        _external_row,
        with_indices=True,
        remove_columns=raw.column_names,
        features=SCHEMA_FEATURES,
        fn_kwargs={
            "offset": start,
            "template": prompt_template,
            "question_column": question_column,
            "answer_column": answer_column,
            "id_column": id_column,
            "solution_column": solution_column,
            "source": source,
            "split": split,
        },
        desc=f"procrl: {source} to the math schema",
    )


def _external_row(
    example: dict[str, Any],
    index: int,
    *,
    offset: int,
    template: PromptTemplate,
    question_column: str,
    answer_column: str,
    id_column: str | None,
    solution_column: str | None,
    source: str,
    split: str,
) -> dict[str, Any]:
    row = offset + index  # 0-based row in the loaded split, independent of start/end
    question = example[question_column]
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"Row {row} of {source!r}: column {question_column!r} holds no question text ({question!r}).")
    answer = example[answer_column]
    solution = example[solution_column] if solution_column is not None else ""
    problem_id = f"{source}/{example[id_column]}" if id_column is not None else f"{source}/{split}/{row}"
    return {
        "prompt": build_prompt(question, template),
        "answer": "" if answer is None else format_answer(answer),
        "problem_id": problem_id,
        "source": source,
        "question": question,
        "solution": solution or "",
    }


def _check_range(start: int, end: int | None, n_rows: int, name: str) -> tuple[int, int]:
    """Validate the half-open row range `[start, end)` against a set of `n_rows` rows; return it with `end` filled."""
    stop = n_rows if end is None else end
    if start < 0 or stop < 0:
        raise ValueError(f"start and end must be >= 0 for {name!r}; got start={start}, end={end}.")
    if stop > n_rows:
        raise ValueError(f"end={end} is out of range for {name!r}, which has {n_rows} rows (valid: end <= {n_rows}).")
    if start >= stop:
        raise ValueError(
            f"The row range [{start}:{stop}) of {name!r} ({n_rows} rows) is empty; need 0 <= start < end <= {n_rows}."
        )
    return start, stop


def parse_eval_set(spec: str, *, with_tokens: bool = True) -> tuple[str, int, int | None, int | None]:
    """'svamp:700:850:96' -> ('svamp', 700, 850, 96): an evaluation set as name:start:end[:max_new_tokens].

    The one parser of both forms:
        with_tokens=True (task=math `eval_sets`): name[:start[:end[:max_new_tokens]]], integers; an empty `start`
            is 0, an empty `end` None (all rows), and tokens default to 256.
        with_tokens=False (FRS problems, `frs_eval_set` of `procrl.trainers.tasks.arguments.FRSCallbackArguments`):
            name[:start[:end]], digits only; tokens are None.

    Raises:
        ValueError: not name[:start[:end[:max_new_tokens]]], or a part that is not an integer (with_tokens=False:
            not name[:start[:end]] with digits only).

    >>> parse_eval_set("svamp:700:850:96"), parse_eval_set("gsm8k::10")
    (('svamp', 700, 850, 96), ('gsm8k', 0, 10, 256))
    >>> parse_eval_set("gsm8k:0:10", with_tokens=False), parse_eval_set("svamp", with_tokens=False)
    (('gsm8k', 0, 10, None), ('svamp', 0, None, None))
    >>> parse_eval_set("arith-ops3-d2-test:0:100:128")  # arith names (procrl.data_builders.arithmetic) hold no ":"
    ('arith-ops3-d2-test', 0, 100, 128)
    """
    parts = spec.split(":")
    if with_tokens:
        if not 1 <= len(parts) <= 4 or not parts[0]:
            raise ValueError(f"eval set {spec!r} must look like name:start:end:max_new_tokens, e.g. svamp:700:850:96")
        integers = f"eval set {spec!r}: start, end and max_new_tokens must be integers"
    else:
        integers = f"frs_eval_set must look like name:start:end, e.g. gsm8k:0:10; got {spec!r}"
        if not 1 <= len(parts) <= 3 or not parts[0] or not all(p.isdigit() for p in parts[1:] if p):
            raise ValueError(integers)
    try:
        start = int(parts[1]) if len(parts) > 1 and parts[1] else 0
        end = int(parts[2]) if len(parts) > 2 and parts[2] else None
        tokens = (int(parts[3]) if len(parts) > 3 and parts[3] else 256) if with_tokens else None
    except ValueError as err:
        raise ValueError(integers) from err
    return parts[0], start, end, tokens
