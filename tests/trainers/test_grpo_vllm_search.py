"""Search episodes through GRPO on vLLM: one ProcessGRPOTrainer step with `use_vllm` (colocate, the CPU build) and
`ProcessRollout(env=SearchEnvironment(fake retriever))` on a tiny fp32 Llama saved to disk (slow: one engine).

A random tiny model never writes search tags by itself, so TRL's `vllm_structured_outputs_regex` constrains every
turn to `<search> w </search>` or `<answer> w </answer>` (vLLM structured outputs, passed through
`trl_sampling_fields` to each turn's `vllm.SamplingParams`); the environment then runs the searches, inserts the
information blocks and ends the episodes as in production. Checked against independent computations: `env_mask` is 0
exactly at the inserted information tokens (the tokenizer's ids of `env.information(passages)`) and at the EOS the
environment appends; `completion_logps` equal an unpadded policy forward (T = 1) at model tokens within 1e-3 and are
0.0 at environment tokens (the sampler's `logprobs` too); TRL counts completion lengths over model tokens only, and
its loss runs and moves the weights. TRL's importance-sampling correction is off here: under the grammar the sampler's
log-probs are those of the masked distribution, far from the unconstrained policy's (test_grpo_vllm.py checks the
correction without constraints).
"""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch
from datasets import Dataset
from grpo_helpers import grpo_config

from procrl.retrieval import Passage
from procrl.rewards.outcome import outcome_reward
from procrl.trainers.rollout import ProcessRollout
from procrl.trainers.search_env import SearchEnvironment

TURN_REGEX = r"<search> [a-z]{2,4} </search>|<answer> [a-z]{2,4} </answer>"
QUESTIONS = [("Question: who wrote Hamlet?", "shakespeare"), ("Question: capital of Peru?", "lima")]
MAX_LEN = 64


class FakeRetriever:
    """One short passage per query; records the calls."""

    def __init__(self):
        self.calls = []

    def search(self, queries, topk=3):
        self.calls.append(list(queries))
        return [[Passage(f"T {q}", f"about {q}", 1.0)][:topk] for q in queries]


def token_parity(completion_ids, **kwargs):
    """A reward that differs between completions (the outcome reward is 0 for all: no gradient)."""
    return [sum(t % 2 for t in ids) / len(ids) for ids in completion_ids]


# declared a reader of completion_logps, so the rollout rescores the episodes' raw log-probs (what this module checks);
# without a reader it leaves them out (procrl.trainers.rollout.needs_completion_logps)
token_parity.needs_logps = True


def _raw_logps(model, prompt, completion) -> list[float]:
    """log_softmax(logits) of each completion token given everything before it: one unpadded forward."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(prompt) + list(completion)])).logits[0, len(prompt) - 1 : -1]
        return torch.log_softmax(logits.double(), -1).gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


def _find(ids: list[int], sub: list[int], start: int) -> int:
    return next(k for k in range(start, len(ids) - len(sub) + 1) if ids[k : k + len(sub)] == sub)


@pytest.fixture(scope="module")
def search_run(tmp_path_factory, smollm2_tokenizer, tiny_llama_factory):
    """One GRPO step with search episodes on TRL's colocated engine; returns (trainer, env, rollouts)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    from transformers import AutoModelForCausalLM

    from procrl.trainers.grpo import ProcessGRPOTrainer

    path = tmp_path_factory.mktemp("tiny-search-policy")
    tiny_llama_factory(
        len(smollm2_tokenizer), hidden_size=64, num_attention_heads=2, num_key_value_heads=1
    ).save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    env = SearchEnvironment(FakeRetriever(), topk=1, max_turns=1)
    args = grpo_config(
        tmp_path_factory.mktemp("grpo-search-out"),
        generation_backend="vllm",
        vllm_kv_cache_gib=0.5,
        num_generations=2,
        max_completion_length=MAX_LEN,
        vllm_structured_outputs_regex=TURN_REGEX,
        # the sampler's log-probs are those of the grammar-masked distribution (a few allowed tokens), the policy's
        # are not: for a random model TRL's IS ratio is then ~exp(-9) and masks every token (loss 0, no gradient)
        vllm_importance_sampling_correction=False,
    )
    side = smollm2_tokenizer.padding_side
    smollm2_tokenizer.padding_side = "left"
    rows = [{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in QUESTIONS] * 2
    trainer = ProcessGRPOTrainer(
        model=policy,
        reward_funcs=[outcome_reward, token_parity],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=smollm2_tokenizer,
        rollout_func=ProcessRollout(env=env),
    )
    rollouts, rollout = [], trainer.rollout_func

    def recorded(prompts, trainer_):
        out = rollout(prompts, trainer_)
        model = trainer_.accelerator.unwrap_model(trainer_.model)  # the policy the engine was synced with
        expected = [_raw_logps(model, p, c) for p, c in zip(out["prompt_ids"], out["completion_ids"], strict=True)]
        rollouts.append((out, expected))
        return out

    trainer.rollout_func = recorded
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    yield trainer, env, rollouts, changed
    smollm2_tokenizer.padding_side = side


@pytest.mark.slow  # trains on vLLM
def test_search_episodes_train_through_grpo_on_vllm(search_run, smollm2_tokenizer):
    trainer, env, rollouts, changed = search_run
    tok, eos = smollm2_tokenizer, smollm2_tokenizer.eos_token_id
    ((out, expected),) = rollouts
    assert trainer.state.global_step == 1 and changed and "loss" in trainer.state.log_history[0]
    queries = [q for call in env.retriever.calls for q in call]
    assert queries, "no episode searched: the test would not exercise the information blocks"
    searched = 0
    rows = zip(out["completion_ids"], out["env_mask"], out["completion_logps"], out["logprobs"], expected, strict=True)
    for ids, mask, raw, sampler, want in rows:
        assert len(ids) == len(mask) == len(raw) == len(sampler) <= MAX_LEN
        env_positions, cursor = set(), 0
        text = tok.decode([t for t, m in zip(ids, mask, strict=True) if m], skip_special_tokens=True)
        assert all(re.fullmatch(TURN_REGEX, turn) for turn in re.findall(r"<\w+> [a-z]+ </\w+>", text))
        for query in re.findall(r"<search> ([a-z]+) </search>", text)[: env.max_turns]:  # the searches that ran
            info = tok(env.information(FakeRetriever().search([query], topk=env.topk)[0]), add_special_tokens=False)
            start = _find(ids, info["input_ids"], cursor)
            env_positions |= set(range(start, start + len(info["input_ids"])))
            cursor, searched = start + len(info["input_ids"]), searched + 1
        if len(ids) < MAX_LEN and text.endswith(("</answer>", "</search>")):  # ended by an answer / unrun search
            assert ids[-1] == eos
            env_positions.add(len(ids) - 1)  # the EOS the environment appends
        assert {k for k, m in enumerate(mask) if m == 0} == env_positions
        assert all(raw[k] == 0.0 and sampler[k] == 0.0 for k in env_positions)
        model_diffs = [abs(raw[k] - want[k]) for k in range(len(ids)) if k not in env_positions]
        assert model_diffs and max(model_diffs) < 1e-3
    assert searched == len(queries)
    # TRL took env_mask: completion lengths count model tokens only
    model_tokens = [sum(mask) for mask in out["env_mask"]]
    logs = trainer.state.log_history[0]
    assert abs(logs["completions/mean_length"] - sum(model_tokens) / len(model_tokens)) < 1e-6
