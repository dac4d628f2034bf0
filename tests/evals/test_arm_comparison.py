"""procrl.evals.arm_comparison on hand-made run.json records: pooled and per-seed paired differences against values
computed by hand, a missing seed, an arm with one seed, None values left out, problems that differ between runs
(an error), the arm labels, the placebo spec, the divergence alarm and the decision rule. The bootstrap itself is
procrl.evals.stats' (tests/evals/test_stats.py); here its interval is compared with a direct call on hand-computed
per-problem differences."""

from __future__ import annotations

import math

import pytest
from arm_records import grpo_run  # tests/helpers

from procrl.evals.arm_comparison import (
    ALARM_KEY,
    PROCESS_ACC,
    alarm_steps,
    arm_labels,
    compare_arms,
    format_arm_comparison,
    parse_placebos,
    per_problem,
    pooled_difference,
)
from procrl.evals.run_report import Variant, group_variants
from procrl.evals.stats import bootstrap_mean_interval

IDS = ["p0", "p1", "p2", "p3"]
run = grpo_run

REF = {0: [1, 0, 0, 1], 1: [1, 1, 0, 0], 2: [0, 0, 1, 1]}  # per problem mean: 2/3, 1/3, 1/3, 2/3
ORACLE = {0: [1, 1, 1, 1], 2: [1, 0, 1, 1]}  # seed 1 failed: per problem mean 1, 1/2, 1, 1
PLACEBO = {0: [1, 0, 0, 0]}  # one seed


def fixture_runs() -> list[dict]:
    runs = [run("outcome", s, c, [0.5, 0.5, 0.25, 1.0]) for s, c in REF.items()]
    runs += [run("oracle", 0, ORACLE[0], [1.0, 1.0, None, 1.0], alarm=[0.0, 1.0, 1.0], wall=120.0, length=40.0)]
    runs += [run("oracle", 1, [0, 0, 0, 0], status="failed")]  # never enters a mean or a difference
    runs += [run("oracle", 2, ORACLE[2], [1.0, 0.5, 1.0, 1.0], alarm=[0.0, 0.0], wall=140.0, length=44.0)]
    runs += [run("oracle_shuffled", 0, PLACEBO[0], alarm=[1.0, 0.0, 1.0])]
    return runs


def by_label(rows):
    return {row.label: row for row in rows}


def test_pooled_and_per_seed_differences_against_hand_computed_values():
    runs = fixture_runs()
    ref = [r for r in runs if "outcome" in r["path"]]
    oracle = [r for r in runs if "/oracle," in r["path"] and r["status"] == "finished"]
    d = pooled_difference(oracle, ref, seeds=[0, 2])
    hand = [1 - 2 / 3, 0.5 - 1 / 3, 1 - 1 / 3, 1 - 2 / 3]  # per problem: mean over seeds, minus the reference's
    assert (d.n, d.seeds, d.other_seeds) == (4, 2, 3)
    assert d.diff == pytest.approx(0.375) == pytest.approx(sum(hand) / 4)
    assert (d.ci_low, d.ci_high) == pytest.approx(bootstrap_mean_interval(hand, seed=0))
    # each seed against the reference's pooled values: s0 (1/3 + 2/3 + 2/3 + 1/3) / 4, s2 (1/3 - 1/3 + 2/3 + 1/3) / 4
    assert [s for s, _ in d.per_seed] == [0, 2]
    assert [v for _, v in d.per_seed] == pytest.approx([0.5, 0.25])
    # ProcessAcc: a None leaves that run out for that problem (p2: only seed 2's 1.0)
    p = pooled_difference(oracle, ref, PROCESS_ACC, seeds=[0, 2])
    hand_p = [1.0 - 0.5, 0.75 - 0.5, 1.0 - 0.25, 1.0 - 1.0]
    assert p.n == 4 and p.diff == pytest.approx(sum(hand_p) / 4)
    assert [v for _, v in p.per_seed] == pytest.approx([(0.5 + 0.5 + 0.0) / 3, (0.5 + 0.0 + 0.75 + 0.0) / 4])


