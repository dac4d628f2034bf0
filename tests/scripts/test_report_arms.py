"""`procrl report --reference ARM --placebo ...` (procrl/scripts/report.py) end to end on two fixture sweep directories
of hand-made run.json files: the paired comparison written into report.md (before the list of runs) and printed,
arms found across sweeps, and the one-line errors. The numbers themselves: tests/evals/test_arm_comparison.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from arm_records import grpo_run as run  # tests/helpers

from procrl.evals.stats import bootstrap_mean_interval
from procrl.scripts.report import main, paths_as_flag

IDS = [f"p{i}" for i in range(20)]


def _write(root: Path, record: dict) -> None:
    folder = root / record["variant"]["name"]
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({k: v for k, v in record.items() if k != "path"}))


@pytest.fixture()
def sweeps(tmp_path) -> list[Path]:
    main_sweep, pum_sweep = tmp_path / "process_rewards_organism", tmp_path / "process_rewards_organism_pum"
    for seed in (0, 1, 2):
        _write(main_sweep, run("outcome", seed, [0] * 10 + [1] * 10, ids=IDS))
        _write(main_sweep, run("oracle", seed, [1] * 20, [1.0] * 20, ids=IDS, alarm=[0.0, 0.0]))
        _write(main_sweep, run("oracle_shuffled", seed, [0] * 20, ids=IDS))
    for seed in (0, 1):  # seed 2 of the PUM arms is missing
        _write(pum_sweep, run("pum_mixed", seed, [1] * 5 + [0] * 5 + [1] * 10, ids=IDS))
        _write(pum_sweep, run("pum_shuffled", seed, [1] * 20, ids=IDS))
    return [main_sweep, pum_sweep]


def _rows(text: str) -> dict[str, list[str]]:
    section = text.split("## Paired comparison", 1)[1].split("## Runs", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split(" | ")] for line in lines[1:])}


def test_the_paired_comparison_across_two_sweeps(sweeps, tmp_path, capsys):
    out = tmp_path / "report"
    argv = [*map(str, sweeps), "--reference", "outcome", "--output-dir", str(out),
            "--placebo", "oracle_shuffled,pum_mixed=pum_shuffled"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    report = (out / "report.md").read_text()
    assert report.index("## Paired comparison against `outcome`") < report.index("## Runs")
    rows = _rows(report)
    assert _rows(printed) == rows
    assert list(rows) == ["outcome", "oracle", "oracle_shuffled", "pum_mixed", "pum_shuffled"]  # the reference first
    oracle, pum = rows["oracle"], rows["pum_mixed"]
    low, high = bootstrap_mean_interval([1.0] * 10 + [0.0] * 10, seed=0)  # all right against half right
    assert oracle[7] == f"+0.500 [{low:+.3f}, {high:+.3f}] (n=20, 3 vs 3 seeds)"
    assert oracle[9] == "oracle_shuffled" and oracle[10].startswith("+1.000 [+1.000, +1.000]")
    assert oracle[14] == "fired in 0/3" and oracle[15] == "**supported**"
    assert pum[1] == "2 (s0, s1)" and pum[9] == "pum_shuffled" and pum[15] == "not supported"  # below its placebo
    assert pum[10].startswith("-0.250 [") and pum[11] == "s0 -0.250; s1 -0.250"
    assert rows["outcome"][15] == "reference" and rows["pum_shuffled"][15] == "placebo"


def test_margin_flag(sweeps, tmp_path, capsys):
    """`--margin 0.6`: the oracle arm's +0.500 against outcome (both intervals above 0) is below the pre-registered
    margin -> "not supported (within 0.6 of the reference)"; `--margin 0.5` leaves it supported (not below)."""
    out = tmp_path / "report"
    argv = [str(sweeps[0]), "--reference", "outcome", "--placebo", "oracle_shuffled", "--output-dir", str(out)]
    assert main([*argv, "--margin", "0.6"]) == 0
    report = (out / "report.md").read_text()
    assert _rows(report)["oracle"][15] == "not supported (within 0.6 of the reference)"
    assert "is at least 0.6 (the pre-registered margin)" in report
    capsys.readouterr()
    assert main([*argv, "--margin", "0.5"]) == 0
    assert _rows(capsys.readouterr().out)["oracle"][15] == "**supported**"
    assert main([str(sweeps[0]), "--margin", "0.03", "--output-dir", str(out)]) == 2
    assert "--margin needs --reference" in capsys.readouterr().err
    assert main([*argv, "--margin", "-0.1"]) == 2
    assert "--margin -0.1: use a fraction in [0, 1]" in capsys.readouterr().err
    assert main([*argv, "--margin", "3"]) == 2  # 3 points typed as 3
    assert "--margin 3.0: use a fraction in [0, 1] (e.g. 0.03 for 3 points, not 3)" in capsys.readouterr().err


def test_errors(sweeps, tmp_path, capsys):
    out = ["--output-dir", str(tmp_path / "r")]
    assert main([str(sweeps[0]), "--reference", "nope", *out]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "procrl report: error: --reference 'nope' is no arm; the arms are oracle, oracle_shuffled, outcome"
    assert main([str(sweeps[0]), "--placebo", "oracle_shuffled", *out]) == 2
    assert "--placebo needs --reference" in capsys.readouterr().err
    assert main([str(sweeps[0]), "--decide-on", "process", *out]) == 2
    assert "--decide-on needs --reference" in capsys.readouterr().err
    assert main([str(sweeps[0]), "--reference", "outcome", "--decide-on", "steps", *out]) == 2
    assert "--decide-on 'steps': use one of accuracy, process" in capsys.readouterr().err
    other = sweeps[0] / "config=arith_organism_oracle,seed=0" / "run.json"
    record = json.loads(other.read_text())
    record["result"]["after"][0]["problems"][0]["problem_id"] = "elsewhere"
    other.write_text(json.dumps(record))
    assert main([str(sweeps[0]), "--reference", "outcome", *out]) == 1
    assert "evaluated different problems" in capsys.readouterr().err


def test_reference_and_placebo_take_a_value():
    argv = ["a", "--reference", "outcome", "--placebo", "x,y=z", "b"]
    assert paths_as_flag(argv) == ["--paths", "a", "b", "--reference", "outcome", "--placebo", "x,y=z"]
