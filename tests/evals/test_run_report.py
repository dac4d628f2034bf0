"""procrl.experiment.run_records (run.json files) and procrl.evals.run_report (variants, table, plots) on
hand-written records: grouping by parameters without the seed, mean ± sample std and Wilson intervals against
hand-computed values, "–" for what was not measured, unfinished runs marked, the plots written. The statistics
themselves: tests/evals/test_stats.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from procrl.evals.run_report import (
    MISSING,
    format_report,
    format_table,
    group_variants,
    metric_columns,
    plot_curves,
    series,
)
from procrl.experiment.run_records import load_runs, sweep_metric
from procrl.experiment.tracking import is_number

# ----------------------------------------------------------------------------------------------------------------------
# Fixtures: run records as procrl.experiment.tracking writes them (schema version 1)
# ----------------------------------------------------------------------------------------------------------------------


def make_record(*, parameters=None, seed=None, sweep="abl", name=None, status="finished", metrics=None, history=None,
                wall=None) -> dict:  # fmt: skip
    variant = None
    if parameters is not None:
        params = {**parameters, **({"seed": seed} if seed is not None else {})}
        variant = {"sweep": sweep, "name": name or ",".join(f"{k}={v}" for k, v in params.items()),
                   "parameters": params, "seed": seed}  # fmt: skip
    return {
        "schema_version": 1, "command": "train-grpo", "argv": [], "status": status, "error": None,
        "started_at": "2026-12-01T20:00:00Z", "finished_at": None, "wall_time_s": wall, "config": {},
        "git": {"commit": "0123456789abcdef", "dirty": False}, "packages": {}, "machine": {}, "variant": variant,
        "metrics": metrics or {}, "history": history or [],
    }  # fmt: skip


def write_run(directory: Path, record: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "run.json").write_text(json.dumps(record))
    return directory


def acc(correct: int, n: int, **more) -> dict:
    return {"task/accuracy": correct / n, "task/correct": correct, "task/n": n, **more}


def table_rows(markdown: str) -> list[dict[str, str]]:
    """The markdown table's rows as {header: cell}."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split(" | ")), strict=True)) for line in lines[2:]]


# ----------------------------------------------------------------------------------------------------------------------
# Grouping
# ----------------------------------------------------------------------------------------------------------------------


def _run(path: str, **kwargs) -> dict:
    return {**make_record(**kwargs), "path": path}


def test_group_by_parameters_without_seed():
    runs = [
        _run("a2", parameters={"reward": "pum", "lr": 1e-5}, seed=2),
        _run("b1", parameters={"reward": "outcome", "lr": 1e-5}, seed=1),
        _run("a1", parameters={"lr": 1e-5, "reward": "pum"}, seed=1),  # parameter order does not matter
        _run("c1", parameters={"reward": "pum", "lr": 3e-5}, seed=1),  # another lr: another variant
        _run("d1", parameters={"reward": "pum", "lr": 1e-5}, seed=1, sweep="other"),  # another sweep
        _run("runs/plain"),  # no variant: a group of its own
        _run("runs/plain2"),
    ]
    variants = group_variants(runs)
    # the same parameters in two sweeps: the sweep's name tells them apart
    assert [v.name for v in variants] == ["abl/reward=pum,lr=1e-05", "reward=outcome,lr=1e-05", "reward=pum,lr=3e-05",
                                          "other/reward=pum,lr=1e-05", "plain", "plain2"]  # fmt: skip
    first = variants[0]
    assert first.parameters == {"reward": "pum", "lr": 1e-5}  # the seed is not a parameter of the variant
    assert [r["path"] for r in first.runs] == ["a1", "a2"]  # sorted by seed
    assert [first.seed_of(r) for r in first.runs] == [1, 2]
    assert [len(v.runs) for v in variants] == [2, 1, 1, 1, 1, 1]


def test_group_name_comes_from_the_parameters_not_the_recorded_name():
    runs = [_run("x", parameters={"r": "a"}, seed=1, name="seed=1,r=a"),
            _run("y", parameters={"r": "a"}, seed=2, name="something else")]  # fmt: skip
    (variant,) = group_variants(runs)
    assert variant.name == "r=a"  # one variant in its sweep: all its parameters but the seed
    assert group_variants([_run("z", parameters={}, seed=1)])[0].name == "(no parameters)"


def test_group_names_keep_parameters_whose_name_contains_seed():
    # review 10: a regex that cut "seed=<n>" out of the name turned both into "config=c,data"
    runs = [_run(f"{d}{s}", parameters={"config": "c", "data_seed": d}, seed=s) for d in (1, 2) for s in (1, 2)]
    variants = group_variants(runs)
    assert [v.name for v in variants] == ["data_seed=1", "data_seed=2"]  # config=c is the same in both
    assert [[r["path"] for r in v.runs] for v in variants] == [["11", "12"], ["21", "22"]]


