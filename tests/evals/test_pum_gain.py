"""The PUM-Math gain check (evals/pum_gain.py, `procrl pum-gain-check`) and what the builder records for it (at_step,
the unknown-token guard, the prompt template), against hand-labelled prefixes and hand-computed means.

The problem used by hand: arith-ops2-d1-train row 0, "In the morning, Nora has 4 muffins. Then Nora donates 2 muffins.
After that, Nora finds 6 more muffins. ...", gold 4 - 2 = 2, 2 + 6 = 8 (known numbers 4, 2, 6; gold results 2, 8).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import datasets
import pytest

from procrl.data_builders import pum_math as pm
from procrl.data_builders.arithmetic_tokenizer import arithmetic_tokenizer
from procrl.data_builders.datasets import load_math_dataset
from procrl.evals.pum_gain import gain_check, gain_contrast, oracle_progress, pair_agreement, prefix_oracle_class
from procrl.generation import Rollout, RolloutEngine
from procrl.rewards.oracle import gold_steps_from_json
from procrl.scripts import pum_gain_check

QUESTION = (
    "In the morning, Nora has 4 muffins. Then Nora donates 2 muffins. After that, Nora finds 6 more muffins. "
    "How many muffins does Nora have now?"
)
GOLD = gold_steps_from_json('[[4,"-",2,2],[2,"+",6,8]]')


# ---------------------------------------------------------------------------------------------------------
# prefix_oracle_class
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "error", "error_or_off_track"),
    [
        ("4 - 2 = 2.\n\n", "correct", "correct"),
        ("4 - 2 = 2.\n\n2 + 6 = 8.\n\n", "correct", "correct"),
        ("4 - 2 = 2.\n\n2 + 6 = 8.", "correct", "correct"),  # the last step without its separator
        ("4 - 2 = 3.\n\n", "first_wrong", "first_wrong"),  # invalid
        ("4 - 2 = 3.\n\n3 + 6 = 9.\n\n", "after_wrong", "after_wrong"),  # 3 is the result of an invalid step
        ("4 - 2 = 2.\n\n2 + 7 = 9.\n\n", "first_wrong", "first_wrong"),  # 7 is no known number: ungrounded
        ("4 - 2 = 2.\n\n2 + 4 = 6.\n\n", "correct", "first_wrong"),  # valid, grounded, off track (6)
        ("4 - 2 = 2.\n\n2 + 4 = 6.\n\n6 + 2 = 8.\n\n", "correct", "after_wrong"),
        ("4 - 2 = 2. 2 + 6 = 9.\n\n", "first_wrong", "first_wrong"),  # two steps in one piece, the 2nd wrong
        ("4 - 2 = 3. 3 + 6 = 9.\n\n", "first_wrong", "first_wrong"),  # the first wrong step is in the last piece
        ("4 - 2 = 2.\n\n2 + 6 = 8.\n\nThe answer is 8.", "no_step_at_end", "no_step_at_end"),
        ("4 - 2 = 3.\n\nThe answer is 3.", "no_step_at_end", "no_step_at_end"),
        ("Nora has 4 muffins.\n\n", "no_step", "no_step"),
    ],
)
def test_prefix_classes_by_hand(prefix, error, error_or_off_track):
    assert prefix_oracle_class(prefix, QUESTION, GOLD) == error
    assert prefix_oracle_class(prefix, QUESTION, GOLD, wrong="error_or_off_track") == error_or_off_track


def test_prefix_class_edge_cases():
    # a cut inside a step is left out whatever its text says
    assert prefix_oracle_class("4 - 2 = 2.\n\n2 + 6 = 8.\n\n", QUESTION, GOLD, at_step=False) == "partial"
    # another separator: the pieces are the lines
    assert prefix_oracle_class("4 - 2 = 2.\n2 + 6 = 9.\n", QUESTION, GOLD, separator="\n") == "first_wrong"
    assert prefix_oracle_class("4 - 2 = 3.\n2 + 6 = 8.\n", QUESTION, GOLD, separator="\n") == "after_wrong"
    with pytest.raises(ValueError, match="wrong must be one of"):
        prefix_oracle_class("4 - 2 = 2.\n\n", QUESTION, GOLD, wrong="off_track")
    with pytest.raises(ValueError, match="gold step"):
        prefix_oracle_class("4 - 2 = 2.\n\n", QUESTION, [])


# ---------------------------------------------------------------------------------------------------------
# gain_contrast and pair_agreement
# ---------------------------------------------------------------------------------------------------------

# problem a: correct 1.0, 0.5; first_wrong -1.0.  problem b: correct 0.0; first_wrong -0.5; after_wrong -2.0; partial.
VALUES = [1.0, 0.5, -1.0, 0.0, -0.5, -2.0, 9.0]
CLASSES = ["correct", "correct", "first_wrong", "correct", "first_wrong", "after_wrong", "partial"]
PROBLEMS = ["a", "a", "a", "b", "b", "b", "b"]


def test_gain_contrast_hand_values():
    r = gain_contrast(VALUES, CLASSES, PROBLEMS, resamples=0)
    # correct (1.0 + 0.5 + 0.0)/3 = 0.5; first_wrong (-1.0 - 0.5)/2 = -0.75; difference 1.25; the partial 9.0 is out
    assert r.groups["correct"].mean == pytest.approx(0.5)
    assert r.groups["first_wrong"].mean == pytest.approx(-0.75)
    assert r.difference == pytest.approx(1.25)
    assert (r.groups["correct"].n_prefixes, r.groups["correct"].n_problems) == (3, 2)
    assert (r.groups["after_wrong"].mean, r.groups["after_wrong"].n_prefixes, r.groups["after_wrong"].n_problems) == (
        -2.0,
        1,
        1,
    )
    assert r.excluded == {"partial": 1, "no_step": 0, "no_step_at_end": 0}
    assert r.groups["correct"].interval is None and r.difference_interval is None  # no bootstrap asked for


def test_gain_contrast_bootstrap_over_problems():
    # Resampling 2 problems gives {a, a} (p = 1/4), {a, b} (1/2), {b, b} (1/4). The difference is then
    # 0.75 - (-1.0) = 1.75, the pooled 1.25, or 0.0 - (-0.5) = 0.5: the 2.5th and 97.5th percentiles are 0.5 and 1.75.
    r = gain_contrast(VALUES, CLASSES, PROBLEMS, resamples=2000, seed=0)
    assert r.difference_interval == pytest.approx((0.5, 1.75))
    assert r.groups["correct"].interval == pytest.approx((0.0, 0.75))  # per-problem means 0.75 and 0.0
    # after_wrong exists in b only: a resample without b has no value (left out), with b it is always -2.0
    assert r.groups["after_wrong"].interval == pytest.approx((-2.0, -2.0))
    # one problem: every resample is that problem, the interval is the point
    one = gain_contrast([0.3, -0.1], ["correct", "first_wrong"], ["p", "p"], resamples=200)
    assert one.difference_interval == pytest.approx((0.4, 0.4)) and one.difference == pytest.approx(0.4)


def test_gain_contrast_empty_classes_and_bad_input():
    r = gain_contrast([0.2, 0.4], ["correct", "no_step"], ["a", "b"], resamples=100)
    assert r.groups["first_wrong"].mean is None and r.groups["first_wrong"].interval is None
    assert r.difference is None and r.difference_interval is None
    assert r.excluded["no_step"] == 1
    empty = gain_contrast([], [], [], resamples=100)
    assert empty.difference is None and all(g.n_prefixes == 0 for g in empty.groups.values())
    with pytest.raises(ValueError, match="finite"):
        gain_contrast([float("nan")], ["correct"], ["a"])
    with pytest.raises(ValueError, match="one each"):
        gain_contrast([0.1, 0.2], ["correct"], ["a", "a"])
    with pytest.raises(ValueError, match="unknown prefix classes"):
        gain_contrast([0.1], ["right"], ["a"])


def test_pair_agreement_hand_counts():
    chosen = ["correct", "first_wrong", "correct", "correct", "partial"]
    rejected = ["first_wrong", "correct", "after_wrong", "correct", "first_wrong"]
    types = ["vertical", "vertical", "horizontal", "horizontal", "vertical"]
    problems = ["a", "a", "b", "b", "b"]
    r = pair_agreement(chosen, rejected, types, problems, resamples=500)
    assert r.pairs == {"all": 5, "horizontal": 2, "vertical": 3}
    # decided: the first three (one side correct, the other wrong); the 1st and 3rd chose the correct side
    assert r.decided == {"all": 3, "horizontal": 1, "vertical": 2}
    assert r.agree["all"] == pytest.approx(2 / 3) and r.agree["vertical"] == 0.5 and r.agree["horizontal"] == 1.0
    # horizontal's decided pair is in b alone; vertical's two are in a (resamples without a are left out)
    assert r.intervals["horizontal"] == pytest.approx((1.0, 1.0))
    assert r.intervals["vertical"] == pytest.approx((0.5, 0.5))
    none = pair_agreement(["correct"], ["correct"], ["vertical"], ["a"])
    assert none.decided == {"all": 0, "vertical": 0} and none.agree["all"] is None and none.intervals["all"] is None
    with pytest.raises(ValueError, match="one chosen class"):
        pair_agreement(["correct"], [], ["vertical"], ["a"])


# ---------------------------------------------------------------------------------------------------------
# A build of two arith problems with scripted engines, then the check on its files
# ---------------------------------------------------------------------------------------------------------

# arith-ops2-d1-train rows 0 and 1: Nora (4 - 2 = 2, 2 + 6 = 8) and Theo (9 + 3 = 12, 12 + 6 = 18)
POLICY = {
    "Nora": ["4 - 2 = 3.\n\n3 + 6 = 9.\n\nThe answer is 9.", "4 - 2 = 2.\n\n2 + 6 = 8.\n\nThe answer isNora."],
    "Theo": ["9 + 3 = 12.\n\n12 + 6 = 19.\n\nThe answer is 19.", "9 + 3 = 12.\n\n12 + 6 = 18.\n\nThe answer isTheo."],
}
RIGHT = {"Nora": ("= 2.", "= 8."), "Theo": ("= 12.", "= 18.")}
WRONG = ("= 3.", "= 19.")


class Scripted(RolloutEngine):
    """The policy: POLICY's texts in turn per problem. A student: of the n rows of a prompt, 0 verify after a wrong
    step, else 2 + 3 per right step written (2 for the bare problem); the others answer 0."""

    def __init__(self, tokenizer, name, policy=False):
        self.tokenizer, self.model_id, self.policy = tokenizer, f"scripted-{name}", policy
        self.prompts: list[str] = []

    def generate(self, prompt_ids, params, *, seed):
        seen, out = Counter(), []
        for ids in prompt_ids:
            prompt = self.tokenizer.decode(ids)
            self.prompts.append(prompt)
            who = "Nora" if "Nora" in prompt else "Theo"
            if self.policy:
                text = POLICY[who][seen[prompt] % 2]
            else:
                answer = prompt.split("assistant\n", 1)[1]
                right = 0 if any(w in answer for w in WRONG) else 2 + 3 * sum(r in answer for r in RIGHT[who])
                gold = "8" if who == "Nora" else "18"
                text = f" The answer is {gold if seen[prompt] < right else 0}."
            seen[prompt] += 1
            ids_out = self.tokenizer.encode(text, add_special_tokens=False)
            out.append(Rollout(ids_out, text, [0.0] * len(ids_out), "eos"))
        return out


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    tokenizer = arithmetic_tokenizer()
    engines = {"P": Scripted(tokenizer, "P", policy=True), "S": Scripted(tokenizer, "S")}
    out = tmp_path_factory.mktemp("build") / "arith"
    config = pm.PUMMathConfig(
        dataset="arith-ops2-d1-train-n2", split="train", start=0, end=2, prompt_template="{question}",
        output_dir=str(out), trajectory_source="both", policy_model="P", n_trajectories=2, students=["S"],
        student_templates=["chat"], n_rollouts=8, n_rollouts_bare=8, cut_fractions=[0.5], shard_size=1000,
        replication_seed=None,
    )  # fmt: skip
    _, stats = pm.build_pum_math(config, engines=engines)
    return out, stats, engines


def test_the_build_records_at_step_drops_unknown_tokens_and_uses_the_prompt_template(build):
    out, stats, engines = build
    # the two "...isNora." / "...isTheo." samples fuse into a word the tokenizer does not know: dropped, counted
    assert stats["unknown_token_trajectories_dropped"] == 2 and stats["trajectories"] == {"reference": 2, "policy": 2}
    # the bare question as the only user turn, as the organisms were trained (no worked example)
    bare = {p for p in engines["S"].prompts if p.endswith("assistant\n")}
    assert bare == {
        f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nIn the morning, Theo has 9 feathers. Then Theo collects 3 more feathers. Next, Theo receives "
        "6 more feathers as a gift. How many feathers does Theo have in the end?<|im_end|>\n<|im_start|>assistant\n",
    }
    records = [json.loads(line) for line in (out / "prefixes.jsonl").read_text().splitlines()]
    traces = [
        "4 - 2 = 2.\n\n2 + 6 = 8.\n\nThe answer is 8.", POLICY["Nora"][0],
        "9 + 3 = 12.\n\n12 + 6 = 18.\n\nThe answer is 18.", POLICY["Theo"][0],
    ]  # fmt: skip
    boundaries = {t[:i] for t in traces for i in range(1, len(t) + 1) if t[:i].endswith("\n\n") or i == len(t)}
    assert {r["prefix"] for r in records if r["at_step"]} == boundaries
    assert sum(not r["at_step"] for r in records) >= 1  # the half-length cuts


def test_gain_check_on_the_build(build):
    out, stats, _ = build
    report = gain_check(out, resamples=200)
    # by hand: Nora: correct "4 - 2 = 2.\n\n", "...2 + 6 = 8.\n\n"; first_wrong "4 - 2 = 3.\n\n"; after_wrong
    # "4 - 2 = 3.\n\n3 + 6 = 9.\n\n". Theo: correct "9 + 3 = 12.\n\n" (shared by both trajectories) and
    # "...12 + 6 = 18.\n\n"; first_wrong "...12 + 6 = 19.\n\n". Each full trace ends with the answer sentence.
    records = [json.loads(line) for line in (out / "prefixes.jsonl").read_text().splitlines()]
    n_partial = sum(not r["at_step"] for r in records)
    assert report["classes"]["error"] == {
        "correct": 4, "first_wrong": 2, "after_wrong": 1, "no_step_at_end": 4, "partial": n_partial,
    }  # fmt: skip
    utility = {r["prefix"]: r["utility"] for r in records}
    correct = ["4 - 2 = 2.\n\n", "4 - 2 = 2.\n\n2 + 6 = 8.\n\n", "9 + 3 = 12.\n\n", "9 + 3 = 12.\n\n12 + 6 = 18.\n\n"]
    first_wrong = ["4 - 2 = 3.\n\n", "9 + 3 = 12.\n\n12 + 6 = 19.\n\n"]
    contrast = report["contrast"]["error"]["G"]
    assert contrast["groups"]["correct"]["mean"] == pytest.approx(sum(utility[p] for p in correct) / 4)
    assert contrast["groups"]["first_wrong"]["mean"] == pytest.approx(sum(utility[p] for p in first_wrong) / 2)
    assert contrast["difference"] > 0 and contrast["difference_interval"] is not None
    assert set(report["contrast"]["error"]) == {"G", "mean_g", "g/S"}
    # one student: its mean gain is its gain
    assert report["contrast"]["error"]["mean_g"] == report["contrast"]["error"]["g/S"]
    pairs = datasets.load_dataset("parquet", data_files=str(out / "pairs.parquet"), split="train")
    agreement = report["pairs"]["error"]
    assert agreement["pairs"]["all"] == len(pairs) == sum(stats["pairs"].values())
    assert agreement["decided"]["all"] > 0 and agreement["agree"]["all"] == 1.0  # wrong prefixes never verify
    # the references on the same pairs, by hand: length from the token counts; the oracle's key by hand-made ranks
    # (an error-free prefix above any with an error, then more steps; a later first error above an earlier one)
    refs = report["references"]
    tokens = zip(pairs["chosen_tokens"], pairs["rejected_tokens"], strict=True)
    length = [1.0 if c > r else 0.5 if c == r else 0.0 for c, r in tokens]
    assert refs["length"]["all"]["accuracy"] == pytest.approx(sum(length) / len(length))
    assert refs["length"]["all"]["pairs"] == len(pairs) and refs["oracle_progress_unmatched_pairs"] == 0
    rank = {p: (1, p.count(" = ")) for p in correct} | {"4 - 2 = 3.\n\n": (0, 0), "9 + 3 = 12.\n\n12 + 6 = 19.\n\n": (0, 1),
                                                         "4 - 2 = 3.\n\n3 + 6 = 9.\n\n": (0, 0)}  # fmt: skip
    rows = {r["problem_id"]: r for r in load_math_dataset("arith-ops2-d1-train-n2", split="train", start=0, end=2,
                                                          prompt_template="{question}")}  # fmt: skip
    record = {(r["problem_id"], r["prefix"]): r for r in records}

    def key(problem, prefix):
        row = rows[problem]
        return oracle_progress(prefix, row["question"], gold_steps_from_json(row["gold_steps"]),
                               at_step=record[(problem, prefix)]["at_step"])  # fmt: skip

    for problem, prefix in record:
        if prefix in rank:
            assert key(problem, prefix) == rank[prefix]
    triples = zip(pairs["problem_id"], pairs["chosen"], pairs["rejected"], strict=True)
    sides = [(key(p, c), key(p, r)) for p, c, r in triples]
    by_hand = [1.0 if a > b else 0.5 if a == b else 0.0 for a, b in sides]
    assert refs["oracle_progress"]["all"]["accuracy"] == pytest.approx(sum(by_hand) / len(by_hand))


def test_gain_check_refuses_a_build_without_gold_steps_or_at_step(build, tmp_path):
    out, _, _ = build
    (tmp_path / "old").mkdir()
    for name in ("stats.json", "pairs.parquet"):
        (tmp_path / "old" / name).write_bytes((out / name).read_bytes())
    lines = [json.loads(line) for line in (out / "prefixes.jsonl").read_text().splitlines()]
    (tmp_path / "old" / "prefixes.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "at_step"}) + "\n" for r in lines)
    )
    with pytest.raises(ValueError, match="at_step"):
        gain_check(tmp_path / "old")
    stats = json.loads((out / "stats.json").read_text())
    stats["config"] |= {"dataset": "svamp", "split": "all", "end": 2}
    (tmp_path / "old" / "stats.json").write_text(json.dumps(stats))
    with pytest.raises(ValueError, match="gold_steps"):
        gain_check(tmp_path / "old")
    with pytest.raises(FileNotFoundError):
        gain_check(tmp_path / "missing")


def test_the_command_prints_the_tables_and_writes_the_result(build, tmp_path, capsys):
    out, _, _ = build
    result = tmp_path / "check.json"
    assert pum_gain_check.main([str(out), "--resamples", "0", "--out", str(result)]) == 0
    printed = capsys.readouterr().out
    assert "wrong step = error;" in printed and "wrong step = error_or_off_track;" in printed
    assert "| G |" in printed and "| vertical |" in printed
    refs = gain_check(out, resamples=0)["references"]
    assert f"| oracle_progress | {refs['oracle_progress']['all']['accuracy']:.3f} |" in printed
    assert f"| length | {refs['length']['all']['accuracy']:.3f} |" in printed
    assert json.loads(result.read_text())["classes"] == gain_check(out, resamples=0)["classes"]
    assert pum_gain_check.main([str(Path(out) / "nowhere")]) == 2
    assert "procrl pum-gain-check: error:" in capsys.readouterr().err
