"""Paired bootstrap differences of the StepGap verifier metrics (`procrl.evals.stepgap.intervals.
paired_difference_intervals`), the comparisons `evaluate` reports and their Markdown table, against hand-computed
values on fakes (no judge, no server)."""

from __future__ import annotations

import numpy as np
import pytest

from procrl.evals.stats import MISSING
from procrl.evals.stepgap import evaluate as ev
from procrl.evals.stepgap.evaluate import compute_metrics, load_annotated
from procrl.evals.stepgap.intervals import CI_METRICS, paired_difference_intervals
from procrl.evals.stepgap.llm_only import variant_parts
from procrl.judges import JudgeResult
from procrl.rewards.stepgap.trace import StepLabel
from procrl.rewards.stepgap.verifier import STAGES

GOLD = [["NONE", "CC"], ["IE", "NONE"], ["NONE", "NONE"], ["MB", "MB"]]
PRED_A = [["NONE", "IE"], ["NONE", "NONE"], ["CC", "NONE"], ["MB", "ERROR"]]  # test_compute_metrics_by_hand's
PRED_B = [["NONE", "IE"], ["NONE", "NONE"], ["NONE", "NONE"], ["MB", "ERROR"]]  # a without its false positive (q3)


def by_hand_difference_interval(gold, a, b, metric, resamples, seed, confidence=0.95):
    """The paired percentile interval by hand: draw k takes questions default_rng(seed).integers(0, n, size=n) (the
    k-th call), scores a and b on them with `compute_metrics`, and keeps a − b where both are defined (not None)."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        idx = rng.integers(0, len(gold), size=len(gold))
        g = [gold[i] for i in idx]
        ma, mb = compute_metrics(g, [a[i] for i in idx])[metric], compute_metrics(g, [b[i] for i in idx])[metric]
        if ma is not None and mb is not None:
            values.append(ma - mb)
    alpha = (1 - confidence) / 2
    return list(np.quantile(values, [alpha, 1 - alpha]))


def test_point_difference_by_hand():
    out = paired_difference_intervals(GOLD, PRED_A, PRED_B, resamples=200, seed=5)
    assert set(out) == set(CI_METRICS)
    # a (compute_metrics' by-hand example): sF1 4/7, Q-F1 2/3, BA 5/8, typed (3/4 + 0 + 0 + 2/3) / 4.
    # b drops a's false positive on question 3: steps tp 2, fp 0, fn 2, tn 4 -> sF1 4/6 = 2/3, BA (2/4 + 4/4) / 2 =
    # 3/4; questions tp 2, fp 0, fn 1 -> Q-F1 4/5; typed NONE tp 4, fp 1 (s3), fn 0 -> 8/9, MB 2/3, CC and IE 0
    by_hand = {"sF1": 4 / 7 - 2 / 3, "Q-F1": 2 / 3 - 4 / 5, "BA": 5 / 8 - 3 / 4, "typed_macro_f1": (3 / 4 - 8 / 9) / 4}
    for metric, diff in by_hand.items():
        assert out[metric]["diff"] == pytest.approx(diff), metric
        ma, mb = compute_metrics(GOLD, PRED_A)[metric], compute_metrics(GOLD, PRED_B)[metric]
        assert out[metric]["diff"] == pytest.approx(ma - mb), metric
        assert [out[metric]["low"], out[metric]["high"]] == pytest.approx(
            by_hand_difference_interval(GOLD, PRED_A, PRED_B, metric, 200, 5)
        ), metric
        # the two differ on one question only: a resample without it gives exactly 0, so 0 is inside; a never wins
        # on gap detection (its one difference is a false positive)
        assert out[metric]["low"] <= min(diff, 0.0) and out[metric]["high"] >= max(diff, 0.0) - 1e-12
    assert out["sF1"]["high"] == pytest.approx(0.0) and out["BA"]["high"] == pytest.approx(0.0)


def test_same_indices_as_metric_intervals():
    # against the perfect prediction b = gold, whose BA is 1 on every resample (every question has steps), the
    # paired interval of BA(a) − BA(b) is a's own `metric_intervals` interval minus 1, if both draw the same questions
    out = paired_difference_intervals(GOLD, PRED_A, GOLD, resamples=150, seed=3)
    own = ev.metric_intervals(GOLD, [PRED_A], resamples=150, seed=3)["BA"]
    assert [out["BA"]["low"], out["BA"]["high"]] == pytest.approx([own[0] - 1, own[1] - 1])
    assert out["BA"]["diff"] == pytest.approx(5 / 8 - 1)


def test_identical_predictions_and_swapping():
    same = paired_difference_intervals(GOLD, PRED_A, PRED_A, resamples=100, seed=1)
    assert set(same) == set(CI_METRICS)
    assert all(entry == {"diff": 0.0, "low": 0.0, "high": 0.0} for entry in same.values())
    ab = paired_difference_intervals(GOLD, PRED_A, PRED_B, resamples=300, seed=2)
    ba = paired_difference_intervals(GOLD, PRED_B, PRED_A, resamples=300, seed=2)
    for metric in CI_METRICS:  # b − a = −(a − b): the point negated, the interval mirrored (same resamples)
        assert ba[metric]["diff"] == pytest.approx(-ab[metric]["diff"])
        assert ba[metric]["low"] == pytest.approx(-ab[metric]["high"])
        assert ba[metric]["high"] == pytest.approx(-ab[metric]["low"])
    # another seed draws other questions; 0 resamples: the point only
    assert paired_difference_intervals(GOLD, PRED_A, PRED_B, resamples=300, seed=9) != ab
    point = paired_difference_intervals(GOLD, PRED_A, PRED_B, resamples=0)
    assert {m: (e["low"], e["high"]) for m, e in point.items()} == {m: (None, None) for m in CI_METRICS}
    assert point["BA"]["diff"] == pytest.approx(-1 / 8)


def test_undefined_metrics_have_no_entry_and_undefined_resamples_are_left_out():
    # no gold and no predicted gap anywhere: sF1 and Q-F1 are 0/0 on both sides, on every resample: no entry
    clean = [["NONE", "NONE"], ["NONE"]]
    out = paired_difference_intervals(clean, clean, clean, resamples=50)
    assert set(out) == {"BA", "typed_macro_f1"} and out["BA"] == {"diff": 0.0, "low": 0.0, "high": 0.0}
    # one side flags a step, the other nothing: a's sF1 is a measured 0, b's undefined: still no entry, never 0 − 0
    flagged = [["CC", "NONE"], ["NONE"]]
    out = paired_difference_intervals(clean, flagged, clean, resamples=50)
    assert "sF1" not in out and "Q-F1" not in out and out["BA"]["diff"] == pytest.approx(2 / 3 - 1)
    # without steps nothing is defined
    assert paired_difference_intervals([[], []], [[], []], [[], []], resamples=10) == {}
    # a gap-free question beside a gapped one: b's sF1 is undefined on the resamples of question 1 alone; they are
    # left out of the difference (the by-hand interval skips them), the others kept
    gold, a, b = [["NONE"], ["CC"]], [["CC"], ["CC"]], [["NONE"], ["CC"]]
    out = paired_difference_intervals(gold, a, b, resamples=200, seed=4, confidence=0.5)
    assert out["sF1"]["diff"] == pytest.approx(2 / 3 - 1)  # a: tp 1, fp 1 -> 2/3; b perfect
    assert [out["sF1"]["low"], out["sF1"]["high"]] == pytest.approx(
        by_hand_difference_interval(gold, a, b, "sF1", 200, 4, confidence=0.5)
    )


def test_errors_are_those_of_metric_intervals():
    with pytest.raises(ValueError, match="no items"):
        paired_difference_intervals([], [], [])
    with pytest.raises(ValueError, match="same questions"):
        paired_difference_intervals(GOLD, PRED_A, PRED_B[:2])
    with pytest.raises(ValueError, match="same questions"):
        paired_difference_intervals(GOLD, PRED_A, [["NONE"], *PRED_B[1:]])
    with pytest.raises(ValueError, match="unknown gold"):
        paired_difference_intervals([["ERROR"]], [["NONE"]], [["NONE"]])
    with pytest.raises(ValueError, match="resamples"):
        paired_difference_intervals(GOLD, PRED_A, PRED_B, resamples=-1)
    with pytest.raises(ValueError, match="confidence"):
        paired_difference_intervals(GOLD, PRED_A, PRED_B, confidence=1.0)
    with pytest.raises(ValueError, match="confidence"):
        paired_difference_intervals(GOLD, PRED_A, PRED_B, resamples=0, confidence=0.0)


# --------------------------------------------------------------------------------------------------------------------
# evaluate() and the table
# --------------------------------------------------------------------------------------------------------------------


class StageHybrid:
    """A hybrid verifier stand-in: gold labels with every stage; without stage D every step NONE (removing D loses
    all gap detection), without any other stage still gold (removing it changes nothing)."""

    def __init__(self, gold):
        self.gold = gold

    def check_steps(self, traces):
        return [[JudgeResult(value=None, unscored=None) for _ in t.steps] for t in traces]

    def route(self, traces, checks, stages=None):
        lost = "D" not in (stages or STAGES)
        return [[StepLabel("NONE" if lost else g) for g in row] for row in self.gold]


class FakeLLMOnly:
    """An `LLMOnlyVerifier` stand-in: gold labels, but "IE" everywhere without the definitions."""

    def __init__(self, gold):
        self.gold = gold

    def judge_variants(self, traces, variants):
        return {name: [["IE"] * len(row) if "definitions" not in parts else row for row in self.gold]
                for name, parts in variants.items()}  # fmt: skip

    def labels(self, rows):
        return [[StepLabel(label) for label in row] for row in rows]

    def unscored(self, rows):
        return {}


def test_evaluate_reports_the_comparisons():
    data = load_annotated(ev.DEFAULT_DATA)[:6]
    gold = [g for _, g in data]
    report = ev.evaluate(StageHybrid(gold), data, baseline_draws=5, bootstrap_resamples=30)
    diffs = report["differences"]
    assert list(diffs) == ["full − -A", "full − -B", "full − -C", "full − -D", "full − -E"]
    # removing D: full is perfect, -D flags nothing -> sF1 1 − 0 and BA 1 − 1/2 on every resample with a gap
    # (gold has gaps on every question), so the interval lies above 0: removing D hurts
    assert diffs["full − -D"]["sF1"] == {"diff": 1.0, "low": 1.0, "high": 1.0}
    assert diffs["full − -D"]["BA"]["diff"] == pytest.approx(0.5) and diffs["full − -D"]["BA"]["low"] > 0
    for metric in CI_METRICS:  # each diff is the difference of the rows' own metrics
        d = report["metrics"]["full"][metric] - report["metrics"]["-D"][metric]
        assert diffs["full − -D"][metric]["diff"] == pytest.approx(d), metric
        assert diffs["full − -A"][metric] == {"diff": 0.0, "low": 0.0, "high": 0.0}  # A changes nothing here
    # the existing keys stay; the per-row intervals are still there
    assert {"metrics", "baselines", "labels", "checks", "judge_unscored"} <= set(report)
    assert "ci" in report["metrics"]["-D"]

    with_llm = ev.evaluate(StageHybrid(gold), data, llm_only=FakeLLMOnly(gold), baseline_draws=5,
                           bootstrap_resamples=20)  # fmt: skip
    parts = [name for name in variant_parts() if name != "LLM-only"]
    assert list(with_llm["differences"]) == [*diffs, "full − LLM-only", *(f"LLM-only − {n}" for n in parts)]
    assert with_llm["differences"]["full − LLM-only"]["sF1"] == {"diff": 0.0, "low": 0.0, "high": 0.0}
    no_defs = with_llm["differences"]["LLM-only − LLM-only -definitions"]
    assert no_defs["BA"]["diff"] == pytest.approx(0.5) and no_defs["BA"]["low"] > 0  # all-IE: BA 1/2

    # no ablation: no comparison at all (also with the LLM-only verifier); 0 resamples: point differences only
    assert ev.evaluate(StageHybrid(gold), data, ablation=False, baseline_draws=5)["differences"] == {}
    no_ablation = ev.evaluate(StageHybrid(gold), data, ablation=False, llm_only=FakeLLMOnly(gold), baseline_draws=5)
    assert no_ablation["differences"] == {}
    points = ev.evaluate(StageHybrid(gold), data, baseline_draws=5, bootstrap_resamples=0)["differences"]
    assert points["full − -D"]["sF1"] == {"diff": 1.0, "low": None, "high": None}


def test_differences_markdown():
    diffs = {
        "full − -D": {
            "sF1": {"diff": 0.25, "low": 0.1, "high": 0.4},
            "Q-F1": {"diff": -0.0125, "low": -0.05, "high": 0.03},
            "BA": {"diff": -1e-17, "low": None, "high": None},  # no interval: the point only, never "-0.0"
        },
        "LLM-only − LLM-only -history": {},
    }
    lines = ev.format_differences_markdown(diffs).splitlines()
    assert lines[0] == "| comparison | sF1 | Q-F1 | BA | typed F1 |"
    assert lines[2] == f"| full − -D | +25.0 [+10.0, +40.0] | -1.2 [-5.0, +3.0] | +0.0 | {MISSING} |"
    assert lines[3] == "| LLM-only − LLM-only -history | " + " | ".join([MISSING] * 4) + " |"
    assert lines[4] == "" and lines[5].startswith("[low, high]: paired bootstrap interval over questions")
    assert lines[5].endswith(ev.DIFFERENCE_RULE) and len(lines) == 6
    assert "removing X hurts when the interval lies above 0, helps when below 0, else no difference shown" in lines[5]
    # point differences only (0 resamples): no brackets anywhere, the rule alone
    points = ev.format_differences_markdown({"full − -A": {"BA": {"diff": 0.5, "low": None, "high": None}}})
    assert "[" not in points and points.splitlines()[-1] == ev.DIFFERENCE_RULE
