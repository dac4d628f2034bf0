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
from procrl.trainers.selection import select_argmax, select_majority, select_random

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
    argv = [*COMMON, "--model", str(policy), "--pum", str(pum), "--scorer", "pum,picsar,majority,random"]
    assert main_select([*argv, "--n", "3", "--max-new-tokens", "6", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["command"] == "select" and report["scorers"] == ["pum", "picsar", "majority", "random"]
    assert set(report["results"]) == {"pum", "picsar", "majority", "random", "pass@3 (oracle)"}
    for r in report["results"].values():
        assert {"accuracy", "ci_low", "ci_high", "correct", "total", "abstained"} <= set(r) and r["total"] == 2
    assert len(report["problems"]) == 2
    for problem in report["problems"]:
        cands = problem["candidates"]
        assert len(cands) == 3 and all(1 <= c["num_tokens"] <= 6 for c in cands)
        # the pum pick is the argmax of the recorded PUM scores; random is the seeded draw
        assert problem["picks"]["pum"] == select_argmax([c["score_pum"] for c in cands])
        assert problem["picks"]["random"] == select_random(3, 0, problem["problem_id"])
        assert problem["picks"]["majority"] == select_majority([c["extracted"] for c in cands])
    table = capsys.readouterr().out
    assert "pum" in table and "majority" in table and "accuracy" in table


def test_select_rerun_reads_its_samples_and_other_settings_sample_again(tiny_dirs, monkeypatch):
    policy, pum, root = tiny_dirs
    out = root / "rerun" / "select.json"
    argv = [*COMMON, "--model", str(policy), "--n", "2", "--max-new-tokens", "5", "--output", str(out)]
    assert main_select([*argv, "--scorer", "majority,random"]) == 0
    first = json.loads(out.read_text())
    assert (root / "rerun" / "select.samples.jsonl").is_file()
    real = TransformersEngine.generate
    calls = []
    monkeypatch.setattr(TransformersEngine, "generate", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert main_select([*argv, "--scorer", "pum,majority", "--pum", str(pum)]) == 0  # PUM added later: no sampling
    second = json.loads(out.read_text())
    assert calls == []
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
    beam = tmp_path / "beam.yaml"
    beam.write_text("pum: some/pum\nbeams: 8\n")
    args, _ = make_beam_parser().parse_args_and_config(["--config", str(beam), "--max_step_tokens", "16"])
    assert (args.pum, args.beams, args.expand, args.max_step_tokens) == ("some/pum", 8, 4, 16)
