"""PUM-Math builder: arithmetic against hand-computed values, pairing, filtering, and end-to-end runs.

Hand values used below (n = 4 rollouts unless said otherwise):
  v(k, n) = q̃(1 - q̃)/(n + 2), q̃ = (k + 1)/(n + 2):
    v(0,4) = v(4,4) = (1/6)(5/6)/6 = 5/216 = 0.0231481;  v(1,4) = v(3,4) = (1/3)(2/3)/6 = 2/54 = 0.0370370;
    v(2,4) = (1/2)(1/2)/6 = 1/24 = 0.0416667.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from subprocesses import wait_for_output  # tests/helpers

from procrl.data_builders import pum_math as pm
from procrl.generation import Rollout, RolloutEngine

JANET_SOLUTION = (
    "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
    "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer’s market.\n#### 18"
)


# ---------------------------------------------------------------------------------------------------------
# Arithmetic
# ---------------------------------------------------------------------------------------------------------


def test_smoothed_variance_hand_values():
    assert pm.smoothed_variance(0, 4) == pytest.approx(5 / 216)
    assert pm.smoothed_variance(4, 4) == pytest.approx(5 / 216)  # 4/4 is not zero variance
    assert pm.smoothed_variance(1, 4) == pytest.approx(2 / 54)
    assert pm.smoothed_variance(2, 4) == pytest.approx(1 / 24)
    # n = 8, k = 0: q̃ = 1/10 -> 0.1 * 0.9 / 10 = 0.009
    assert pm.smoothed_variance(0, 8) == pytest.approx(0.009)
    with pytest.raises(ValueError):
        pm.smoothed_variance(5, 4)


def test_gains_subtract_the_bare_solve_rate():
    # student 0: 3/4 - 2/8 = 0.5; student 1: 1/4 - 4/8 = -0.25
    rates = pm.PrefixRates(successes=[3, 1], n=4, bare=[2, 4], n_bare=8)
    assert rates.gains() == pytest.approx([0.5, -0.25])


def test_student_scales_and_zero_spread_exclusion():
    # gains (P=2, M=2): student 0 = [0.5, -0.5] -> pop. std 0.5; student 1 = [0, 0] -> 0 (excluded)
    assert pm.student_scales([[0.5, 0.0], [-0.5, 0.0]]) == pytest.approx([0.5, 0.0])
    # G = mean over students with σ > 0: only student 0 -> 0.5 / 0.5 = 1
    assert pm.intrinsic_utility([0.5, 0.0], [0.5, 0.0]) == pytest.approx(1.0)
    # both students: (0.5/0.5 + (-0.25)/0.25)/2 = 0
    assert pm.intrinsic_utility([0.5, -0.25], [0.5, 0.25]) == pytest.approx(0.0)
    assert pm.intrinsic_utility([0.3], [0.0]) == 0.0  # nobody left: neutral 0, not NaN


def test_delta_variance_hand_value():
    # a: k = (4, 0), b: k = (0, 2), σ = (0.5, 1.0), M = 2
    # student 0: (v(4)+v(0))/0.25 = (10/216)/0.25 = 40/216; student 1: (v(0)+v(2))/1 = 5/216 + 9/216 = 14/216
    # Var = (54/216)/4 = 0.0625
    a = pm.PrefixRates([4, 0], 4, [0, 0], 8)
    b = pm.PrefixRates([0, 2], 4, [0, 0], 8)
    assert pm.delta_variance(a, b, [0.5, 1.0]) == pytest.approx(0.0625)
    # a student with σ = 0 drops out and M counts only the others: (14/216)/1
    assert pm.delta_variance(a, b, [0.0, 1.0]) == pytest.approx(14 / 216)


def test_margin_filter_ties_and_orientation():
    counts = pm.PairCounts()
    utility = {"a": 1.0, "b": 0.7, "c": 0.2, "d": 0.2}
    variance = {("a", "b"): 0.25**2, ("b", "c"): 0.25**2, ("c", "d"): 0.1, ("c", "a"): 0.0}
    candidates = [("a", "b", "vertical"), ("b", "c", "horizontal"), ("c", "d", "horizontal"), ("c", "a", "vertical")]
    # a-b: |0.3| > 0.25 keep; b-c: 0.5 > 0.25 keep; c-d: tie dropped; c-a: ΔG = -0.8, std 0 -> keep, a chosen
    kept = pm.select_pairs(candidates, utility, variance, kappa=1.0, keep_ties=False, counts=counts)
    assert [(p["chosen_key"], p["rejected_key"], p["pair_type"]) for p in kept] == [
        ("a", "b", "vertical"),
        ("b", "c", "horizontal"),
        ("a", "c", "vertical"),
    ]
    assert kept[0]["margin"] == pytest.approx(0.3) and kept[2]["margin"] == pytest.approx(0.8)
    assert counts.ties_dropped == Counter(horizontal=1) and not counts.dropped_by_margin
    # kappa 2: a-b needs |ΔG| > 0.5 -> dropped; b-c: 0.5 > 0.5 is False -> dropped (strict inequality)
    counts = pm.PairCounts()
    kept = pm.select_pairs(candidates, utility, variance, kappa=2.0, keep_ties=True, counts=counts)
    assert [(p["chosen_key"], p["is_tie"]) for p in kept] == [("c", True), ("a", False)]
    assert kept[0]["margin"] == 0.0
    assert counts.dropped_by_margin == Counter(vertical=1, horizontal=1)
    assert counts.ties_kept == Counter(horizontal=1)


def _prefix(key, n_tokens, pid="q"):
    return pm.Prefix(key, pid, [key], n_tokens)


def test_vertical_and_horizontal_pairing():
    prefixes = {k: _prefix(k, n) for k, n in [("a1", 10), ("a2", 20), ("a3", 40), ("b1", 11), ("b2", 30), ("b3", 42)]}
    t1 = pm.Trajectory("q", 0, "reference", ["x"], ["a1", "a2", "a3"])
    t2 = pm.Trajectory("q", 1, "policy", ["y"], ["b1", "b2", "b3"])
    counts = pm.PairCounts()
    pairs = pm.candidate_pairs([t1, t2], prefixes, tolerance=0.10, counts=counts)
    vertical = {(a, b) for a, b, t in pairs if t == "vertical"}
    horizontal = {(a, b) for a, b, t in pairs if t == "horizontal"}
    assert vertical == {("a1", "a2"), ("a1", "a3"), ("a2", "a3"), ("b1", "b2"), ("b1", "b3"), ("b2", "b3")}
    # |10-11| = 1 <= 1.1 yes; |40-42| = 2 <= 4.2 yes; |20-11| = 9 > 2.0; |40-30| = 10 > 4.0; |20-30| = 10 > 3.0
    assert horizontal == {("a1", "b1"), ("a3", "b3")}


def test_identical_prefixes_make_no_pair_and_are_counted():
    prefixes = {"s": _prefix("s", 10), "a2": _prefix("a2", 20), "b2": _prefix("b2", 21)}
    # both trajectories start with the same first step: one shared prefix "s"
    t1 = pm.Trajectory("q", 0, "reference", ["x"], ["s", "a2"])
    t2 = pm.Trajectory("q", 1, "policy", ["y"], ["s", "b2"])
    counts = pm.PairCounts()
    pairs = pm.candidate_pairs([t1, t2], prefixes, tolerance=0.10, counts=counts)
    assert counts.identical_pairs_dropped == 1  # (s, s) horizontal
    assert ("s", "s", "horizontal") not in pairs
    assert ("a2", "b2", "horizontal") in pairs


def test_step_count_mismatch_names_the_problem():
    with pytest.raises(ValueError, match="problem gsm8k/test/7: 3 prefixes but 2 rows"):
        pm.attach_rates("gsm8k/test/7", ["p0", "p1", "p2"], [[1, 2], [0, 0]])


def test_reference_steps_of_a_gsm8k_solution():
    assert pm.reference_steps(JANET_SOLUTION) == [
        "Janet sells 16 - 3 - 4 = 9 duck eggs a day.\n\n",
        "She makes 9 * 2 = $18 every day at the farmer’s market.\n\n",
        "The answer is 18.",
    ]
    assert pm.reference_steps("") == []
    assert pm.reference_steps("First.\n\nThen \\boxed{2}.") == ["First.\n\n", "Then \\boxed{2}."]


def test_cuts_are_strict_token_prefixes(smollm2_tokenizer):
    from procrl.rewards.steps import tokenize_steps

    steps = pm.reference_steps(JANET_SOLUTION)
    full_ids, bounds = tokenize_steps(smollm2_tokenizer, steps)
    cuts = pm.cut_trajectory(smollm2_tokenizer, steps, [0.25, 0.5, 0.75], at_steps=True)
    lengths = [n for _, n in cuts]
    assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths)
    assert bounds[0] in lengths and bounds[1] in lengths and len(full_ids) in lengths  # 3 step cuts
    assert len(cuts) == 6  # + 3 fraction cuts (none coincides with a step boundary here)
    text = "".join(steps)
    for pieces, n_tokens in cuts:
        assert text.startswith("".join(pieces))
        ids, _ = tokenize_steps(smollm2_tokenizer, pieces)
        assert len(ids) == n_tokens
        assert ids == full_ids[:n_tokens]  # piecewise tokenization keeps the prefix property
    # the 0.5 cut sits at floor(0.5 * L) tokens
    assert math.floor(0.5 * len(full_ids)) in lengths


def test_config_validation_messages():
    with pytest.raises(ValueError, match="student_temperatures has 3 values for 2 students"):
        pm.PUMMathConfig(student_temperatures=[1.0, 0.7, 0.5])
    with pytest.raises(ValueError, match="cut_fractions must lie in"):
        pm.PUMMathConfig(cut_fractions=[0.0, 0.5])
    config = pm.PUMMathConfig(students=["a", "b", "c"], student_templates=["chat"])
    assert config.student_templates == ["chat", "chat", "chat"]
    with pytest.raises(ValueError, match="prompt_template must be a string containing the placeholder"):
        pm.PUMMathConfig(prompt_template="Solve it.")
    assert pm.PUMMathConfig().prompt_template == "one_shot"


def test_maps_to_unknown(smollm2_tokenizer):
    from procrl.data_builders.arithmetic_tokenizer import arithmetic_tokenizer

    word_level = arithmetic_tokenizer()
    assert not pm.maps_to_unknown(word_level, "4 - 2 = 2.\n\nThe answer is 2.")
    # the organism can emit "is" then "Nora" (no space): decoded they fuse into a word the tokenizer does not know
    assert pm.maps_to_unknown(word_level, "4 - 2 = 2.\n\nThe answer isNora.")
    assert pm.maps_to_unknown(word_level, "4 - 2 = 2.\n\n\n2 + 6 = 8.")  # a whitespace run outside the vocabulary
    assert not pm.maps_to_unknown(smollm2_tokenizer, "The answer isNora.\n\n\n")  # byte-level BPE knows every text

    class NoUnk:
        unk_token_id = None

    assert not pm.maps_to_unknown(NoUnk(), "anything")


def test_unparseable_gold_is_skipped_and_counted(tmp_path):
    data = tmp_path / "probs.jsonl"
    rows = [
        {"question": "1 + 1?", "answer": "2"},
        {"question": "Look at the figure.", "answer": "see figure"},
        {"question": "2 + 2?", "answer": "4"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    counts = Counter()
    config = pm.PUMMathConfig(dataset=str(data), split="train", end=None)
    problems = pm.load_problems(config, counts)
    assert [p.question for p in problems] == ["1 + 1?", "2 + 2?"]
    assert counts["unparseable_golds_skipped"] == 1


# ---------------------------------------------------------------------------------------------------------
# End to end with a scripted engine (fixed answers per prompt)
# ---------------------------------------------------------------------------------------------------------


class ScriptedEngine(RolloutEngine):
    """Answers by prompt: the rule maps the decoded prompt to how many of its n rows answer 18 (the rest say 5)."""

    def __init__(self, tokenizer, rule, name):
        self.tokenizer = tokenizer
        self.rule = rule
        self.model_id = f"scripted-{name}"
        self.calls = 0

    def generate(self, prompt_ids, params, *, seed):
        self.calls += 1
        seen = Counter()
        out = []
        for ids in prompt_ids:
            key = tuple(ids)
            correct = seen[key] < self.rule(self.tokenizer.decode(ids))
            seen[key] += 1
            text = " The answer is 18." if correct else " The answer is 5."
            tokens = self.tokenizer.encode(text, add_special_tokens=False)
            out.append(Rollout(tokens, text, [0.0] * len(tokens), "eos"))
        return out


def _rule(counts):
    """counts = (bare, p1, p2, p3): successes for the bare problem and the prefixes through step 1, 2, 3."""

    def rule(prompt):
        if "The answer is 18." in prompt:
            return counts[3]
        if "$18 every day" in prompt:
            return counts[2]
        if "duck eggs" in prompt:
            return counts[1]
        return counts[0]

    return rule


def test_end_to_end_pairs_match_hand_computation(tmp_path, smollm2_tokenizer):
    # One GSM8K problem (Janet, gold 18), its reference solution only, cut at the 3 step boundaries.
    # Student A: bare 2/8, p1 1/4, p2 3/4, p3 4/4  -> gains 0, 0.5, 0.75; σ_A = pop.std = sqrt(0.0972222) = 0.311805
    # Student B: bare 0/8, p1 0/4, p2 2/4, p3 2/4  -> gains 0, 0.5, 0.5;  σ_B = sqrt(0.0555556) = 0.235702
    # G(p1) = 0; G(p2) = (0.5/0.311805 + 0.5/0.235702)/2 = (1.603567 + 2.121320)/2 = 1.862444
    # G(p3) = (0.75/0.311805 + 0.5/0.235702)/2 = (2.405351 + 2.121320)/2 = 2.263335
    # Var(p1,p2) = [(v1+v3)/σA² + (v0+v2)/σB²]/4 = [0.0740741/0.0972222 + 0.0648148/0.0555556]/4
    #            = (0.761905 + 1.166667)/4 = 0.482143 -> std 0.694365 < ΔG 1.862444: kept (p2 chosen)
    # Var(p1,p3) = [(v1+v4)/σA² + (v0+v2)/σB²]/4 = (0.619048 + 1.166667)/4 = 0.446429 -> std 0.668153: kept (p3)
    # Var(p2,p3) = [(v3+v4)/σA² + (v2+v2)/σB²]/4 = (0.619048 + 1.5)/4 = 0.529762 -> std 0.727848 > ΔG 0.400891: dropped
    n_bare = 8
    engines = {
        "A": ScriptedEngine(smollm2_tokenizer, _rule((2, 1, 3, 4)), "A"),
        "B": ScriptedEngine(smollm2_tokenizer, _rule((0, 0, 2, 2)), "B"),
    }
    config = pm.PUMMathConfig(
        dataset="gsm8k", start=0, end=1, output_dir=str(tmp_path / "out"), trajectory_source="reference",
        students=["A", "B"], student_templates=["chat"], n_rollouts=4, n_rollouts_bare=n_bare, cut_fractions=[],
        shard_size=1000,
    )  # fmt: skip
    dataset, stats = pm.build_pum_math(config, engines=engines)
    assert stats["problems"] == 1 and stats["prefixes"] == 3 and stats["trajectories"] == {"reference": 1}
    assert stats["rollouts"]["total"] == (3 * 4 + 8) * 2
    assert stats["student_sigma"] == pytest.approx([0.311805, 0.235702], abs=1e-6)
    assert stats["pairs"] == {"vertical": 2} and stats["dropped_by_margin"] == {"vertical": 1}
    rows = sorted(dataset.to_list(), key=lambda r: r["margin"])
    assert [r["chosen"].endswith(t) for r, t in zip(rows, ["market.\n\n", "The answer is 18."], strict=True)] == [
        True,
        True,
    ]
    assert all(r["rejected"] == "Janet sells 16 - 3 - 4 = 9 duck eggs a day.\n\n" for r in rows)
    assert [r["margin"] for r in rows] == pytest.approx([1.862444, 2.263335], abs=1e-5)
    assert [r["delta_std"] for r in rows] == pytest.approx([0.694365, 0.668153], abs=1e-5)
    assert rows[0]["gain_chosen"] == pytest.approx(1.862444, abs=1e-5) and rows[0]["gain_rejected"] == pytest.approx(
        0.0
    )
    assert rows[0]["prompt"].startswith("Janet’s ducks lay 16 eggs") and rows[0]["n_rollouts"] == 4
    out = Path(config.output_dir)
    for name in ("dataset", "pairs.parquet", "stats.json", "gains.png", "prefixes.jsonl"):
        assert (out / name).exists(), name
    assert json.loads((out / "stats.json").read_text())["pairs"] == {"vertical": 2}
    import datasets

    assert datasets.Dataset.from_parquet(str(out / "pairs.parquet")).to_list() == dataset.to_list()

    # A rerun reads every rollout from the cache: no generate call, same pairs.
    calls = {k: e.calls for k, e in engines.items()}
    dataset2, stats2 = pm.build_pum_math(config, engines=engines)
    assert {k: e.calls for k, e in engines.items()} == calls
    assert stats2["rollouts"]["generated_this_run"] == 0 and dataset2.to_list() == dataset.to_list()


class PhasedEngine(ScriptedEngine):
    """A scripted engine whose rule changes after the first generate call (the main run): the replication's fresh
    rollouts then disagree with the main estimate where the test wants them to. Records the rows of every call."""

    def __init__(self, tokenizer, rules, name):
        super().__init__(tokenizer, rules[0], name)
        self.rules, self.rows = rules, []

    def generate(self, prompt_ids, params, *, seed):
        self.rule = self.rules[min(self.calls, len(self.rules) - 1)]
        self.rows.append(len(prompt_ids))
        return super().generate(prompt_ids, params, seed=seed)


def test_replication_reestimates_prefixes_only_and_can_fail(tmp_path, smollm2_tokenizer):
    # Main run as in the hand computation above: kept pairs p2 > p1 and p3 > p1 (vertical).
    # Replication: student A now solves p1 4/4, p2 3/4, p3 1/4 (B unchanged); σ and q(x, ∅) cancel or stay fixed:
    # ΔG(p2, p1) = [(3/4 - 4/4)/0.311805 + (2/4 - 0/4)/0.235702]/2 = (-0.801784 + 2.121320)/2 = +0.66  -> replicates
    # ΔG(p3, p1) = [(1/4 - 4/4)/0.311805 + (2/4 - 0/4)/0.235702]/2 = (-2.405351 + 2.121320)/2 = -0.14  -> does not
    engines = {
        "A": PhasedEngine(smollm2_tokenizer, [_rule((2, 1, 3, 4)), _rule((2, 4, 3, 1))], "A"),
        "B": PhasedEngine(smollm2_tokenizer, [_rule((0, 0, 2, 2))], "B"),
    }
    config = pm.PUMMathConfig(
        dataset="gsm8k", start=0, end=1, output_dir=str(tmp_path / "out"), trajectory_source="reference",
        students=["A", "B"], student_templates=["chat"], n_rollouts=4, n_rollouts_bare=8, cut_fractions=[],
        shard_size=1000, replication_seed=1,
    )  # fmt: skip
    _, stats = pm.build_pum_math(config, engines=engines)
    assert stats["pairs"] == {"vertical": 2}
    rep = stats["replication"]
    assert rep["vertical"] == {"pairs": 2, "replicated": 1, "replicated_frac": 0.5, "tied_frac": 0.0}
    assert rep["all"] == {"pairs": 2, "replicated_frac": 0.5}
    assert json.loads((Path(config.output_dir) / "stats.json").read_text())["replication"] == rep  # on disk too
    # main run: 3 prefixes x 4 + 8 bare rows per student; replication: the 3 prefixes x 4 only (no bare rollouts)
    assert engines["A"].rows == [3 * 4 + 8, 3 * 4] and engines["B"].rows == [3 * 4 + 8, 3 * 4]


def test_student_with_zero_spread_is_excluded_and_counted(tmp_path, smollm2_tokenizer):
    # Student B answers everything right: gains all 0 -> σ_B = 0, excluded; G comes from student A alone.
    engines = {
        "A": ScriptedEngine(smollm2_tokenizer, _rule((2, 1, 3, 4)), "A"),
        "B": ScriptedEngine(smollm2_tokenizer, _rule((8, 4, 4, 4)), "B"),
    }
    config = pm.PUMMathConfig(
        dataset="gsm8k", start=0, end=1, output_dir=str(tmp_path / "out"), trajectory_source="reference",
        students=["A", "B"], student_templates=["chat"], cut_fractions=[], shard_size=1000,
    )  # fmt: skip
    dataset, stats = pm.build_pum_math(config, engines=engines)
    assert stats["students_excluded_zero_spread"] == ["B"]
    # G = g_A/σ_A: p1 0, p2 1.603567, p3 2.405351; Var(p_i,p_j) = (v_i + v_j)/σ_A² (M = 1)
    # p1-p2: sqrt(0.761905) = 0.872872 < 1.603567 kept; p1-p3: sqrt(0.619048) = 0.786796 < 2.405351 kept;
    # p2-p3: sqrt(0.619048) = 0.786796 < 0.801784 kept (barely)
    assert stats["pairs"] == {"vertical": 3}
    assert sorted(dataset["margin"]) == pytest.approx([0.801784, 1.603567, 2.405351], abs=1e-5)


def test_verification_budget_is_generous_and_timeouts_are_counted(tmp_path, smollm2_tokenizer, monkeypatch, caplog):
    import logging

    from procrl.rewards import outcome

    assert pm.PUMMathConfig().verify_timeout_s == 30.0 > outcome.DEFAULT_TIMEOUT_S
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="verify_timeout_s must be a positive, finite number"):
            pm.PUMMathConfig(verify_timeout_s=bad)

    # A hand-made checker that agrees with is_correct on these texts (the last "The answer is N." decides). Once
    # armed, its first check of a wrong answer runs out of the budget as a stopped math-verify step would: it takes
    # the whole budget and fails. The gold "slow" does the same in parse_gold.
    budgets, slow = [], []

    def fake_is_correct(completion, gold, *, timeout_s=None, answer_extraction="strict"):
        budgets.append(timeout_s)
        if slow == ["armed"] and completion.rstrip().endswith("The answer is 5."):
            slow.append(completion)
            time.sleep(1.1 * timeout_s)
            return False
        return completion.rstrip().endswith("The answer is 18.")

    def fake_parse_gold(gold, *, timeout_s=None):
        budgets.append(timeout_s)
        if gold == "slow":
            time.sleep(1.1 * timeout_s)
            return None
        return [gold]

    monkeypatch.setattr(outcome, "is_correct", fake_is_correct)
    monkeypatch.setattr(outcome, "parse_gold", fake_parse_gold)
    engines = {
        "A": ScriptedEngine(smollm2_tokenizer, _rule((2, 1, 3, 4)), "A"),
        "B": ScriptedEngine(smollm2_tokenizer, _rule((0, 0, 2, 2)), "B"),
    }
    config = pm.PUMMathConfig(
        dataset="gsm8k", start=0, end=1, output_dir=str(tmp_path / "out"), trajectory_source="reference",
        students=["A", "B"], student_templates=["chat"], n_rollouts=4, n_rollouts_bare=8, cut_fractions=[],
        shard_size=1000,
    )  # fmt: skip
    # The default budget reaches every check; nothing runs out.
    _, stats = pm.build_pum_math(config, engines=engines)
    assert set(budgets) == {30.0} and len(budgets) == 1 + (3 * 4 + 8) * 2  # one gold parse, every rollout checked
    assert stats["verification_timeouts"] == 0 and stats["pairs"] == {"vertical": 2}

    # A small budget and one check that runs out of it: counted (not the other, fast, wrong answers), a warning,
    # stats.json says so; the timed-out check was a wrong answer anyway, so the pairs are the hand-computed ones.
    budgets.clear()
    slow.append("armed")
    config.verify_timeout_s = 0.5
    with caplog.at_level(logging.WARNING, logger="procrl"):
        dataset, stats = pm.build_pum_math(config, engines=engines)
    assert len(slow) == 2 and set(budgets) == {0.5}
    assert stats["verification_timeouts"] == 1 and stats["rollouts"]["generated_this_run"] == 0  # rollouts reused
    assert json.loads((Path(config.output_dir) / "stats.json").read_text())["verification_timeouts"] == 1
    assert "1 math-verify checks ran out of their 0.5 s budget (verify_timeout_s)" in caplog.text
    assert sorted(dataset["margin"]) == pytest.approx([1.862444, 2.263335], abs=1e-5)

    # A gold parse that runs out: the problem is skipped as unparseable, and the timeout is counted.
    data = tmp_path / "probs.jsonl"
    data.write_text(
        "".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in [("1 + 1?", "2"), ("?", "slow")])
    )
    counts = Counter()
    problems = pm.load_problems(
        pm.PUMMathConfig(dataset=str(data), split="train", end=None, verify_timeout_s=0.5), counts
    )
    assert [p.question for p in problems] == ["1 + 1?"]
    assert counts == {"unparseable_golds_skipped": 1, "verification_timeouts": 1}


# ---------------------------------------------------------------------------------------------------------
# The real transformers engine on a tiny model; kill -9 and resume
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture()
def tiny_model_dir(tmp_path, tiny_llama, smollm2_tokenizer):
    path = tmp_path / "tiny"
    tiny_llama.save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return str(path)


@pytest.mark.slow  # about 40 s on 2 busy cores
def test_real_engine_on_a_tiny_model(tmp_path, tiny_model_dir):
    config = pm.PUMMathConfig(
        dataset="gsm8k", start=0, end=2, output_dir=str(tmp_path / "out"), trajectory_source="both",
        policy_model=tiny_model_dir, n_trajectories=2, max_trajectory_tokens=12,
        students=[tiny_model_dir], student_templates=["chat"], student_max_new_tokens=[6],
        n_rollouts=8, n_rollouts_bare=2, generation_backend="transformers", batch_size=16, shard_size=32,
    )  # fmt: skip
    dataset, stats = pm.build_pum_math(config)
    n_traj = sum(stats["trajectories"].values())
    assert stats["trajectories"]["reference"] == 2 and n_traj >= 3
    assert stats["rollouts"]["total"] == stats["prefixes"] * 8 + 2 * 2
    assert stats["rollouts"]["generated_this_run"] == stats["rollouts"]["total"] + 2 * 2  # + the 4 trajectories
    assert stats["tokens_generated"] > 0
    # A random model never writes "The answer is N" itself, so a rollout can only verify when its prefix already
    # ends with the right answer (a full reference solution). About a third of the random continuations start without
    # a space and glue to it ("18.inatealent" does not verify): with 2 rollouts per prefix all 4 of the two full
    # solutions' rollouts were glued in about 1 run in 20 (CI stop 10); with 8 each, (1/3)**16 < 1e-7.
    from procrl.rewards.outcome import is_correct

    gold = {"gsm8k/test/0": "18", "gsm8k/test/1": "3"}
    records = [json.loads(line) for line in Path(config.output_dir, "prefixes.jsonl").read_text().splitlines()]
    assert len(records) == stats["prefixes"]
    answered = [is_correct(r["prefix"], gold[r["problem_id"]]) for r in records]
    assert sum(answered) == 2
    assert all(r["successes"] == [0] for r, ok in zip(records, answered, strict=True) if not ok)
    assert sum(r["successes"][0] for r, ok in zip(records, answered, strict=True) if ok) > 0
    assert len(dataset) == sum(stats["pairs"].values()) > 0


RESUME_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    from procrl.data_builders import pum_math as pm
    from procrl.generation import Rollout, RolloutEngine, TransformersEngine

    class Judged(RolloutEngine):
        # real generation; a rollout "answers 18" when its first sampled token id is even (so the pairs
        # depend on what was actually sampled)
        def __init__(self, path):
            # a fixed model_id keeps the samples (seeded from the cache key) the same across test runs
            self.inner = TransformersEngine(path, device="cpu", batch_size=4, model_id="tiny-resume-test")
            self.tokenizer = self.inner.tokenizer
            self.model_id = "judged-" + self.inner.model_id
            self.calls = 0
        def cache_key(self):
            return "judged-" + self.inner.cache_key()
        def generate(self, prompt_ids, params, *, seed):
            # The run to be killed (PUM_TEST_BLOCK_BEFORE_SHARD=k): call k is shard k, and shards 0..k-1 are on disk
            # when it starts (a shard is written before the next is generated); it says so and never returns.
            if self.calls == int(os.environ.get("PUM_TEST_BLOCK_BEFORE_SHARD", "-1")):
                print(f"blocked before shard {self.calls}", flush=True)
                threading.Event().wait()
            self.calls += 1
            out = []
            for r in self.inner.generate(prompt_ids, params, seed=seed):
                text = " The answer is 18." if r.token_ids and r.token_ids[0] % 2 == 0 else " The answer is 5."
                out.append(Rollout(r.token_ids, text, r.logprobs, r.finish_reason))
            return out

    model, out = sys.argv[1], sys.argv[2]
    config = pm.PUMMathConfig(
        dataset="gsm8k", start=0, end=3, output_dir=out, trajectory_source="reference",
        students=["tiny"], student_templates=["chat"], student_max_new_tokens=[8],
        n_rollouts=4, n_rollouts_bare=4, shard_size=4, cut_fractions=[0.5], seed=3, kappa=0.0,
    )
    pm.build_pum_math(config, engines={"tiny": Judged(model)})
    """
)


