"""FRSCallback inside ProcessGRPOTrainer runs of a tiny random Llama (real SmolLM2 vocabulary, CPU), with scripted
judges; and `generate_traces` against an independent forward pass."""

from __future__ import annotations

import contextlib
import json
import sys
import types

import pytest
import torch
from datasets import Dataset
from grpo_helpers import grpo_config
from transformers import GenerationConfig

from procrl.evals.frs import FRSConfig, ReasoningJudgement, Trace, tail_confidence_from_logps
from procrl.evals.frs import sampling as frs_traces
from procrl.evals.frs.sampling import generate_traces
from procrl.generation import render_prompts, sequence_logps
from procrl.judges import Judge, JudgeArguments, JudgeResult
from procrl.rewards.outcome import outcome_reward
from procrl.trainers import frs_callback
from procrl.trainers.frs_callback import FRSCallback, add_frs_callback
from procrl.trainers.grpo import ProcessGRPOTrainer
from procrl.trainers.tasks.arguments import FRSCallbackArguments

QUESTIONS = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8"), ("What is 1 + 1?", "2")]


def _dataset():
    rows = [
        {"prompt": [{"role": "user", "content": q}], "answer": a, "problem_id": f"toy/{i}", "question": q}
        for i, (q, a) in enumerate(QUESTIONS)
    ]
    return Dataset.from_list(rows)


class ConstantJudge(Judge):
    """Scores every trace (3, 4, 4, 4) -> RS (15 - 4) / 16 * 100 = 68.75 ("ok"); or times out on every request
    ("unscored"); or loses its server so that the whole call raises ("raise")."""

    def __init__(self, mode="ok"):
        super().__init__("constant")
        self.mode, self.calls = mode, 0

    def judge(self, requests, schema, *, desc="judging", progress=True):
        self.calls += 1
        if self.mode == "raise":
            raise ConnectionError("judge server went away")
        return super().judge(requests, schema, desc=desc, progress=progress)

    def _request_payload(self, messages, schema):
        return {"messages": messages}

    async def _judge_uncached(self, requests, schemas, finish):
        for j in range(len(requests)):
            if self.mode == "ok":
                value = schemas[j](faithfulness=3, utility=4, coherence=4, factuality=4)
                finish(j, JudgeResult(value=value, unscored=None, raw="{}", attempts=1))
            else:
                finish(j, JudgeResult(value=None, unscored="timeout", raw=None, attempts=4))


def _trainer(tmp_path, model, tokenizer, **config):
    return ProcessGRPOTrainer(
        model=model,
        reward_funcs=[outcome_reward],
        args=grpo_config(tmp_path, **{"max_steps": 2, **config}),
        train_dataset=_dataset(),
        processing_class=tokenizer,
    )


@pytest.mark.slow  # trains
def test_callback_logs_frs_during_training_without_a_second_forward(tmp_path, tiny_llama, tokenizer):
    trainer = _trainer(tmp_path, tiny_llama, tokenizer, max_steps=3)
    judge = ConstantJudge()
    callback = FRSCallback(_dataset(), every_n_steps=2, n_traces=2, n_problems=2, judge=judge, trainer=trainer)
    # Count policy forwards that happen outside `generate` while the callback evaluates: there must be none.
    model = trainer.model
    state = {"generating": False, "evaluating": False, "outside": 0}
    original_generate, original_evaluate = model.generate, callback.evaluate

    def generate(*args, **kwargs):
        state["generating"] = True
        try:
            return original_generate(*args, **kwargs)
        finally:
            state["generating"] = False

    def evaluate(step):
        state["evaluating"] = True
        try:
            return original_evaluate(step)
        finally:
            state["evaluating"] = False

    def count_forward(*_):
        if state["evaluating"] and not state["generating"]:
            state["outside"] += 1

    model.generate, callback.evaluate = generate, evaluate
    model.register_forward_hook(count_forward)
    trainer.train()

    assert state["outside"] == 0
    assert sorted(callback.reports) == [2, 3]  # step 2 (every 2) and the last step, 3
    frs_logs = [row for row in trainer.state.log_history if "frs/score" in row]
    assert [row["step"] for row in frs_logs] == [2, 3]
    for row in frs_logs:
        assert row["frs/score"] == 68.75  # every judged trace has RS 68.75, so every FRS@K does too
        assert row["frs/at_k/50"] == 68.75
        assert row["frs/unscored"] == 0.0
        assert 0.0 <= row["frs/accuracy"] <= 1.0 and "frs/accuracy_kept" in row
        assert "frs/selection_gain" in row and row["frs/selection_gain"] == 0.0
    # TRL's per-step metrics stay in the step's own entry (the callback bypasses GRPOTrainer.log, which clears them)
    step_rows = [row for row in trainer.state.log_history if "loss" in row]
    assert len(step_rows) == 3 and all("rewards/outcome_reward/mean" in row for row in step_rows)
    assert not any("frs/score" in row for row in step_rows)
    # report_to none: the judged traces go to JSON next to the checkpoints
    saved = json.loads((tmp_path / "frs_step2.json").read_text())
    assert saved["step"] == 2 and len(saved["traces"]) == 4  # 2 problems x 2 traces
    assert {t["problem_id"] for t in saved["traces"]} == {"toy/0", "toy/1"}
    assert saved["report"]["at_k"]["10"] == 68.75
    assert (tmp_path / "frs_step3.json").is_file()
    assert judge.calls == 2


