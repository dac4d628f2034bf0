"""`procrl calibrate` (procrl/scripts/calibrate.py) end to end on a tiny random policy (transformers engine): 2 arith
levels x 3 problems x 8 samples; the level metrics against values recomputed here from the per-problem records in
run.json, and the records against the texts in texts.jsonl; a rerun reads every sample from the store; `--combine`
over two hand-made run records; bad arguments and bad runs."""

from __future__ import annotations

import itertools
import json
import statistics

import pytest

from procrl.data_builders.datasets import load_math_dataset
from procrl.rewards.oracle import gold_steps_from_json, oracle_labels
from procrl.rewards.outcome import extract_answer, is_correct
from procrl.scripts.calibrate import main

LEVELS = ["arith-ops1-d1-test", "arith-ops2-d1-test"]
COMMON = ["--levels", *LEVELS, "--n-problems", "3", "--num-samples", "8", "--group-size", "4", "--max-new-tokens",
          "6", "--batch-size", "16", "--device", "cpu", "--no-progress", "--generation-backend", "transformers",
          "--resamples", "50"]  # fmt: skip


def read(directory):
    record = json.loads((directory / "run.json").read_text())
    texts = [json.loads(line) for line in open(record["files"]["texts"])]
    return record, texts


def pass_at_8_by_subsets(correct: list[bool]) -> float:
    subsets = list(itertools.combinations(correct, 8))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.fixture(scope="module")
