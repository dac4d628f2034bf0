"""A PUM against the step oracle on a select run's samples (evals/pum_oracle.py, `procrl pum-oracle`): labels,
cross-fitted first-error detection and within-problem AUROC, on a hand-made select run of arith problems."""

from __future__ import annotations

import json
import math
from itertools import pairwise

import pytest

from procrl.data_builders.datasets import load_math_dataset
from procrl.evals import pum_oracle
from procrl.evals.pum_oracle import crossfit_shift, label_candidates, pum_oracle_agreement
from procrl.rewards.oracle import gold_steps_from_json
from procrl.rewards.pum import PrefixUtilityModel
from procrl.rewards.pum_rewards import PUMReward
from procrl.scripts import pum_oracle as command

DATASET = "arith-ops2-d1-test-n6"


def _texts(gold: str) -> dict[str, str]:
    """A right trace, one wrong at step 0 (its result off by one, carried on), and one without a step."""
    steps = gold_steps_from_json(gold)
    (a, op, b, c), (_, op2, d, e) = [(s.a, s.op, s.b, s.result) for s in steps]
    right = f"{a} {op} {b} = {c}.\n{c} {op2} {d} = {e}.\nThe answer is {e}."
    wrong = f"{a} {op} {b} = {c + 1}.\n{c + 1} {op2} {d} = {e + 1}.\nThe answer is {e + 1}."
    return {"right": right, "wrong": wrong, "none": "I am not sure."}


