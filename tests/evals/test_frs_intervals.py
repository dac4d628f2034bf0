"""Bootstrap intervals of FRS over problems (`procrl.evals.frs.intervals`) against a by-hand resampling, and the
intervals in `procrl frs`'s result, printout and run metrics."""

from __future__ import annotations

import json
import math
import types
from dataclasses import asdict

import numpy as np
import pytest

from procrl.evals.frs import DIMENSIONS, FRSArguments, FRSConfig, Trace, plan_judging, summarize
from procrl.evals.frs import offline as frs_offline
from procrl.evals.frs.intervals import (
    FRSIntervals,
    frs_intervals,
    intervals_from_result,
    metric_names,
    point_estimates,
)
from procrl.evals.frs.traces import read_traces
from procrl.judges import JudgeArguments
from procrl.scripts import frs as frs_script


def judged(pid: str, confidence: float, correct: bool, value: int | None, unscored: str | None = None) -> Trace:
    """A trace whose four scores are all `value` (RS = (value - 1) * 25), or not judged (value None)."""
    scores = None if value is None else dict.fromkeys(DIMENSIONS, value)
    return Trace(pid, "q", f"{pid}-{confidence}", "1", correct, confidence, 10, scores=scores, unscored=unscored)


# three problems, two traces each, distinct confidences
TRACES = [
    judged("p0", 0.90, True, 5),  # RS 100
    judged("p0", 0.30, False, 2),  # RS 25
    judged("p1", 0.80, True, 4),  # RS 75
    judged("p1", 0.20, False, 1),  # RS 0
    judged("p2", 0.60, False, 3),  # RS 50
    judged("p2", 0.10, True, 3),  # RS 50
]
CONFIG = FRSConfig(k_percent=30, k_values=(30, 50), random_baseline="mean")


