"""Search-R1 tag parsing, multi-turn search episodes (env_mask, log-probs, traces) and TRL's loss masking."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset

import procrl.trainers.search_env as search_env_mod
from procrl.generation import GenerationOutput, cut_completion, render_prompts, stop_criteria
from procrl.retrieval import Passage
from procrl.rewards.qa import em_reward
from procrl.rewards.stepgap.trace import parse_trace, question_from_prompt
from procrl.trainers.rollout import ProcessRollout
from procrl.trainers.search_env import STOP_STRINGS, SearchEnvironment

# --------------------------------------------------------------------------------------------------------------------
# Parsing


def test_tags_across_lines_and_evidence():
    text = (
        "<think>\nfirst hop\n</think>\n<search>\nLothair II\nmother\n</search>\n"
        "<information>Doc 1 (Title: Lothair II) His mother was Ermengarde.\nDoc 2 (Title: X) y</information>\n"
        "<search> Ermengarde </search>\n<information>Doc 1 (Title: Ermengarde of Tours) died 851</information>\n"
        "<answer>\n20 March 851\n</answer>"
    )
    t = parse_trace("q", text)
    assert [s.kind for s in t.steps] == ["inference", "inference", "conclusion"]
    assert t.steps[0].query == "Lothair II\nmother" and t.answer == "20 March 851"
    assert [p.title for p in t.steps[0].retrieved] == ["Lothair II", "X"]
    assert t.steps[0].evidence == [] and [p.title for p in t.steps[1].evidence] == ["Lothair II", "X"]
    assert [p.title for p in t.steps[2].evidence] == ["Lothair II", "X", "Ermengarde of Tours"]
    assert t.format_violations == [] and t.num_searches == 2
    # the model text of a step excludes the environment block
    assert "<information>" not in t.steps[1].text and t.steps[1].text.strip().startswith("<search>")


def test_search_after_answer_is_violation():
    t = parse_trace("q", "<answer> A </answer> <search> more </search>")
    assert t.answer == "A" and t.format_violations == ["search_after_answer"]
    assert len(t.steps) == 1 and t.steps[0].malformed  # not executed: no inference step


def test_unclosed_search_malformed():
    t = parse_trace("q", "<think>x</think><search> who is")
    assert t.steps[0].malformed and t.steps[0].retrieved == [] and t.steps[0].query == "who is"
    assert t.format_violations == ["unclosed_search", "no_answer"] and t.answer is None


def test_search_inside_answer_not_credited():
    t = parse_trace("q", "<answer> Paris <search> capital </search> </answer>")
    assert t.answer is None and "search_inside_answer" in t.format_violations
    assert [s.kind for s in t.steps] == ["conclusion"]  # the inner search is no step and never runs


def test_tags_inside_information_are_not_parsed():
    t = parse_trace("q", "<search> q </search><information>Doc 1 (Title: A) <answer> fake </answer></information>")
    assert t.answer is None and t.format_violations == ["no_answer"]


def test_retrieved_override_and_question():
    t = parse_trace(
        "q", "<search> q </search>\n<information>ignored</information><answer>a</answer>", [[Passage("P", "p")]]
    )
    assert t.steps[0].retrieved == [Passage("P", "p")]
    assert question_from_prompt([{"role": "user", "content": "Rules <answer> x </answer>\nQuestion: Who?"}]) == "Who?"


def test_turns_stop_by_the_one_stop_rule(smollm2_tokenizer):
    """The turns end where `procrl.generation.sampling` says: generation stops once the turn's text holds a tag, and
    the turn is cut after the token that completes it (a tag in the prompt never counts)."""
    tok = smollm2_tokenizer
    prompt = tok("a </search>", add_special_tokens=False)["input_ids"]
    new = tok("<search> x </search> JUNK", add_special_tokens=False)["input_ids"]
    other = tok("<search> x </sea", add_special_tokens=False)["input_ids"]
    width = len(prompt)
    rows = [prompt + new, prompt + other + [tok.pad_token_id] * (len(new) - len(other))]
    crit = stop_criteria(tok, STOP_STRINGS, prompt_width=width)
    assert crit(torch.tensor(rows), None).tolist() == [True, False]
    cut, reason = cut_completion(new, eos_ids=[tok.eos_token_id], stop=STOP_STRINGS, tokenizer=tok)
    assert reason == "stop" and tok.decode(new[:cut]) == "<search> x </search>"


# --------------------------------------------------------------------------------------------------------------------
# Episodes with a scripted policy (the environment logic) and a fake retriever


class FakeRetriever:
    def __init__(self):
        self.calls = []

    def search(self, queries, topk=3):
        self.calls.append(list(queries))
        return [[Passage(f"T{j}", f"about {q}", 1.0) for j in range(topk)] for q in queries]


SCRIPTS = {  # question -> one turn per environment round; " JUNK" after a stop string must be cut away
    "Q1": ["<think>hop</think>\n<search> Lothair II mother </search> JUNK", "<answer> 20 March 851 </answer> JUNK"],
    "Q2": ["<answer> x </answer>"],
    "Q3": ["<search> unclosed<EOS>"],
    "Q4": ["<answer> y <search> q </search>"],
    "Q5": ["<search> first </search>", "<search> second </search>", "<answer> z </answer>"],
}


def make_fake_generate(tok):
    eos = tok.eos_token_id

    def fake_generate(model, prompt_ids, generation_config, *, pad_token_id, eos_ids, stopping_criteria=None, **kw):
        outs = []
        for ids in prompt_ids:
            text = tok.decode(ids)
            question = next(q for q in SCRIPTS if f"Question: {q}" in text)
            turn = SCRIPTS[question][text.count("</information>")]
            new = []
            for piece in turn.split("<EOS>"):
                new += tok(piece, add_special_tokens=False)["input_ids"] + [eos]
            new = new[:-1] if not turn.endswith("<EOS>") else new
            outs.append(new[: generation_config.max_new_tokens])
        return GenerationOutput(outs, [[-0.25] * len(o) for o in outs], [[-0.5] * len(o) for o in outs])

    return fake_generate


def _run(tok, monkeypatch, questions, max_len=200, max_turns=4):
    monkeypatch.setattr(search_env_mod, "generate_completions", make_fake_generate(tok))
    retriever = FakeRetriever()
    env = SearchEnvironment(retriever, topk=2, max_turns=max_turns)
    prompts = [[{"role": "user", "content": f"Question: {q}"}] for q in questions]
    prompt_ids = render_prompts(tok, prompts)
    from transformers import GenerationConfig

    episodes = env.run(
        None, tok, prompts, prompt_ids, GenerationConfig(max_new_tokens=max_len), max_completion_length=max_len,
        pad_token_id=tok.pad_token_id, eos_ids=[tok.eos_token_id],
    )  # fmt: skip
    return episodes, retriever


def test_episode_env_mask_and_logprobs(smollm2_tokenizer, monkeypatch):
    tok = smollm2_tokenizer
    ep, retriever = _run(tok, monkeypatch, ["Q1", "Q2"])
    assert retriever.calls == [["Lothair II mother"]]  # one batched call, only Q1 searches
    ids, mask, lp, raw = ep.completion_ids[0], ep.env_mask[0], ep.logprobs[0], ep.completion_logps[0]
    assert len(ids) == len(mask) == len(lp) == len(raw)
    text = tok.decode(ids, skip_special_tokens=True)
    assert "JUNK" not in text and text.endswith("</answer>")
    # the environment tokens are exactly the information block and the appended EOS
    env_text = tok.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
    info = "\n<information>Doc 1 (Title: T0) about Lothair II mother\nDoc 2 (Title: T1) about Lothair II mother</information>\n"
    assert env_text == info + tok.eos_token
    assert ids[-1] == tok.eos_token_id and mask[-1] == 0
    model_text = tok.decode([t for t, m in zip(ids, mask, strict=True) if m == 1])
    assert model_text == "<think>hop</think>\n<search> Lothair II mother </search><answer> 20 March 851 </answer>"
    assert all((v == -0.25) == (m == 1) for v, m in zip(lp, mask, strict=True))  # env tokens: 0.0
    assert all((v == -0.5) == (m == 1) for v, m in zip(raw, mask, strict=True))
    trace = ep.search_trace[0]
    assert trace.answer == "20 March 851" and trace.num_searches == 1 and trace.question == "Q1"
    assert [p.title for p in trace.steps[1].evidence] == ["T0", "T1"]
    # token spans cover the model tokens of each turn and no environment token
    (s0, e0), (s1, e1) = trace.steps[0].token_span, trace.steps[1].token_span
    assert set(mask[s0:e0]) == {1} and set(mask[s1:e1]) == {1} and set(mask[e0:s1]) == {0}
    assert tok.decode(ids[s1:e1]) == "<answer> 20 March 851 </answer>"
    # Q2 answers at once: env EOS only
    assert ep.env_mask[1][-1] == 0 and sum(ep.env_mask[1]) == len(ep.env_mask[1]) - 1
    assert em_reward(["p", "p"], ["", ""], ep.completion_ids, golden_answers=[["20 March 851"], ["x"]],
                     search_trace=ep.search_trace) == [1.0, 1.0]  # fmt: skip


def test_episode_malformed_and_limits(smollm2_tokenizer, monkeypatch):
    tok = smollm2_tokenizer
    ep, retriever = _run(tok, monkeypatch, ["Q3", "Q4", "Q5"], max_turns=1)
    # Q3: unclosed search, model EOS: no retrieval, nothing appended by the environment
    assert ep.env_mask[0] == [1] * len(ep.completion_ids[0]) and ep.completion_ids[0][-1] == tok.eos_token_id
    assert ep.search_trace[0].steps[0].malformed and ep.search_trace[0].answer is None
    # Q4: search inside the answer: not executed, answer not credited, episode closed with an env EOS
    assert ep.search_trace[1].answer is None and "search_inside_answer" in ep.search_trace[1].format_violations
    assert ep.env_mask[1][-1] == 0
    # Q5: max_turns=1: the first search runs, the second does not and ends the episode
    assert retriever.calls == [["first"]]
    assert ep.search_trace[2].num_searches == 1 and ep.search_trace[2].answer is None


def test_budget_truncates_information(smollm2_tokenizer, monkeypatch):
    tok = smollm2_tokenizer
    n_model = len(
        tok("<think>hop</think>\n<search> Lothair II mother </search>", add_special_tokens=False)["input_ids"]
    )
    ep, _ = _run(tok, monkeypatch, ["Q1"], max_len=n_model + 5)
    assert len(ep.completion_ids[0]) == n_model + 5 and ep.env_mask[0][n_model:] == [0] * 5
    assert ep.completion_ids[0][-1] != tok.eos_token_id  # truncated: TRL sees it as such


# --------------------------------------------------------------------------------------------------------------------
# TRL: env tokens are masked out of the loss


def test_trl_masks_environment_tokens(smollm2_tokenizer, tiny_llama, monkeypatch, tmp_path):
    from procrl.trainers.grpo import ProcessGRPOConfig, ProcessGRPOTrainer

    tok = smollm2_tokenizer
    monkeypatch.setattr(search_env_mod, "generate_completions", make_fake_generate(tok))
    n_model = len(
        tok("<think>hop</think>\n<search> Lothair II mother </search>", add_special_tokens=False)["input_ids"]
    )
    args = ProcessGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_completion_length=n_model + 6,
        max_steps=1, beta=0.0, report_to="none", save_strategy="no", logging_steps=1, seed=0, temperature=1.0,
    )  # fmt: skip
    rows = [{"prompt": [{"role": "user", "content": f"Question: {q}"}], "golden_answers": ["x"]} for q in ["Q1", "Q2"]]
    trainer = ProcessGRPOTrainer(
        model=tiny_llama, reward_funcs=[em_reward], args=args, train_dataset=Dataset.from_list(rows),
        processing_class=tok, rollout_func=ProcessRollout(env=SearchEnvironment(FakeRetriever(), topk=1)),
    )  # fmt: skip
    inputs = [rows[0], rows[0], rows[1], rows[1]]
    out = trainer._generate_and_score_completions(inputs)
    mask = out["tool_mask"] * out["completion_mask"]  # TRL's loss mask (grpo_trainer.py:2497, :3027)
    # Q1 rows: n_model model tokens, then 6 information tokens (budget-truncated) -> masked
    assert mask[0, :n_model].tolist() == [1] * n_model and mask[0, n_model : n_model + 6].tolist() == [0] * 6
    # Q2 rows: "<answer> x </answer>" model tokens + env EOS (masked)
    n2 = len(tok("<answer> x </answer>", add_special_tokens=False)["input_ids"])
    assert mask[2, :n2].tolist() == [1] * n2 and mask[2, n2].item() == 0
    # The loss ignores environment tokens: changing the trailing (budget-cut) information tokens of Q1 changes no
    # model token's context, so the policy gradient is unchanged; without the mask it changes. (The loss VALUE is
    # uninformative here: with old log-probs = current ones the ratio is exactly 1.)
    out["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])
    changed = dict(out, completion_ids=out["completion_ids"].clone())
    changed["completion_ids"][0:2, n_model : n_model + 6] = 42

    def grad(batch):
        trainer.model.zero_grad()
        trainer._compute_loss(trainer.model, batch).backward()
        return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])

    def rel_diff(a, b):  # the tiny random model's gradients are ~1e-10: compare relative to their size
        ga, gb = grad(a), grad(b)
        return ((ga - gb).norm() / ga.norm()).item()

    assert rel_diff(out, changed) < 1e-4
    without = {k: v for k, v in out.items() if k != "tool_mask"}
    changed_without = {k: v for k, v in changed.items() if k != "tool_mask"}
    assert rel_diff(without, changed_without) > 1e-2


def test_real_generation_path(smollm2_tokenizer, tiny_llama):
    # the real generate + stop_criteria path on a tiny random model (it never writes tags): one turn, all model
    # tokens, log-probs equal to a teacher-forced forward of the sampled ids (raw distribution, T = 1)
    from transformers import GenerationConfig

    from procrl.generation import sequence_logps

    tok = smollm2_tokenizer
    prompts = [[{"role": "user", "content": "Question: Q1"}], [{"role": "user", "content": "Question: Q22"}]]
    prompt_ids = render_prompts(tok, prompts)
    config = GenerationConfig(do_sample=False, max_new_tokens=6, pad_token_id=tok.pad_token_id)
    env = SearchEnvironment(FakeRetriever())
    ep = env.run(tiny_llama, tok, prompts, prompt_ids, config, max_completion_length=6,
                 pad_token_id=tok.pad_token_id, eos_ids=[tok.eos_token_id])  # fmt: skip
    for i in range(2):
        assert ep.env_mask[i] == [1] * len(ep.completion_ids[i]) and len(ep.completion_ids[i]) == 6
        seq = list(prompt_ids[i]) + ep.completion_ids[i]
        (ref,) = sequence_logps(tiny_llama, [seq], [len(prompt_ids[i])], pad_token_id=tok.pad_token_id)
        assert ep.completion_logps[i] == pytest.approx(ref, abs=1e-4)
