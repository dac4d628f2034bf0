"""`procrl select` and `procrl beam` (procrl/scripts/select.py, procrl/scripts/beam.py) end to end on a tiny random
policy + tiny random PUM over 2 SVAMP problems (few tokens): run.json's result and problems.jsonl; `select --ks` on a
hand-made selection result (the best-of-k curves, table.md, curves.png and the bestofn metrics against values
computed by hand); their bad-argument exit status, `--help` and `--config`."""

import json
import math
import os
import re
from pathlib import Path

import pytest

from procrl.evals.selection import SelectConfig, read_select_run, select_argmax, select_majority, select_random
from procrl.generation import TransformersEngine
from procrl.scripts import select
from procrl.scripts.beam import main as main_beam
from procrl.scripts.beam import make_parser as make_beam_parser
from procrl.scripts.select import main as main_select
from procrl.scripts.select import make_parser as make_select_parser


def read_run(directory) -> tuple[dict, list[dict]]:
    """(run.json, the rows of the problems file it names) of a select or beam run."""
    record = json.loads((directory / "run.json").read_text())
    rows = [json.loads(line) for line in open(record["files"]["problems"])]
    return record, rows


# ----------------------------------------------------------------------------------------------------------
# End to end on tiny models
# ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory, smollm2_tokenizer, tiny_llama_factory, tiny_pum_factory):
    root = tmp_path_factory.mktemp("sel")
    policy = root / "policy"
    tiny_llama_factory(len(smollm2_tokenizer)).save_pretrained(policy)
    smollm2_tokenizer.save_pretrained(policy)
    tiny_pum_factory(len(smollm2_tokenizer), seed=1).save_pretrained(root / "pum")
    smollm2_tokenizer.save_pretrained(root / "pum")
    return policy, root / "pum", root


COMMON = ["--dataset", "svamp", "--start", "0", "--end", "2", "--device", "cpu", "--no-progress", "--batch-size", "8",
          "--generation-backend", "transformers"]  # fmt: skip


def test_select_end_to_end(tiny_dirs, capsys):
    policy, pum, root = tiny_dirs
    out = root / "select"
    scorers = "pum,picsar,majority,random,pum_min,picsar_answer"
    argv = [*COMMON, "--model", str(policy), "--pum", str(pum), "--scorer", scorers, "--greedy"]
    assert main_select([*argv, "--n", "3", "--max-new-tokens", "6", "--output-dir", str(out)]) == 0
    record, problems = read_run(out)
    report = record["result"]
    assert record["command"] == "select" and report["command"] == "select" and report["scorers"] == scorers.split(",")
    assert record["files"] == {"problems": str(out / "problems.jsonl")} and "problems" not in report  # no --ks
    assert list(report["results"]) == [*scorers.split(","), "greedy", "pass@3 (oracle)"]
    for r in report["results"].values():
        assert {"accuracy", "ci_low", "ci_high", "correct", "total", "abstained"} <= set(r) and r["total"] == 2
    assert report["settings"]["greedy"] is True and report["settings"]["picsar_evaluator"] is None
    assert len(problems) == 2
    columns = ["pum", "picsar", "picsar_reasoning", "picsar_answer", "pum_min", "pum_last", "pum_mean"]
    for problem in problems:
        cands = problem["candidates"]
        assert len(cands) == 3 and all(1 <= c["num_tokens"] <= 6 for c in cands)
        assert all(
            sorted(k for k in c if k.startswith("score_")) == sorted(f"score_{k}" for k in columns) for c in cands
        )
        # the argmax scorers pick the argmax of their recorded column; random is the seeded draw
        for scorer in ("pum", "picsar", "pum_min", "picsar_answer"):
            assert problem["picks"][scorer] == select_argmax([c[f"score_{scorer}"] for c in cands])
        assert problem["picks"]["random"] == select_random(3, 0, problem["problem_id"])
        assert problem["picks"]["majority"] == select_majority([c["extracted"] for c in cands])
        for c in cands:  # picsar = its two terms; the full completion fits the PUM: the step aggregates exist
            if c["score_picsar"] is not None:
                assert c["score_picsar"] == pytest.approx(c["score_picsar_reasoning"] + c["score_picsar_answer"])
            if c["text"].strip():
                assert all(math.isfinite(c[f"score_pum_{k}"]) for k in ("min", "last", "mean"))
        assert set(problem["greedy"]) == {"text", "extracted", "correct"}
    greedy_correct = sum(p["greedy"]["correct"] is True for p in problems)
    assert (report["results"]["greedy"]["correct"], report["results"]["greedy"]["abstained"]) == (greedy_correct, 0)
    samples = report["samples"]
    assert samples["from_cache"] is False and samples["greedy_from_cache"] is False
    assert samples["cache_dir"] == str(out / "cache") and samples["engine"].startswith("transformers:")
    assert len(samples["files"]) == 1 and len(samples["greedy_files"]) == 1  # 6 samples, 2 greedy rows: batch 8
    assert all((out / "cache" / f).is_file() for f in samples["files"] + samples["greedy_files"])
    printed = capsys.readouterr().out
    assert "pum" in printed and "majority" in printed and "greedy" in printed and "accuracy" in printed
    assert f"run: {out / 'run.json'}" in printed and f"problems: {out / 'problems.jsonl'}" in printed


