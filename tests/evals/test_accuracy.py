"""Evaluation helpers: the Wilson interval against textbook values, the before/after table (the run report
of the GRPO command is tested in tests/scripts/test_train_grpo_report.py), and `evaluate` on an empty eval set and on
one problem no reward applies to (a tiny random model: undefined values are None, never 0)."""

import pytest
from datasets import Dataset

from procrl.evals.accuracy import evaluate, paired_comparison, wilson_interval
from procrl.evals.reporting import format_table
from procrl.evals.stats import MISSING


@pytest.mark.parametrize(
    "successes, n, low, high",
    [
        (5, 10, 0.2366, 0.7634),  # symmetric textbook case
        (0, 50, 0.0, 3.8415 / 53.8415),  # 0/n: upper bound z²/(n + z²)
        (50, 50, 50 / 53.8415, 1.0),  # n/n: lower bound n/(n + z²)
        (3, 150, 0.0068, 0.0572),
    ],
)
def test_wilson_interval(successes, n, low, high):
    got_low, got_high = wilson_interval(successes, n)
    assert got_low == pytest.approx(low, abs=1e-4)
    assert got_high == pytest.approx(high, abs=1e-4)


def test_wilson_interval_without_data_is_none():
    # 0 trials: no proportion, so no interval (it used to be the uninformative (0, 1))
    assert wilson_interval(0, 0) is None


def test_table_pairs_before_and_after_by_name():
    row = dict(
        accuracy=0.02,
        ci_low=0.007,
        ci_high=0.057,
        mean_reward=-0.0289,
        mean_length=53.2,
        truncated_frac=0.03,
        wall_time_s=155.0,
    )
    text = format_table([{"name": "svamp[700:850]", **row}], [{"name": "svamp[700:850]", **row, "accuracy": 0.027}])
    lines = text.splitlines()
    assert lines[2].split()[:3] == ["svamp[700:850]", "before", "0.020"]
    assert lines[3].split()[:3] == ["svamp[700:850]", "after", "0.027"]


def test_table_shows_undefined_values_as_dashes():
    # an empty eval set: every rate and mean is None; the wall time is measured
    empty = dict(accuracy=None, ci_low=None, ci_high=None, mean_reward=None, mean_length=None, truncated_frac=None)
    text = format_table([{"name": "svamp[0:0]", **empty, "wall_time_s": 0.5}], [])
    assert text.splitlines()[2].split() == ["svamp[0:0]", "before", MISSING, MISSING, MISSING, MISSING, "0.5"]


def _always_right(completions, **kwargs):
    return [1.0] * len(completions)


def _abstain(completions, **kwargs):
    return [None] * len(completions)


def test_evaluate_on_no_problem_is_undefined_not_zero(tiny_llama, tokenizer):
    empty = Dataset.from_dict({"prompt": [], "answer": []})
    result = evaluate(tiny_llama, tokenizer, empty, name="svamp[0:0]", outcome_func=_always_right, progress=False)
    # n = 0: the counts are 0; accuracy, its interval, mean reward, length and truncation are over nothing: None
    assert (result.n, result.unparseable_gold) == (0, 0)
    assert result.to_dict() | {"wall_time_s": 0} == {
        "name": "svamp[0:0]", "n": 0, "accuracy": None, "ci_low": None, "ci_high": None, "mean_reward": None,
        "rewards": {}, "mean_length": None, "truncated_frac": None, "unparseable_gold": 0, "wall_time_s": 0,
        "problems": [],
    }  # fmt: skip


def test_evaluate_without_any_reward_value_has_no_mean_reward(tiny_llama, tokenizer):
    data = Dataset.from_dict({"prompt": ["What is 2 + 2?"], "answer": ["4"]})
    result = evaluate(
        tiny_llama, tokenizer, data, name="one", outcome_func=_always_right, reward_funcs=[_abstain],
        max_new_tokens=3, progress=False,
    )  # fmt: skip
    # 1 of 1 right: accuracy 1, Wilson [n / (n + z²), 1] = [1 / 4.8415, 1]
    assert (result.n, result.accuracy, result.ci_high) == (1, 1.0, 1.0)
    assert result.ci_low == pytest.approx(1 / 4.8415, abs=1e-4)
    # the only reward abstained on the only row: no row to average, so None (it used to be 0.0)
    assert result.mean_reward is None and result.rewards == {"_abstain": None}
    # one completion of 1 to 3 tokens: a measured length and a truncation share of 0 or 1
    assert 1 <= result.mean_length <= 3 and result.truncated_frac in (0.0, 1.0)


def test_paired_comparison_pairs_problems_by_id_and_skips_missing_values():
    def rows(correct, process):
        return {"problems": [{"problem_id": f"p{i}", "correct": c, "rewards": {"oracle_process_reward": r}}
                             for i, (c, r) in enumerate(zip(correct, process, strict=True))]}  # fmt: skip

    before = rows([0.0, 0.0, 1.0, 0.0, None], [0.0, 0.5, 1.0, 0.25, 0.5])
    after = rows([1.0, 0.0, 1.0, 1.0, 1.0], [1.0, 0.5, None, 1.0, 1.0])
    after["problems"].append({"problem_id": "extra", "correct": 1.0, "rewards": {}})
    out = paired_comparison(before, after)
    acc, process = out["accuracy"], out["oracle_process_reward"]
    assert (acc["n"], acc["before"], acc["after"], acc["diff"]) == (4, 0.25, 0.75, 0.5)  # p4: gold unparseable
    assert process["n"] == 4 and process["diff"] == pytest.approx((1.0 + 0.0 + 0.75 + 0.5) / 4)  # p2 has no after
    assert acc["ci_low"] <= acc["diff"] <= acc["ci_high"]
    assert paired_comparison(before, {"problems": []}) == {}
