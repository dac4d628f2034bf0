"""The calibration library (evals/calibration.py, evals/calibration_report.py) on hand-made records: the per-level
metrics against values computed here by other means (pass@8 by enumerating 8-subsets, the mixed share by hand), the
edge rule at its boundaries, the settings' errors, one completion's record, the SFT provenance, and the table rows."""

from __future__ import annotations

import itertools
import json
import statistics

import pytest

from procrl.data_builders.prompts import resolve_template
from procrl.evals.calibration import (
    SFT_MANIFEST,
    CalibrationConfig,
    check_completion,
    edge_levels,
    is_edge,
    level_metrics,
    prompt_mismatch,
    sft_provenance,
)
from procrl.evals.calibration_report import TABLE_HEADER, calibration_markdown, calibration_rows


def record(correct, *, answered=True, tokens=10, process=None):
    return {"correct": correct, "answered": answered, "num_tokens": tokens, "process_acc": process, "first_error": None}


def problem(pattern: str, greedy: bool | None, *, process=None, tokens=10):
    """One problem from a string of samples: "1" right, "0" wrong, "-" wrong without an answer."""
    samples = [
        record(c == "1", answered=c != "-", tokens=tokens + i, process=None if process is None else process[i])
        for i, c in enumerate(pattern)
    ]
    return {"samples": samples, "greedy": record(greedy, tokens=tokens, process=None if process is None else 0.5)}


def brute_pass_at_8(pattern: str) -> float:
    """The share of the 8-subsets of the samples that hold a correct one (what the unbiased estimator estimates)."""
    subsets = list(itertools.combinations(pattern, 8))
    return sum("1" in s for s in subsets) / len(subsets)


def test_level_metrics_against_values_computed_by_hand():
    patterns = ["1100000000", "0000000000", "1111111111", "0000000-01"]  # n = 10 samples, G = 4
    processes = [[0.1 * i for i in range(10)], [0.0] * 10, [1.0] * 10, [0.5] * 10]
    greedy = [True, False, True, False]
    problems = [problem(p, g, process=q) for p, g, q in zip(patterns, greedy, processes, strict=True)]
    m = level_metrics(problems, group_size=4, resamples=200)
    shares = [p.count("1") / 10 for p in patterns]
    assert m["problems"] == m["scored"] == 4
    assert m["per_sample_accuracy"] == pytest.approx(statistics.fmean(shares))
    low, high = m["per_sample_ci"]
    assert min(shares) <= low <= m["per_sample_accuracy"] <= high <= max(shares)
    assert m["pass@8"] == pytest.approx(statistics.fmean(brute_pass_at_8(p) for p in patterns))
    # first 4 samples: 1100 mixed, 0000 not, 1111 not, 0000 not (the 1 of the last problem is sample 10)
    assert m["mixed_share"] == pytest.approx(1 / 4) and m["group_size"] == 4
    assert m["greedy_accuracy"] == 0.5 and m["greedy_correct"] == 2
    assert m["greedy_ci"][0] < 0.5 < m["greedy_ci"][1]
    assert m["process_acc"] == pytest.approx(statistics.fmean(v for q in processes for v in q))
    assert m["greedy_process_acc"] == pytest.approx(0.5)
    assert m["mean_length"] == pytest.approx(10 + 4.5)
    assert m["no_answer_share"] == pytest.approx(1 / 40)


def test_level_metrics_leaves_out_unparseable_golds_and_gives_none_over_nothing():
    unparseable = {"samples": [record(None)] * 8, "greedy": record(None)}
    m = level_metrics([unparseable, problem("11110000", True)], group_size=8)
    assert m["problems"] == 2 and m["scored"] == 1
    assert m["per_sample_accuracy"] == 0.5 and m["per_sample_ci"] == [0.5, 0.5]
    assert m["pass@8"] == 1.0 and m["mixed_share"] == 1.0 and m["greedy_accuracy"] == 1.0
    assert m["process_acc"] is None and m["greedy_process_acc"] is None  # no gold steps: no oracle value
    none = level_metrics([unparseable], group_size=8)
    assert none["per_sample_accuracy"] is None and none["per_sample_ci"] is None and none["pass@8"] is None
    assert none["greedy_accuracy"] is None and none["greedy_ci"] is None and none["mixed_share"] is None


