"""Rollout engines (procrl/generation/engines.py) and sharded, resumable rollouts (data_builders/rollouts.py,
issue 3 "Rollout engine").

A tiny random Llama over the real SmolLM2 tokenizer stands in for a student. Its greedy outputs are arbitrary but
deterministic, so expected values are derived from an independent run of the same model (a prompt alone, a forward
pass, a run without EOS/stop) rather than hard-coded. The resume and two-process tests run real subprocesses.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from subprocesses import wait_for_output  # tests/helpers

from procrl.data_builders.rollout_shards import read_shard_file
from procrl.data_builders.rollouts import RolloutRequest, RolloutStats, run_rollouts
from procrl.generation import (
    Rollout,
    RolloutEngine,
    SamplingParams,
    TransformersEngine,
    cut_completion,
    derive_seed,
    make_engine,
    weights_fingerprint,
)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GREEDY = SamplingParams(temperature=0, max_new_tokens=10)


@pytest.fixture()
def engine(tiny_llama, smollm2_tokenizer):
    return TransformersEngine(model=tiny_llama, tokenizer=smollm2_tokenizer, batch_size=4)


def _ids(tokenizer, text):
    return tokenizer(text)["input_ids"]


# Logits of a batched, left-padded, KV-cached run differ from an unpadded forward pass by rounding only (~1e-6 on
# the tiny model, whose top-2 logit gaps along the greedy paths below are >= 0.02): a gap under NEAR_TIE is a tie
# whose argmax any kernel or batch shape may flip, so greedy ids are compared only up to the first such step.
NEAR_TIE = 1e-3


def _greedy_reference(model, prompt, steps):
    """The greedy path of `prompt` by full forward passes (batch of one, no padding, no KV cache): the chosen ids,
    their raw log-probs, and the gap between the top two logits at each step."""
    ids, logps, gaps = list(prompt), [], []
    for _ in range(steps):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
        top = logits.topk(2)
        gaps.append(float(top.values[0] - top.values[1]))
        logps.append(float(torch.log_softmax(logits, dim=-1)[top.indices[0]]))
        ids.append(int(top.indices[0]))
    return ids[len(prompt) :], logps, gaps


def _assert_greedy_path(rollout, reference, min_clear=5):
    """`rollout` follows the reference greedy path (ids exactly, log-probs within 1e-4) up to the reference's first
    near tie; at least `min_clear` steps must come before it, so the comparison cannot become vacuous."""
    ids, logps, gaps = reference
    clear = next((t for t, gap in enumerate(gaps) if gap <= NEAR_TIE), len(gaps))
    assert clear >= min_clear, f"near tie at greedy step {clear} (gaps {gaps}); the test needs another prompt"
    assert rollout.token_ids[:clear] == ids[:clear]
    torch.testing.assert_close(rollout.logprobs[:clear], logps[:clear], atol=1e-4, rtol=0)


# ----------------------------------------------------------------------------------------------------------------
# SamplingParams / Rollout


def test_sampling_params_validate_and_canonicalise():
    assert SamplingParams(temperature=1, stop="\n\n").to_dict() == SamplingParams(stop=["\n\n"]).to_dict()
    assert SamplingParams(stop=("a",)).to_dict()["stop"] == ["a"]
    for bad, match in [
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"min_new_tokens": 11, "max_new_tokens": 10}, "min_new_tokens"),
        ({"stop": ("",)}, "stop"),
    ]:
        with pytest.raises(ValueError, match=match):
            SamplingParams(**bad)


def test_rollout_round_trip_and_checks():
    r = Rollout([5, 2], "hi", [-0.5, -1.25], "eos")
    assert Rollout.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    with pytest.raises(ValueError, match="log-probs"):
        Rollout([5, 2], "hi", [-0.5], "eos")
    with pytest.raises(ValueError, match="finish_reason"):
        Rollout([5], "hi", [-0.5], "done")
    with pytest.raises(ValueError, match="no prompt ids"):
        RolloutRequest("k", [], 2)


# ----------------------------------------------------------------------------------------------------------------
# Ending a completion (hand-computed on the SmolLM2 tokenizer)


def test_cut_completion_by_hand(smollm2_tokenizer):
    tok = smollm2_tokenizer
    # "Step one.\n\n\nThe end" -> ['Step', ' one', '.', '\n\n', '\n', 'The', ' end'] (ids checked below)
    ids = [3512, 582, 30, 1116, 198, 504, 1112]
    assert tok.decode(ids) == "Step one.\n\n\nThe end"
    cases = [
        ((), (7, "length")),  # nothing ends it: every token kept
        (("\n\n",), (4, "stop")),  # completed by token 4 ('\n\n'), which is kept
        (("\n\n\n",), (5, "stop")),  # needs the extra '\n' of token 5
        (("ne",), (2, "stop")),  # the stop string ends inside token 2 (' one'): that token is kept whole
        (("zzz", "The"), (6, "stop")),  # first of several stop strings to appear
        (("absent",), (7, "length")),
    ]
    for stop, expected in cases:
        assert cut_completion(ids, eos_ids=[2], stop=stop, tokenizer=tok) == expected, stop
    # EOS (id 2) before a stop string: cut after the EOS, which is kept.
    assert cut_completion([3512, 2, 582, 30, 1116], eos_ids=[2], stop=("\n\n",), tokenizer=tok) == (2, "eos")
    # A stop string after the EOS does not count; one before it wins.
    assert cut_completion([3512, 1116, 2], eos_ids=[2], stop=("\n\n",), tokenizer=tok) == (2, "stop")
    # Only the completion's text is searched: "\nThe" does not contain "\n\n" even if the prompt ended with "\n".
    assert cut_completion([198, 504], eos_ids=[2], stop=("\n\n",), tokenizer=tok) == (2, "length")


# ----------------------------------------------------------------------------------------------------------------
# TransformersEngine


def test_left_padding_does_not_change_greedy_outputs(engine, tiny_llama, smollm2_tokenizer):
    # Against an unpadded forward pass per step, not against another batch shape by ==: the same ids up to the first
    # near tie (none in 10 steps here), log-probs within 1e-4. Padding that leaked into attention or positions would
    # move the padded row's logits by far more than that.
    short = _ids(smollm2_tokenizer, "Hello there, how")
    long = _ids(smollm2_tokenizer, "A much longer prompt that goes on and on about nothing at all")
    ref_short, ref_long = _greedy_reference(tiny_llama, short, 10), _greedy_reference(tiny_llama, long, 10)
    alone = engine.generate([short], GREEDY, seed=0)[0]
    batch = engine.generate([long, short, long], GREEDY, seed=0)  # short is padded by 9+ columns, and re-ordered
    for rollout, reference in [(alone, ref_short), (batch[1], ref_short), (batch[0], ref_long), (batch[2], ref_long)]:
        _assert_greedy_path(rollout, reference)
    assert 2 not in ref_short[0]  # random weights: no EOS in 10 greedy steps
    assert len(alone.token_ids) == len(batch[1].token_ids) == 10 and alone.finish_reason == "length"


def test_logprobs_equal_an_independent_forward_pass(engine, tiny_llama, smollm2_tokenizer):
    short = _ids(smollm2_tokenizer, "Hi")
    long = _ids(smollm2_tokenizer, "Write a long story about a cat who learns to count to twenty")
    params = SamplingParams(temperature=0.7, top_k=50, top_p=0.9, max_new_tokens=12)  # logprobs stay raw (T = 1)
    for prompt, rollout in zip([short, long], engine.generate([short, long], params, seed=3), strict=True):
        assert rollout.text == smollm2_tokenizer.decode(rollout.token_ids, skip_special_tokens=True)
        full = torch.tensor([prompt + rollout.token_ids])
        with torch.no_grad():
            logits = tiny_llama(input_ids=full).logits[0].float()  # (P + L, V), no padding at all
        # logits at position t score token t + 1: the completion's tokens are scored by positions P-1 .. P+L-2.
        expected = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        expected = expected.gather(-1, torch.tensor(rollout.token_ids)[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(rollout.logprobs), expected, atol=1e-4, rtol=0)


def test_cut_after_eos(tiny_llama_factory, smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompt = _ids(tok, "A much longer prompt that goes on and on about nothing at all")
    # Both runs use a batch of the same two rows (same shapes, hence the same kernels and rounding): == is fair.
    plain_engine = TransformersEngine(model=tiny_llama_factory(len(tok)), tokenizer=tok)
    plain = plain_engine.generate([prompt, prompt], GREEDY, seed=0)[0]
    # Declare the 5th greedy token an EOS id: generation must end right after its first occurrence, keeping it.
    eos = plain.token_ids[4]
    first = plain.token_ids.index(eos)
    model = tiny_llama_factory(len(tok))
    model.generation_config.eos_token_id = [2, eos]
    out = TransformersEngine(model=model, tokenizer=tok).generate([prompt, prompt], GREEDY, seed=0)
    for rollout in out:
        assert rollout.token_ids == plain.token_ids[: first + 1]
        assert rollout.finish_reason == "eos"
        assert rollout.logprobs == pytest.approx(plain.logprobs[: first + 1], abs=1e-4)


def test_stop_strings_cut_the_completion_only(engine, smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompt = _ids(tok, "Hello there, how")
    plain = engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=12), seed=0)[0]
    assert plain.finish_reason == "length"
    # A stop string made of the decoded text of tokens 3..4: the expected cut is the first k whose decoded prefix
    # contains it (linear scan here; the engine uses a stopping criterion during generation and a binary search).
    stop = tok.decode(plain.token_ids[3:5])
    k = next(k for k in range(1, 13) if stop in tok.decode(plain.token_ids[:k]))
    assert k <= 5
    rollout = engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=12, stop=(stop,)), seed=0)[0]
    assert rollout.token_ids == plain.token_ids[:k] and rollout.finish_reason == "stop"
    assert stop in rollout.text and len(rollout.logprobs) == k
    # Text that spans prompt and completion never matches: the prompt's last word + the first generated token's text.
    spanning = "how" + tok.decode(plain.token_ids[:1])
    assert spanning not in tok.decode(plain.token_ids[:1])
    rollout = engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=12, stop=(spanning,)), seed=0)[0]
    k = next((k for k in range(1, 13) if spanning in tok.decode(plain.token_ids[:k])), 12)
    assert rollout.token_ids == plain.token_ids[:k]
    assert k > 1


def test_seeds_reproduce_and_differ(engine, smollm2_tokenizer):
    rows = [_ids(smollm2_tokenizer, "Hi"), _ids(smollm2_tokenizer, "Tell me a story"), _ids(smollm2_tokenizer, "Hi")]
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    torch.manual_seed(1234)
    before = torch.rand(1)
    a = engine.generate(rows, params, seed=7)
    torch.manual_seed(1234)
    assert torch.equal(torch.rand(1), before)  # the caller's RNG stream is not consumed
    torch.manual_seed(99)  # the global RNG state does not matter
    b = engine.generate(rows, params, seed=7)
    c = engine.generate(rows, params, seed=8)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert [r.token_ids for r in a] != [r.token_ids for r in c]
    assert a[0].token_ids != a[2].token_ids  # two samples of one prompt in one batch differ


def _hide_vllm(monkeypatch, *, broken: bool) -> None:
    """vLLM not installed (find_spec finds nothing), or installed but broken (found, but its import fails)."""
    import importlib.machinery
    import importlib.util

    monkeypatch.delenv("PROCRL_GENERATION_BACKEND", raising=False)  # conftest: "auto" = transformers otherwise
    real_find_spec = importlib.util.find_spec
    spec = importlib.machinery.ModuleSpec("vllm", None) if broken else None
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: spec if name == "vllm" else real_find_spec(name, *a)
    )
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError


@pytest.mark.parametrize("broken", [False, True])
def test_make_engine_falls_back_to_transformers(tmp_path, tiny_llama, smollm2_tokenizer, monkeypatch, broken):
    """With vLLM hidden (not installed, or installed but not importable) "auto" builds the transformers engine, and
    generation_backend="vllm" raises an ImportError that says how to install vLLM or fall back."""
    tiny_llama.save_pretrained(tmp_path)
    smollm2_tokenizer.save_pretrained(tmp_path)
    _hide_vllm(monkeypatch, broken=broken)
    engine = make_engine(str(tmp_path), device="cpu", kv_cache_gib=0.5)  # a vLLM-only option is dropped
    assert isinstance(engine, TransformersEngine)
    assert engine.model_id.startswith(f"transformers:{tmp_path}:float32:")
    with pytest.raises(
        ImportError, match=r"vLLM cannot be imported .*`make install`.*`generation_backend: transformers`"
    ):
        make_engine(str(tmp_path), generation_backend="vllm")
    with pytest.raises(ValueError, match="generation_backend must be"):
        make_engine(str(tmp_path), generation_backend="tgi")


def test_weights_fingerprint_of_in_memory_models_is_exact(tiny_llama_factory):
    import copy

    a, b = tiny_llama_factory(64), tiny_llama_factory(64)  # built separately, same seed: the same bits
    assert a is not b and all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    fingerprint = weights_fingerprint(None, a)
    assert fingerprint.startswith("params-") and weights_fingerprint(None, b) == fingerprint
    assert weights_fingerprint(None, copy.deepcopy(a)) == fingerprint
    assert weights_fingerprint(None, copy.deepcopy(a).to("cpu")) == fingerprint  # moved to the same device
    assert weights_fingerprint(None, copy.deepcopy(a).requires_grad_(False)) == fingerprint  # not hashed
    if torch.cuda.is_available():
        assert weights_fingerprint(None, copy.deepcopy(a).to("cuda")) == fingerprint

    # One ulp in one element of one parameter.
    with torch.no_grad():
        first = next(b.parameters()).view(-1)
        before = first[0].clone()
        first[0] = torch.nextafter(before, torch.tensor(math.inf, dtype=before.dtype))
        assert first[0] != before and torch.equal(first[1:], next(a.parameters()).view(-1)[1:])
    assert weights_fingerprint(None, b) != fingerprint

    # Another dtype is another model, even when it holds the same values exactly (float32 -> float64 -> float32).
    wide = copy.deepcopy(a).to(torch.float64)
    assert weights_fingerprint(None, wide) != fingerprint
    assert weights_fingerprint(None, wide.to(torch.float32)) == fingerprint
    assert weights_fingerprint(None, copy.deepcopy(a).to(torch.bfloat16)) not in (
        fingerprint,
        weights_fingerprint(None, wide),
    )


# ----------------------------------------------------------------------------------------------------------------
# run_rollouts


class Counting(RolloutEngine):
    """Wraps an engine and counts the rows it is asked to generate."""

    def __init__(self, inner):
        self.inner, self.rows, self.calls = inner, 0, 0
        self.model_id, self.tokenizer = inner.model_id, inner.tokenizer

    def cache_key(self):
        return self.inner.cache_key()

    def generate(self, prompt_ids, params, *, seed):
        self.rows += len(prompt_ids)
        self.calls += 1
        return self.inner.generate(prompt_ids, params, seed=seed)


class Echo(RolloutEngine):
    """Scripted engine: a rollout is [last prompt id, seed mod 1000], so the test can see which row went where."""

    model_id = "echo"
    tokenizer = None

    def generate(self, prompt_ids, params, *, seed):
        return [Rollout([row[-1], seed % 1000], "", [0.0, 0.0], "length") for row in prompt_ids]


def _as_ids(result):
    return {k: [r.token_ids for r in v] for k, v in result.items()}


def test_run_rollouts_orders_by_key_and_shards_get_distinct_seeds(tmp_path):
    requests = [RolloutRequest("a", [1, 10], 3), RolloutRequest("b", [11], 0), RolloutRequest("c", [12], 4)]
    stats = RolloutStats()
    out = run_rollouts(Echo(), requests, GREEDY, seed=0, cache_dir=tmp_path, shard_size=2, stats=stats)
    assert list(out) == ["a", "b", "c"]
    # Rows a a a c c c c -> shards [a a] [a c] [c c] [c]: each rollout comes from its own prompt.
    assert [r.token_ids[0] for r in out["a"]] == [10, 10, 10] and out["b"] == []
    assert [r.token_ids[0] for r in out["c"]] == [12] * 4
    seeds = [r.token_ids[1] for r in out["a"] + out["c"]]
    assert seeds[0] == seeds[1] != seeds[2] == seeds[3] != seeds[4] == seeds[5] != seeds[6]
    assert (stats.rows, stats.shards, stats.generated_rows, stats.cached_rows) == (7, 4, 7, 0)
    assert sorted(stats.files) == sorted(str(p) for p in tmp_path.glob("rollouts-*.jsonl")) and len(stats.files) == 4
    # the files in row order hold the rows: read back by name, as a report's list is
    assert [r.token_ids for f in stats.files for r in read_shard_file(f)] == [r.token_ids for r in out["a"] + out["c"]]
    with pytest.raises(ValueError, match="unique"):
        run_rollouts(Echo(), requests + requests[:1], GREEDY, seed=0, cache_dir=tmp_path)


def test_run_rollouts_cache_hit_and_miss(tmp_path, engine, smollm2_tokenizer):
    tok = smollm2_tokenizer
    requests = [RolloutRequest(f"q{i}", _ids(tok, f"Question {i}: what is {i} plus {i}?"), n=3) for i in range(3)]
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    counting = Counting(engine)
    stats = RolloutStats()
    first = run_rollouts(counting, requests, params, seed=5, cache_dir=tmp_path, shard_size=4, stats=stats)
    assert counting.rows == 9 and counting.calls == 3  # 9 rows -> shards of 4, 4, 1
    first_files = sorted(tmp_path.glob("rollouts-*.jsonl"))
    assert len(first_files) == 3
    assert {k: len(v) for k, v in first.items()} == {"q0": 3, "q1": 3, "q2": 3}
    assert stats.tokens_generated == sum(len(r.token_ids) for v in first.values() for r in v) == 9 * 6

    again = run_rollouts(counting, requests, params, seed=5, cache_dir=tmp_path, shard_size=4, stats=stats)
    assert counting.rows == 9  # nothing generated
    assert (stats.generated_rows, stats.cached_rows, stats.cached_shards) == (0, 9, 3)
    assert {k: [r.to_dict() for r in v] for k, v in again.items()} == {
        k: [r.to_dict() for r in v] for k, v in first.items()
    }

    run_rollouts(
        counting, requests, SamplingParams(temperature=0.9, max_new_tokens=6), seed=5, cache_dir=tmp_path, shard_size=4
    )
    assert counting.rows == 18  # a changed parameter misses every shard
    run_rollouts(counting, requests, params, seed=6, cache_dir=tmp_path, shard_size=4)
    assert counting.rows == 27  # so does a changed seed
    # A truncated shard file is regenerated, not trusted, and the result is unchanged.
    victim = max(first_files, key=lambda p: p.stat().st_size)  # one of the 4-row shards
    victim.write_text(victim.read_text().splitlines()[0] + "\n")
    repaired = run_rollouts(counting, requests, params, seed=5, cache_dir=tmp_path, shard_size=4)
    assert counting.rows == 27 + 4
    assert _as_ids(repaired) == _as_ids(first)


# ----------------------------------------------------------------------------------------------------------------
# Subprocesses: kill -9 and resume; two processes with torchrun

SCRIPT = """
import json, sys, threading
from procrl.data_builders.rollouts import RolloutRequest, RolloutStats, run_rollouts
from procrl.generation import SamplingParams, TransformersEngine, default_state