def test_one_seed_arm_and_undefined_values():
    runs = fixture_runs()
    placebo = [r for r in runs if "shuffled" in r["path"]]
    ref = [r for r in runs if "outcome" in r["path"]]
    d = pooled_difference(placebo, ref, seeds=[0])
    assert d.diff == pytest.approx((1 / 3 - 1 / 3 - 1 / 3 - 2 / 3) / 4) and d.per_seed[0][1] == pytest.approx(d.diff)
    assert pooled_difference(placebo, ref, PROCESS_ACC) is None  # the placebo recorded no ProcessAcc: undefined
    with pytest.raises(ValueError, match="at least one finished run on each side"):
        pooled_difference([], ref)


def test_runs_that_evaluated_other_problems_are_an_error():
    ref = [run("outcome", 0, [1, 0, 0, 1])]
    other_ids = [run("oracle", 0, [1, 1, 1, 1], ids=["p0", "p1", "p2", "p9"])]
    with pytest.raises(ValueError, match=r"evaluated different problems .*1 of .*'s 4 missing, 1 others.*eval_sets"):
        pooled_difference(other_ids, ref)
    other_set = [run("oracle", 0, [1, 1, 1, 1], name="arith-ops4-d1-test-n400[4:8]")]
    with pytest.raises(ValueError, match="evaluated different problems"):
        pooled_difference(other_set, ref)
    no_eval = {**ref[0], "result": {"after": []}}
    with pytest.raises(ValueError, match=r"no per-problem evaluation after training"):
        per_problem(no_eval)
    twice = run("oracle", 0, [1, 1], ids=["p0", "p0"])
    with pytest.raises(ValueError, match="evaluated twice"):
        per_problem(twice)


def test_compare_arms_rows_decisions_and_table():
    variants = group_variants(fixture_runs())
    rows = by_label(compare_arms(variants, "outcome", "oracle_shuffled"))
    assert list(rows) == ["outcome", "oracle", "oracle_shuffled"]
    oracle = rows["oracle"]
    assert oracle.seeds == [0, 2] and oracle.placebo == "oracle_shuffled"
    assert oracle.vs_reference.diff == pytest.approx(0.375)
    hand_placebo = [1 - 1, 0.5 - 0, 1 - 0, 1 - 0]
    assert oracle.vs_placebo.diff == pytest.approx(sum(hand_placebo) / 4)
    low_ref = bootstrap_mean_interval([1 / 3, 1 / 6, 2 / 3, 1 / 3], seed=0)[0]
    low_placebo = bootstrap_mean_interval(hand_placebo, seed=0)[0]
    assert oracle.decision == ("supported" if low_ref > 0 and low_placebo > 0 else "not supported")
    assert rows["outcome"].decision == "reference" and rows["outcome"].vs_reference is None
    assert rows["oracle_shuffled"].decision == "placebo" and rows["oracle_shuffled"].placebo is None
    assert rows["oracle_shuffled"].vs_reference is not None  # the placebo is still compared with the reference

    text = format_arm_comparison(list(rows.values()), "outcome")
    assert "supported** only when" in text and "AND against its placebo arm" in text
    table = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    cells = [c.strip() for c in table["oracle"].strip("|").split(" | ")]
    assert cells[1] == "2 (s0, s2)"  # the failed seed 1 is left out
    assert cells[2] == f"0.875 ± {math.sqrt(((1 - 0.875) ** 2 + (0.75 - 0.875) ** 2) / 1):.3f}"
    assert cells[3] == f"{(1.0 + 0.875) / 2:.3f} ± {math.sqrt(2 * (1.0 - 0.9375) ** 2):.3f}"
    assert cells[4] == "42.0 ± 2.8" and cells[5] == "130 ± 14"
    assert cells[6].startswith("+0.875 [")  # after - before: from all wrong (the records' default before)
    assert cells[7].startswith("+0.375 [") and cells[7].endswith("(n=4, 2 vs 3 seeds)")
    assert cells[8] == "s0 +0.500; s2 +0.250"
    assert cells[14] == "fired in 1/2: s0 at step 10"
    shuffled = [c.strip() for c in table["oracle_shuffled"].strip("|").split(" | ")]
    assert shuffled[1] == "1 (s0)" and shuffled[2] == "0.250" and shuffled[3] == "–"  # one seed: no sd
    assert shuffled[14] == "fired in 1/1: s0 at step 5, 15"
    assert [c.strip() for c in table["outcome"].strip("|").split(" | ")][14] == "not recorded: s0, s1, s2"