def _select_run(tmp_path, max_new_tokens: int = 64):
    rows = list(load_math_dataset(DATASET, prompt_template="{question}"))
    problems = []
    for row in rows:
        texts = _texts(row["gold_steps"])
        problems.append(
            {
                "problem_id": row["problem_id"],
                "answer": row["answer"],
                "candidates": [
                    {"text": texts[kind], "num_tokens": n, "score_good": good}
                    for kind, n, good in [("right", 20, 1.0), ("wrong", 22, 0.0), ("none", 5, None)]
                ],  # fmt: skip
            }
        )
    settings = {"dataset": DATASET, "split": None, "start": 0, "end": -1, "prompt_template": "{question}",
                "max_new_tokens": max_new_tokens, "n": 3}  # fmt: skip
    record = {"command": "select", "status": "finished", "result": {"settings": settings, "dataset": DATASET}}
    (tmp_path / "run.json").write_text(json.dumps(record))
    (tmp_path / "problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    return rows


def test_labels_follow_the_oracle_and_the_token_budget(tmp_path):
    rows = _select_run(tmp_path)
    from procrl.evals.selection import read_select_run

    run = read_select_run(tmp_path)
    ids, questions, texts, labels = label_candidates(run, rows)
    assert len(labels) == 3 * len(rows) and questions[0] == rows[0]["question"] and ids[2] == rows[0]["problem_id"]
    assert [(lab.first_error, len(lab.steps)) for lab in labels[:3]] == [(None, 2), (0, 2), (None, 0)]
    # a trace cut on its last result: at the budget (20 tokens) that result is no step, below it is one
    cut = texts[0].split("\nThe answer")[0].rstrip(".")
    run["problems"][0]["candidates"] = [{"text": cut, "num_tokens": 20}, {"text": cut, "num_tokens": 19}]
    run["settings"]["max_new_tokens"] = 20
    at_budget, below = label_candidates(run, rows)[3][:2]
    assert (len(at_budget.steps), len(below.steps)) == (1, 2)
    with pytest.raises(ValueError, match="not in its data slice"):
        label_candidates(run, rows[1:])
    with pytest.raises(ValueError, match="has no gold_steps"):
        label_candidates(run, [{**r, "gold_steps": None} for r in rows])


def test_crossfit_needs_two_folds_and_enough_problems():
    with pytest.raises(ValueError, match="folds >= 2"):
        crossfit_shift([[1.0]], [None], ["a"], 1)
    with pytest.raises(ValueError, match="2 problems"):
        crossfit_shift([[1.0], [1.0]], [None, None], ["a", "b"], 3)


def test_agreement_with_designed_step_scores(tmp_path, monkeypatch, smollm2_tokenizer, tiny_pum_factory):
    rows = _select_run(tmp_path)
    pum = PrefixUtilityModel(tiny_pum_factory(len(smollm2_tokenizer)), smollm2_tokenizer, max_length=1024)

    def designed(_pum, questions, texts, labels, include_empty):  # +1 for a step without error, -1 for an error step
        assert include_empty  # U(x, empty prefix) in front: -1.5 here (so step 0's increment ranks differently)
        steps = [
            [-1.5] * bool(label.steps) + [1.0 if not s.is_error else -1.0 for s in label.steps] for label in labels
        ]
        return steps, [float(len(t)) for t in texts]

    monkeypatch.setattr(pum_oracle, "pum_scores", designed)
    report = pum_oracle_agreement(tmp_path, pum, folds=2, resamples=50, progress=False)
    n = len(rows)
    assert report["counts"] == {"problems": n, "completions": 3 * n, "without_steps": n, "erroneous": n,
                                "error_free": n, "incomplete": 0}  # fmt: skip
    fe = report["first_error"]
    assert (fe["f1"], fe["acc_erroneous"], fe["acc_correct"]) == (1.0, 1.0, 1.0)  # any threshold in (-1, 1]
    assert (fe["n_erroneous"], fe["n_correct"], fe["n_no_steps"], len(fe["thresholds"])) == (n, n, n, 2)
    assert all(-1.0 < t <= 1.0 for t in fe["thresholds"])
    within = report["within_problem_auroc"]
    assert set(within) == {"pum_full", "num_tokens", "good"}
    assert within["good"]["auroc"] == 1.0 and within["good"]["n_unscored"] == n  # the step-less one is unscored
    # length: the right trace (20) is below the wrong one (22) and above the step-less one (5): 1/2 per problem
    assert within["num_tokens"]["auroc"] == pytest.approx(0.5) and within["num_tokens"]["n_problems"] == n
    assert report["step_auroc"]["no_error"]["auroc"] == 1.0
    # increments U_k - U_{k-1} (-1.5 before step 0), against the oracle's no-error steps, by pairwise count
    _, _, _, labels = label_candidates(pum_oracle.read_select_run(tmp_path), rows)
    good, bad = [], []
    for label in labels:
        utilities = [-1.5] + [1.0 if not s.is_error else -1.0 for s in label.steps]
        for step, (before, after) in zip(label.steps, pairwise(utilities), strict=True):
            (bad if step.is_error else good).append(after - before)
    wins = sum((g > b) + 0.5 * (g == b) for g in good for b in bad)
    increments = report["step_auroc_increments"]["no_error"]
    assert (increments["n_positive"], increments["n_negative"]) == (len(good), len(bad))
    assert increments["auroc"] == pytest.approx(wins / (len(good) * len(bad)))
    assert "increment" in command.format_report(report)


def test_each_fold_is_flagged_at_the_other_folds_threshold(tmp_path, monkeypatch, smollm2_tokenizer, tiny_pum_factory):
    rows = _select_run(tmp_path)  # 6 problems: positions 0, 2, 4 in fold 0, the others in fold 1
    pum = PrefixUtilityModel(tiny_pum_factory(len(smollm2_tokenizer)), smollm2_tokenizer, max_length=1024)
    offset = {row["problem_id"]: 10.0 * (i % 2) for i, row in enumerate(rows)}
    question_to_id = {row["question"]: row["problem_id"] for row in rows}

    def designed(_pum, questions, texts, labels, include_empty):  # +-1 as above, shifted by 10 in fold 1
        steps = [[0.0] * bool(label.steps) + [(1.0 if not s.is_error else -1.0) + offset[question_to_id[q]]
                                              for s in label.steps]
                 for q, label in zip(questions, labels, strict=True)]  # fmt: skip
        return steps, [0.0] * len(texts)

    monkeypatch.setattr(pum_oracle, "pum_scores", designed)
    fe = pum_oracle_agreement(tmp_path, pum, folds=2, resamples=0, progress=False)["first_error"]
    # fold 0 gets fold 1's threshold (10: every step of fold 0 flagged, so its 3 wrong traces are hits and its 3
    # right ones misses); fold 1 gets fold 0's (0: nothing flagged, its 3 right traces hits). In-sample: F1 = 1.
    assert fe["thresholds"] == [10.0, 0.0]
    assert (fe["acc_erroneous"], fe["acc_correct"], fe["f1"]) == (0.5, 0.5, 0.5)


def test_no_threshold_leaves_the_aurocs(tmp_path, monkeypatch, smollm2_tokenizer, tiny_pum_factory, capsys):
    _select_run(tmp_path)
    pum = PrefixUtilityModel(tiny_pum_factory(len(smollm2_tokenizer)), smollm2_tokenizer, max_length=1024)
    monkeypatch.setattr(
        pum_oracle,
        "pum_scores",
        lambda _p, q, texts, labels, include_empty: (
            [[math.nan] * (len(x.steps) + bool(x.steps)) for x in labels],
            [1.0] * len(texts),
        ),
    )
    report = pum_oracle_agreement(tmp_path, pum, resamples=0, progress=False)
    assert "no finite step score" in report["first_error"]["undefined"]
    assert report["within_problem_auroc"]["pum_full"]["auroc"] == 0.5  # all tied
    assert "first-error detection: undefined" in command.format_report(report)


def test_the_command_scores_with_a_real_pum_and_writes_the_result(
    tmp_path, capsys, smollm2_tokenizer, tiny_pum_factory
):
    rows = _select_run(tmp_path)
    pum_dir = tmp_path / "pum"
    model = tiny_pum_factory(len(smollm2_tokenizer))
    model.save_pretrained(pum_dir)
    smollm2_tokenizer.save_pretrained(pum_dir)
    out = tmp_path / "agreement.json"
    assert command.main([str(tmp_path), "--pum", str(pum_dir), "--resamples", "0", "--out", str(out),
                         "--no-progress"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "first-error detection" in printed and "within-problem AUROC" in printed and str(out) in printed
    report = json.loads(out.read_text())
    pum = PrefixUtilityModel.from_pretrained(str(pum_dir), batch_size=64)  # the command's batches
    texts = [t for row in rows for t in _texts(row["gold_steps"]).values()]
    questions = [row["question"] for row in rows for _ in range(3)]
    full = PUMReward(pum, mode="full")(completions=texts, question=questions)
    assert report["counts"]["completions"] == len(texts) and all(v is not None for v in full)
    by_hand = []  # per problem: the right trace against the wrong and the step-less one, ties 1/2
    for p in range(len(rows)):
        right, others = full[3 * p], full[3 * p + 1 : 3 * p + 3]
        by_hand.append(sum(1.0 if right > o else 0.5 if right == o else 0.0 for o in others) / 2)
    assert report["within_problem_auroc"]["pum_full"]["auroc"] == pytest.approx(sum(by_hand) / len(rows), abs=1e-6)
    assert command.main([str(tmp_path / "missing"), "--pum", str(pum_dir)]) == 2
    assert "procrl pum-oracle: error:" in capsys.readouterr().err