model_dir, cache_dir, out_path, block_after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


class Blocking(TransformersEngine):
    # block_after >= 0: the call for shard `block_after` announces itself on stdout (the shards before it are on disk:
    # a shard is written before the next one starts) and never returns, so the test can kill the run there.
    calls = 0

    def generate(self, *args, **kwargs):
        if Blocking.calls == block_after:
            print(f"blocked before shard {block_after}", flush=True)
            threading.Event().wait()
        Blocking.calls += 1
        return super().generate(*args, **kwargs)


engine = Blocking(model_dir, device="cpu", batch_size=4)
tok = engine.tokenizer
requests = [RolloutRequest(f"q{i}", tok(f"Question {i}: what is {i} plus {i}?")["input_ids"], n=4) for i in range(6)]
stats = RolloutStats()
result = run_rollouts(engine, requests, SamplingParams(temperature=1.0, max_new_tokens=8), seed=123,
                      cache_dir=cache_dir, shard_size=3, stats=stats)
state = default_state()
with open(f"{out_path}.rank{state.process_index}", "w") as f:
    json.dump({"stats": stats.to_dict(), "world": state.num_processes,
               "result": {k: [r.to_dict() for r in v] for k, v in result.items()}}, f)
"""
N_SHARDS = 8  # 6 requests x 4 rows = 24 rows in shards of 3
SHARD_ROWS = 3


@pytest.fixture(scope="module")
def job(tmp_path_factory, smollm2_tokenizer, tiny_llama_factory):
    root = tmp_path_factory.mktemp("rollout-job")
    tiny_llama_factory(len(smollm2_tokenizer)).save_pretrained(root / "model")
    smollm2_tokenizer.save_pretrained(root / "model")
    (root / "script.py").write_text(SCRIPT)
    return root


def _cmd(job, cache, out, block_after=-1, launcher=(sys.executable,)):
    return [*launcher, str(job / "script.py"), str(job / "model"), str(cache), str(out), str(block_after)]


def _env(**extra):
    return {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", **extra}


def _run(cmd, **env):
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(**env), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def _load(out, rank=0):
    return json.loads(Path(f"{out}.rank{rank}").read_text())


def _flat(result: dict) -> list[dict]:
    """The rows of a result in request order (= shard order: shard i holds rows SHARD_ROWS*i ...)."""
    return [row for rollouts in result.values() for row in rollouts]


def _assert_same_rollouts(got: dict, expected: dict) -> None:
    """Same keys, token ids, texts and finish reasons exactly; log-probs within 1e-4 (docs/architecture.md "Log-probabilities"'s tolerance). The two
    results were generated by different processes with the same batch shapes; on one machine they agree bit for bit
    in practice, but no kernel promises that across processes, so floats get a tolerance."""
    assert list(got) == list(expected)
    for key in expected:
        a, b = got[key], expected[key]
        assert [(r["token_ids"], r["text"], r["finish_reason"]) for r in a] == [
            (r["token_ids"], r["text"], r["finish_reason"]) for r in b
        ], key
        for ra, rb in zip(a, b, strict=True):
            torch.testing.assert_close(ra["logprobs"], rb["logprobs"], atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def uninterrupted(job):
    """The same script run to completion in a fresh cache, in this process (saves a subprocess start) with one
    thread like the subprocesses (CPU matmul reductions, hence samples, may depend on the thread count)."""
    import runpy

    argv, threads = sys.argv, torch.get_num_threads()
    sys.argv = _cmd(job, job / "fresh-cache", job / "fresh.json")[1:]
    torch.set_num_threads(1)
    try:
        runpy.run_path(str(job / "script.py"), run_name="__main__")
    finally:
        sys.argv = argv
        torch.set_num_threads(threads)
    return _load(job / "fresh.json")


@pytest.mark.slow
def test_kill_9_and_resume_gives_the_uninterrupted_result(job, uninterrupted):
    """Killed (kill -9) while it blocks before shard 2, i.e. after shards 0 and 1 are on disk (an event, not a race
    against a sleep); the rerun reuses exactly those two files and generates the other six."""
    cache, finished = job / "killed-cache", 2
    with open(job / "killed.stderr", "wb") as stderr:
        proc = subprocess.Popen(
            _cmd(job, cache, job / "killed.json", block_after=finished),
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        try:
            wait_for_output(proc, b"blocked before shard 2")
        except AssertionError as err:
            proc.kill()
            proc.wait()
            raise AssertionError(f"{err}\n{(job / 'killed.stderr').read_text()[-3000:]}") from None
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        proc.stdout.close()
    files = sorted(cache.glob("rollouts-*.jsonl"))
    assert len(files) == finished and not (job / "killed.json.rank0").exists()
    written = {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files}

    _run(_cmd(job, cache, job / "resumed.json"))
    resumed = _load(job / "resumed.json")
    assert resumed["stats"]["cached_shards"] == finished and resumed["stats"]["cached_rows"] == finished * SHARD_ROWS
    assert resumed["stats"]["generated_shards"] == N_SHARDS - finished
    assert resumed["stats"]["generated_rows"] == (N_SHARDS - finished) * SHARD_ROWS
    # The killed run's shards are reused as they are (not rewritten), and their rows come back bit for bit.
    assert {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files} == written
    rows = _flat(resumed["result"])
    for content, _ in written.values():
        header, *lines = content.decode().splitlines()
        start = json.loads(header)["shard"] * SHARD_ROWS
        assert rows[start : start + SHARD_ROWS] == [json.loads(line) for line in lines]
    assert len(rows) == 24 and uninterrupted["stats"]["generated_shards"] == N_SHARDS
    _assert_same_rollouts(resumed["result"], uninterrupted["result"])


@pytest.mark.slow
def test_two_processes_with_torchrun_match_one_process(job, uninterrupted):
    out = job / "torchrun.json"
    _run(
        _cmd(
            job, job / "torchrun-cache", out, launcher=(str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2")
        ),
        ACCELERATE_USE_CPU="True",
    )
    ranks = [_load(out, 0), _load(out, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["result"] == ranks[1]["result"]  # both ranks read the same shard files: bit for bit
    _assert_same_rollouts(ranks[0]["result"], uninterrupted["result"])  # generated by other processes: see there
    # Shards 0, 2, 4, 6 by rank 0 and 1, 3, 5, 7 by rank 1: the stats are summed over ranks.
    assert ranks[0]["stats"]["generated_shards"] == N_SHARDS and ranks[0]["stats"]["generated_rows"] == 24


# ----------------------------------------------------------------------------------------------------------------
# VLLMEngine glue, against a stand-in `vllm` module (the real engine: tests/data_builders/test_vllm_builder.py)


def _fake_vllm(monkeypatch, *, on_cpu: bool):
    """A stand-in `vllm`: the LLM "generates" a fixed continuation and scores token t with logprob -t/1000 (sampled)
    or -t/100 (prompt log-probs), so a test can tell which path produced each value; `calls` records every call."""
    import types
    from dataclasses import dataclass as dc

    continuation = [3512, 582, 30, 1116, 198, 504, 2, 1112]  # "Step one.\n\n\nThe" <eos> " end"
    calls = []

    @dc
    class Logprob:
        logprob: float

    class FakeSamplingParams:
        def __init__(self, **kwargs):
            self.__dict__.update(kwargs)

    class FakeLLM:
        def __init__(self, model, **kwargs):
            calls.append(("init", model, kwargs))
            model_config = types.SimpleNamespace(model=model, logprobs_mode=kwargs.get("logprobs_mode", "raw_logprobs"))
            self.llm_engine = types.SimpleNamespace(model_config=model_config)

        def generate(self, prompts, params, use_tqdm=False):
            calls.append(("generate", prompts, params))
            outs = []
            for prompt in prompts:
                ids = prompt["prompt_token_ids"]
                if isinstance(params, list):  # sampling: one SamplingParams per row
                    lps = [{t: Logprob(-t / 1000)} for t in continuation]
                    completion = types.SimpleNamespace(token_ids=continuation, logprobs=lps)
                    outs.append(types.SimpleNamespace(outputs=[completion]))
                else:  # rescoring: prompt log-probs of prompt + completion
                    outs.append(
                        types.SimpleNamespace(prompt_logprobs=[None] + [{t: Logprob(-t / 100)} for t in ids[1:]])
                    )
            return outs

    platforms = types.SimpleNamespace(current_platform=types.SimpleNamespace(is_cpu=lambda: on_cpu))
    fake = types.SimpleNamespace(LLM=FakeLLM, SamplingParams=FakeSamplingParams, platforms=platforms)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    return continuation, calls


def test_vllm_engine_glue_with_a_fake_vllm(monkeypatch, tmp_path, smollm2_tokenizer):
    """vLLM's own log-probs are raw (its default `raw_logprobs` mode): used as they are, whatever the sampling."""
    from procrl.generation import VLLMEngine

    continuation, calls = _fake_vllm(monkeypatch, on_cpu=True)
    smollm2_tokenizer.save_pretrained(tmp_path)
    engine = VLLMEngine(str(tmp_path), tokenizer=smollm2_tokenizer, kv_cache_gib=0.5)
    assert engine.model_id.startswith(f"vllm:{tmp_path}:float32:")  # "auto" is float32 on CPU
    init = calls[0][2]
    assert init["generation_config"] == "vllm" and init["enforce_eager"] is True
    assert init["kv_cache_memory_bytes"] == 2**29 and engine.logprobs_mode == "raw_logprobs"

    # T = 1: cut after the EOS (id 2), vLLM's sampled log-probs; one seed per row.
    out = engine.generate([[10, 11], [12]], SamplingParams(temperature=1.0, max_new_tokens=8), seed=0)
    assert [r.token_ids for r in out] == [continuation[:7]] * 2
    assert out[0].finish_reason == "eos" and out[0].text == "Step one.\n\n\nThe"
    assert out[0].logprobs == [-t / 1000 for t in continuation[:7]]
    row_params = calls[-1][2]
    assert row_params[0].seed != row_params[1].seed and row_params[0].top_k == -1 and row_params[0].logprobs == 0

    # T = 0.7 and a stop string: cut after "\n\n" (4 tokens); raw mode needs no rescoring pass.
    n_calls = len(calls)
    out = engine.generate([[10, 11]], SamplingParams(temperature=0.7, max_new_tokens=8, stop=("\n\n",)), seed=0)
    assert out[0].token_ids == continuation[:4] and out[0].finish_reason == "stop"
    assert out[0].logprobs == [-t / 1000 for t in continuation[:4]]
    assert len(calls) == n_calls + 1 and calls[-1][2][0].logprobs == 0 and calls[-1][2][0].include_stop_str_in_output
    with pytest.raises(ValueError, match="CPU build"):
        VLLMEngine(str(tmp_path), tokenizer=smollm2_tokenizer, device="cuda")


def test_vllm_engine_rescoring_in_processed_logprobs_mode(monkeypatch, tmp_path, smollm2_tokenizer):
    """An engine whose log-probs are after temperature (TRL's colocate LLM: `processed_logprobs`): vLLM's are used
    only when the sampler draws from the raw distribution; otherwise the completions are rescored (prompt
    log-probs, which are raw). On a GPU build the CPU-only options are not passed."""
    from procrl.generation import VLLMEngine

    continuation, calls = _fake_vllm(monkeypatch, on_cpu=False)
    smollm2_tokenizer.save_pretrained(tmp_path)
    engine = VLLMEngine(str(tmp_path), tokenizer=smollm2_tokenizer, dtype="float16", logprobs_mode="processed_logprobs")
    assert engine.model_id.startswith(f"vllm:{tmp_path}:float16:") and engine.logprobs_mode == "processed_logprobs"
    assert "enforce_eager" not in calls[0][2] and "kv_cache_memory_bytes" not in calls[0][2]

    out = engine.generate([[10, 11]], SamplingParams(temperature=1.0, max_new_tokens=8), seed=0)
    assert out[0].logprobs == [-t / 1000 for t in continuation[:7]] and calls[-1][2][0].logprobs == 0

    out = engine.generate([[10, 11]], SamplingParams(temperature=0.7, max_new_tokens=8, stop=("\n\n",)), seed=0)
    assert out[0].token_ids == continuation[:4] and out[0].finish_reason == "stop"
    assert out[0].logprobs == [-t / 100 for t in continuation[:4]]
    assert calls[-1][1] == [{"prompt_token_ids": [10, 11, *continuation[:4]]}]
    assert calls[-2][2][0].logprobs is None
    # The same through from_llm (e.g. TRL's colocate engine): the model path comes from the LLM's config.
    wrapped = VLLMEngine.from_llm(engine.llm, smollm2_tokenizer, model_id="trl-colocate")
    assert wrapped.model_id == "trl-colocate" and wrapped.logprobs_mode == "processed_logprobs"
    assert wrapped.generate([[10, 11]], SamplingParams(temperature=0.7, max_new_tokens=8), seed=0)[0].logprobs == [
        -t / 100 for t in continuation[:7]
    ]


def test_run_rollouts_counts_problems_in_a_second_bar(tmp_path, capsys):
    requests = [RolloutRequest("p1/bare", [1], 2), RolloutRequest("p2/bare", [2], 2), RolloutRequest("p1/cut", [3], 3)]
    run_rollouts(Echo(), requests, GREEDY, seed=0, cache_dir=tmp_path, shard_size=2, groups=["p1", "p2", "p1"],
                 desc="student 0")  # fmt: skip
    err = capsys.readouterr().err
    assert "student 0: problems" in err and "2/2" in err and "7/7" in err
    with pytest.raises(ValueError, match="one group per request"):
        run_rollouts(Echo(), requests, GREEDY, seed=0, cache_dir=tmp_path, groups=["p1"])
    run_rollouts(Echo(), requests, GREEDY, seed=0, cache_dir=tmp_path / "quiet", shard_size=2,
                 groups=["p1", "p2", "p1"], desc="student 1", progress=False)  # fmt: skip
    assert "student 1" not in capsys.readouterr().err  # progress=False: no bar


def test_caller_chosen_shard_seeds_join_the_key(tmp_path):
    """`shard_seed(i)` seeds shard i (as the offline commands seed their generate calls) and is part of its hash: the
    same rows under other seeds are other shards, the same seeds read the stored ones."""
    requests = [RolloutRequest("a", [10], 3), RolloutRequest("b", [11], 2)]
    stats = RolloutStats()
    out = run_rollouts(Echo(), requests, GREEDY, seed=0, cache_dir=tmp_path, shard_size=2, stats=stats,
                       shard_seed=lambda i: derive_seed(0, "select", i))  # fmt: skip
    expected = [derive_seed(0, "select", i) % 1000 for i in (0, 0, 1, 1, 2)]  # rows a a | a b | b
    assert [r.token_ids[1] for r in out["a"] + out["b"]] == expected
    default = run_rollouts(Echo(), requests, GREEDY, seed=0, cache_dir=tmp_path, shard_size=2, stats=stats)
    assert stats.generated_rows == 5 and [r.token_ids for r in default["a"]] != [r.token_ids for r in out["a"]]
    other = run_rollouts(Echo(), requests, GREEDY, seed=0, cache_dir=tmp_path, shard_size=2, stats=stats,
                         shard_seed=lambda i: derive_seed(1, "select", i))  # fmt: skip
    assert stats.generated_rows == 5 and len(list(tmp_path.glob("rollouts-*.jsonl"))) == 9
    assert [r.token_ids[1] for r in other["a"]] == [derive_seed(1, "select", i) % 1000 for i in (0, 0, 1)]
    again = run_rollouts(Echo(), requests, GREEDY, seed=0, cache_dir=tmp_path, shard_size=2, stats=stats,
                         shard_seed=lambda i: derive_seed(0, "select", i))  # fmt: skip
    assert stats.generated_rows == 0 and _as_ids(again) == _as_ids(out)


def test_read_shard_file_refuses_a_missing_renamed_or_cut_file(tmp_path):
    stats = RolloutStats()
    run_rollouts(Echo(), [RolloutRequest("a", [10], 3)], GREEDY, seed=0, cache_dir=tmp_path, stats=stats)
    (path,) = map(Path, stats.files)
    assert [r.token_ids[0] for r in read_shard_file(path)] == [10, 10, 10]
    with pytest.raises(ValueError, match="missing or unreadable"):
        read_shard_file(tmp_path / "rollouts-0.jsonl")
    renamed = path.with_name("rollouts-" + "0" * 32 + ".jsonl")
    renamed.write_text(path.read_text())
    with pytest.raises(ValueError, match="does not hold the shard"):
        read_shard_file(renamed)
    path.write_text("\n".join(path.read_text().splitlines()[:2]) + "\n")  # the header and one of three rows
    with pytest.raises(ValueError, match="does not hold the shard"):
        read_shard_file(path)