def test_supported_needs_both_intervals_above_zero():
    ids = [f"p{i}" for i in range(40)]
    ref = [run("outcome", s, [0] * 40, ids=ids) for s in (0, 1)]
    arm = [run("oracle", s, [1] * 40, ids=ids) for s in (0, 1)]
    same = [run("oracle_shuffled", s, [1] * 40, ids=ids) for s in (0, 1)]  # as good as the arm: no edge
    rows = by_label(compare_arms(group_variants(ref + arm + same), "outcome", "oracle=oracle_shuffled"))
    assert rows["oracle"].vs_reference.ci_low == pytest.approx(1.0)
    assert (rows["oracle"].vs_placebo.ci_low, rows["oracle"].vs_placebo.ci_high) == pytest.approx((0.0, 0.0))
    assert rows["oracle"].decision == "not supported"  # above the reference, not above the placebo
    worse = [run("oracle_shuffled", s, [0] * 40, ids=ids) for s in (0, 1)]
    rows = by_label(compare_arms(group_variants(ref + arm + worse), "outcome", "oracle_shuffled"))
    assert rows["oracle"].decision == "supported"
    rows = by_label(compare_arms(group_variants(ref + arm), "outcome"))
    assert rows["oracle"].decision == "undecided: no placebo arm" and rows["oracle"].vs_reference is not None


def test_decide_on_process_reads_the_processacc_intervals():
    """`decide_on="process"` (issue 28 §3 from the corrupted warm start): the same accuracy in every arm, ProcessAcc
    higher in the oracle arm than in the reference and the placebo -> supported on ProcessAcc, not on accuracy."""
    ids = [f"p{i}" for i in range(40)]
    ref = [run("outcome", s, [1] * 40, [0.5] * 40, ids=ids) for s in (0, 1)]
    arm = [run("oracle", s, [1] * 40, [1.0] * 40, ids=ids) for s in (0, 1)]
    placebo = [run("oracle_shuffled", s, [1] * 40, [0.5] * 40, ids=ids) for s in (0, 1)]
    variants = group_variants(ref + arm + placebo)
    assert by_label(compare_arms(variants, "outcome", "oracle_shuffled"))["oracle"].decision == "not supported"
    rows = by_label(compare_arms(variants, "outcome", "oracle_shuffled", decide_on="process"))
    oracle = rows["oracle"]
    assert oracle.process_vs_placebo.diff == pytest.approx(0.5) == oracle.process_vs_reference.diff
    assert oracle.decision == "supported"
    text = format_arm_comparison(list(rows.values()), "outcome", "process")
    assert "paired difference in ProcessAcc against" in text
    with pytest.raises(ValueError, match="decide_on='steps'"):
        compare_arms(variants, "outcome", decide_on="steps")


