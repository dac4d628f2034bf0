"""`procrl frs` end to end on a tiny random Llama saved with the real SmolLM2 tokenizer (CPU, a few seconds)."""

from __future__ import annotations

import contextlib
import json

import pytest

from procrl.judges import Judge, JudgeResult, parse_judgement
from procrl.evals.frs import DIMENSIONS
from procrl.scripts.frs import main, make_parser
from procrl.evals.frs import offline as frs_offline


@pytest.fixture()
def tiny_model_dir(tmp_path, tiny_llama, smollm2_tokenizer):
    path = tmp_path / "tiny"
    tiny_llama.save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return path


def test_offline_frs_writes_json_and_plot(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "frs"
    # an in-process judge on the same random model: it never writes valid JSON, so every judgement is unscored
    code = main([
        "--model", str(tiny_model_dir), "--dataset", "gsm8k", "--start", "0", "--end", "3", "--n", "4",
        "--k", "10", "--max-new-tokens", "6", "--batch-size", "6", "--judge", f"transformers:{tiny_model_dir}",
        "--judge-max-tokens", "8", "--generation-backend", "transformers",
        "--output-dir", str(out), "--no-progress",
    ])  # fmt: skip
    assert code == 0
    result = json.loads((out / "frs.json").read_text())
    report = result["report"]
    assert result["dataset"] == "gsm8k[0:3]"
    assert report["n_traces"] == 12 and report["n_problems"] == 3 and len(result["traces"]) == 12
    assert [t["problem_id"] for t in result["traces"][:5]] == ["gsm8k/test/0"] * 4 + ["gsm8k/test/1"]
    # N = 12 -> kept floor(1.2) = 1 ... floor(6) = 6 (JSON keys are strings)
    assert report["kept_at_k"] == {"10": 1, "20": 2, "30": 3, "40": 4, "50": 6}
    # judged: the top 6, plus per question its most confident and one seeded random trace: 6 to 10 requests (10 when
    # the top 6 split 3/3/0 over the questions: two random traces outside it, two extra for the third question)
    assert 6 <= report["n_judged"] <= 10
    assert sum(report["unscored"].values()) == report["n_judged"] and report["score"] is None
    assert report["accuracy"] == 0.0  # six random tokens never verify
    assert all(t["num_tokens"] <= 6 and 0.0 <= t["confidence"] <= 1.0 for t in result["traces"])
    assert result["settings"]["temperature"] == 0.7 and result["settings"]["n_traces"] == 4
    assert (out / "frs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "FRS@10: –" in capsys.readouterr().out  # undefined (nothing scored), never 0
    # a second run reads nothing from the cache (failures are not cached) and reproduces the same traces
    main(["--model", str(tiny_model_dir), "--end", "3", "--n", "4", "--max-new-tokens", "6", "--batch-size", "6", "--judge", "none",
          "--generation-backend", "transformers", "--output-dir", str(tmp_path / "again"), "--no-progress"])  # fmt: skip
    again = json.loads((tmp_path / "again" / "frs.json").read_text())
    assert [t["completion"] for t in again["traces"]] == [t["completion"] for t in result["traces"]]
    assert again["report"]["n_judged"] == 0 and again["report"]["selection_gain_dropped"] == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--k-values", "10,x"], "--k-values"),
        (["--n", "0"], "--n"),
        (["--k", "0"], "percentages"),
    ],
)
def test_bad_arguments_exit_with_2(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_interrupted_generation_resumes_with_the_same_traces(tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    argv = ["--model", str(tiny_model_dir), "--end", "4", "--n", "4", "--max-new-tokens", "5", "--batch-size", "8",
            "--judge", "none", "--output-dir", str(out), "--no-progress", "--generation-backend", "transformers"]  # fmt: skip
    assert main(argv) == 0
    full = [t["completion"] for t in json.loads((out / "frs.json").read_text())["traces"]]
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
    resumed = [t["completion"] for t in json.loads((out / "frs.json").read_text())["traces"]]
    assert resumed == ["REUSED", *full[1:]]  # the cut shard sampled again, identical (seeded per shard)
    assert len(shards[1].read_text().splitlines()) == 1 + 8
    # other settings: other shards, nothing reused
    assert main([*argv, "--temperature", "0.9"]) == 0
    assert "REUSED" not in [t["completion"] for t in json.loads((out / "frs.json").read_text())["traces"]]
    assert len(list((out / "cache").glob("rollouts-*.jsonl"))) == 4


def test_a_config_file_sets_the_defaults_and_flags_override_it(tmp_path):
    config = tmp_path / "frs.yaml"
    config.write_text("n: 4\nk_values: '10,50'\njudge: none\nestimator: bins\n")
    args, _ = make_parser().parse_args_and_config(args=["--config", str(config), "--k-values", "20,30", "--top_k", "5"])
    assert (args.n, args.k_values, args.judge, args.estimator, args.top_k) == (4, "20,30", "none", "bins", 5)
    assert args.frs_config().k_values == (10.0, 20.0, 30.0)  # the headline K (10) joins the curve
    with pytest.raises(SystemExit):  # argparse refuses an unknown choice (exit status 2)
        make_parser().parse_args_and_config(args=["--config", str(config), "--estimator", "exact"])


@pytest.mark.parametrize(
    "argv, sees",
    [
        ([], True),
        (["--judge-sees-correctness", "false"], False),
        (["--judge_sees_correctness", "false"], False),
        (["--judge-sees-correctness", "true"], True),
    ],
)
def test_the_correctness_flag_option(argv, sees):
    args, _ = make_parser().parse_args_and_config(args=argv)
    assert args.judge_sees_correctness is sees
    assert args.frs_config().judge_sees_correctness is sees
    assert args.frs_config().k_values == (10, 20, 30, 40, 50)  # the whole FRS curve by default


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

    monkeypatch.setattr(frs_offline, "open_judge", fake_open_judge)
    out = tmp_path / "frs"
    argv = ["--model", str(tiny_model_dir), "--end", "3", "--n", "4", "--max-new-tokens", "6", "--batch-size", "6",
            "--generation-backend", "transformers", "--output-dir", str(out), "--no-progress"]  # fmt: skip
    assert main([*argv, "--judge-sees-correctness", "false"]) == 0
    assert opened == ["local"] and 6 <= len(judge.requests) <= 10  # see test_offline_frs_writes_json_and_plot
    assert all("final_correct" not in m[-1]["content"] for m in judge.requests)
    result = json.loads((out / "frs.json").read_text())
    report = result["report"]
    assert result["settings"]["frs"]["judge_sees_correctness"] is False and report["judge_sees_correctness"] is False
    assert report["at_k"] == {"10": 75.0, "20": 75.0, "30": 75.0, "40": 75.0, "50": 75.0}
    assert report["at_k_expected"] == pytest.approx({k: 68.75 for k in ("10", "20", "30", "40", "50")})
    assert report["selection_gain"] == 0.0 and report["selection_gain_expected"] == pytest.approx(0.0)
    assert report["rs_auc"] is None and report["auc_n_correct"] == 0  # six random tokens are never correct
    judged = [t for t in result["traces"] if t["scores"] is not None]
    assert len(judged) == len(judge.requests) == report["n_scored"]
    for t in judged:
        assert t["scores"] == json.loads(ProbJudge.REPLY) and t["rs"] == 75.0
        assert t["expected_scores"] == {name: 3.75 for name in DIMENSIONS}
        assert t["rs_expected"] == pytest.approx(68.75)
    assert all("rs_expected" not in t for t in result["traces"] if t["scores"] is None)
    printed = capsys.readouterr().out
    assert "FRS@K from expected scores: 10: 68.8, 20: 68.8" in printed and "(0 scored traces without" in printed
    assert "final_correct hidden to the judge" in printed
    # the same traces (read back from the sample store), judged with the flag: the prompt holds it again
    judge.requests.clear()
    assert main(argv) == 0
    assert judge.requests and all('{"final_correct": false}' in m[-1]["content"] for m in judge.requests)
    assert json.loads((out / "frs.json").read_text())["report"]["judge_sees_correctness"] is True
