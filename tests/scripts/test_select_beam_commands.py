"""`procrl select` and `procrl beam` (procrl/scripts/select.py, procrl/scripts/beam.py) end to end on a tiny random
policy + tiny random PUM over 2 SVAMP problems (few tokens), their bad-argument exit status, `--help` and
`--config`."""

import json
import math
import os

import pytest

from procrl.generation import TransformersEngine
from procrl.scripts.beam import main as main_beam
from procrl.scripts.beam import make_parser as make_beam_parser
from procrl.scripts.select import main as main_select
from procrl.scripts.select import make_parser as make_select_parser
from procrl.evals.selection import select_argmax, select_majority, select_random

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
    out = root / "select.json"
    scorers = "pum,picsar,majority,random,pum_min,picsar_answer"
    argv = [*COMMON, "--model", str(policy), "--pum", str(pum), "--scorer", scorers, "--greedy"]
    assert main_select([*argv, "--n", "3", "--max-new-tokens", "6", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["command"] == "select" and report["scorers"] == scorers.split(",")
    assert list(report["results"]) == [*scorers.split(","), "greedy", "pass@3 (oracle)"]
    for r in report["results"].values():
        assert {"accuracy", "ci_low", "ci_high", "correct", "total", "abstained"} <= set(r) and r["total"] == 2
    assert report["settings"]["greedy"] is True and report["settings"]["picsar_evaluator"] is None
    assert len(report["problems"]) == 2
    columns = ["pum", "picsar", "picsar_reasoning", "picsar_answer", "pum_min", "pum_last", "pum_mean"]
    for problem in report["problems"]:
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
    greedy_correct = sum(p["greedy"]["correct"] is True for p in report["problems"])
    assert (report["results"]["greedy"]["correct"], report["results"]["greedy"]["abstained"]) == (greedy_correct, 0)
    samples = report["samples"]
    assert samples["from_cache"] is False and samples["greedy_from_cache"] is False
    assert samples["cache_dir"] == str(root / "cache") and samples["engine"].startswith("transformers:")
    assert len(samples["files"]) == 1 and len(samples["greedy_files"]) == 1  # 6 samples, 2 greedy rows: batch 8
    assert all((root / "cache" / f).is_file() for f in samples["files"] + samples["greedy_files"])
    table = capsys.readouterr().out
    assert "pum" in table and "majority" in table and "greedy" in table and "accuracy" in table


def test_select_rerun_reads_its_samples_and_other_settings_sample_again(tiny_dirs, monkeypatch):
    policy, pum, root = tiny_dirs
    out = root / "rerun" / "select.json"
    argv = [*COMMON, "--model", str(policy), "--n", "2", "--max-new-tokens", "5", "--output", str(out)]
    assert main_select([*argv, "--scorer", "majority,random", "--greedy"]) == 0
    first = json.loads(out.read_text())
    assert len(list((root / "rerun" / "cache").glob("rollouts-*.jsonl"))) == 2  # the samples, the greedy decodes
    real = TransformersEngine.generate
    calls = []
    monkeypatch.setattr(TransformersEngine, "generate", lambda *a, **k: calls.append(1) or real(*a, **k))
    # a PUM and a step scorer added later: neither sampling nor greedy decoding again
    assert main_select([*argv, "--scorer", "pum,majority,pum_last", "--pum", str(pum), "--greedy"]) == 0
    second = json.loads(out.read_text())
    assert calls == [] and second["samples"]["from_cache"] is True and second["samples"]["greedy_from_cache"] is True
    assert [p["greedy"] for p in second["problems"]] == [p["greedy"] for p in first["problems"]]
    texts = [[c["text"] for c in p["candidates"]] for p in first["problems"]]
    assert [[c["text"] for c in p["candidates"]] for p in second["problems"]] == texts
    assert [p["picks"]["majority"] for p in second["problems"]] == [p["picks"]["majority"] for p in first["problems"]]
    assert main_select([*COMMON, "--model", str(policy), "--n", "2", "--max-new-tokens", "4", "--output", str(out),
                        "--scorer", "random"]) == 0  # fmt: skip
    assert calls  # another token budget: sampled again
    calls.clear()
    weights = next(policy.glob("*.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # a rewritten checkpoint
    assert main_select([*argv, "--scorer", "random"]) == 0
    assert calls  # same settings, but the weights changed: sampled again
    assert json.loads(out.read_text())["samples"]["from_cache"] is False


def test_select_rejects_bad_arguments(tiny_dirs):
    policy, _, _ = tiny_dirs
    assert main_select([*COMMON, "--model", str(policy), "--scorer", "oracle"]) == 2
    assert main_select([*COMMON, "--model", str(policy), "--scorer", "pum"]) == 2  # no --pum
    assert main_select([*COMMON, "--model", str(policy), "--scorer", "pum_mean"]) == 2  # no --pum
    assert main_select([*COMMON, "--model", str(policy), "--scorer", "random", "--picsar-evaluator", "x"]) == 2


def test_beam_end_to_end(tiny_dirs, capsys):
    policy, pum, root = tiny_dirs
    out = root / "beam.json"
    argv = [*COMMON, "--model", str(policy), "--pum", str(pum), "--beams", "2", "--expand", "2"]
    assert (
        main_beam([*argv, "--max-steps", "2", "--max-step-tokens", "4", "--max-new-tokens", "8", "--output", str(out)])
        == 0
    )
    report = json.loads(out.read_text())
    assert report["command"] == "beam" and list(report["results"]) == ["beam B=2 k=2"]
    assert report["results"]["beam B=2 k=2"]["total"] == 2
    assert 1 <= report["summary"]["rounds"] <= 2
    for problem in report["problems"]:
        assert 1 <= len(problem["beams"]) <= 2
        scores = [b["score"] for b in problem["beams"]]
        assert scores == sorted(scores, reverse=True)  # kept beams are the top-B by U
        assert 1 <= problem["num_tokens"] <= 8 and math.isfinite(problem["score"])
    assert "beam B=2 k=2" in capsys.readouterr().out


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