def test_a_preregistered_margin_turns_a_small_supported_effect_into_not_supported():
    """docs/results §3's clause (outcome only within 0.03 of the oracle arm: not supported): ProcessAcc +0.025 on every
    problem (both intervals exactly [+0.025, +0.025], above 0) -> not supported with margin 0.03, supported with 0.02,
    just under 0.025 and without a margin (the intervals alone)."""
    ids = [f"p{i}" for i in range(40)]
    ref = [run("outcome", s, [1] * 40, [0.5] * 40, ids=ids) for s in (0, 1)]
    arm = [run("oracle", s, [1] * 40, [0.525] * 40, ids=ids) for s in (0, 1)]
    placebo = [run("oracle_shuffled", s, [1] * 40, [0.0] * 40, ids=ids) for s in (0, 1)]
    variants = group_variants(ref + arm + placebo)

    def compare(margin):
        return compare_arms(variants, "outcome", "oracle_shuffled", decide_on="process", margin=margin)

    row = by_label(compare(0.03))["oracle"]
    assert row.process_vs_reference.diff == pytest.approx(0.025) and row.process_vs_reference.above_zero
    assert row.process_vs_placebo.above_zero
    assert row.decision == "not supported (within 0.03 of the reference)"
    assert [by_label(compare(m))["oracle"].decision for m in (0.0, 0.02, 0.025 - 1e-9)] == ["supported"] * 3
    text = format_arm_comparison(compare(0.03), "outcome", "process", 0.03)
    assert "is at least 0.03 (the pre-registered margin)" in text
    assert "pre-registered margin" not in format_arm_comparison(compare(0.0), "outcome", "process")
    # the margin reads the decision's metric: on accuracy (equal in every arm) the arm is not supported anyway
    assert by_label(compare_arms(variants, "outcome", "oracle_shuffled", margin=0.03))["oracle"].decision == (
        "not supported"
    )
    for bad in (-0.01, 3.0, math.nan, math.inf):  # 3.0: "3 points" typed as a number of points
        with pytest.raises(ValueError, match=r"margin=.*use a fraction in \[0, 1\]"):
            compare_arms(variants, "outcome", margin=bad)


def test_arm_names_and_errors():
    variants = group_variants(fixture_runs())
    with pytest.raises(
        ValueError, match=r"--reference 'nope' is no arm; the arms are outcome, oracle, oracle_shuffled"
    ):
        compare_arms(variants, "nope")
    with pytest.raises(ValueError, match=r"--placebo 'gone' is no arm"):
        compare_arms(variants, "outcome", "oracle=gone")
    with pytest.raises(ValueError, match="its own placebo"):
        compare_arms(variants, "outcome", "oracle=oracle")
    # the variant's full name works too
    assert compare_arms(variants, "config=arith_organism_outcome")[0].decision == "reference"
    unfinished = group_variants([run("outcome", 0, [1, 0, 0, 1], status="failed"), *fixture_runs()[3:]])
    with pytest.raises(ValueError, match="reference arm outcome has no finished run"):
        compare_arms(unfinished, "outcome")


def test_arm_labels():
    def variant(stem):
        return Variant(f"config={stem}", {"config": f"configs/grpo/{stem}.yaml"})

    stems = ["arith_organism_outcome", "arith_organism_pum_mixed", "arith_organism_pum_shuffled"]
    assert arm_labels([variant(s) for s in stems]) == ["outcome", "pum_mixed", "pum_shuffled"]
    assert arm_labels([variant("arith_organism_oracle")]) == ["arith_organism_oracle"]  # one arm: its stem
    no_config = [Variant("lr=0.1", {"lr": 0.1}), variant("a_b")]
    assert arm_labels(no_config) == ["lr=0.1", "config=a_b"]
    clash = [Variant("x", {"config": "a/run_x.yaml"}), Variant("y", {"config": "b/run_x.yaml"})]
    assert arm_labels(clash) == ["x", "y"]  # the same stem twice: the variant names


def test_placebo_spec():
    assert parse_placebos("oracle_shuffled,pum_mixed=pum_shuffled,pum_process=pum_shuffled") == (
        "oracle_shuffled",
        {"pum_mixed": "pum_shuffled", "pum_process": "pum_shuffled"},
    )
    with pytest.raises(ValueError, match="two placebos for every arm"):
        parse_placebos("a,b")
    with pytest.raises(ValueError, match="each ARM once"):
        parse_placebos("a=b,a=c")
    with pytest.raises(ValueError, match="ARM=PLACEBO"):
        parse_placebos("=b")