def test_evaluation_leaves_the_training_rng_and_mode_alone(tmp_path, tiny_llama, tokenizer):
    # FRS samples from its own forked RNG (seeded by args.seed + step), so the training run's random stream is the
    # same with and without the callback, and the evaluation at one step is reproducible.
    trainer = _trainer(tmp_path, tiny_llama, tokenizer)
    callback = FRSCallback(_dataset(), every_n_steps=1, n_traces=2, n_problems=2, judge=None).attach(trainer)
    assert callback in trainer.callback_handler.callbacks
    trainer.model.train()
    texts = []
    for _ in range(2):
        torch.manual_seed(5)
        callback.evaluate(4)
        after = torch.rand(3)
        torch.manual_seed(5)
        assert torch.equal(after, torch.rand(3))
        assert trainer.model.training  # restored after generating in eval mode
        texts.append([t["completion"] for t in json.loads((tmp_path / "frs_step4.json").read_text())["traces"]])
    assert texts[0] == texts[1] and len(texts[0]) == 4


class RecordingJudge(ConstantJudge):
    """ConstantJudge that keeps the user message of every request."""

    def __init__(self):
        super().__init__("ok")
        self.prompts = []

    async def _judge_uncached(self, requests, schemas, finish):
        self.prompts += [next(m["content"] for m in messages if m["role"] == "user") for messages in requests]
        await super()._judge_uncached(requests, schemas, finish)


@pytest.mark.parametrize("sees", [True, False])
def test_the_judge_sees_the_answer_check_only_when_configured(tmp_path, tiny_llama, tokenizer, sees):
    trainer = _trainer(tmp_path, tiny_llama, tokenizer)
    judge = RecordingJudge()
    config = FRSConfig(judge_sees_correctness=sees)
    callback = FRSCallback(_dataset(), every_n_steps=1, n_traces=2, n_problems=2, judge=judge, frs_config=config)
    report = callback.attach(trainer).evaluate(1)
    assert report is not None and report.judge_sees_correctness is sees and report.score == 68.75
    assert judge.prompts and all(("final_correct" in prompt) is sees for prompt in judge.prompts)


@pytest.mark.slow  # trains
@pytest.mark.parametrize("mode", ["raise", "unscored"])
def test_judge_failures_never_stop_training(tmp_path, tiny_llama, tokenizer, mode):
    trainer = _trainer(tmp_path, tiny_llama, tokenizer, max_steps=1)
    FRSCallback(_dataset(), every_n_steps=1, n_traces=2, n_problems=2, judge=ConstantJudge(mode)).attach(trainer)
    trainer.train()
    assert trainer.state.global_step == 1
    logs = {k: v for row in trainer.state.log_history for k, v in row.items() if k.startswith("frs/")}
    if mode == "raise":
        assert logs == {"frs/failed": 1.0}
    else:  # every request failed: counted, and no score is logged rather than NaN
        assert "frs/score" not in logs
        # 4 traces: top floor(50% x 4) = 2 for FRS@50, plus selection gain's top + random of each question
        assert 2 <= logs["frs/unscored"] == logs["frs/judged"] <= 4


