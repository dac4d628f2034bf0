"""`procrl report` (procrl/scripts/report.py) end to end on a fixture sweep directory of hand-written run.json files:
report.md and curves.png written (into the sweep dir by default), the table printed and sorted by the sweep's metric,
`--finished-only`, `--output-dir` / `--title`, bare paths anywhere on the line, and the one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from procrl.scripts.report import default_output_dir, main, make_parser, paths_as_flag


def write_run(directory: Path, name: str, params: dict, seed: int, correct: int, n: int, status: str = "finished"):
    directory.mkdir(parents=True, exist_ok=True)
    record = {
        "schema_version": 1, "command": "train-grpo", "argv": [], "status": status, "error": None,
        "started_at": "2026-12-01T20:00:00Z", "finished_at": None, "wall_time_s": 60.0, "config": {},
        "git": {"commit": "abc", "dirty": False}, "packages": {}, "machine": {},
        "variant": {"sweep": "abl", "name": name, "parameters": {**params, "seed": seed}, "seed": seed},
        "metrics": {"task/accuracy": correct / n, "task/correct": correct, "task/n": n, "reward": 0.5},
        "history": [{"step": s, "reward": 0.1 * s, "task/accuracy": 0.1 * s + 0.01 * seed} for s in range(1, 4)],
    }  # fmt: skip
    (directory / "run.json").write_text(json.dumps(record))


@pytest.fixture()
def sweep_dir(tmp_path) -> Path:
    root = tmp_path / "abl"
    root.mkdir()
    (root / "sweep.json").write_text(
        json.dumps({"name": "abl", "metric": {"name": "task/accuracy", "goal": "maximize"}})
    )
    for reward, seeds in (("outcome", {1: 3, 2: 5}), ("pum", {1: 8, 2: 6})):
        for seed, correct in seeds.items():
            name = f"reward={reward},seed={seed}"
            status = "running" if (reward, seed) == ("pum", 2) else "finished"
            write_run(root / name, name, {"reward": reward}, seed, correct, 10, status)
    return root


def rows_of(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[1:]]


def test_report_on_a_sweep_dir(sweep_dir, capsys):
    assert main([str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    report = (sweep_dir / "report.md").read_text()
    png = sweep_dir / "curves.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000
    rows = rows_of(out)
    # pum (0.8 finished; 0.6 still running: not in the mean) before outcome (0.3, 0.5: mean 0.4): sorted by the
    # sweep's metric, best in bold
    assert [r[0] for r in rows] == ["reward=pum", "reward=outcome"]
    assert rows[0][1] == "1 finished, 1 running" and rows[0][3] == "**0.800; s2 (running) 0.600**"
    assert rows[1][3] == "0.400 ± 0.141" and rows[1][4].startswith("s1 0.300 [0.108, 0.603] (3/10)")
    assert "Sorted by `task/accuracy`" in report and "![curves](curves.png)" in report
    assert out.strip().splitlines()[-2:] == [f"report: {sweep_dir / 'report.md'}", f"plots: {png}"]


def test_finished_only_output_dir_and_title(sweep_dir, tmp_path, capsys):
    out_dir = tmp_path / "rep"
    argv = ["--finished-only", "--output-dir", str(out_dir), str(sweep_dir / "reward=pum,seed=1"), "--title", "T",
            str(sweep_dir / "reward=pum,seed=2"), str(sweep_dir / "reward=outcome,seed=1")]  # fmt: skip
    assert main(argv) == 0
    rows = rows_of(capsys.readouterr().out)
    assert [(r[0], r[1], r[2]) for r in rows] == [("reward=pum", "finished", "1"), ("reward=outcome", "finished", "1")]
    assert (out_dir / "report.md").read_text().startswith("# T\n") and (out_dir / "curves.png").is_file()
    assert not (sweep_dir / "report.md").exists()


def test_paths_as_flag():
    assert paths_as_flag(["a", "--finished-only", "b"]) == ["--paths", "a", "b", "--finished-only"]
    assert paths_as_flag(["--finished_only", "false", "a"]) == ["--paths", "a", "--finished_only", "false"]
    assert paths_as_flag(["--output-dir", "o", "--paths", "a", "b"]) == ["--paths", "a", "b", "--output-dir", "o"]
    assert paths_as_flag(["--config", "r.yaml"]) == ["--config", "r.yaml"]


def test_default_output_dir(sweep_dir):
    assert default_output_dir([str(sweep_dir)]) == sweep_dir
    assert default_output_dir([str(sweep_dir / "reward=pum,seed=1")]) == Path("report")  # a run dir
    assert default_output_dir([str(sweep_dir), str(sweep_dir)]) == Path("report")


def test_config_file_gives_the_paths(sweep_dir, tmp_path):
    config = tmp_path / "report.yaml"
    config.write_text(f"paths: ['{sweep_dir}']\noutput_dir: {tmp_path / 'from_yaml'}\n")
    assert main(["--config", str(config)]) == 0
    assert (tmp_path / "from_yaml" / "report.md").is_file()


@pytest.mark.parametrize(
    "argv,status,message",
    [
        ([], 2, "give at least one RUN_DIR"),  # no path
        (["{tmp}/missing"], 2, "does not exist"),
        (["{tmp}/empty"], 2, "no run.json"),
        (["{tmp}/bad"], 1, "not valid JSON"),
        (["{tmp}/running", "--finished-only"], 1, "no finished run"),
        (["{tmp}/empty", "--colour"], 2, "unrecognized arguments"),
        (["{tmp}/bad_sweep"], 1, "not a readable JSON file"),  # review 14: was a traceback
    ],
)
def test_errors_are_one_line(tmp_path, capsys, argv, status, message):
    write_run(tmp_path / "bad_sweep" / "v", "v", {"r": 1}, 1, 1, 2)
    (tmp_path / "bad_sweep" / "sweep.json").write_text("{")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "run.json").write_text("{")
    write_run(tmp_path / "running", "r", {"r": 1}, 1, 1, 2, status="running")
    assert main([a.format(tmp=tmp_path) for a in argv]) == status
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("procrl report: error: ") and message in err[0]


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        make_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "--finished_only" in out
    # review 16c: the formatter adds "(default: ...)": a help string that says it too printed two
    options = " ".join(out.split("options:", 1)[1].split())  # argparse wraps lines: join them
    for chunk in options.split(" --")[1:]:
        assert chunk.count("(default:") <= 1, chunk


@pytest.mark.slow  # a subprocess: the module runs as a script
def test_module_runs_as_a_script(sweep_dir, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "procrl.scripts.report", str(sweep_dir), "--output-dir", str(tmp_path / "o")],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "| reward=pum |" in result.stdout and (tmp_path / "o" / "curves.png").is_file()
