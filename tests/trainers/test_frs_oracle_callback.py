"""The FRS callback with `judge: oracle`: it scores the live policy's traces of arith problems with the step oracle
(tiny random Llama, CPU, no training step), and refuses an eval set without gold steps when it is built."""

from __future__ import annotations

import json
import types

import pytest
from datasets import Dataset
from grpo_helpers import grpo_config

from procrl.data_builders.datasets import load_math_dataset, resolve_template
from procrl.evals.frs import FRSConfig, Trace
from procrl.evals.frs.oracle_judge import OracleJudge, oracle_scores
from procrl.judges import JudgeArguments
from procrl.rewards.oracle import gold_steps_from_json, oracle_labels
from procrl.rewards.outcome import outcome_reward
from procrl.trainers import frs_callback
from procrl.trainers.frs_callback import FRSCallback, add_frs_callback
from procrl.trainers.grpo import ProcessGRPOTrainer
from procrl.trainers.tasks.arguments import FRSCallbackArguments

ARITH = "arith-ops3-d2-test-n64"
ORACLE = JudgeArguments(judge="oracle")


def _arith(n=2):
    return load_math_dataset(ARITH, end=n, prompt_template=resolve_template("one_shot"))


def _trainer(tmp_path, model, tokenizer):
    return ProcessGRPOTrainer(
        model=model,
        reward_funcs=[outcome_reward],
        args=grpo_config(tmp_path),
        train_dataset=_arith(),
        processing_class=tokenizer,
    )


def test_the_callback_scores_the_policys_traces_with_the_oracle(tmp_path, tiny_llama, tokenizer):
    trainer = _trainer(tmp_path, tiny_llama, tokenizer)
    callback = FRSCallback(_arith(), every_n_steps=1, n_traces=2, n_problems=2, judge=ORACLE).attach(trainer)
    report = callback.evaluate(1)
    assert report is not None and report.unscored == {} and report.n_scored == report.n_judged > 0
    assert isinstance(callback._judge, OracleJudge) and report.judge["requests"] == report.n_judged
    saved = json.loads((tmp_path / "frs_step1.json").read_text())
    rows = {row["problem_id"]: row for row in _arith()}
    for trace in saved["traces"]:
        assert trace["gold_steps"] == rows[trace["problem_id"]]["gold_steps"] and trace["truncated"] is not None
        if trace["scores"] is not None:
            gold = gold_steps_from_json(trace["gold_steps"])
            labels = oracle_labels(trace["completion"], trace["problem"], gold, truncated=trace["truncated"])
            assert trace["scores"] == oracle_scores(labels)
    logged = [row for row in trainer.state.log_history if "frs/score" in row]
    assert len(logged) == 1 and logged[0]["frs/score"] == report.score


def test_known_traces_give_their_rs_in_the_callbacks_metrics(tmp_path, tiny_llama, tokenizer, monkeypatch):
    def scripted(model, tokenizer, rows_, **kwargs):  # the policy's traces replaced by the gold and a wrong one
        return [
            Trace(row["problem_id"], row["question"], text, row["answer"], None, confidence, 10,
                  gold_steps=row["gold_steps"], truncated=False)
            for row in rows_
            for text, confidence in ((row["solution"], 0.9), ("I do not know.", 0.8))
        ]  # fmt: skip

    monkeypatch.setattr(frs_callback, "generate_traces", scripted)
    trainer = _trainer(tmp_path, tiny_llama, tokenizer)
    config = FRSConfig(random_baseline="mean")  # RS(random) = the mean over the question's traces: no draw
    callback = FRSCallback(_arith(), every_n_steps=1, n_traces=2, judge=ORACLE, frs_config=config).attach(trainer)
    report = callback.evaluate(2)
    # 4 traces: the two gold traces (RS 100) are the most confident; the two without steps have RS 0, so each
    # question's gain is 100 - (100 + 0) / 2
    assert report.at_k[50] == 100.0 and report.selection_gain == pytest.approx(50.0)
    assert report.n_judged == 4 and report.score == 100.0


def test_an_eval_set_without_gold_steps_is_refused_when_the_callback_is_built():
    plain = Dataset.from_list([{"prompt": [{"role": "user", "content": "1 + 1?"}], "answer": "2", "question": "q"}])
    for judge in (ORACLE, OracleJudge()):
        with pytest.raises(ValueError, match="step-checkable problems only .*the FRS eval set has no `gold_steps`"):
            FRSCallback(plain, every_n_steps=1, judge=judge)
    trainer = types.SimpleNamespace(
        args=types.SimpleNamespace(output_dir="unused", seed=0),
        callback_handler=types.SimpleNamespace(callbacks=[]),
        add_callback=lambda callback: None,
    )
    args = FRSCallbackArguments(frs_every_n_steps=1, frs_eval_set="svamp:0:2")
    with pytest.raises(ValueError, match="frs_eval_set svamp:0:2 has no `gold_steps`"):
        add_frs_callback(args, trainer, judge=ORACLE)
    args = FRSCallbackArguments(frs_every_n_steps=1, frs_eval_set=f"{ARITH}:0:2")
    callback = add_frs_callback(args, trainer, judge=ORACLE)
    assert callback is not None and callback.judge is ORACLE and len(callback.rows) == 2