def calibrated(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("calib") / "run"
    argv = [*COMMON, "--model", str(tiny_model_dir), "--label", "tiny", "--output-dir", str(out)]
    assert main(argv) == 0
    first = read(out)
    assert main(argv) == 0  # the same settings again: every sample and greedy decode comes from the store
    return out, first, read(out)


def test_run_record_and_files(calibrated):
    out, (record, texts), _ = calibrated
    result = record["result"]
    assert record["command"] == "calibrate" and record["status"] == "finished"
    assert result["label"] == "tiny" and result["sft"] is None  # a plain model directory: no SFT manifest
    assert [lv["level"] for lv in result["levels"]] == LEVELS
    assert set(record["files"]) == {"texts", "table", "plot"} and (out / "calibration.png").stat().st_size > 0
    assert "texts" not in result and len(texts) == 6
    table = (out / "calibration.md").read_text()
    assert all(f"| tiny | {name} |" in table for name in LEVELS)
    assert record["metrics"]["calibrate/edge_levels"] == len(result["edge_levels"])
    assert result["edge_levels"] == [lv["level"] for lv in result["levels"] if lv["edge"]]
    for lv in result["levels"]:
        assert record["metrics"][f"calibrate/{lv['level']}/per_sample_accuracy"] == lv["metrics"]["per_sample_accuracy"]


def test_metrics_equal_values_recomputed_from_the_stored_records(calibrated):
    _, (record, _), _ = calibrated
    for lv in record["result"]["levels"]:
        problems, m = lv["problems"], lv["metrics"]
        assert len(problems) == 3 and all(len(p["samples"]) == 8 for p in problems)
        correct = [[s["correct"] for s in p["samples"]] for p in problems]
        assert m["per_sample_accuracy"] == pytest.approx(statistics.fmean(sum(c) / 8 for c in correct))
        assert m["pass@8"] == pytest.approx(statistics.fmean(pass_at_8_by_subsets(c) for c in correct))
        assert m["mixed_share"] == pytest.approx(statistics.fmean(0 < sum(c[:4]) < 4 for c in correct))
        samples = [s for p in problems for s in p["samples"]]
        assert m["process_acc"] == pytest.approx(statistics.fmean(s["process_acc"] for s in samples))
        assert m["greedy_process_acc"] == pytest.approx(statistics.fmean(p["greedy"]["process_acc"] for p in problems))
        assert m["greedy_accuracy"] == pytest.approx(statistics.fmean(p["greedy"]["correct"] for p in problems))
        assert m["mean_length"] == pytest.approx(statistics.fmean(s["num_tokens"] for s in samples))
        assert m["no_answer_share"] == pytest.approx(statistics.fmean(not s["answered"] for s in samples))
        assert all(1 <= s["num_tokens"] <= 6 for s in samples)


def test_records_equal_the_checks_of_the_stored_texts(calibrated):
    _, (record, texts), _ = calibrated
    by_key = {(t["level"], t["problem_id"]): t for t in texts}
    for lv in record["result"]["levels"]:
        rows = {r["problem_id"]: r for r in load_math_dataset(lv["level"], end=3)}
        for p in lv["problems"]:
            row, stored = rows[p["problem_id"]], by_key[(lv["level"], p["problem_id"])]
            gold = gold_steps_from_json(row["gold_steps"])
            pairs = [*zip(p["samples"], stored["samples"], strict=True), (p["greedy"], stored["greedy"])]
            for rec, text in pairs:
                assert rec["correct"] is is_correct(text["text"], row["answer"])
                assert rec["answered"] is (extract_answer(text["text"]) is not None)
                assert text["extracted"] == extract_answer(text["text"])
                assert rec["num_tokens"] == 6 or not rec["truncated"]  # only a completion at the budget is cut
                labels = oracle_labels(text["text"], row["question"], gold, truncated=rec["truncated"])
                assert (rec["process_acc"], rec["first_error"]) == (labels.process_acc, labels.first_error)


def test_a_rerun_reads_every_sample_from_the_store(calibrated):
    _, (first, first_texts), (second, second_texts) = calibrated
    assert not first["result"]["from_cache"]
    assert all(not lv["samples"]["from_cache"] for lv in first["result"]["levels"])
    assert second["result"]["from_cache"]
    for a, b in zip(first["result"]["levels"], second["result"]["levels"], strict=True):
        assert b["samples"]["from_cache"] and b["samples"]["greedy_from_cache"]
        assert a["samples"]["files"] == b["samples"]["files"] and a["problems"] == b["problems"]
    assert first_texts == second_texts


def calibrate_record(model, levels, *, status="finished", sft=None, label=None):
    result = {
        "command": "calibrate",
        "model": model,
        "label": label or model,
        "settings": {"num_samples": 8, "temperature": 0.7, "group_size": 8, "n_problems": 64},
        "sft": sft,
        "levels": [
            {
                "level": name,
                "edge": edge,
                "metrics": {
                    "per_sample_accuracy": acc,
                    "per_sample_ci": [acc - 0.1, acc + 0.1],
                    "greedy_accuracy": greedy,
                    "greedy_ci": [0.1, 0.9],
                    "pass@8": pass8,
                    "mixed_share": mixed,
                    "process_acc": 0.5,
                    "greedy_process_acc": 0.75,
                    "mean_length": 42.0,
                    "no_answer_share": 0.25,
                },
            }
            for name, acc, greedy, pass8, mixed, edge in levels
        ],  # fmt: skip
        "edge_levels": [name for name, *_, edge in levels if edge],
        "edge_rule": {"low": 0.2, "high": 0.6, "min_pass": 0.7, "k": 8},
    }
    return {"command": "calibrate", "status": status, "result": result}


def write_run(directory, record):
    directory.mkdir(parents=True)
    (directory / "run.json").write_text(json.dumps(record))
    return str(directory)


def test_combine_two_runs(tmp_path, capsys):
    base = write_run(tmp_path / "base", calibrate_record("default", [("ops1", 0.3, 0.5, 0.8, 0.75, True),
                                                                      ("ops2", 0.1, 0.0, 0.4, 0.25, False)]))  # fmt: skip
    sft_info = {
        "key": "k1",
        "base_model": "default",
        "dataset": "arith-ops2-d2-train[0:]",
        "steps": 10,
        "wall_time_s": 99.6,
    }
    sft = write_run(
        tmp_path / "sft", calibrate_record("/ckpt/k1", [("ops2", 0.5, 0.5, 0.9, 0.625, True)], sft=sft_info)
    )
    out = tmp_path / "docs" / "calibration.md"
    assert main(["--combine", base, sft, "--out", str(out), "--labels", "base", "sft"]) == 0
    page = out.read_text()
    assert page == capsys.readouterr().out.split("table: ")[0]
    rows = [line for line in page.splitlines() if line.startswith("| base") or line.startswith("| sft")]
    assert rows == [
        "| base | ops1 | 0.300 [0.200, 0.400] | 0.500 [0.100, 0.900] | 0.800 | 0.750 | 0.500 / 0.750 | 42.0 | 0.250 | – | edge |",
        "| base | ops2 | 0.100 [0.000, 0.200] | 0.000 [0.100, 0.900] | 0.400 | 0.250 | 0.500 / 0.750 | 42.0 | 0.250 | – |  |",
        "| sft | ops2 | 0.500 [0.400, 0.600] | 0.500 [0.100, 0.900] | 0.900 | 0.625 | 0.500 / 0.750 | 42.0 | 0.250 | 100 s | edge |",
    ]  # fmt: skip
    assert "- **base** (`default`;" in page and "edge level `ops1`" in page
    assert "- **sft** (`/ckpt/k1`;" in page and "SFT checkpoint `k1`" in page
    assert "![per-sample accuracy by level](calibration.png)" in page and (out.parent / "calibration.png").is_file()
    # without --labels: each run's own label
    assert main(["--combine", base, sft, "--out", str(tmp_path / "t.md")]) == 0
    assert "| /ckpt/k1 | ops2 |" in (tmp_path / "t.md").read_text()


def test_combine_refuses_bad_runs_and_labels(tmp_path, capsys):
    good = write_run(tmp_path / "good", calibrate_record("a", [("ops1", 0.3, 0.5, 0.8, 0.75, True)]))
    failed = write_run(tmp_path / "failed", calibrate_record("b", [], status="failed"))
    twin = write_run(tmp_path / "twin", calibrate_record("a", [("ops1", 0.3, 0.5, 0.8, 0.75, True)]))
    out = tmp_path / "t.md"
    cases = [
        ([good, failed], "not a finished calibrate run"),
        ([good, str(tmp_path / "missing")], "not a readable `procrl calibrate` run"),
        ([good, twin], "name each with --labels"),
        ([good, twin, "--labels", "x"], "--labels gives 1 names for 2 runs"),
    ]
    for runs, message in cases:
        assert main(["--combine", *runs, "--out", str(out)]) == 2
        assert message in capsys.readouterr().err
    assert not out.exists()


def test_bad_settings_are_one_error_line(capsys):
    assert main(["--num-samples", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("procrl calibrate: error:") and "--num-samples 8" in err and len(err.splitlines()) == 1