def test_group_names_show_what_differs_within_a_sweep_as_procrl_sweep_names_variants():
    runs = [
        _run("p", parameters={"reward_funcs": ["outcome", "pum"], "max_steps": 2, "lr": 3.16227e-05}, seed=1),
        _run("o", parameters={"reward_funcs": ["outcome"], "max_steps": 2, "lr": 3.16227e-05}, seed=1),
        _run("q", parameters={"reward_funcs": ["outcome"], "max_steps": 2, "lr": 1e-4}, seed=1, sweep="other"),
    ]
    # the constant max_steps is left out of sweep abl's names (lr is constant there too); sweep "other" has one
    # variant: all its parameters, floats with 4 significant digits, lists joined by "+" (procrl.experiment.sweeps.variant_name)
    assert [v.name for v in group_variants(runs)] == [
        "reward_funcs=outcome+pum", "reward_funcs=outcome", "reward_funcs=outcome,max_steps=2,lr=0.0001"
    ]  # fmt: skip


def test_group_names_that_coincide_are_told_apart():
    # variant_name keeps 4 significant digits: two learning rates that differ further down give the same name
    runs = [_run("a", parameters={"lr": 1.00001e-5}, seed=1), _run("b", parameters={"lr": 1.00002e-5}, seed=1)]
    assert [v.name for v in group_variants(runs)] == ["lr=1e-05", "lr=1e-05 #2"]


# ----------------------------------------------------------------------------------------------------------------------
# Table
# ----------------------------------------------------------------------------------------------------------------------


def test_table_mean_std_wilson_and_missing_values():
    runs = [
        _run("o1", parameters={"reward": "outcome"}, seed=1, metrics=acc(7, 20, reward=0.2), wall=100.0),
        _run("o2", parameters={"reward": "outcome"}, seed=2, metrics=acc(9, 20, reward=0.4), wall=110.0),
        _run("p1", parameters={"reward": "pum"}, seed=1, metrics={"reward": 0.0, "hacking/repetition_rate": 0.125}),
    ]
    rows = {r["variant"]: r for r in table_rows(format_table(group_variants(runs)))}
    outcome, pum = rows["reward=outcome"], rows["reward=pum"]
    assert outcome["seeds"] == "2" and outcome["status"] == "finished"
    assert outcome["task accuracy (mean ± std)"] == "0.400 ± 0.071"  # mean 0.4, sample std 0.1/sqrt(2)
    assert outcome["accuracy per seed [Wilson 95%]"] == "s1 0.350 [0.181, 0.567] (7/20); s2 0.450 [0.258, 0.658] (9/20)"
    assert outcome["reward"] == "0.300 ± 0.141" and outcome["wall time (s)"] == "105 ± 7"
    # not measured: "–", never 0; a measured 0 stays 0
    assert outcome["accuracy before"] == MISSING and outcome["length (tokens)"] == MISSING
    assert outcome["hacking/repetition_rate"] == MISSING and pum["hacking/repetition_rate"] == "0.125"
    assert pum["task accuracy (mean ± std)"] == MISSING and pum["accuracy per seed [Wilson 95%]"] == f"s1 {MISSING}"
    assert pum["reward"] == "0.000" and pum["wall time (s)"] == MISSING
    assert "FRS" not in outcome  # no run measured FRS: no column


def test_a_run_evaluated_on_no_problem_shows_dashes_not_zero():
    # train-grpo's record of an empty eval set: counts 0, no accuracy (undefined, left out of run.json's metrics)
    runs = [_run("e1", parameters={"reward": "outcome"}, seed=1, metrics={"task/correct": 0, "task/n": 0})]
    (row,) = table_rows(format_table(group_variants(runs)))
    assert row["task accuracy (mean ± std)"] == MISSING  # no value: "–", never 0.000
    assert row["accuracy per seed [Wilson 95%]"] == f"s1 {MISSING}"  # 0/0: no accuracy, no interval


def test_extra_metric_patterns_add_one_column_per_matching_key():
    """`--metrics` patterns (a results folder's bestofn keys): each matching key once, in pattern order; a run
    without the key shows "–"."""
    runs = [
        _run("a", metrics={"bestofn/picsar/acc@16": 0.125, "bestofn/random/acc@16": 0.25, "bestofn/pum/auroc": 0.5}),
        _run("b", metrics={"bestofn/picsar/acc@16": 0.0}),
    ]
    variants = group_variants(runs)
    patterns = ["bestofn/*/acc@16", "bestofn/picsar/*", "bestofn/*/auroc", "no/such/*"]
    assert metric_columns(variants, patterns) == [
        "bestofn/picsar/acc@16", "bestofn/random/acc@16", "bestofn/pum/auroc",
    ]  # fmt: skip
    rows = table_rows(format_table(variants, extra_metrics=patterns))
    assert [r["bestofn/random/acc@16"] for r in rows] == ["0.250", MISSING]
    assert [r["bestofn/picsar/acc@16"] for r in rows] == ["0.125", "0.000"] and "no/such/*" not in rows[0]
    assert "bestofn/pum/auroc" not in table_rows(format_table(variants))[0]  # without patterns: no such column