def by_hand(traces, draw, k_values):
    """The statistic, written out: the drawn problems' traces (a problem drawn twice twice), sorted by confidence,
    the top floor(K * N / 100) (>= 1) kept; the 'mean' selection gain per drawn question."""
    problems = list(dict.fromkeys(t.problem_id for t in traces))
    pool = [t for p in draw for t in traces if t.problem_id == problems[p]]
    ranked = sorted(pool, key=lambda t: -t.confidence)
    out = {"accuracy": sum(t.correct for t in pool) / len(pool)}
    for k in k_values:
        kept = ranked[: max(1, k * len(ranked) // 100)]
        out[f"accuracy@{k}"] = sum(t.correct for t in kept) / len(kept)
        rs = [t.rs for t in kept if t.rs is not None]
        out[f"frs@{k}"] = sum(rs) / len(rs) if rs else None
    gains = []
    for p in draw:
        scored = sorted(
            (t for t in traces if t.problem_id == problems[p] and t.rs is not None), key=lambda t: -t.confidence
        )
        if len(scored) >= 2:
            gains.append(scored[0].rs - sum(t.rs for t in scored) / len(scored))
    out["selection_gain"] = sum(gains) / len(gains) if gains else None
    return out


def hand_intervals(traces, k_values, n_problems, resamples, seed):
    rng = np.random.default_rng(seed)
    draws = [rng.integers(0, n_problems, size=n_problems) for _ in range(resamples)]
    stats = [by_hand(traces, draw, k_values) for draw in draws]
    intervals, undefined = {}, {}
    for name in stats[0]:
        values = [s[name] for s in stats if s[name] is not None]
        undefined[name] = resamples - len(values)
        intervals[name] = tuple(np.quantile(values, [0.025, 0.975])) if values else None
    return intervals, undefined


def assert_intervals_match(got: FRSIntervals, expected: dict):
    assert set(got.intervals) == set(expected)
    for name, interval in expected.items():
        if interval is None:
            assert got.intervals[name] is None, name
        else:
            assert got.intervals[name] == pytest.approx(interval, abs=1e-9), name


def test_intervals_equal_a_by_hand_resampling_over_problems():
    got = frs_intervals(TRACES, CONFIG, resamples=300, seed=7)
    expected, undefined = hand_intervals(TRACES, (30, 50), 3, 300, 7)
    assert_intervals_match(got, expected)
    assert got.n_undefined == undefined and got.n_problems == 3 and got.resamples == 300
    assert metric_names(CONFIG) == ["accuracy", "accuracy@30", "accuracy@50", "frs@30", "frs@50", "selection_gain"]
    # every resample has a scored kept trace and a question with a gain
    assert all(v == 0 for v in got.n_undefined.values())
    lo, hi = got.intervals["frs@30"]
    assert 0.0 <= lo <= hi <= 100.0


def test_point_estimates_are_the_reports_values_for_both_estimators_and_baselines():
    rng = np.random.default_rng(3)
    for estimator in ("topk", "bins"):
        for baseline in ("sample", "mean"):
            traces = [
                Trace(f"p{p}", "q", f"t{p}-{j}", "1", bool(rng.integers(2)), float(rng.random()), 10)
                for p in range(8)
                for j in range(5)
            ]
            config = FRSConfig(estimator=estimator, random_baseline=baseline, n_bins=4, max_per_bin=3)
            for i in plan_judging(traces, config):
                traces[i].scores = dict.fromkeys(DIMENSIONS, int(rng.integers(1, 6)))
            report, mine = summarize(traces, config), point_estimates(traces, config)
            assert mine["accuracy"] == pytest.approx(report.accuracy)
            assert mine["selection_gain"] == pytest.approx(report.selection_gain)
            for k in config.k_values:
                assert mine[f"accuracy@{k}"] == pytest.approx(report.accuracy_at_k[k])
                assert mine[f"frs@{k}"] == pytest.approx(report.at_k[k])


def test_a_problem_with_all_traces_unjudged():
    # p1's traces were never judged (below the judged cut): a resample of p1 only has no FRS and no gain
    traces = [
        judged("p0", 0.9, True, 5),
        judged("p0", 0.7, True, 3),
        judged("p1", 0.4, False, None),
        judged("p1", 0.2, False, None, unscored="timeout"),
    ]
    config = FRSConfig(k_percent=50, k_values=(50,), random_baseline="mean")
    got = frs_intervals(traces, config, resamples=200, seed=1)
    expected, undefined = hand_intervals(traces, (50,), 2, 200, 1)
    assert_intervals_match(got, expected)
    assert got.n_undefined == undefined
    assert 0 < got.n_undefined["frs@50"] < 200 and got.n_undefined["accuracy"] == 0
    assert got.n_undefined["selection_gain"] == got.n_undefined["frs@50"]  # exactly the p1-only resamples


def test_nothing_judged_gives_no_frs_interval_but_accuracy_intervals():
    traces = [judged(f"p{p}", 0.1 * (p + j + 1), p == j, None) for p in range(3) for j in range(2)]
    got = frs_intervals(traces, FRSConfig(), resamples=50, seed=0)
    assert got.intervals["frs@10"] is None and got.intervals["selection_gain"] is None
    assert got.n_undefined["frs@10"] == 50
    lo, hi = got.intervals["accuracy"]
    assert 0.0 <= lo <= hi <= 1.0
    assert not any(isinstance(v, float) and math.isnan(v) for iv in got.intervals.values() if iv for v in iv)


def test_one_problem_gives_the_point_estimate_as_both_ends():
    traces = [judged("p0", 0.9, True, 5), judged("p0", 0.5, False, 3), judged("p0", 0.1, True, 1)]
    config = FRSConfig(k_percent=50, k_values=(50,), random_baseline="mean")
    got = frs_intervals(traces, config, resamples=100, seed=0)
    # N = 3: keep floor(1.5) = 1 -> FRS@50 = 100; gain = 100 - mean(100, 50, 0) = 50; accuracy 2/3
    assert got.intervals["frs@50"] == (100.0, 100.0)
    assert got.intervals["selection_gain"] == pytest.approx((50.0, 50.0))
    assert got.intervals["accuracy"] == pytest.approx((2 / 3, 2 / 3))
    assert got.n_problems == 1


def test_same_seed_same_intervals_and_no_traces_is_neutral():
    first = frs_intervals(TRACES, CONFIG, resamples=100, seed=11)
    assert frs_intervals(TRACES, CONFIG, resamples=100, seed=11) == first
    empty = frs_intervals([], CONFIG, resamples=100)
    assert empty.n_problems == 0 and all(v is None for v in empty.intervals.values())
    with pytest.raises(ValueError, match="resamples"):
        frs_intervals(TRACES, CONFIG, resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        frs_intervals(TRACES, CONFIG, confidence=1.0)


def test_intervals_from_a_result_and_its_judged_traces():
    result = json.loads(json.dumps({"settings": {"frs": asdict(CONFIG)}}))  # as run.json holds it
    got = intervals_from_result(result, TRACES, resamples=100)
    # the run's FRS seed (0) by default
    assert got == frs_intervals(TRACES, CONFIG, resamples=100, seed=CONFIG.seed)
    assert got.to_dict()["bootstrap"] == {"unit": "problems", "resamples": 100, "confidence": 0.95, "seed": 0,
                                          "n_problems": 3, "n_undefined": got.n_undefined}  # fmt: skip
    assert intervals_from_result(result, TRACES, resamples=100, seed=5) == frs_intervals(
        TRACES, CONFIG, resamples=100, seed=5
    )
    with pytest.raises(ValueError, match="settings.frs"):
        intervals_from_result({"traces": []}, TRACES)
    with pytest.raises(ValueError, match="does not read back"):
        intervals_from_result({"settings": {"frs": {"k_values": [0]}}}, TRACES)


def fake_run(monkeypatch, tmp_path, resamples: int):
    """`run_frs` with the sampler replaced by the six TRACES (nothing judged again: judge none keeps their scores)."""
    setup = types.SimpleNamespace(dataset=[0, 1, 2], engine=types.SimpleNamespace(cache_key=lambda: "fake"))
    monkeypatch.setattr(frs_offline, "load_setup", lambda args: setup)
    monkeypatch.setattr(frs_offline, "sample_traces", lambda *a, **kw: [Trace(**asdict(t)) for t in TRACES])
    args = frs_offline.OfflineFRSConfig(
        bootstrap_resamples=resamples, output_dir=str(tmp_path / "frs"), no_progress=True,
        generation_backend="transformers",
    )  # fmt: skip
    frs = FRSArguments(frs_k_percent=30, frs_k_values=[30, 50], frs_random_baseline="mean")
    result, files = frs_offline.run_frs(args, frs, JudgeArguments(judge="none"))
    assert files == {"judged_traces": "judged_traces.jsonl", "plot": "frs.png"}
    assert read_traces(tmp_path / "frs" / files["judged_traces"]) == TRACES  # judge none keeps their scores
    return result


def test_procrl_frs_writes_prints_and_records_the_intervals(monkeypatch, tmp_path, capsys):
    result = fake_run(monkeypatch, tmp_path, resamples=100)
    written = json.loads(json.dumps(result))  # what run.json holds
    assert written["settings"]["frs"] == json.loads(json.dumps(asdict(CONFIG)))
    expected = frs_intervals(TRACES, CONFIG, resamples=100, seed=0).to_dict()
    assert set(written["intervals"]) == set(expected["intervals"])
    for name, interval in expected["intervals"].items():
        assert written["intervals"][name] == pytest.approx(interval), name
    assert written["bootstrap"]["resamples"] == 100 and written["bootstrap"]["n_problems"] == 3
    assert (tmp_path / "frs" / "frs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    frs_script.print_summary(result)
    out = capsys.readouterr().out
    lo, hi = expected["intervals"]["frs@30"]
    assert f"FRS@30: {result['report']['score']:.1f} [{lo:.1f}, {hi:.1f}]" in out
    assert "95% percentile bootstrap over 3 problems, 100 resamples (seed 0)" in out
    metrics = frs_script.run_metrics(result)
    assert metrics["frs/ci/frs@30/low"] == pytest.approx(lo) and metrics["frs/ci/frs@30/high"] == pytest.approx(hi)


def test_procrl_frs_without_bootstrap(monkeypatch, tmp_path, capsys):
    result = fake_run(monkeypatch, tmp_path, resamples=0)
    assert result["intervals"] is None and result["bootstrap"] is None
    frs_script.print_summary(result)
    assert "no bootstrap intervals (--bootstrap-resamples 0)" in capsys.readouterr().out
    assert not any(key.startswith("frs/ci/") for key in frs_script.run_metrics(result))
    with pytest.raises(ValueError, match="--bootstrap-resamples must be >= 0"):
        frs_offline.OfflineFRSConfig(bootstrap_resamples=-1, generation_backend="transformers")
    result = fake_run(monkeypatch, tmp_path, resamples=0)
    assert (
        intervals_from_result(result, TRACES, resamples=100).to_dict()
        == frs_intervals(TRACES, CONFIG, resamples=100, seed=0).to_dict()
    )  # the intervals such a run lacks, from its judged traces (procrl frs compare does so)


# --- paired differences between two models on the same problems (issue 28 §4) -------------------------------------


def test_paired_accuracy_difference_is_the_bootstrap_of_per_problem_differences():
    """With the same number of traces per problem, the accuracy difference on a resample is the mean over the drawn
    problems of acc_a(p) - acc_b(p): the same draws (same seed) must give the same interval as bootstrapping those
    per-problem differences directly."""
    from procrl.evals.frs.intervals import paired_differences
    from procrl.evals.stats import bootstrap_interval

    rng = np.random.default_rng(1)
    correct_a = rng.random((30, 4)) < 0.6
    correct_b = rng.random((30, 4)) < 0.4
    a = [judged(f"p{p}", float(rng.random()), bool(correct_a[p, j]), 3) for p in range(30) for j in range(4)]
    b = [judged(f"p{p}", float(rng.random()), bool(correct_b[p, j]), 3) for p in reversed(range(30)) for j in range(4)]
    per_problem = correct_a.mean(axis=1) - correct_b.mean(axis=1)
    out = paired_differences(a, CONFIG, b, CONFIG, ["accuracy"], resamples=200, seed=5)["accuracy"]
    assert out["difference"] == pytest.approx(per_problem.mean())
    expected = bootstrap_interval(30, lambda idx: float(per_problem[idx].mean()), resamples=200, seed=5)
    assert out["interval"] == pytest.approx(list(expected))
    assert out["n_undefined"] == 0


def test_paired_difference_of_a_model_with_itself_is_zero_and_frs_follows_the_scores():
    from procrl.evals.frs.intervals import paired_differences

    same = paired_differences(TRACES, CONFIG, TRACES, CONFIG, ["accuracy", "frs@30"], resamples=50)
    assert same["accuracy"]["difference"] == 0.0 and same["accuracy"]["interval"] == [0.0, 0.0]
    assert same["frs@30"]["interval"] == [0.0, 0.0]
    # the same traces with every judged score one point lower: RS drops by 25 on every kept trace
    lower = [judged(t.problem_id, t.confidence, t.correct, next(iter(t.scores.values())) - 1) for t in TRACES]
    diff = paired_differences(TRACES, CONFIG, lower, CONFIG, ["frs@30", "frs@50"], resamples=50)
    assert diff["frs@30"]["difference"] == pytest.approx(25.0) and diff["frs@30"]["interval"] == pytest.approx([25, 25])
    assert diff["frs@50"]["difference"] == pytest.approx(25.0)


def test_paired_differences_refuse_other_problems_and_unknown_numbers():
    from procrl.evals.frs.intervals import paired_differences

    other = [judged("p9", 0.5, True, 4)] + TRACES[2:]
    with pytest.raises(ValueError, match="different problems .1 only in the first, 1 only in the second"):
        paired_differences(TRACES, CONFIG, other, CONFIG, ["accuracy"])
    with pytest.raises(ValueError, match="different problems"):
        paired_differences([], CONFIG, [], CONFIG, ["accuracy"])
    with pytest.raises(ValueError, match="'frs@10' is not a number both runs report"):
        paired_differences(TRACES, CONFIG, TRACES, CONFIG, ["frs@10"])
