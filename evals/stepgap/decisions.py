"""Where the verifier's labels come from: each step's deciding rule against its gold label.

Every `StepLabel` of `procrl.rewards.stepgap.verifier.StepGapVerifier` carries the reason of the rule that decided it
("A: off-target", "C: no evidence", "D: quote neutral (P(e/n/c) 0.00/1.00/0.00)", ...). With the NLI probabilities
and the judge's unscored reason cut off, the reason names the rule; counting rules against gold labels shows which
stage makes the errors (e.g. "C: no evidence" on a step the oracle calls NONE is stage B missing an abstention, not
stage C), which the metric table cannot.

    >>> rows = decision_table([["D: quote neutral (P(e/n/c) 0.00/1.00/0.00)", "C: no evidence"]], [["MB", "IE"]],
    ...                       [["NONE", "IE"]])
    >>> [(r["decision"], r["label"], r["steps"], r["gold"]) for r in rows]
    [('C: no evidence', 'IE', 1, {'IE': 1}), ('D: quote neutral', 'MB', 1, {'NONE': 1})]
"""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from typing import Any

from procrl.evals.stats import ratio
from procrl.rewards.stepgap.verifier import TYPED_LABELS

__all__ = ["decision", "decision_table", "format_decisions_markdown"]

_PROBABILITIES = re.compile(r"\s*\(P\(e/n/c\)[^)]*\)\s*$")


def decision(reason: str) -> str:
    """The rule a label's reason names: its NLI probabilities cut off, "judge unscored: <why>" kept as "judge
    unscored" (the why is counted in the run's `judge_unscored`).

    >>> decision("E: evidence neutral (P(e/n/c) 0.10/0.80/0.10)"), decision("judge unscored: timeout")
    ('E: evidence neutral', 'judge unscored')
    """
    reason = str(reason or "").strip()
    if reason.startswith("judge unscored"):
        return "judge unscored"
    return _PROBABILITIES.sub("", reason) or "(no reason)"


def decision_table(
    reasons: Sequence[Sequence[str]], labels: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]
) -> list[dict[str, Any]]:
    """Count steps by (deciding rule, label given) against their gold labels.

    Args:
        reasons, labels, gold: `[question][step]`, the same shapes (a label's reason, its label, the gold label).

    Returns:
        One row per (decision, label), most steps first (ties by name): {"decision", "label", "steps", "gold":
        {gold label: count} (labels with no step left out), "agree": the share of its steps whose gold label is the
        label given (None without steps, which a row never has)}.

    Raises:
        ValueError: the three do not have the same questions and steps.
    """
    if not (len(reasons) == len(labels) == len(gold)) or any(
        not (len(r) == len(p) == len(g)) for r, p, g in zip(reasons, labels, gold, strict=True)
    ):
        raise ValueError("decision_table: reasons, labels and gold must have the same questions and steps")
    counts: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    for row_r, row_p, row_g in zip(reasons, labels, gold, strict=True):
        for reason, label, g in zip(row_r, row_p, row_g, strict=True):
            counts[(decision(reason), label)][g] += 1
    rows = [
        {
            "decision": name,
            "label": label,
            "steps": sum(c.values()),
            "gold": {g: c[g] for g in sorted(c, key=_gold_order)},
            "agree": ratio(c[label], sum(c.values())),
        }
        for (name, label), c in counts.items()
    ]
    return sorted(rows, key=lambda r: (-r["steps"], r["decision"], r["label"]))


def _gold_order(label: str) -> tuple[int, str]:
    return (TYPED_LABELS.index(label) if label in TYPED_LABELS else len(TYPED_LABELS), label)


def format_decisions_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """`decision_table` as a Markdown table: rule, label given, steps, the gold labels' counts, agreement (%)."""
    head = "| decision (full tree) | label | steps | " + " | ".join(f"gold {g}" for g in TYPED_LABELS) + " | agree |"
    lines = [head, "|" + "---|" * (len(TYPED_LABELS) + 4)]
    for r in rows:
        agree = "–" if r["agree"] is None else f"{100 * r['agree']:.1f}%"
        gold = " | ".join(str(r["gold"].get(g, 0)) for g in TYPED_LABELS)
        lines.append(f"| {r['decision']} | {r['label']} | {r['steps']} | {gold} | {agree} |")
    return "\n".join(lines)