def test_generate_traces_confidence_equals_an_independent_forward(tiny_llama, tokenizer, monkeypatch):
    recorded = []
    original = frs_traces.generate_completions

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        recorded.append(out)
        return out

    monkeypatch.setattr(frs_traces, "generate_completions", spy)
    rows = [dict(r) for r in _dataset()]
    config = GenerationConfig(
        do_sample=True, temperature=0.7, top_k=0, max_new_tokens=10, pad_token_id=2, eos_token_id=[2]
    )
    torch.manual_seed(0)
    traces = generate_traces(
        tiny_llama, tokenizer, rows, n_traces=3, generation_config=config, batch_size=4, progress=False
    )
    assert len(traces) == 9 and [t.problem_id for t in traces[:4]] == ["toy/0"] * 3 + ["toy/1"]
    completion_ids = [ids for out in recorded for ids in out.completion_ids]
    prompts = [row["prompt"] for row in rows for _ in range(3)]
    prompt_ids = render_prompts(tokenizer, prompts)
    separate = sequence_logps(tiny_llama, [p + c for p, c in zip(prompt_ids, completion_ids, strict=True)],
                              [len(p) for p in prompt_ids])  # fmt: skip
    for t, ids, logps in zip(traces, completion_ids, separate, strict=True):
        assert t.num_tokens == len(ids)  # EOS included when sampled
        assert t.confidence == pytest.approx(tail_confidence_from_logps(logps), abs=1e-5)
        assert t.correct is False  # a random model writes no "The answer is"
        assert t.problem.startswith("What is")


def test_wandb_table_holds_judged_traces(tmp_path, monkeypatch):
    logged = []

    class Table:
        def __init__(self, columns):
            self.columns, self.data = columns, []

        def add_data(self, *row):
            self.data.append(row)

    fake = types.SimpleNamespace(run=object(), Table=Table, log=lambda payload: logged.append(payload))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    callback = FRSCallback(_dataset(), every_n_steps=1, judge=None)
    judged = Trace("toy/0", "What is 2 + 3?", "2 + 3 = 5", "5", True, 0.5, 7, scores=dict(
        faithfulness=5, utility=5, coherence=5, factuality=4))  # fmt: skip
    failed = Trace("toy/0", "What is 2 + 3?", "no idea", "5", False, 0.4, 3, unscored="timeout")
    not_judged = Trace("toy/1", "What is 4 + 4?", "8", "8", True, 0.1, 2)
    with_probs = Trace("toy/1", "What is 4 + 4?", "4 + 4 = 8", "8", True, 0.3, 6, scores=dict(
        faithfulness=4, utility=4, coherence=3, factuality=5), expected_scores=dict(
        faithfulness=4.5, utility=3.75, coherence=3.25, factuality=4.5))  # fmt: skip
    callback._log_wandb_table(7, [judged, failed, not_judged, with_probs])
    (payload,) = logged
    assert payload["train/global_step"] == 7
    table = payload["frs/traces"]
    assert table.columns == ["problem_id", "problem", "trace", "confidence", "faithfulness", "utility", "coherence",
                             "factuality", "rs", "rs_expected", "correct"]  # fmt: skip
    assert table.data[:2] == [
        ("toy/0", "What is 2 + 3?", "2 + 3 = 5", 0.5, 5, 5, 5, 4, 93.75, None, True),  # RS (19 - 4) / 16 * 100
        ("toy/0", "What is 2 + 3?", "no idea", 0.4, None, None, None, None, None, None, False),
    ]
    # RS (16 - 4) / 16 * 100 = 75; RS_expected (16.0 - 4) / 16 * 100 = 75 too (4.5 + 3.75 + 3.25 + 4.5 = 16.0)
    (*head, rs, rs_expected, correct) = table.data[2]
    assert head == ["toy/1", "What is 4 + 4?", "4 + 4 = 8", 0.3, 4, 4, 3, 5] and correct is True
    assert rs == pytest.approx(75.0) and rs_expected == pytest.approx(75.0)
    assert len(table.data) == 3  # the trace that was never judged is left out
    assert ReasoningJudgement(**judged.scores).factuality == 4


