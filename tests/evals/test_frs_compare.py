"""`procrl frs compare` on tiny synthetic `procrl frs` runs (run.json + judged traces): ranks, inversions, interval
overlaps, bad input -> 2."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from procrl.evals.frs import DIMENSIONS, FRSConfig, Trace
from procrl.evals.frs.compare import build_comparison, compare_runs, load_frs_run, rank_descending
from procrl.evals.frs.intervals import frs_intervals
from procrl.scripts import frs as script

GSM, SVAMP = "gsm8k[0:50]", "svamp[0:20]"


def write_report(tmp_path, name, model, dataset, accuracy, frs10, frs20=None, intervals=None, k_percent=10,
                 traces=None, command="frs", status="finished"):  # fmt: skip
    """The run directory of a `procrl frs` run as it writes it (the fields the comparison reads: run.json's command,
    status, result and files, and the judged traces); `intervals`: name -> [lo, hi]. Returns the directory."""
    config = FRSConfig(k_percent=k_percent, k_values=(10, 20))
    frs20 = frs10 if frs20 is None else frs20
    result = {
        "model": model,
        "dataset": dataset,
        "settings": {"frs": asdict(config)},
        "report": {
            "k_percent": k_percent,
            "score": frs10,
            "at_k": {"10": frs10, "20": frs20},
            "accuracy": accuracy,
            "accuracy_kept": accuracy,
            "accuracy_at_k": {"10": accuracy, "20": accuracy},
            "selection_gain": 5.0,
            "n_problems": 50,
            "n_traces": 800,
        },
        "intervals": intervals,
    }
    run_dir = tmp_path / name
    run_dir.mkdir(parents=True, exist_ok=True)
    files = {"judged_traces": "judged_traces.jsonl", "plot": "frs.png"}
    (run_dir / "judged_traces.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in traces or []))
    record = {"command": command, "status": status, "result": result, "files": files}
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


@pytest.fixture()
def three_models(tmp_path):
    """A, B, C on gsm8k and D on svamp.

    accuracy: A = C = 0.60 > B = 0.45; FRS@10: C 70 > B 55 > A 40. A vs B: inverted, and no pair of intervals
    overlaps; A vs C: accuracy tied (same interval), FRS apart: FRS separates them; B vs C: same order."""
    paths = [
        write_report(tmp_path, "a", "A", GSM, 0.60, 40.0, intervals={"accuracy": [0.56, 0.64], "frs@10": [35, 45]}),
        write_report(tmp_path, "b", "B", GSM, 0.45, 55.0, intervals={"accuracy": [0.40, 0.50], "frs@10": [50, 60]}),
        write_report(tmp_path, "c", "C", GSM, 0.60, 70.0, intervals={"accuracy": [0.56, 0.64], "frs@10": [65, 75]}),
        write_report(tmp_path, "d", "D", SVAMP, 0.30, 20.0, intervals={"accuracy": [0.2, 0.4], "frs@10": [10, 30]}),
    ]
    return paths


def test_ranks_and_inversions(three_models):
    comparison = build_comparison(three_models)
    gsm = comparison["benchmarks"][GSM]
    assert gsm["k"] == 10 and gsm["metric"] == "frs@10"
    ranks = {m["model"]: (m["rank_accuracy"], m["rank_frs"]) for m in gsm["models"]}
    assert ranks == {"A": (1, 3), "B": (3, 2), "C": (1, 1)}  # A and C tie on accuracy: both rank 1
    pairs = {tuple(p["models"]): p for p in gsm["pairs"]}
    ab, ac, bc = pairs["A", "B"], pairs["A", "C"], pairs["B", "C"]
    assert (ab["accuracy_order"], ab["frs_order"], ab["inverted"]) == (">", "<", True)
    assert ab["accuracy_intervals_overlap"] is False and ab["frs_intervals_overlap"] is False
    assert ab["inverted_beyond_intervals"] is True and ab["frs_separates"] is False
    assert (ac["accuracy_order"], ac["inverted"], ac["inverted_beyond_intervals"]) == ("=", False, False)
    assert ac["accuracy_intervals_overlap"] is True and ac["frs_separates"] is True
    assert (bc["accuracy_order"], bc["frs_order"], bc["inverted"]) == ("<", "<", False)
    assert gsm["inverted"] and gsm["inverted_beyond_intervals"] and gsm["frs_separates"]
    svamp = comparison["benchmarks"][SVAMP]
    assert svamp["pairs"] == [] and svamp["models"][0]["rank_frs"] == 1 and not svamp["inverted"]
    assert comparison["counts"] == {"runs": 4, "benchmarks": 2, "pairs": 3, "inverted": 1,
                                    "inverted_beyond_intervals": 1, "frs_separates": 1, "frs_separates_paired": 0}  # fmt: skip


def test_an_inversion_inside_the_intervals_and_another_k(tmp_path):
    # A > B by accuracy, A < B by FRS@20 only; the accuracy intervals overlap: inverted, not beyond the intervals
    a = write_report(
        tmp_path, "a", "A", GSM, 0.6, 50.0, frs20=40.0, intervals={"accuracy": [0.5, 0.7], "frs@20": [35, 45]}
    )
    b = write_report(
        tmp_path, "b", "B", GSM, 0.5, 50.0, frs20=60.0, intervals={"accuracy": [0.4, 0.6], "frs@20": [55, 65]}
    )
    at10 = build_comparison([a, b])["benchmarks"][GSM]["pairs"][0]
    assert at10["frs_order"] == "=" and at10["inverted"] is False
    assert at10["frs_intervals_overlap"] is None  # the reports have no FRS@10 interval
    pair = build_comparison([a, b], k=20)["benchmarks"][GSM]["pairs"][0]
    assert pair["inverted"] is True and pair["accuracy_intervals_overlap"] is True
    assert pair["frs_intervals_overlap"] is False and pair["inverted_beyond_intervals"] is False
    assert pair["frs_separates"] is True


def test_rank_descending_ties_and_missing():
    assert rank_descending([3.0, 1.0, 3.0, 2.0]) == [1, 4, 1, 3]
    assert rank_descending([None, 1.0]) == [None, 1]
    assert rank_descending([]) == []


def test_a_run_without_intervals_gets_them_from_its_judged_traces(tmp_path):
    traces = [
        Trace(f"p{p}", "q", f"t{p}{j}", "1", j == 0, 0.9 - 0.1 * p - 0.05 * j, 10, scores=dict.fromkeys(DIMENSIONS, 5 - j))
        for p in range(4)
        for j in range(2)
    ]  # fmt: skip
    run_dir = write_report(tmp_path, "old", "A", GSM, 0.5, 80.0, traces=traces)  # --bootstrap-resamples 0
    run = load_frs_run(run_dir / "run.json", resamples=50)  # its run.json works too
    assert run.intervals_source == "traces" and run.path == str(run_dir)
    config = FRSConfig(k_percent=10, k_values=(10, 20))  # the run's FRS config; its seed (0) by default
    expected = frs_intervals(traces, config, resamples=50, seed=0).intervals
    assert run.intervals["frs@10"] == pytest.approx(list(expected["frs@10"]))
    assert load_frs_run(run_dir, resamples=50, seed=3).intervals == {
        k: (None if v is None else list(v)) for k, v in frs_intervals(traces, config, resamples=50, seed=3).intervals.items()
    }  # fmt: skip
    assert load_frs_run(run_dir, resamples=0).intervals_source == "none"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"command": "select"}, "not the record of a `procrl frs` run"),
        ({"status": "failed"}, "the run is 'failed', not finished"),
    ],
)
def test_only_finished_frs_runs_are_compared(tmp_path, kwargs, message):
    run_dir = write_report(tmp_path, "x", "A", GSM, 0.5, 40.0, **kwargs)
    with pytest.raises(ValueError, match=message):
        load_frs_run(run_dir)


def test_bad_comparisons_are_value_errors(tmp_path, three_models):
    again = write_report(tmp_path, "a2", "A", GSM, 0.5, 40.0, intervals={})
    with pytest.raises(ValueError, match="two reports of A on gsm8k"):
        build_comparison([three_models[0], again])
    other_k = write_report(tmp_path, "e", "E", GSM, 0.5, 40.0, intervals={}, k_percent=20)
    with pytest.raises(ValueError, match="different headline Ks"):
        build_comparison([three_models[0], other_k])
    with pytest.raises(ValueError, match="no FRS@30"):
        build_comparison(three_models, k=30)
    with pytest.raises(ValueError, match="no procrl frs run"):
        compare_runs([])


def test_the_command_writes_table_plot_and_record(tmp_path, three_models, capsys):
    out = tmp_path / "cmp"
    assert script.main(["compare", *map(str, three_models), "--output-dir", str(out)]) == 0
    table = (out / "table.md").read_text()
    assert "| A | gsm8k[0:50] | 50 | 800 | 60.0 [56.0, 64.0] | 60.0 | 40.0 [35.0, 45.0] | 40.0 | 5.0 |" in table
    assert "| A vs B | A > B | A < B | yes | no | no | yes | no |" in table
    assert "| C | 60.0 | 1 | 70.0 | 1 |" in table
    assert table in capsys.readouterr().out
    assert (out / "frs_compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == ["frs_compare.png", "run.json", "table.md"]  # no other JSON
    record = json.loads((out / "run.json").read_text())
    assert record["command"] == "frs compare" and record["status"] == "finished"
    assert record["files"] == {"table": "table.md", "plot": "frs_compare.png"}
    assert record["result"]["benchmarks"][GSM]["inverted_beyond_intervals"] is True
    assert [run["path"] for run in record["result"]["runs"]] == list(map(str, three_models))
    assert record["metrics"]["frs_compare/inverted"] == 1 and record["metrics"]["frs_compare/runs"] == 4


@pytest.mark.parametrize(
    "argv, message",
    [
        (["{missing}", "--output-dir", "{out}"], "no run.json here"),
        (["{a}", "--output-dir", "{out}", "--k", "30"], "no FRS@30"),
        (["{a}", "--output-dir", "{out}", "--k", "0"], "--k must be a percentage"),
        (["{a}"], "--output-dir DIR is required"),
        (["--output-dir", "{out}"], "give at least one run"),
        (["{a}", "--output-dir", "{out}", "--bogus", "1"], "unrecognized arguments: ['--bogus', '1']"),
        (["{notjson}", "--output-dir", "{out}"], "is not JSON"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, three_models, capsys, argv, message):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "run.json").write_text("{")
    names = {"missing": tmp_path / "nope", "out": tmp_path / "cmp", "a": three_models[0], "notjson": tmp_path / "x"}
    assert script.main(["compare", *(word.format(**names) for word in argv)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("procrl frs compare: error: ") and message in err[0], err
    assert not (tmp_path / "cmp" / "run.json").exists()  # nothing written on bad input


def test_pairs_with_judged_traces_get_paired_differences(tmp_path):
    """Two models with the same right/wrong traces on the same problems (accuracy difference exactly 0), the second
    judged one point lower everywhere (RS -25): the paired FRS@10 difference is +25 with a zero-width interval, so
    FRS separates the pair and accuracy does not. A run without traces leaves its pairs unpaired."""

    def traces(score):
        return [
            Trace(f"p{p}", "q", f"t{p}{j}", "1", j % 2 == 0, 0.9 - 0.01 * (4 * p + j), 10,
                  scores=dict.fromkeys(DIMENSIONS, score))
            for p in range(10) for j in range(4)
        ]  # fmt: skip

    clean = write_report(tmp_path, "clean_run", "/ckpt/clean", GSM, 0.5, 100.0, traces=traces(5))
    lucky = write_report(tmp_path, "lucky_run", "/ckpt/lucky", GSM, 0.5, 75.0, traces=traces(4))
    bare = write_report(tmp_path, "bare", "C", GSM, 0.5, 75.0)
    comparison = build_comparison([clean, lucky, bare], resamples=100)
    pairs = {tuple(p["models"]): p for p in comparison["benchmarks"][GSM]["pairs"]}
    paired = pairs["clean_run", "lucky_run"]  # models that are paths are labelled by their run directories
    assert paired["paired"]["accuracy"]["difference"] == 0.0
    assert paired["paired"]["frs@10"]["difference"] == pytest.approx(25.0)
    assert paired["paired"]["frs@10"]["interval"] == pytest.approx([25.0, 25.0])
    assert paired["frs_separates_paired"] is True and comparison["counts"]["frs_separates_paired"] == 1
    assert pairs["clean_run", "C"]["paired"] is None and pairs["clean_run", "C"]["frs_separates_paired"] is None
    from procrl.evals.frs.compare import format_table

    assert "| clean_run − lucky_run | 0.0 [0.0, 0.0] | 25.0 [25.0, 25.0] | yes |" in format_table(comparison)