def _shards(out: Path) -> list[Path]:
    return sorted((out / "cache").rglob("rollouts-*.jsonl"))


def _decided(out: Path) -> tuple[list, list]:
    """What the sampled ids decide, exactly: every prefix's text and success counts, every pair's texts and type."""
    import datasets

    records = [json.loads(line) for line in (out / "prefixes.jsonl").read_text().splitlines()]
    rows = datasets.load_from_disk(str(out / "dataset")).to_list()
    return (
        [(r["key"], r["prefix"], r["successes"], r["bare_successes"]) for r in records],
        [(r["problem_id"], r["chosen"], r["rejected"], r["pair_type"], r["is_tie"]) for r in rows],
    )


def _assert_same_dataset(out: Path, reference: Path) -> None:
    """Texts and counts first (clearer failures), then everything. Every float of `dataset/` and `prefixes.jsonl`
    (gains, G, margin, delta_std) is computed on the main rank from the integer success counts by the same Python
    code in the same order, whether the build was resumed or ran on two ranks; no log-prob or other model output
    reaches them. So equal counts give equal IEEE-754 doubles on any CPU, and == is what the builder promises."""
    import datasets

    assert _decided(out) == _decided(reference)
    got = datasets.load_from_disk(str(out / "dataset")).to_list()
    assert got == datasets.load_from_disk(str(reference / "dataset")).to_list() and len(got) > 0
    assert (out / "prefixes.jsonl").read_text() == (reference / "prefixes.jsonl").read_text()