def test_bad_arguments_and_a_missing_trainer():
    with pytest.raises(ValueError, match="every_n_steps"):
        FRSCallback(_dataset(), every_n_steps=0)
    with pytest.raises(ValueError, match="'prompt' and 'answer'"):
        FRSCallback(Dataset.from_list([{"question": "q"}]), every_n_steps=1)
    assert FRSCallback(_dataset(), every_n_steps=1, judge=None).evaluate(1) is None  # warns, does nothing


def test_frs_arguments_build_and_attach_the_callback(tmp_path):
    class FakeTrainer:
        args = types.SimpleNamespace(output_dir=str(tmp_path), seed=7)
        callback_handler = types.SimpleNamespace(callbacks=[])

        def add_callback(self, callback):
            self.callback_handler.callbacks.append(callback)

    trainer, local = FakeTrainer(), JudgeArguments()
    assert add_frs_callback(FRSCallbackArguments(), trainer, judge=local) is None  # off by default
    args = FRSCallbackArguments(frs_every_n_steps=5, frs_eval_set="svamp:0:3", frs_traces=2)
    callback = add_frs_callback(args, trainer, judge=JudgeArguments(judge="none"))
    assert trainer.callback_handler.callbacks == [callback] and callback.trainer is trainer
    assert (len(callback.rows), callback.every_n_steps, callback.n_traces, callback.judge) == (3, 5, 2, None)
    callback = add_frs_callback(FRSCallbackArguments(frs_every_n_steps=1, frs_max_new_tokens=64), trainer, judge=local)
    assert callback.judge is local and len(callback.rows) == 10 and callback.overrides == {"max_new_tokens": 64}
    assert callback.n_traces == 4  # the callback's CPU-sized default (procrl frs: 16)
    assert callback.config == FRSConfig(seed=7)  # K = 10, the curve at 10-50, the judge sees the answer check
    args = FRSCallbackArguments(frs_every_n_steps=1, frs_judge_sees_correctness=False, frs_k_percent=20,
                                frs_temperature=0.5, frs_estimator="bins")  # fmt: skip
    callback = add_frs_callback(args, trainer, judge=local)
    assert callback.config.judge_sees_correctness is False and callback.config.k_percent == 20
    assert callback.config.k_values == (10, 20, 30, 40, 50) and callback.config.estimator == "bins"
    assert callback.overrides == {"temperature": 0.5}
    for kwargs, message in [
        ({"frs_eval_set": "gsm8k:a:b"}, "frs_eval_set"),
        ({"frs_every_n_steps": -1}, "frs_every_n_steps must be >= 0"),
        ({"frs_traces": 0}, "frs_traces must be >= 1"),
        ({"frs_k_percent": 0}, r"percentages in \(0, 100\], got 0"),
        ({"frs_k_values": [10, 120]}, "got 120"),
        ({"frs_max_new_tokens": 0}, "frs_max_new_tokens must be >= 1"),
        ({"frs_temperature": 0.0}, "frs_temperature must be > 0"),
        ({"frs_random_baseline": "median"}, "frs_random_baseline must be 'sample' or 'mean'"),
    ]:
        with pytest.raises(ValueError, match=message):
            FRSCallbackArguments(**kwargs)


def test_the_run_judge_is_opened_once_on_first_use_and_closed_at_the_end(tmp_path, monkeypatch):
    opened, closed = [], []
    judge = ConstantJudge()

    @contextlib.contextmanager
    def fake_open(args, *, output_dir, default_max_tokens):
        opened.append((args.judge, str(output_dir), default_max_tokens))
        yield judge
        closed.append(True)

    monkeypatch.setattr(frs_callback, "open_judge_from", fake_open)
    callback = FRSCallback(_dataset(), every_n_steps=1, judge=JudgeArguments(judge="http://127.0.0.1:9/v1"))
    callback.trainer = types.SimpleNamespace(args=types.SimpleNamespace(output_dir=str(tmp_path)))
    assert callback._open_judge() is judge and callback._open_judge() is judge
    assert opened == [("http://127.0.0.1:9/v1", str(tmp_path), 96)]  # FRS's reply budget (JUDGE_MAX_TOKENS)
    callback.close()
    assert closed == [True]
