"""`procrl frs` end to end on a tiny random Llama saved with the real SmolLM2 tokenizer (CPU, a few seconds)."""

from __future__ import annotations

import json

import pytest

from procrl.scripts.frs import main, make_parser


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
    assert "FRS@10: n/a" in capsys.readouterr().out
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
    # Chunks of batch 8 // n 4 = 2 problems: [0, 1], [2, 3]. Simulate a crash after the first chunk plus the lines of
    # problem 2 (a chunk cut mid-write), with a marker in a finished trace to see that it is reused, not resampled.
    lines = (out / "traces.jsonl").read_text().splitlines()
    first = json.loads(lines[1])
    first["completion"] = "REUSED"
    (out / "traces.jsonl").write_text("\n".join([lines[0], json.dumps(first), *lines[2:13]]) + "\n")
    assert main(argv) == 0
    resumed = [t["completion"] for t in json.loads((out / "frs.json").read_text())["traces"]]
    assert resumed == ["REUSED", *full[1:]]  # the cut chunk sampled again, identical (seeded per chunk)
    assert len((out / "traces.jsonl").read_text().splitlines()) == 1 + 16
    # other settings: the file is replaced, nothing reused
    assert main([*argv, "--temperature", "0.9"]) == 0
    assert "REUSED" not in (out / "traces.jsonl").read_text()


def test_a_config_file_sets_the_defaults_and_flags_override_it(tmp_path):
    config = tmp_path / "frs.yaml"
    config.write_text("n: 4\nk_values: '10,50'\njudge: none\nestimator: bins\n")
    (args,) = make_parser().parse_args_and_config(args=["--config", str(config), "--k-values", "20,30", "--top_k", "5"])
    assert (args.n, args.k_values, args.judge, args.estimator, args.top_k) == (4, "20,30", "none", "bins", 5)
    assert args.frs_config().k_values == (10.0, 20.0, 30.0)  # the headline K (10) joins the curve
    with pytest.raises(SystemExit):  # argparse refuses an unknown choice (exit status 2)
        make_parser().parse_args_and_config(args=["--config", str(config), "--estimator", "exact"])
