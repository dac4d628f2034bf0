"""`procrl frs` end to end on a tiny random Llama saved with the real SmolLM2 tokenizer (CPU, a few seconds): the
result in run.json, the judged traces beside it, and `procrl frs compare` on such runs."""

from __future__ import annotations

import contextlib
import json

import pytest

from procrl.evals.frs import DIMENSIONS
from procrl.judges import Judge, JudgeResult, parse_judgement
from procrl.judges import spec as judge_spec
from procrl.scripts.frs import main, make_parser

FILES = {"judged_traces": "judged_traces.jsonl", "plot": "frs.png"}  # the sample store cache/ is not a file entry


def run_record(out):
    return json.loads((out / "run.json").read_text())


def judged_traces(out):
    return [json.loads(line) for line in (out / "judged_traces.jsonl").read_text().splitlines()]


@pytest.fixture()
def tiny_model_dir(tmp_path, tiny_llama, smollm2_tokenizer):
    path = tmp_path / "tiny"
    tiny_llama.save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return path


def test_offline_frs_writes_its_result_into_run_json(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "frs"
    # an in-process judge on the same random model: it never writes valid JSON, so every judgement is unscored
    code = main([
        "--model", str(tiny_model_dir), "--dataset", "gsm8k", "--start", "0", "--end", "3", "--frs-traces", "4",
        "--frs-k-percent", "10", "--max-new-tokens", "6", "--batch-size", "6",
        "--judge", f"transformers:{tiny_model_dir}", "--judge-max-tokens", "8", "--generation-backend", "transformers",
        "--output-dir", str(out), "--no-progress",
    ])  # fmt: skip
    assert code == 0
    record = run_record(out)
    assert record["command"] == "frs" and record["status"] == "finished" and record["files"] == FILES
    files = {p.name for p in out.iterdir() if p.is_file()}
    assert files == {"run.json", *FILES.values()}  # no separate results JSON
    result, traces = record["result"], judged_traces(out)
    report = result["report"]
    assert result["dataset"] == "gsm8k[0:3]" and "traces" not in result
    assert report["n_traces"] == 12 and report["n_problems"] == 3 and len(traces) == 12
    assert [t["problem_id"] for t in traces[:5]] == ["gsm8k/test/0"] * 4 + ["gsm8k/test/1"]
    # N = 12 -> kept floor(1.2) = 1 ... floor(6) = 6 (JSON keys are strings)
    assert report["kept_at_k"] == {"10": 1, "20": 2, "30": 3, "40": 4, "50": 6}
    # judged: the top 6, plus per question its most confident and one seeded random trace: 6 to 10 requests (10 when
    # the top 6 split 3/3/0 over the questions: two random traces outside it, two extra for the third question)
    assert 6 <= report["n_judged"] <= 10
    assert sum(report["unscored"].values()) == report["n_judged"] and report["score"] is None
    assert report["accuracy"] == 0.0  # six random tokens never verify
    assert all(t["num_tokens"] <= 6 and 0.0 <= t["confidence"] <= 1.0 for t in traces)
    assert sum(t["unscored"] is not None for t in traces) == report["n_judged"]
    settings = result["settings"]
    assert (settings["temperature"], settings["n_traces"], settings["judge_max_tokens"]) == (0.7, 4, 8)
    assert record["metrics"]["frs/n_traces"] == 12 and record["metrics"]["frs/judged"] == report["n_judged"]
    assert (out / "frs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "FRS@10: –" in printed and f"run record: {out / 'run.json'}" in printed  # undefined, never 0
    # a second run reads nothing from the cache (failures are not cached) and reproduces the same traces
    again_dir = tmp_path / "again"
    main(["--model", str(tiny_model_dir), "--end", "3", "--frs-traces", "4", "--max-new-tokens", "6", "--batch-size",
          "6", "--judge", "none", "--generation-backend", "transformers", "--output-dir", str(again_dir),
          "--no-progress"])  # fmt: skip
    again = run_record(again_dir)["result"]
    assert [t["completion"] for t in judged_traces(again_dir)] == [t["completion"] for t in traces]
    assert again["report"]["n_judged"] == 0 and again["report"]["selection_gain_dropped"] == 0
    assert again["settings"]["judge_max_tokens"] == 96  # FRS's reply budget when none is set

    # compare: the runs are read from their run.json; two runs of one model on one benchmark are refused
    compared = tmp_path / "compare"
    assert main(["compare", str(out), "--output-dir", str(compared), "--bootstrap-resamples", "20"]) == 0
    record = run_record(compared)
    assert record["command"] == "frs compare" and record["argv"][:2] == ["compare", str(out)]
    assert record["files"] == {"table": "table.md", "plot": "frs_compare.png"}
    (row,) = record["result"]["runs"]
    assert (row["path"], row["model"], row["benchmark"]) == (str(out), str(tiny_model_dir), "gsm8k[0:3]")
    assert row["values"]["accuracy"] == 0.0 and row["intervals"]["accuracy"] == [0.0, 0.0]
    table = (compared / "table.md").read_text()  # a model given as an absolute path is labelled by its run folder
    assert f"| {out.name} | gsm8k[0:3] | 3 | 12 | 0.0 [0.0, 0.0] |" in table
    capsys.readouterr()
    assert main(["compare", str(out), str(again_dir / "run.json"), "--output-dir", str(tmp_path / "c2")]) == 2
    assert "two reports of" in capsys.readouterr().err and not (tmp_path / "c2").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--frs-k-values", "10", "120"], "percentages in (0, 100], got 120"),
        (["--frs-traces", "0"], "frs_traces must be >= 1"),
        (["--frs-k-percent", "0"], "percentages"),
        (["--judge", "ftp://x"], "not a judge spec"),
        (["--judge-concurrency", "0"], "judge_concurrency must be >= 1"),
        (["compare", "--output-dir", "x"], "give at least one run"),
        (["agreement", "--output-dir", "x"], "give at least one run"),
        (["agreement", "nowhere", "--output-dir", "x"], "no judged traces"),
    ],
)
def test_bad_arguments_exit_with_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_interrupted_generation_resumes_with_the_same_traces(tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    argv = ["--model", str(tiny_model_dir), "--end", "4", "--frs-traces", "4", "--max-new-tokens", "5", "--batch-size",
            "8", "--judge", "none", "--output-dir", str(out), "--no-progress", "--generation-backend", "transformers"]  # fmt: skip
    assert main(argv) == 0
    full = [t["completion"] for t in judged_traces(out)]
    # Shards of batch 8 // n 4 = 2 problems in the sample store: [0, 1], [2, 3]. Simulate a crash in the second one
    # (cut mid-write: its header and 3 of its 8 rows), with a marker in a finished trace to see that it is reused.
    shards = {json.loads(p.read_text().splitlines()[0])["shard"]: p for p in (out / "cache").glob("rollouts-*.jsonl")}
    assert sorted(shards) == [0, 1]
    lines = shards[0].read_text().splitlines()
    first = json.loads(lines[1])
    first["text"] = "REUSED"
    shards[0].write_text("\n".join([lines[0], json.dumps(first), *lines[2:]]) + "\n")
    shards[1].write_text("\n".join(shards[1].read_text().splitlines()[:4]) + "\n")
    assert main(argv) == 0
    resumed = [t["completion"] for t in judged_traces(out)]
    assert resumed == ["REUSED", *full[1:]]  # the cut shard sampled again, identical (seeded per shard)
    assert len(shards[1].read_text().splitlines()) == 1 + 8
    # other settings: other shards, nothing reused
    assert main([*argv, "--temperature", "0.9"]) == 0
    assert "REUSED" not in [t["completion"] for t in judged_traces(out)]
    assert len(list((out / "cache").glob("rollouts-*.jsonl"))) == 4


def test_one_command_two_modes_and_help_for_both(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    text = capsys.readouterr().out
    assert info.value.code == 0 and text.startswith("usage: procrl frs ")
    assert "procrl frs compare RUN_DIR... --output-dir D" in text and "--frs-traces" in text and "--judge" in text
    with pytest.raises(SystemExit) as info:
        main(["compare", "--help"])
    text = capsys.readouterr().out
    assert info.value.code == 0 and text.startswith("usage: procrl frs compare ") and "--runs" in text
    assert "--frs_traces" not in text.split("options:")[1]  # the comparison's own flags only


def test_a_config_file_sets_the_defaults_and_flags_override_it(tmp_path):
    # the keys of a GRPO config's FRS and judge settings mean the same here
    config = tmp_path / "frs.yaml"
    config.write_text("frs_traces: 4\nfrs_k_values: [10, 50]\njudge: none\nfrs_estimator: bins\njudge_timeout_s: 30\n")
    args, frs, judge, _ = make_parser().parse_args_and_config(
        args=["--config", str(config), "--frs-k-values", "20", "30", "--top_k", "5"]
    )
    assert (frs.frs_traces, frs.frs_k_values, frs.frs_estimator, args.top_k) == (4, [20.0, 30.0], "bins", 5)
    assert (judge.judge, judge.judge_timeout_s, judge.enabled) == ("none", 30.0, False)
    assert frs.frs_config(seed=args.seed).k_values == (10.0, 20.0, 30.0)  # the headline K (10) joins the curve
    with pytest.raises(SystemExit):  # argparse refuses an unknown choice (exit status 2)
        make_parser().parse_args_and_config(args=["--config", str(config), "--frs-estimator", "exact"])


@pytest.mark.parametrize(
    "argv, sees",
    [
        ([], True),
        (["--frs-judge-sees-correctness", "false"], False),
        (["--frs_judge_sees_correctness", "false"], False),
        (["--frs-judge-sees-correctness", "true"], True),
    ],
)
def test_the_correctness_flag_option(argv, sees):
    _, frs, _, _ = make_parser().parse_args_and_config(args=argv)
    assert frs.frs_judge_sees_correctness is sees
    assert frs.frs_config().judge_sees_correctness is sees
    assert frs.frs_config().k_values == (10, 20, 30, 40, 50) and frs.frs_traces == 16  # the paper's N, whole curve


class ProbJudge(Judge):
    """Replies (3, 4, 4, 5) to every request, RS (16 - 4) / 16 * 100 = 75, with probabilities as a backend with
    log-probs gives them: every dimension {3: 0.5, 4: 0.25, 5: 0.25} -> E = 1.5 + 1 + 1.25 = 3.75 ->
    RS_expected (15 - 4) / 16 * 100 = 68.75."""

    REPLY = '{"faithfulness": 3, "utility": 4, "coherence": 4, "factuality": 5}'

    def __init__(self):
        super().__init__("prob")
        self.requests = []

    def _request_payload(self, messages, schema):
        return {"messages": messages}

    async def _judge_uncached(self, requests, schemas, finish):
        for j, messages in enumerate(requests):
            self.requests.append(messages)
            value, reason = parse_judgement(self.REPLY, schemas[j])
            probs = {name: {"3": 0.5, "4": 0.25, "5": 0.25} for name in DIMENSIONS}
            finish(j, JudgeResult(value=value, unscored=reason, raw=self.REPLY, attempts=1, probs=probs))


def test_frs_command_reports_expected_scores_and_drops_the_flag(tmp_path, tiny_model_dir, monkeypatch, capsys):
    judge = ProbJudge()
    opened = []

    @contextlib.contextmanager
    def fake_open_judge(spec, **kwargs):
        opened.append(spec)
        yield judge

    monkeypatch.setattr(judge_spec, "open_judge", fake_open_judge)
    out = tmp_path / "frs"
    argv = ["--model", str(tiny_model_dir), "--end", "3", "--frs-traces", "4", "--max-new-tokens", "6", "--batch-size",
            "6", "--generation-backend", "transformers", "--output-dir", str(out), "--no-progress"]  # fmt: skip
    assert main([*argv, "--frs-judge-sees-correctness", "false"]) == 0
    assert opened == ["local"] and 6 <= len(judge.requests) <= 10  # see test_offline_frs_writes_its_result_into_run_json
    assert all("final_correct" not in m[-1]["content"] for m in judge.requests)
    result, traces = run_record(out)["result"], judged_traces(out)
    report = result["report"]
    assert result["settings"]["frs"]["judge_sees_correctness"] is False and report["judge_sees_correctness"] is False
    assert report["at_k"] == {"10": 75.0, "20": 75.0, "30": 75.0, "40": 75.0, "50": 75.0}
    assert report["at_k_expected"] == pytest.approx({k: 68.75 for k in ("10", "20", "30", "40", "50")})
    assert report["selection_gain"] == 0.0 and report["selection_gain_expected"] == pytest.approx(0.0)
    assert report["rs_auc"] is None and report["auc_n_correct"] == 0  # six random tokens are never correct
    judged = [t for t in traces if t["scores"] is not None]
    assert len(judged) == len(judge.requests) == report["n_scored"]
    for t in judged:
        assert t["scores"] == json.loads(ProbJudge.REPLY) and t["rs"] == 75.0
        assert t["expected_scores"] == {name: 3.75 for name in DIMENSIONS}
        assert t["rs_expected"] == pytest.approx(68.75)
    assert all("rs_expected" not in t for t in traces if t["scores"] is None)
    printed = capsys.readouterr().out
    assert "FRS@K from expected scores: 10: 68.8, 20: 68.8" in printed and "(0 scored traces without" in printed
    assert "final_correct hidden to the judge" in printed
    # the same traces (read back from the sample store), judged with the flag: the prompt holds it again
    judge.requests.clear()
    assert main(argv) == 0
    assert judge.requests and all('{"final_correct": false}' in m[-1]["content"] for m in judge.requests)
    assert run_record(out)["result"]["report"]["judge_sees_correctness"] is True