@pytest.mark.slow
def test_kill_9_resume_and_two_ranks_give_the_uninterrupted_dataset(tmp_path, tiny_model_dir):
    script = tmp_path / "build.py"
    script.write_text(RESUME_SCRIPT)
    # one torch thread everywhere: CPU samples can depend on the thread count, and torchrun sets 1 per rank
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    reference_out, resumed_out = tmp_path / "uninterrupted", tmp_path / "resumed"
    subprocess.run([sys.executable, str(script), tiny_model_dir, str(reference_out)], check=True, env=env, timeout=300)
    total = len(_shards(reference_out))
    reference_stats = json.loads((reference_out / "stats.json").read_text())["rollouts"]
    assert total >= 6 and reference_stats["from_cache"] == 0
    rows_per_shard = 4  # shard_size 4 = n_rollouts = n_rollouts_bare: one request per shard

    # Killed while it blocks before shard 2, i.e. once shards 0 and 1 are on disk: an event, not a race with a sleep.
    finished = 2
    with open(tmp_path / "killed.stderr", "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(script), tiny_model_dir, str(resumed_out)],
            env={**env, "PUM_TEST_BLOCK_BEFORE_SHARD": str(finished)},
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        try:
            wait_for_output(proc, f"blocked before shard {finished}".encode())
        except AssertionError as err:
            proc.kill()
            proc.wait()
            raise AssertionError(f"{err}\n{(tmp_path / 'killed.stderr').read_text()[-3000:]}") from None
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        proc.stdout.close()
    files = _shards(resumed_out)
    assert len(files) == finished < total
    assert not (resumed_out / "stats.json").exists()
    written = {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files}

    subprocess.run([sys.executable, str(script), tiny_model_dir, str(resumed_out)], check=True, env=env, timeout=300)
    stats = json.loads((resumed_out / "stats.json").read_text())["rollouts"]
    # The resumed build read the killed run's two shards (untouched files) and generated only the others.
    assert stats["from_cache"] == finished * rows_per_shard
    assert stats["total"] == reference_stats["total"]
    assert stats["generated_this_run"] == stats["total"] - finished * rows_per_shard
    assert {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files} == written
    assert len(_shards(resumed_out)) == total
    _assert_same_dataset(resumed_out, reference_out)

    # Two CPU ranks (gloo): the shards are split between the ranks, the main rank writes the same dataset.
    sharded_out = tmp_path / "two_ranks"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    subprocess.run(
        [*torchrun, str(script), tiny_model_dir, str(sharded_out)],
        check=True,
        env={**env, "ACCELERATE_USE_CPU": "True"},
        timeout=300,
    )
    # A shard's batches depend on its rows only, so two ranks generate every shard in the batch shapes of one rank.
    _assert_same_dataset(sharded_out, reference_out)
    assert any(
        json.loads(line)["successes"] != [0] for line in (reference_out / "prefixes.jsonl").read_text().splitlines()
    )


def test_gain_plot_without_pairs_warns_nothing(tmp_path):
    import warnings

    config = pm.PUMMathConfig(dataset="gsm8k", output_dir=str(tmp_path), students=["a"], student_templates=["chat"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "No artists with labels" for a legend of nothing
        pm.plot_gains({"raw_gains": {0: [0.0, 0.0]}, "rows": []}, config, tmp_path / "gains.png")
    assert (tmp_path / "gains.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