def test_table_counts_seeds_that_lack_a_value_and_accuracy_without_counts():
    runs = [
        _run("a", parameters={"r": "x"}, seed=1, metrics={"task/accuracy": 0.5, "frs/score": 40.0}),
        _run("b", parameters={"r": "x"}, seed=2, metrics={"task/accuracy": 0.7}),
    ]
    (row,) = table_rows(format_table(group_variants(runs)))
    assert row["FRS"] == "40.0 (1/2 seeds)"
    assert row["accuracy per seed [Wilson 95%]"] == "s1 0.500 [no counts]; s2 0.700 [no counts]"
    assert row["task accuracy (mean ± std)"] == f"0.600 ± {math.sqrt(0.02):.3f}"


def test_unfinished_runs_are_marked():
    runs = [
        _run("a", parameters={"r": "x"}, seed=1, metrics=acc(5, 10)),
        _run("b", parameters={"r": "x"}, seed=2, status="running", metrics=acc(2, 10)),
        _run("c", parameters={"r": "y"}, seed=1, status="failed"),
    ]
    rows = {r["variant"]: r for r in table_rows(format_table(group_variants(runs)))}
    assert rows["r=x"]["status"] == "1 finished, 1 running" and rows["r=y"]["status"] == "1 failed"
    assert "s2 (running) 0.200" in rows["r=x"]["accuracy per seed [Wilson 95%]"]


def test_unfinished_runs_stay_out_of_means_stds_and_the_sort():
    # review 9: x's failed seed (0.9) would lift its mean to 0.7, above y's 0.6, and give it a std
    runs = [
        _run("x1", parameters={"r": "x"}, seed=1, metrics=acc(5, 10, reward=1.0), wall=10.0),
        _run("x2", parameters={"r": "x"}, seed=2, status="failed", metrics=acc(9, 10, reward=3.0), wall=4.0),
        _run("x3", parameters={"r": "x"}, seed=3, status="running", metrics={"reward": 5.0}),
        _run("y1", parameters={"r": "y"}, seed=1, metrics=acc(6, 10), wall=20.0),
        _run("z1", parameters={"r": "z"}, seed=1, status="failed", metrics=acc(10, 10)),  # no finished run
    ]
    rows = table_rows(format_table(group_variants(runs), {"name": "task/accuracy", "goal": "maximize"}))
    assert [r["variant"] for r in rows] == ["r=y", "r=x", "r=z"]  # z has no finished value: last
    y, x, z = rows
    assert y["task accuracy (mean ± std)"] == "**0.600**"
    assert x["task accuracy (mean ± std)"] == "0.500; s2 (failed) 0.900"  # no std from one finished seed
    assert x["reward"] == "1.000; s2 (failed) 3.000; s3 (running) 5.000"
    assert x["wall time (s)"] == "10; s2 (failed) 4"
    assert z["task accuracy (mean ± std)"] == "s1 (failed) 1.000"


@pytest.mark.parametrize(
    "goal,order", [("maximize", ["b", "a", "c"]), ("minimize", ["a", "b", "c"]), (None, ["a", "b", "c"])]
)
def test_table_sorted_by_the_sweep_metric_best_in_bold(goal, order):
    runs = [
        _run("a", parameters={"r": "a"}, seed=1, metrics=acc(2, 10)),
        _run("b", parameters={"r": "b"}, seed=1, metrics=acc(6, 10)),
        _run("c", parameters={"r": "c"}, seed=1, metrics={}),  # without the metric: last
    ]
    rows = table_rows(format_table(group_variants(runs), {"name": "task/accuracy", "goal": goal}))
    assert [r["variant"] for r in rows] == [f"r={x}" for x in order]
    assert rows[0]["task accuracy (mean ± std)"].startswith("**") and "**" not in rows[1]["task accuracy (mean ± std)"]


def test_a_metric_that_is_no_column_gets_one():
    runs = [_run("a", parameters={"r": "a"}, seed=1, metrics={"eval/svamp/accuracy": 0.25})]
    (row,) = table_rows(format_table(group_variants(runs), {"name": "eval/svamp/accuracy", "goal": "maximize"}))
    assert row["eval/svamp/accuracy"] == "**0.250**"