@pytest.mark.parametrize(
    ("patterns", "group_size"), [(["1" * 7], 4), (["1" * 8, "1" * 9], 4), (["1" * 8], 9), (["1" * 8], 1)]
)
def test_level_metrics_refuses_bad_sample_counts(patterns, group_size):
    with pytest.raises(ValueError, match="level_metrics"):
        level_metrics([problem(p, True) for p in patterns], group_size=group_size)


@pytest.mark.parametrize(
    ("accuracy", "pass8", "expected"),
    [
        (0.2, 0.7, True),  # both bounds inclusive
        (0.6, 1.0, True),
        (0.4, 0.69, False),  # pass@8 too low
        (0.19, 0.9, False),  # too hard
        (0.61, 1.0, False),  # too easy
        (None, 0.9, False),  # undefined: never an edge
        (0.4, None, False),
    ],
)
def test_edge_rule(accuracy, pass8, expected):
    assert is_edge(accuracy, pass8, low=0.2, high=0.6, min_pass=0.7) is expected


def test_edge_levels_names_the_levels_that_pass_in_order():
    levels = [
        {"level": name, "metrics": {"per_sample_accuracy": acc, "pass@8": p8}}
        for name, acc, p8 in [("ops1", 0.9, 1.0), ("ops2", 0.5, 0.95), ("ops3", 0.25, 0.75), ("ops4", 0.05, 0.3)]
    ]
    assert edge_levels(levels, low=0.2, high=0.6, min_pass=0.7) == ["ops2", "ops3"]
    assert edge_levels(levels, low=0.2, high=0.6, min_pass=0.99) == []
    assert edge_levels(levels, low=0.0, high=1.0, min_pass=0.0) == ["ops1", "ops2", "ops3", "ops4"]


@pytest.mark.parametrize(
    ("overrides", "fix"),
    [
        ({"num_samples": 7}, "--num-samples 8"),
        ({"group_size": 9}, "--group-size 8"),
        ({"num_samples": 12, "group_size": 16}, "must be in [2, --num-samples 12]"),
        ({"group_size": 1}, "--group-size"),
        ({"levels": []}, "--levels is empty; give one problem set per level"),
        ({"levels": ["arith-ops1-test", "arith-ops1-test"]}, "more than once"),
        ({"levels": ["arith-ops9-test"]}, "arith-ops9-test"),
        ({"n_problems": 0}, "--n-problems must be >= 1"),
        ({"edge_low": 0.7}, "swap them"),
        ({"edge_pass": 1.5}, "must lie in [0, 1]"),
        ({"dataset": "svamp"}, "give --levels instead"),
        ({"end": 10}, "give --n-problems instead"),
        ({"label": " "}, "--label is empty"),
    ],
)
def test_bad_settings_raise_with_the_fix(overrides, fix):
    with pytest.raises(ValueError) as info:
        CalibrationConfig(**overrides)
    assert fix in str(info.value)


def test_defaults_are_a_valid_ladder_on_the_test_split():
    config = CalibrationConfig()
    assert config.num_samples == 8 == config.group_size and config.temperature == 0.7 and config.n_problems == 64
    assert len(config.levels) >= 3 and all(level.endswith("-test") for level in config.levels)
    assert (config.edge_low, config.edge_high, config.edge_pass) == (0.2, 0.6, 0.7)
    assert config.policy_label == "default" and CalibrationConfig(label="x").policy_label == "x"


GOLD = '[[14,"+",7,21],[21,"-",9,12]]'
ROW = {"answer": "12", "question": "Ann has 14 pens, buys 7, then gives 9 away. How many?", "gold_steps": GOLD}


def test_check_completion_with_and_without_gold_steps():
    right = check_completion("14 + 7 = 21. 21 - 9 = 12. The answer is 12.", [5, 6, 2], ROW, [2])
    assert right == {"correct": True, "answered": True, "num_tokens": 3, "truncated": False, "process_acc": 1.0,
                     "first_error": None, "steps": 2}  # fmt: skip
    wrong = check_completion("14 + 7 = 22. The answer is 13.", [5, 2], ROW, [2])
    assert wrong["correct"] is False and wrong["first_error"] == 0 and wrong["process_acc"] == 0.0
    silent = check_completion("14 + 7 = 21", [5, 6], ROW, [2])  # cut by the budget: "21" may be cut mid-number
    assert silent["answered"] is False and silent["correct"] is False and silent["truncated"] and silent["steps"] == 0
    plain = check_completion("The answer is 12.", [5], {"answer": "12", "question": "q"}, [2])
    assert plain["correct"] is True and plain["process_acc"] is None and plain["first_error"] is None
    assert check_completion("The answer is 12.", [5], {"answer": "no number", "question": "q"}, [2])["correct"] is None