def test_select_certainty_scorers_and_picsar_input_end_to_end(tiny_dirs):
    policy, _, root = tiny_dirs
    out = root / "certainty"
    argv = [*COMMON, "--model", str(policy), "--n", "2", "--max-new-tokens", "4", "--output-dir", str(out), "--ks",
            "1,2", "--resamples", "20", "--scorer", "self_certainty,mean_logprob,picsar_answer",
            "--picsar-instruction", "", "--picsar-separator", "\nThe answer is ", "--picsar-join-space"]  # fmt: skip
    assert main_select(argv) == 0
    record, problems = read_run(out)
    settings = record["result"]["settings"]
    assert (settings["picsar_instruction"], settings["picsar_separator"], settings["picsar_join_space"]) == (
        "", "\nThe answer is ", True,
    )  # fmt: skip
    for problem in problems:
        for c in problem["candidates"]:  # both columns of the one certainty pass, defined for every non-empty sample
            assert c["num_tokens"] >= 1 and math.isfinite(c["score_mean_logprob"]) and c["score_mean_logprob"] <= 0
            assert math.isfinite(c["score_self_certainty"]) and c["score_self_certainty"] > -1e-5
        for scorer in ("self_certainty", "mean_logprob"):
            assert problem["picks"][scorer] == select_argmax([c[f"score_{scorer}"] for c in problem["candidates"]])
    methods = record["result"]["bestofn"]["methods"]
    assert {"self_certainty", "mean_logprob", "picsar_answer", "pass@k"} <= set(methods)
    assert set(record["result"]["bestofn"]["auroc"]) >= {"self_certainty", "mean_logprob", "picsar_answer"}