def test_report_lists_every_run_and_the_conventions():
    runs = [_run("a", parameters={"r": "a"}, seed=3, metrics=acc(1, 4), status="failed", wall=12.4)]
    runs[0]["error"] = "RuntimeError: boom"
    text = format_report(group_variants(runs), "T", plot="curves.png")
    assert text.startswith("# T\n") and "![curves](curves.png)" in text and "sample standard deviation" in text
    assert "| r=a | 3 | failed (RuntimeError: boom) | 12 | 0123456789 | a |" in text
    runs[0]["error"] = "ValueError: a|b"  # a pipe in a cell is escaped, so the row keeps its columns
    assert "| failed (ValueError: a\\|b) |" in format_report(group_variants(runs), "T")


# ----------------------------------------------------------------------------------------------------------------------
# Loading run.json files
# ----------------------------------------------------------------------------------------------------------------------


def test_load_runs_finds_every_run_json_below_a_directory(tmp_path):
    write_run(tmp_path / "sweep" / "v1", make_record(parameters={"r": "a"}, seed=1))
    write_run(tmp_path / "sweep" / "deep" / "v2", make_record(parameters={"r": "a"}, seed=2, status="running"))
    runs = load_runs([tmp_path / "sweep", tmp_path / "sweep" / "v1"])  # v1 twice: read once
    assert sorted(Path(r["path"]).name for r in runs) == ["v1", "v2"]
    finished = load_runs([tmp_path / "sweep"], include_unfinished=False)
    assert [Path(r["path"]).name for r in finished] == ["v1"]
    assert [Path(r["path"]).name for r in load_runs([tmp_path / "sweep" / "v1" / "run.json"])] == ["v1"]


def test_load_runs_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_runs([tmp_path / "nope"])
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="is not a run.json"):
        load_runs([tmp_path / "notes.txt"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no run.json"):
        load_runs([tmp_path / "empty"])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "run.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_runs([tmp_path / "bad"])
    write_run(tmp_path / "new", {**make_record(), "schema_version": 2})
    with pytest.raises(ValueError, match="schema_version 2"):
        load_runs([tmp_path / "new"])


@pytest.mark.parametrize(
    "text, message",
    [("{not json", "not a readable JSON file"), ("[1, 2]", "a JSON list, expected an object"),
     ('{"metric": {"name": "reward", "goal": "best"}}', "metric goal 'best'")],
)  # fmt: skip
def test_a_bad_sweep_json_is_a_value_error(tmp_path, text, message):
    (tmp_path / "sweep.json").write_text(text)
    with pytest.raises(ValueError, match=message):
        sweep_metric(tmp_path)


def test_is_number_is_a_finite_non_bool_number():
    assert [is_number(v) for v in (0, -3, 0.5, True, False, math.nan, -math.inf, "1", None, [1])] == [
        True, True, True, False, False, False, False, False, False, False
    ]  # fmt: skip


def test_sweep_metric(tmp_path):
    assert sweep_metric(tmp_path) is None
    (tmp_path / "sweep.json").write_text(json.dumps({"metric": {"name": "task/accuracy", "goal": "maximize"}}))
    assert sweep_metric(tmp_path) == {"name": "task/accuracy", "goal": "maximize"}
    (tmp_path / "sweep.json").write_text(json.dumps({"sweep": {"metric": {"name": "reward"}}}))
    assert sweep_metric(tmp_path) == {"name": "reward", "goal": "minimize"}  # wandb's default goal
    # what procrl sweep writes: the sweep's name under "sweep", its metric (or null) at the top
    (tmp_path / "sweep.json").write_text(json.dumps({"sweep": "abl", "method": "grid", "metric": None, "variants": []}))
    assert sweep_metric(tmp_path) is None


# ----------------------------------------------------------------------------------------------------------------------
# Plots
# ----------------------------------------------------------------------------------------------------------------------


def test_series_mean_min_max_over_seeds():
    runs = [
        _run("a", parameters={"r": "a"}, seed=1, history=[{"step": 1, "reward": 1.0}, {"step": 2, "reward": 3.0}]),
        _run("b", parameters={"r": "a"}, seed=2, history=[{"step": 1, "reward": 2.0}, {"step": 3, "loss": 1.0}]),
    ]
    (variant,) = group_variants(runs)
    assert series(variant, "reward") == [(1, 1.5, 1.0, 2.0, 2), (2, 3.0, 3.0, 3.0, 1)]
    assert series(variant, "hacking/reward_accuracy_corr") == []


def test_plot_curves_writes_a_png(tmp_path):
    history = [{"step": s, "reward": 0.1 * s, "task/accuracy": 0.05 * s} for s in range(1, 5)]
    runs = [_run("a", parameters={"r": "a"}, seed=1, history=history),
            _run("b", parameters={"r": "a"}, seed=2, history=history[:2]),
            _run("c", parameters={"r": "b"}, seed=1)]  # fmt: skip
    path = plot_curves(group_variants(runs), tmp_path / "out" / "curves.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