def test_sft_provenance_reads_the_manifest(tmp_path):
    assert sft_provenance(str(tmp_path)) is None
    manifest = {
        "key": "abc123",
        "base_model": "default",
        "dataset": "arith-ops3-d2-train[0:]",
        "data": {"rows": 500, "tokens": 9000},
        "train": {"steps": 40, "wall_time_s": 321.5, "train_loss": 0.8},
        "created_at": "2026-01-01T00:00:00Z",
    }
    (tmp_path / SFT_MANIFEST).write_text(json.dumps(manifest))
    assert sft_provenance(str(tmp_path)) == {
        "manifest": str(tmp_path / SFT_MANIFEST),
        "key": "abc123",
        "base_model": "default",
        "dataset": "arith-ops3-d2-train[0:]",
        "prompt_template": None,  # a manifest from before the template was recorded
        "rows": 500,
        "steps": 40,
        "wall_time_s": 321.5,
        "train_loss": 0.8,
        "created_at": "2026-01-01T00:00:00Z",
    }
    (tmp_path / SFT_MANIFEST).write_text(json.dumps({**manifest, "prompt_template": "{question}"}))
    assert sft_provenance(str(tmp_path))["prompt_template"] == "{question}"
    (tmp_path / SFT_MANIFEST).write_text("{not json")
    assert "error" in sft_provenance(str(tmp_path))


def test_prompt_mismatch_names_the_trained_template():
    """An organism trained on "{question}" and sampled with calibrate's default one-shot prompt gets a warning that
    names the flag to pass; the same template (by name or text), no manifest or no recorded template: none."""
    sft = {"key": "3d9d", "prompt_template": "{question}"}
    message = prompt_mismatch(sft, "one_shot")
    assert message.startswith("the SFT checkpoint 3d9d was trained on prompt_template '{question}'")
    assert message.endswith("pass --prompt-template '{question}'")
    assert prompt_mismatch(sft, "{question}") is None
    assert prompt_mismatch({"key": "k", "prompt_template": resolve_template("zero_shot")}, "zero_shot") is None
    assert prompt_mismatch({"key": "k", "prompt_template": "one_shot"}, "zero_shot") is not None
    assert prompt_mismatch(None, "one_shot") is None and prompt_mismatch({"key": "k"}, "one_shot") is None


def level(name, acc, ci, pass8, edge, process=None):
    metrics = {"per_sample_accuracy": acc, "per_sample_ci": ci, "greedy_accuracy": 0.5, "greedy_ci": [0.25, 0.75],
               "pass@8": pass8, "mixed_share": 0.5, "process_acc": process, "greedy_process_acc": process,
               "mean_length": 50.0, "no_answer_share": 0.0}  # fmt: skip
    return {"level": name, "metrics": metrics, "edge": edge}


def test_table_rows_and_page():
    base = {"model": "default", "levels": [level("ops1", 0.5, [0.4, 0.6], 0.9, True)], "edge_levels": ["ops1"],
            "sft": None, "settings": {"num_samples": 8}, "edge_rule": {"low": 0.2, "high": 0.6, "min_pass": 0.7}}  # fmt: skip
    sft = {"model": "/ckpt", "levels": [level("ops1", None, None, None, False, process=0.25)], "edge_levels": [],
           "sft": {"key": "k", "wall_time_s": 60.4}}  # fmt: skip
    rows = calibration_rows([("base", base), ("sft", sft)])
    assert rows == [
        ["base", "ops1", "0.500 [0.400, 0.600]", "0.500 [0.250, 0.750]", "0.900", "0.500", None, "50.0", "0.000",
         None, "edge"],
        ["sft", "ops1", "–", "0.500 [0.250, 0.750]", None, "0.500", "0.250 / 0.250", "50.0", "0.000", "60 s", ""],
    ]  # fmt: skip
    page = calibration_markdown([("base", base), ("sft", sft)], sources=["a", "b"], plot="c.png")
    assert "- **base** (`default`;" in page and "edge level `ops1`" in page and "- **sft**" in page
    assert "edge level none" in page and "per-sample accuracy in [0.2, 0.6] and pass@8 >= 0.7" in page
    assert "| " + " | ".join(TABLE_HEADER) + " |" in page and "![per-sample accuracy by level](c.png)" in page
