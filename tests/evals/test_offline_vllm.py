"""`procrl select`, `procrl beam` and `procrl frs` end to end on the real vLLM engine (the CPU build here; the
embedded SmolLM2-135M-Instruct, float32), 2 problems and a few tokens each. One engine serves the whole module:
`procrl.generation.engines.make_engine` hands it out for generation_backend=vllm (the rest of each command runs
as it is). The samples' log-probs are checked against an independent teacher-forced transformers forward pass."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import procrl.generation.engines as engines
from procrl.data_builders.rollout_shards import read_shard_file
from procrl.evals import offline
from procrl.evals.beam_search import BeamConfig, run_beam
from procrl.evals.frs import FRSArguments
from procrl.evals.frs.offline import OfflineFRSConfig, run_frs
from procrl.evals.frs.traces import read_traces
from procrl.evals.selection import SelectConfig, run_select
from procrl.generation import TransformersEngine, VLLMEngine, render_prompts, sequence_logps
from procrl.judges import JudgeArguments
from procrl.models import resolve_model

pytest.importorskip("vllm", reason="the vLLM engine needs vllm (make install)")

pytestmark = pytest.mark.slow

SLICE = {"dataset": "svamp", "start": 0, "end": 2, "no_progress": True, "batch_size": 4, "vllm_kv_cache_gib": 0.5}


@pytest.fixture(scope="module")
def vllm_engine():
    engine = VLLMEngine("default", dtype="float32", kv_cache_gib=0.5)
    yield engine
    del engine


@pytest.fixture()
def shared_engine(vllm_engine, monkeypatch):
    """`make_engine(..., generation_backend="vllm")` returns the module's engine (same model and dtype as asked); the
    transformers engine is built as usual. Counts the vLLM generate calls."""
    real = engines.make_engine
    calls = []

    def make_engine(path, *, generation_backend, **kwargs):
        if generation_backend != "vllm":
            return real(path, generation_backend=generation_backend, **kwargs)
        assert str(path) == str(resolve_model("default")) and kwargs["dtype"] == "float32"
        assert kwargs["vllm_dtype"] == "auto" and kwargs["kv_cache_gib"] == 0.5
        return vllm_engine

    monkeypatch.setattr(engines, "make_engine", make_engine)
    original = vllm_engine.generate
    monkeypatch.setattr(vllm_engine, "generate", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


@pytest.fixture(scope="module")
def hf_policy():
    return AutoModelForCausalLM.from_pretrained(resolve_model("default"), dtype=torch.float32).eval()


def _assert_raw_logprobs(model, prompt_ids, ids, logps):
    """Every sample's log-probs equal a teacher-forced forward pass of prompt + sample (raw, T = 1)."""
    rows = [p + i for p, i in zip(prompt_ids, ids, strict=True) if i]
    expected = sequence_logps(model, rows, [len(p) for p, i in zip(prompt_ids, ids, strict=True) if i])
    got = [lp for i, lp in zip(ids, logps, strict=True) if i]
    assert len(rows) > 0
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-4, rtol=0)


def test_select_on_vllm_keys_its_samples_on_the_engine(tmp_path, shared_engine, hf_policy):
    config = SelectConfig(
        **SLICE, scorer="picsar,majority,random", n=2, max_new_tokens=8, generation_backend="vllm",
        output_dir=str(tmp_path),
    )  # fmt: skip
    report = run_select(config)
    assert shared_engine == [1] and report["settings"]["generation_backend"] == "vllm"
    assert set(report["results"]) == {"picsar", "majority", "random", "pass@2 (oracle)"}
    assert report["samples"]["engine"].startswith("vllm:") and len(report["samples"]["files"]) == 1  # 4 rows, batch 4
    samples = [r for name in report["samples"]["files"] for r in read_shard_file(tmp_path / "cache" / name)]
    assert len(samples) == 4 and all(1 <= len(r.token_ids) <= 8 for r in samples)
    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    prompts = render_prompts(tok, [p["prompt"] for p in _svamp_rows()])
    ids, logps = [r.token_ids for r in samples], [r.logprobs for r in samples]
    _assert_raw_logprobs(hf_policy, [p for p in prompts for _ in range(2)], ids, logps)
    texts = [c["text"] for p in report["problems"] for c in p["candidates"]]
    assert texts == tok.batch_decode(ids, skip_special_tokens=True)

    # the same settings read the sample store; the transformers engine never reuses a vLLM sample
    assert run_select(config)["samples"]["from_cache"] is True and shared_engine == [1]
    again = run_select(replace(config, generation_backend="transformers", device="cpu"))
    assert again["samples"]["from_cache"] is False and shared_engine == [1]
    assert again["samples"]["engine"].startswith("transformers:")
    assert set(again["samples"]["files"]).isdisjoint(report["samples"]["files"])


def _svamp_rows():
    from procrl.data_builders.datasets import load_math_dataset, resolve_template

    return list(load_math_dataset("svamp", start=0, end=2, prompt_template=resolve_template("one_shot")))


def test_frs_on_vllm_resumes_from_its_sample_store(tmp_path, shared_engine):
    out = tmp_path / "frs"
    args = OfflineFRSConfig(**SLICE, max_new_tokens=8, generation_backend="vllm", output_dir=str(out))
    frs, judge = FRSArguments(frs_traces=2), JudgeArguments(judge="none")
    result, files = run_frs(args, frs, judge)
    traces = read_traces(out / files["judged_traces"])
    assert len(traces) == 4 and result["settings"]["engine"].startswith("vllm:")
    assert shared_engine == [1]  # batch 4 // n 2 = 2 problems per shard: one call
    assert all(1 <= t.num_tokens <= 8 and 0.0 <= t.confidence <= 1.0 for t in traces)
    assert len(list((out / "cache").glob("rollouts-*.jsonl"))) == 1
    run_frs(args, frs, judge)
    assert shared_engine == [1]  # everything read back from the sample store
    assert [t.completion for t in read_traces(out / files["judged_traces"])] == [t.completion for t in traces]


def test_beam_on_vllm(tmp_path, shared_engine, tiny_pum_factory, smollm2_tokenizer):
    pum = tmp_path / "pum"
    tiny_pum_factory(len(smollm2_tokenizer), seed=1).save_pretrained(pum)
    smollm2_tokenizer.save_pretrained(pum)
    config = BeamConfig(
        **SLICE, pum=str(pum), beams=2, expand=2, max_steps=2, max_step_tokens=8, max_new_tokens=16,
        generation_backend="vllm", device="cpu", output_dir=str(tmp_path / "beam"),
    )  # fmt: skip
    report = run_beam(config)
    assert 1 <= report["summary"]["rounds"] <= 2 and len(shared_engine) >= report["summary"]["rounds"]
    for problem in report["problems"]:
        scores = [b["score"] for b in problem["beams"]]
        assert 1 <= len(scores) <= 2 and scores == sorted(scores, reverse=True)
        assert 1 <= problem["num_tokens"] <= 16


def test_transformers_backend_is_still_a_transformers_engine(tmp_path):
    setup = offline.load_setup(SelectConfig(**SLICE, scorer="random", generation_backend="transformers", device="cpu"))
    assert isinstance(setup.engine, TransformersEngine) and setup.model is setup.engine.model
