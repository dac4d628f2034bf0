"""`procrl bestofn` (procrl/scripts/bestofn.py) end to end on a tiny select report written here: bestofn.json,
table.md, curves.png and run.json with the headline metrics, bare report words anywhere on the line, and the
one-line errors (exit status 2) of a missing file, a file that is not a select report, a k > n and empty ks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from procrl.scripts.bestofn import BestOfNArguments, main, reports_as_flag

# two problems x 3 candidates: (extracted, correct, num_tokens, score_pum)
ROWS = {
    "p0": [("1", False, 9, 0.2), ("2", True, 4, 0.7), ("1", False, 5, None)],  # majority "1" wrong, pum right
    "p1": [("3", True, 6, 0.1), ("3", True, 2, 0.3), ("4", False, 8, 0.3)],  # majority right, pum's tie -> index 1
}


@pytest.fixture()
def report_path(tmp_path) -> str:
    problems = [
        {
            "problem_id": pid,
            "answer": "x",
            "candidates": [
                {"text": f"{pid}-{i}", "extracted": e, "correct": c, "num_tokens": t, "score_pum": s}
                for i, (e, c, t, s) in enumerate(rows)
            ],
        }
        for pid, rows in ROWS.items()
    ]
    path = tmp_path / "select" / "select.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"command": "select", "problems": problems}))
    return str(path)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("procrl bestofn: error: "), err
    return lines[0]


def test_end_to_end(report_path, tmp_path, capsys):
    out_dir = tmp_path / "select" / "bestofn"  # the default: next to the report (the report word after a flag)
    assert main(["--ks", "1,3", report_path, "--subsets", "8", "--resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert "| method | k=1 | k=3 |" in printed and f"results: {out_dir / 'bestofn.json'}" in printed
    result = json.loads((out_dir / "bestofn.json").read_text())
    assert result["methods"] == ["random", "majority", "longest", "pum", "pass@k"]
    # k = n = 3: random (1/3 + 2/3) / 2 = 0.5; majority p0 wrong, p1 right; longest p0 (9) wrong, p1 (8) wrong;
    # pum p0 (0.7) right, p1 (0.3-0.3 tie -> index 1) right; pass@3 both
    expected = {"random": 0.5, "majority": 0.5, "longest": 0.0, "pum": 1.0, "pass@k": 1.0}
    for method, value in expected.items():
        assert result["curves"][method][1]["accuracy"] == pytest.approx(value)
    assert (out_dir / "table.md").read_text().startswith("Best-of-k accuracy")
    assert (out_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    record = json.loads((out_dir / "run.json").read_text())
    assert record["command"] == "bestofn" and record["status"] == "finished"
    assert record["metrics"]["bestofn/pum/acc@3"] == pytest.approx(1.0)
    assert record["metrics"]["bestofn/longest/acc@3"] == pytest.approx(0.0)
    # pum AUROC: p0 pos [0.7] vs neg [0.2] -> 1; p1 pos [0.1, 0.3] vs neg [0.3] -> (0 + 0.5) / 2 = 0.25
    assert record["metrics"]["bestofn/pum/auroc"] == pytest.approx(0.625)
    assert record["metrics"]["bestofn/problems"] == 2 and record["metrics"]["bestofn/unparseable_gold"] == 0


def test_output_dir():
    assert BestOfNArguments(reports=["a/s.json"], output_dir="out").output_path == Path("out")
    assert BestOfNArguments(reports=["a/s.json", "b/t.json"]).output_path == Path("a/bestofn")
    assert BestOfNArguments(reports=["x.json"], ks="8, 2,2").k_list == [2, 8]  # sorted, duplicates dropped


def test_reports_as_flag():
    assert reports_as_flag(["a.json", "--seed", "3", "b.json", "--report-to", "none"]) == [
        "--reports", "a.json", "b.json", "--seed", "3", "--report-to", "none",
    ]  # fmt: skip
    assert reports_as_flag(["--reports", "a.json", "b.json"]) == ["--reports", "a.json", "b.json"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["missing.json"], "missing.json: no such report file"),
        (["{report}", "--ks", "1,4"], "k = 4 > n = 3 samples per problem (e.g. --ks 1)"),
        (["{report}", "--ks", ","], "--ks is empty"),
        (["{report}", "--ks", "1,two"], "must be comma-separated integers"),
        (["{report}", "--subsets", "0"], "--subsets must be >= 1"),
        ([], "give at least one procrl select report"),
        (["{report}", "--bogus", "1"], "unrecognized arguments: ['--bogus', '1']"),
    ],
)
def test_bad_input_is_one_line_and_status_2(argv, message, report_path, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([report_path if a == "{report}" else a for a in argv]) == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "select" / "bestofn").exists()  # no run record for bad input


def test_not_a_select_report_is_one_line_and_status_2(tmp_path, capsys):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"command": "train-grpo", "metrics": {}}))
    assert main([str(run)]) == 2
    assert "not a procrl select report" in one_error_line(capsys)
