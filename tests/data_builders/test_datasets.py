"""Tests of procrl.data_builders.datasets: the shipped math sets, the generic loader and the prompt templates.

Expected values were read from the shipped files by hand (data_builders/data/*.jsonl), not from the loader.
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
import zipfile
from pathlib import Path

import datasets
import pytest

from procrl.data_builders import datasets as mathdata
from procrl.data_builders.datasets import (
    BUILTIN_DATASETS,
    ONE_SHOT_TEMPLATE,
    SCHEMA_COLUMNS,
    ZERO_SHOT_TEMPLATE,
    build_prompt,
    builtin_data_file,
    format_answer,
    load_math_dataset,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated_hf_cache(tmp_path, monkeypatch):
    """Keep `datasets.load_dataset` caches of the local-file tests out of the user's ~/.cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def _assert_schema(ds: datasets.Dataset) -> None:
    assert tuple(ds.column_names) == SCHEMA_COLUMNS
    row = ds[0]
    for column in SCHEMA_COLUMNS[1:]:
        assert isinstance(row[column], str), column
    assert row["prompt"] == build_prompt(row["question"], ONE_SHOT_TEMPLATE)  # the default template
    assert row["prompt"][-1]["role"] == "user"
    assert row["question"] in row["prompt"][-1]["content"]


# ---------------------------------------------------------------------------------------------------------------------
# Built-in sets
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "n_rows", "source"),
    [
        ("svamp", 1000, "svamp"),  # SVAMP.json: 1,000 problems
        ("gsm8k", 1319, "gsm8k"),  # GSM8K test.jsonl: 1,319 lines
        ("math500", 500, "math500"),  # PRM800K math_splits/test.jsonl: 500 lines
    ],
)
def test_builtin_schema_and_row_count(name, n_rows, source):
    ds = load_math_dataset(name)
    assert len(ds) == n_rows
    _assert_schema(ds)
    assert set(ds["source"]) == {source}
    assert len(set(ds["problem_id"])) == n_rows  # ids are unique
    assert all(pid.startswith(f"{source}/") for pid in ds["problem_id"])


def test_svamp_demo_slices_are_disjoint():
    train = load_math_dataset("svamp", start=0, end=700)
    evaluation = load_math_dataset("svamp", start=700, end=850)
    assert len(train) == 700
    assert len(evaluation) == 150
    assert not set(train["problem_id"]) & set(evaluation["problem_id"])
    # Ids come from SVAMP's own `ID` field, in file order: line 701 is chal-701.
    assert evaluation[0]["problem_id"] == "svamp/chal-701"
    assert train[-1]["problem_id"] == "svamp/chal-700"


def test_svamp_known_record():
    row = load_math_dataset("svamp", end=1)[0]
    # Line 1 of svamp.jsonl: ID chal-1, Answer 51.0, Body and Question joined with one space.
    assert row["problem_id"] == "svamp/chal-1"
    assert row["answer"] == "51"
    assert row["question"] == (
        "Each pack of dvds costs 76 dollars. If there is a discount of 25 dollars on each pack "
        "How much do you have to pay to buy each pack?"
    )
    assert row["solution"] == ""


def test_gsm8k_answer_keeps_the_full_solution():
    ds = load_math_dataset("gsm8k", start=0, end=50)  # the demo's evaluation slice
    assert len(ds) == 50
    row = ds[0]
    assert row["problem_id"] == "gsm8k/test/0"
    assert row["question"].startswith("Janet’s ducks lay 16 eggs per day.")
    assert row["answer"].endswith("\n#### 18")
    assert "<<16-3-4=9>>" in row["answer"]  # calculator annotations are kept; the outcome reward ignores them
    assert row["solution"] == row["answer"]
    assert all("####" in answer for answer in ds["answer"])
    assert load_math_dataset("gsm8k", start=17, end=18)[0]["problem_id"] == "gsm8k/test/17"