def test_select_rerun_reads_its_samples_and_other_settings_sample_again(tiny_dirs, monkeypatch):
    policy, pum, root = tiny_dirs
    out = root / "rerun"
    argv = [*COMMON, "--model", str(policy), "--n", "2", "--max-new-tokens", "5", "--output-dir", str(out)]
    assert main_select([*argv, "--scorer", "majority,random", "--greedy"]) == 0
    first = read_run(out)[1]
    assert len(list((out / "cache").glob("rollouts-*.jsonl"))) == 2  # the samples, the greedy decodes
    real = TransformersEngine.generate
    calls = []
    monkeypatch.setattr(TransformersEngine, "generate", lambda *a, **k: calls.append(1) or real(*a, **k))
    # a PUM and a step scorer added later: neither sampling nor greedy decoding again
    assert main_select([*argv, "--scorer", "pum,majority,pum_last", "--pum", str(pum), "--greedy"]) == 0
    record, second = read_run(out)
    samples = record["result"]["samples"]
    assert calls == [] and samples["from_cache"] is True and samples["greedy_from_cache"] is True
    assert [p["greedy"] for p in second] == [p["greedy"] for p in first]
    texts = [[c["text"] for c in p["candidates"]] for p in first]
    assert [[c["text"] for c in p["candidates"]] for p in second] == texts
    assert [p["picks"]["majority"] for p in second] == [p["picks"]["majority"] for p in first]
    assert main_select([*COMMON, "--model", str(policy), "--n", "2", "--max-new-tokens", "4", "--output-dir", str(out),
                        "--scorer", "random"]) == 0  # fmt: skip
    assert calls  # another token budget: sampled again
    calls.clear()
    weights = next(policy.glob("*.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # a rewritten checkpoint
    assert main_select([*argv, "--scorer", "random"]) == 0
    assert calls  # same settings, but the weights changed: sampled again
    assert read_run(out)[0]["result"]["samples"]["from_cache"] is False


# ----------------------------------------------------------------------------------------------------------
# select --ks: the best-of-k curves of a hand-made selection
# ----------------------------------------------------------------------------------------------------------

# two problems x 3 candidates: (extracted, correct, num_tokens, score_pum)
ROWS = {
    "p0": [("1", False, 9, 0.2), ("2", True, 4, 0.7), ("1", False, 5, None)],  # majority "1" wrong, pum right
    "p1": [("3", True, 6, 0.1), ("3", True, 2, 0.3), ("4", False, 8, 0.3)],  # majority right, pum's tie -> index 1
}


def hand_made_select(config: SelectConfig) -> dict:
    """What `run_select` returns, for the ROWS samples (no model)."""
    problems = [
        {
            "problem_id": pid,
            "answer": "x",
            "candidates": [
                {"text": f"{pid}-{i}", "extracted": e, "correct": c, "num_tokens": t, "score_pum": s}
                for i, (e, c, t, s) in enumerate(rows)
            ],
            "picks": {},
        }
        for pid, rows in ROWS.items()
    ]
    row = {"accuracy": 0.5, "ci_low": 0.1, "ci_high": 0.9, "correct": 1, "total": 2, "abstained": 0}
    return {"command": "select", "settings": config.settings(), "results": {"pum": row},
            "summary": {"mean_sample_accuracy": 0.5, "unparseable_gold": 0}, "problems": problems}  # fmt: skip


def test_select_ks_writes_the_curves_into_run_json_table_and_figure(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(select, "run_select", hand_made_select)
    out = tmp_path / "sel"
    argv = ["--scorer", "majority", "--n", "3", "--ks", "3,1", "--subsets", "8", "--resamples", "200"]
    assert main_select([*argv, "--output-dir", str(out)]) == 0
    record, problems = read_run(out)
    assert [p["problem_id"] for p in problems] == ["p0", "p1"]
    assert read_select_run(out) == {**record["result"], "problems": problems}  # what `procrl frs --traces-from` reads
    curves = record["result"]["bestofn"]
    assert curves["methods"] == ["random", "majority", "longest", "pum", "pass@k"]
    assert curves["settings"] == {"ks": [1, 3], "subsets": 8, "seed": 0, "resamples": 200, "n": 3}
    # k = n = 3: random (1/3 + 2/3) / 2 = 0.5; majority p0 wrong, p1 right; longest p0 (9) wrong, p1 (8) wrong;
    # pum p0 (0.7) right, p1 (0.3-0.3 tie -> index 1) right; pass@3 both
    expected = {"random": 0.5, "majority": 0.5, "longest": 0.0, "pum": 1.0, "pass@k": 1.0}
    for method, value in expected.items():
        assert curves["curves"][method][1]["accuracy"] == pytest.approx(value)
        assert record["metrics"][f"bestofn/{method}/acc@3"] == pytest.approx(value)
    # k = 1: random = pass@1 = longest = the mean correctness (every method picks the one candidate it sees)
    assert record["metrics"]["bestofn/pass@k/acc@1"] == pytest.approx(0.5)
    # pum AUROC: p0 pos [0.7] vs neg [0.2] -> 1; p1 pos [0.1, 0.3] vs neg [0.3] -> (0 + 0.5) / 2 = 0.25
    assert record["metrics"]["bestofn/pum/auroc"] == pytest.approx(0.625)
    assert record["metrics"]["bestofn/problems"] == 2 and record["metrics"]["bestofn/unparseable_gold"] == 0
    assert record["metrics"]["select/pum/accuracy"] == 0.5  # the selection's own metrics stay
    assert record["files"] == {"problems": str(out / "problems.jsonl"), "table": str(out / "table.md"),
                               "curves": str(out / "curves.png")}  # fmt: skip
    table = (out / "table.md").read_text()
    assert table.startswith("Best-of-k accuracy") and "| method | k=1 | k=3 |" in table
    assert "| pum | " in table and "| 100.0 [100.0, 100.0] |" in table
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert table.strip() in capsys.readouterr().out  # printed after the accuracy table


def test_the_organism_config_parses_with_its_picsar_input():
    """configs/results/select_arith_organism.yaml (procrl issue 28 §1): the model comes on the command line."""
    path = Path(__file__).resolve().parents[2] / "configs" / "results" / "select_arith_organism.yaml"
    (config,) = make_select_parser().parse_args_and_config(["--config", str(path), "--model", "/ckpt"])[:1]
    assert (config.model, config.dataset, config.end, config.prompt_template) == (
        "/ckpt", "arith-ops4-d1-test-n400", -1, "{question}",
    )  # fmt: skip
    assert (config.n, config.temperature, config.max_new_tokens, config.generation_backend, config.greedy) == (
        16, 0.7, 64, "transformers", True,
    )  # fmt: skip
    assert config.k_list == [1, 2, 4, 6, 8, 16]
    assert config.contrasts.startswith("picsar@6-majority@16,")
    assert config.scorers == ["picsar", "picsar_reasoning", "picsar_answer", "mean_logprob", "self_certainty",
                              "majority", "random"]  # fmt: skip
    assert (config.picsar_instruction, config.picsar_separator, config.picsar_join_space) == (
        "", "\n\nThe answer is ", True,
    )  # fmt: skip


def test_select_ks_must_fit_n():
    assert SelectConfig(scorer="random", n=8, ks="8, 2,2").k_list == [2, 8]  # sorted, duplicates dropped
    assert SelectConfig(scorer="random").k_list == []  # no curves by default
    for ks, message in (("1,16", "k = 16 > --n 8 samples (e.g. --ks 1)"), ("1,two", "comma-separated integers"),
                        ("0", "every k must be >= 1")):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(message)):
            SelectConfig(scorer="random", n=8, ks=ks)
    with pytest.raises(ValueError, match=re.escape("--contrasts picsar@6-majority@16: k = 16 is not one of --ks '6'")):
        SelectConfig(scorer="picsar,majority", n=16, ks="6", contrasts="picsar@6-majority@16")
    with pytest.raises(ValueError, match="write METHOD@K-METHOD@K"):
        SelectConfig(scorer="majority", n=16, ks="6", contrasts="majority")
    with pytest.raises(ValueError, match="no method 'picsar' in this run"):  # a typo fails before any sampling
        SelectConfig(scorer="majority", n=16, ks="6,16", contrasts="picsar@6-majority@16")
    # every column of a requested pass, the baselines and greedy (with --greedy) are methods
    SelectConfig(scorer="picsar,majority", n=16, ks="6,16", greedy=True,
                 contrasts="picsar_answer@6-longest@16,greedy@6-pass@k@16")  # fmt: skip
    with pytest.raises(ValueError, match="no method 'greedy'"):
        SelectConfig(scorer="majority", n=16, ks="6,16", contrasts="greedy@6-majority@16")
    with pytest.raises(ValueError, match="--subsets"):
        SelectConfig(scorer="random", subsets=0)


def test_select_rejects_bad_arguments(tiny_dirs):
    policy, _, _ = tiny_dirs
    assert main_select([*COMMON, "--model", str(policy), "--scorer", "oracle"]) == 2
    assert main_select([*COMMON, "--model", str(policy), "--scorer", "pum"]) == 2  # no --pum
    assert main_select([*COMMON, "--model", str(policy), "--scorer", "pum_mean"]) == 2  # no --pum
    assert main_select([*COMMON, "--model", str(policy), "--scorer", "random", "--picsar-evaluator", "x"]) == 2


def test_beam_end_to_end(tiny_dirs, capsys):
    policy, pum, root = tiny_dirs
    out = root / "beam"
    argv = [*COMMON, "--model", str(policy), "--pum", str(pum), "--beams", "2", "--expand", "2"]
    assert (
        main_beam([*argv, "--max-steps", "2", "--max-step-tokens", "4", "--max-new-tokens", "8", "--output-dir",
                   str(out)])
        == 0
    )  # fmt: skip
    record, problems = read_run(out)
    report = record["result"]
    assert record["command"] == "beam" and report["command"] == "beam" and list(report["results"]) == ["beam B=2 k=2"]
    assert report["results"]["beam B=2 k=2"]["total"] == 2
    assert 1 <= report["summary"]["rounds"] <= 2
    assert len(problems) == 2 and "problems" not in report
    for problem in problems:
        assert 1 <= len(problem["beams"]) <= 2
        scores = [b["score"] for b in problem["beams"]]
        assert scores == sorted(scores, reverse=True)  # kept beams are the top-B by U
        assert 1 <= problem["num_tokens"] <= 8 and math.isfinite(problem["score"])
    assert "beam B=2 k=2" in capsys.readouterr().out


def test_beam_versus_a_select_run_pairs_the_same_problems(tiny_dirs, capsys):
    policy, pum, root = tiny_dirs
    sel, out = root / "select_curves", root / "beam_versus"
    base = [*COMMON, "--model", str(policy), "--pum", str(pum), "--max-new-tokens", "8"]
    assert main_select([*base, "--scorer", "pum,majority", "--n", "2", "--ks", "1,2", "--resamples", "20",
                        "--greedy", "--output-dir", str(sel)]) == 0  # fmt: skip
    beam = [*base, "--beams", "1", "--expand", "2", "--max-steps", "2", "--max-step-tokens", "4"]
    assert main_beam([*beam, "--versus", str(sel), "--versus-k", "4"]) == 2  # refused before the search
    assert "--versus-k 4 is not among the select run's ks [1, 2]" in capsys.readouterr().err
    assert main_beam([*beam, "--versus", str(sel), "--versus-k", "2", "--output-dir", str(out)]) == 0
    record, problems = read_run(out)
    versus = record["result"]["versus"]
    curves = json.loads((sel / "run.json").read_text())["result"]["bestofn"]
    ours = {p["problem_id"]: float(p["correct"]) for p in problems}
    assert versus["k"] == 2 and versus["problems"] == 2 and versus["select_dir"] == str(sel)
    assert set(versus["rows"]) == set(curves["per_problem"]) >= {"greedy", "majority", "pum", "pass@k"}
    for method, row in versus["rows"].items():
        theirs = curves["per_problem"][method]["2"]
        diffs = [ours[pid] - v for pid, v in zip(curves["problem_ids"], theirs, strict=True)]
        assert row["diff"] == pytest.approx(sum(diffs) / 2) and row["ci_low"] <= row["diff"] <= row["ci_high"]
    assert "beam against" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------------------
# --help and --config
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("main", "command"), [(main_select, "procrl select"), (main_beam, "procrl beam")])
def test_help_prints_the_usage_and_exits_0(main, command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {command}") and "--max-new-tokens" in out and "--no-progress" in out


def test_config_file_sets_defaults_and_flags_override(tmp_path):
    config = tmp_path / "select.yaml"
    config.write_text("scorer: majority,random\nn: 4\nmax_new_tokens: 32\ndataset: gsm8k\n")
    args, _ = make_select_parser().parse_args_and_config(["--config", str(config), "--n", "6", "--top-p", "0.9"])
    assert (args.scorers, args.n, args.max_new_tokens, args.dataset, args.top_p) == (["majority", "random"], 6, 32,
                                                                                     "gsm8k", 0.9)  # fmt: skip
    assert (args.greedy, args.picsar_evaluator) == (False, None)
    flags = ["--scorer", "picsar,picsar_answer", "--picsar-evaluator", "gemma3-270m", "--greedy"]
    args, _ = make_select_parser().parse_args_and_config(flags)
    assert (args.scorers, args.picsar_evaluator, args.greedy) == (["picsar", "picsar_answer"], "gemma3-270m", True)
    beam = tmp_path / "beam.yaml"
    beam.write_text("pum: some/pum\nbeams: 8\n")
    args, _ = make_beam_parser().parse_args_and_config(["--config", str(beam), "--max_step_tokens", "16"])
    assert (args.pum, args.beams, args.expand, args.max_step_tokens) == ("some/pum", 8, 4, 16)