def test_alarm_steps():
    assert alarm_steps({"history": [{"step": 5, ALARM_KEY: 1.0}, {"step": 10, ALARM_KEY: 0.0}]}) == [5]
    assert alarm_steps({"history": [{"step": 5, ALARM_KEY: 0.0}]}) == []
    assert alarm_steps({"history": []}) is None and alarm_steps({}) is None


def test_after_minus_before_and_the_stability_rule():
    """after - before per problem, pooled over seeds: seeds 0 and 1 of pum_process after [1, 1, 0, 0] and
    [1, 0, 0, 0] from before [1, 1, 1, 0] -> per problem (1 + 1)/2 - 1 = 0, 0.5 - 1 = -0.5, -1, 0: mean -0.375."""
    from procrl.evals.arm_comparison import STABILITY_MARGIN

    before = [1, 1, 1, 0]
    ref = [run("outcome", s, [1, 1, 1, 1], before=before, alarm=[0.0]) for s in (0, 1)]
    falls = [run("pum_process", 0, [1, 1, 0, 0], before=before, alarm=[0.0]),
             run("pum_process", 1, [1, 0, 0, 0], before=before, alarm=[0.0])]  # fmt: skip
    rows = by_label(compare_arms(group_variants(ref + falls), "outcome", stable="pum_process"))
    d = rows["pum_process"].after_vs_before
    assert (d.n, d.diff) == (4, pytest.approx(-0.375))
    assert (d.ci_low, d.ci_high) == pytest.approx(bootstrap_mean_interval([0.0, -0.5, -1.0, 0.0], seed=0))
    assert rows["pum_process"].decision == "not stable"
    assert rows["outcome"].after_vs_before.diff == pytest.approx(0.25)  # every arm gets the column
    # the same arm holding its accuracy (interval [0, 0]) with a silent alarm is stable; a fired alarm is not
    holds = [run("pum_process", s, before, before=before, alarm=[0.0, 0.0]) for s in (0, 1)]
    assert by_label(compare_arms(group_variants(ref + holds), "outcome", stable="pum_process"))[
        "pum_process"].decision == "stable"  # fmt: skip
    fired = [run("pum_process", 0, before, before=before, alarm=[0.0, 1.0])]
    assert by_label(compare_arms(group_variants(ref + fired), "outcome", stable="pum_process"))[
        "pum_process"].decision == "not stable"  # fmt: skip
    quiet = [run("pum_process", 0, before, before=before)]  # no alarm metric recorded
    assert by_label(compare_arms(group_variants(ref + quiet), "outcome", stable="pum_process"))[
        "pum_process"].decision == "undecided: alarm not recorded"  # fmt: skip
    # a small drop inside the margin is still stable: 400 problems, 2 lost (mean -0.005; the bootstrap's low end
    # needs 12 of the 2 losses' 400 draws to reach -0.03: far beyond its 2.5th percentile)
    ids = [f"p{i}" for i in range(400)]
    base = [run("outcome", 0, [1] * 400, ids=ids, before=[1] * 400, alarm=[0.0])]
    small = [run("pum_process", 0, [0, 0] + [1] * 398, ids=ids, before=[1] * 400, alarm=[0.0])]
    row = by_label(compare_arms(group_variants(base + small), "outcome", stable="pum_process"))["pum_process"]
    assert row.after_vs_before.diff == pytest.approx(-0.005) and row.after_vs_before.ci_low > -STABILITY_MARGIN
    assert row.decision == "stable"
    with pytest.raises(ValueError, match="--stable 'nope' is no arm"):
        compare_arms(group_variants(ref + holds), "outcome", stable="nope")
    assert "Δacc after − before" in format_arm_comparison(list(rows.values()), "outcome")
