"""procrl.evals.frs.agreement and `procrl frs agreement`: Spearman's ρ and Cohen's κ against values computed by hand,
their undefined cases, the matching of two judges' traces, the oracle as the reference, and the command's files."""

from __future__ import annotations

import json

import pytest

from procrl.evals.frs.agreement import cohen_kappa, judge_agreement, oracle_reference, spearman
from procrl.scripts.frs import main

GOLD = '[[14,"+",7,21],[21,"-",9,12]]'
QUESTION = "Tom has 14 apples, gets 7 more and eats 9. How many apples does Tom have?"


def row(pid, completion, scores, gold=GOLD):
    dims = ("faithfulness", "utility", "coherence", "factuality")
    return {"problem_id": pid, "problem": QUESTION, "completion": completion, "gold_steps": gold,
            "scores": dict(zip(dims, scores, strict=True)) if scores else None, "truncated": False}  # fmt: skip


def test_spearman_against_hand_values():
    # x ranks [1, 2, 3, 4], y ranks [2, 1, 4, 3]: Pearson of the ranks = 1 - 6 * sum d^2 / (n (n^2 - 1)) = 1 - 24/60
    assert spearman([1, 2, 3, 4], [2, 1, 4, 3]) == pytest.approx(0.6)
    assert spearman([1.0], [2.0]) is None and spearman([2, 2], [1, 3]) is None
    with pytest.raises(ValueError, match="3 values against 2"):
        spearman([1, 2, 3], [1, 2])


def test_cohen_kappa_against_hand_values():
    # a: [1,1,1,2,2,3], b: [1,1,2,2,3,3]: p_o = 4/6; p_e = (3*2 + 2*2 + 1*2) / 36 = 12/36
    assert cohen_kappa([1, 1, 1, 2, 2, 3], [1, 1, 2, 2, 3, 3]) == pytest.approx((4 / 6 - 1 / 3) / (1 - 1 / 3))
    assert cohen_kappa([], []) is None
    assert cohen_kappa([2, 4], [4, 2]) == pytest.approx(-1.0)  # p_o 0, p_e 1/2
    with pytest.raises(ValueError, match=r"labels \[0, 6\] are not among"):
        cohen_kappa([0, 1], [6, 1])


def test_matching_keeps_traces_both_scored_and_the_first_of_duplicates():
    judge = [row("p0", "a", [5, 5, 5, 5]), row("p0", "a", [1, 1, 1, 1]), row("p0", "b", None),
             row("p1", "c", [3, 3, 3, 3]), row("p2", "d", [4, 4, 4, 4])]  # fmt: skip
    reference = [row("p0", "a", [5, 4, 5, 5]), row("p0", "b", [2, 2, 2, 2]), row("p1", "c", [2, 2, 2, 2])]
    result = judge_agreement(judge, reference, resamples=0)
    assert (result.matched, result.problems, result.judge_scored, result.reference_scored) == (2, 2, 3, 3)
    assert result.spearman_rs == pytest.approx(1.0) and result.spearman_rs_interval is None
    # faithfulness: judge [5, 3] vs reference [5, 2]: p_o 1/2, p_e 1/4 -> 1/3
    assert result.kappa["faithfulness"] == pytest.approx(1 / 3) and result.exact_share["utility"] == 0.0
    assert result.mean_rs_judge == pytest.approx((100 + 50) / 2) and result.modal_share == 0.5
    empty = judge_agreement([], reference, resamples=10)
    assert empty.matched == 0 and empty.spearman_rs is None and empty.kappa["coherence"] is None
    assert empty.mean_rs_judge is None and empty.modal_share is None


def test_oracle_reference_scores_each_trace_like_the_oracle_judge():
    rows = [row("p0", "14 + 7 = 21. 21 - 9 = 12. The answer is 12.", None),
            row("p1", "14 + 7 = 22. 22 - 9 = 13. The answer is 13.", None)]  # fmt: skip
    scores = [r["scores"] for r in oracle_reference(rows)]
    assert scores[0] == dict.fromkeys(("faithfulness", "utility", "coherence", "factuality"), 5)
    assert scores[1]["factuality"] < 5 and scores[1]["utility"] == 1  # no gold intermediate produced
    with pytest.raises(ValueError, match="no `gold_steps`"):
        oracle_reference([row("p0", "x", None, gold=None)])


def test_agreement_command_writes_table_and_record(tmp_path, capsys):
    run = tmp_path / "frs_run"
    run.mkdir()
    good = "14 + 7 = 21. 21 - 9 = 12. The answer is 12."
    bad = "14 + 7 = 22. 22 - 9 = 13. The answer is 13."
    rows = [row(f"p{i}", text, s) for i in range(6) for text, s in ((good, [5, 5, 5, 5]), (bad, [5, 5, 5, 5]))]
    (run / "judged_traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "agreement"
    assert main(["agreement", str(run), "--output-dir", str(out), "--bootstrap-resamples", "20"]) == 0
    record = json.loads((out / "run.json").read_text())
    result = record["result"]["runs"]["frs_run"]
    assert record["command"] == "frs agreement" and record["result"]["reference"] == "oracle"
    # a constant judge: rho undefined, kappa 0 where the oracle varies, modal share 1
    assert result["matched"] == 2 * 6 and result["spearman_rs"] is None and result["modal_share"] == 1.0
    assert result["kappa"]["factuality"] == pytest.approx(0.0)
    assert "| frs_run | 12 | 6 | – |" in (out / "agreement.md").read_text()
    assert "frs_run" in capsys.readouterr().out
