"""`procrl.evals.stepgap.decisions`: the deciding rule of each full-tree label against gold, counted by hand."""

import pytest

from procrl.evals.stepgap.decisions import decision, decision_table, format_decisions_markdown


def test_decision_strips_probabilities_and_unscored_reasons():
    assert decision("D: quote neutral (P(e/n/c) 0.00/1.00/0.00)") == "D: quote neutral"
    assert decision("E: evidence entailment (P(e/n/c) 0.91/0.05/0.04)") == "E: evidence entailment"
    assert decision("judge unscored: timeout") == "judge unscored"
    assert decision("B: accurate abstention") == "B: accurate abstention"
    assert decision("") == "(no reason)"
    assert decision(None) == "(no reason)"


def test_decision_table_counts_by_hand():
    reasons = [
        ["C: no evidence", "D: quote neutral (P(e/n/c) 0.0/1.0/0.0)", "D: quote entailment (P(e/n/c) 1.0/0.0/0.0)"],
        ["C: no evidence", "D: quote neutral (P(e/n/c) 0.2/0.7/0.1)"],
        ["judge unscored: invalid json"],
    ]
    labels = [["IE", "MB", "NONE"], ["IE", "MB"], ["ERROR"]]
    gold = [["NONE", "MB", "NONE"], ["NONE", "NONE"], ["CC"]]
    rows = decision_table(reasons, labels, gold)
    # by hand: C-no-evidence 2 steps, both gold NONE (agree 0/2); D-neutral 2 steps, gold MB and NONE (1/2);
    # D-entailment 1 step gold NONE (1/1); judge unscored 1 step gold CC (ERROR is never gold: 0/1)
    assert [(r["decision"], r["label"], r["steps"], r["gold"], r["agree"]) for r in rows] == [
        ("C: no evidence", "IE", 2, {"NONE": 2}, 0.0),
        ("D: quote neutral", "MB", 2, {"NONE": 1, "MB": 1}, 0.5),
        ("D: quote entailment", "NONE", 1, {"NONE": 1}, 1.0),
        ("judge unscored", "ERROR", 1, {"CC": 1}, 0.0),
    ]
    assert sum(r["steps"] for r in rows) == 6
    assert list(rows[1]["gold"]) == ["NONE", "MB"]  # gold labels in TYPED_LABELS order


def test_decision_table_empty_and_mismatched():
    assert decision_table([], [], []) == []
    with pytest.raises(ValueError, match="same questions and steps"):
        decision_table([["C: no evidence"]], [["IE"]], [["NONE", "IE"]])
    with pytest.raises(ValueError, match="same questions and steps"):
        decision_table([["C: no evidence"]], [], [["NONE"]])


def test_format_decisions_markdown():
    rows = decision_table([["C: no evidence", "A: off-target"]], [["IE", "CC"]], [["NONE", "CC"]])
    text = format_decisions_markdown(rows)
    lines = text.splitlines()
    assert lines[0] == "| decision (full tree) | label | steps | gold NONE | gold CC | gold IE | gold MB | agree |"
    assert lines[1] == "|" + "---|" * 8
    assert "| A: off-target | CC | 1 | 0 | 1 | 0 | 0 | 100.0% |" in lines
    assert "| C: no evidence | IE | 1 | 1 | 0 | 0 | 0 | 0.0% |" in lines
    assert len(lines) == 4