def test_math500_known_record():
    row = load_math_dataset("math500", end=1)[0]
    assert row["problem_id"] == "math500/test/precalculus/807.json"
    assert row["answer"] == r"\left( 3, \frac{\pi}{2} \right)"
    assert row["question"].startswith("Convert the point $(0,3)$ in rectangular coordinates")
    assert r"\boxed{\left( 3, \frac{\pi}{2} \right)}" in row["solution"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": 0, "end": 1001}, "out of range"),  # svamp has 1,000 rows
        ({"start": -1}, ">= 0"),  # negative start
        ({"start": 5, "end": 5}, "empty"),  # empty range
        ({"start": 1000}, "empty"),  # start at the end
        ({"split": "test"}, "ships only"),  # svamp ships one split, "all"
    ],
)
def test_builtin_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_math_dataset("svamp", **kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# Local files and other data
# ---------------------------------------------------------------------------------------------------------------------


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


RECORDS = [
    {"uid": "a", "problem": "What is 2 + 3?", "gold": 5.0, "worked": "2 + 3 = 5."},
    {"uid": "b", "problem": "Half of 5?", "gold": 2.5, "worked": "5 / 2 = 2.5."},
    {"uid": "c", "problem": "What is 7 - 4?", "gold": 3.0, "worked": "7 - 4 = 3."},
]


def test_local_jsonl_with_custom_columns(tmp_path):
    path = _write_jsonl(tmp_path / "toy.jsonl", RECORDS)
    ds = load_math_dataset(
        str(path),
        question_column="problem",
        answer_column="gold",
        id_column="uid",
        solution_column="worked",
        start=1,
    )
    _assert_schema(ds)
    assert ds["problem_id"] == ["toy/b", "toy/c"]
    assert ds["answer"] == ["2.5", "3"]  # floats become clean number strings
    assert ds["source"] == ["toy", "toy"]
    assert ds["solution"] == ["5 / 2 = 2.5.", "7 - 4 = 3."]
    assert ds[0]["prompt"] == build_prompt("Half of 5?", ONE_SHOT_TEMPLATE)


def test_local_parquet_default_ids_count_rows_of_the_file(tmp_path):
    path = tmp_path / "toy.parquet"
    datasets.Dataset.from_list(RECORDS).rename_columns({"problem": "question", "gold": "answer"}).to_parquet(path)
    ds = load_math_dataset(str(path), start=2, end=3, prompt_template=ZERO_SHOT_TEMPLATE)
    assert ds["problem_id"] == ["toy/train/2"]  # <source>/<split>/<0-based row>, independent of start
    assert ds[0]["solution"] == ""
    assert ds[0]["prompt"][0]["content"].startswith("What is 7 - 4?\n")


def test_missing_column_is_named(tmp_path):
    path = _write_jsonl(tmp_path / "toy.jsonl", RECORDS)
    with pytest.raises(ValueError, match=r"'question'.*\['uid', 'problem', 'gold', 'worked'\].*question_column"):
        load_math_dataset(str(path))  # the default question column does not exist
    with pytest.raises(ValueError, match=r"'answer'.*answer_column"):
        load_math_dataset(str(path), question_column="problem")


def test_local_file_bad_range_and_empty_file(tmp_path):
    path = _write_jsonl(tmp_path / "toy.jsonl", RECORDS)
    with pytest.raises(ValueError, match="out of range"):
        load_math_dataset(str(path), question_column="problem", answer_column="gold", end=4)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        load_math_dataset(str(empty))  # 0 bytes


# ---------------------------------------------------------------------------------------------------------------------
# Prompts and answers
# ---------------------------------------------------------------------------------------------------------------------


def test_one_shot_prompt_is_a_finished_example_exchange_then_the_question():
    question = "Sam has 3 apples and buys 4 more. How many apples does he have?"
    prompt = build_prompt(question, ONE_SHOT_TEMPLATE)
    assert [m["role"] for m in prompt] == ["user", "assistant", "user"]
    assert prompt[1]["content"].endswith("The answer is 9.")  # the worked example's final line
    assert prompt[2]["content"] == question + '\nReason in a few short steps, then end with "The answer is <number>."'
    assert question not in prompt[0]["content"] + prompt[1]["content"]
    assert build_prompt(question, ZERO_SHOT_TEMPLATE) == [prompt[2]]
    # Only {question} is substituted: LaTeX braces in the template or question survive.
    assert build_prompt(r"Find $\frac{1}{2}$.", r"{question} Use \boxed{}.")[0]["content"] == (
        r"Find $\frac{1}{2}$. Use \boxed{}."
    )


def test_one_shot_template_is_short():
    # The demo's 135M model generates 96 tokens; the prompt must stay small (~100 tokens ~ 80 words).
    assert sum(len(m["content"].split()) for m in ONE_SHOT_TEMPLATE) <= 80


@pytest.mark.parametrize(
    "template",
    [
        "Solve: {q}",  # wrong placeholder name
        "no placeholder",
        "",
        [{"role": "user", "content": "{question}"}, {"role": "assistant", "content": "ok"}],  # last turn not user
        [],  # no messages
    ],
)
def test_template_without_placeholder_is_rejected(template):
    with pytest.raises(ValueError, match=r"\{question\}"):
        build_prompt("What is 1 + 1?", template)
    with pytest.raises(ValueError, match=r"\{question\}"):
        load_math_dataset("svamp", end=2, prompt_template=template)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (27.0, "27"),  # integral float: no ".0"
        (2.5, "2.5"),  # fraction kept
        (3, "3"),  # int
        ("#### 18", "#### 18"),  # strings unchanged
    ],
)
def test_format_answer(value, expected):
    assert format_answer(value) == expected


# ---------------------------------------------------------------------------------------------------------------------
# Shipped data is found in any install
# ---------------------------------------------------------------------------------------------------------------------


def test_builtin_files_are_package_resources():
    package_dir = Path(mathdata.__file__).parent
    for spec in BUILTIN_DATASETS.values():
        resource = builtin_data_file(spec.filename)
        assert Path(str(resource)) == package_dir / "data" / spec.filename
    assert (package_dir / "data" / "SOURCE.md").is_file()
    with pytest.raises(FileNotFoundError, match="reinstall"):
        builtin_data_file("does_not_exist.jsonl")


def test_builtin_files_are_declared_package_data():
    """A normal install copies only the package-data globs of pyproject.toml; every shipped file must match one.
    The tests live in the source checkout, next to pyproject.toml: a missing file is a failure, not a skip."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "procrl.data_builders.data" in config["tool"]["setuptools"]["packages"]
    patterns = config["tool"]["setuptools"]["package-data"]["procrl.data_builders.data"]
    for name in [spec.filename for spec in BUILTIN_DATASETS.values()] + ["SOURCE.md"]:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name


def test_builtin_loads_through_a_non_filesystem_resource(tmp_path, monkeypatch):
    """The loader reads through importlib.resources' Traversable API only, so a zipped install works too."""
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.write(builtin_data_file("svamp.jsonl"), "procrl/data_builders/data/svamp.jsonl")
    monkeypatch.setattr(mathdata, "files", lambda package: zipfile.Path(archive, "procrl/data_builders/"))
    ds = load_math_dataset("svamp", start=998)
    assert ds["problem_id"] == ["svamp/chal-999", "svamp/chal-1000"]
