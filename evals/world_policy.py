"""The calibration row of a search policy in the synthetic world (docs/architecture.md "World episodes"; issue 29):
EM, format violations, searches and the StepGap oracle's label shares over the policy's own episodes.

`procrl world-eval` rolls the policy out through the search environment (`procrl.trainers.search_env`) and passes
the parsed traces here; this module only measures them. Definitions (n episodes, their steps pooled):

- EM: share of episodes whose credited answer matches a gold answer (`procrl.rewards.qa.em_reward`'s rule), with a
  Wilson 95% interval (`procrl.evals.stats.wilson_interval`);
- format-violation rate: share of episodes with any format violation (`Trace.format_violations`, "no_answer"
  included), the search task's `stepgap/format_violation_frac`;
- searches per episode: executed searches (`Trace.num_searches`), mean;
- annotated steps: `annotated_record` writes an episode whose steps are all well-formed in the annotated-trace format
  of `procrl stepgap-eval` (`procrl.evals.stepgap.evaluate.load_annotated`), with the oracle's labels as gold, so the
  StepGap verifier can be measured on the policy's own steps;
- label shares: the oracle's label of every well-formed step (NONE, CC, IE, MB) over all steps; a malformed step
  counts as FORMAT, as the StepGap reward labels it; plus the repair rate after each gap type (gaps followed by a
  next step that makes the oracle's repair).
"""

from __future__ import annotations

from collections.abc import Sequence

from procrl.evals.stats import wilson_interval
from procrl.rewards.qa import normalize_answer
from procrl.rewards.stepgap.oracle import StepGapOracle
from procrl.rewards.stepgap.trace import Trace

__all__ = ["WORLD_LABELS", "annotated_record", "episode_record", "policy_row"]

WORLD_LABELS = ("NONE", "CC", "IE", "MB", "FORMAT", "ERROR")


def episode_record(trace: Trace, golds: Sequence[str], oracle: StepGapOracle) -> dict:
    """One episode's record: em (0/1), format_violations, searches, labels per step (FORMAT for a malformed step),
    repaired per step (None without a gap or next step), the answer."""
    verdicts = oracle.label_trace(trace)
    labels = ["FORMAT" if step.malformed else v.label for step, v in zip(trace.steps, verdicts, strict=True)]
    normal = {normalize_answer(g) for g in golds}
    em = int(trace.answer is not None and normalize_answer(trace.answer) in normal)
    return {
        "em": em,
        "answer": trace.answer,
        "format_violations": list(trace.format_violations),
        "searches": trace.num_searches,
        "labels": labels,
        "repaired": [v.repaired for v in verdicts],
    }


def policy_row(records: Sequence[dict]) -> dict:
    """The calibration row over `episode_record`s: n, em (+ Wilson interval), format_violation_rate,
    searches_per_episode, steps, label shares `label/<L>` over all steps (None, undefined, when no episode has a
    step), `repair/<gap>` (repaired / gaps with a next step; None without one).

    Raises:
        ValueError: no records.

    >>> row = policy_row([{"em": 1, "format_violations": [], "searches": 2, "labels": ["NONE", "CC", "NONE"],
    ...                    "repaired": [None, True, None]}, {"em": 0, "format_violations": ["no_answer"],
    ...                    "searches": 0, "labels": ["FORMAT"], "repaired": [None]}])
    >>> row["em"], row["format_violation_rate"], row["searches_per_episode"], row["label/NONE"], row["repair/CC"]
    (0.5, 0.5, 1.0, 0.5, 1.0)
    """
    if not records:
        raise ValueError("policy_row needs at least one episode record")
    n = len(records)
    hits = sum(r["em"] for r in records)
    low, high = wilson_interval(hits, n)
    labels = [lab for r in records for lab in r["labels"]]
    row = {
        "n": n,
        "em": hits / n,
        "em_low": low,
        "em_high": high,
        "format_violation_rate": sum(bool(r["format_violations"]) for r in records) / n,
        "searches_per_episode": sum(r["searches"] for r in records) / n,
        "steps": len(labels),
    }
    for label in WORLD_LABELS:
        row[f"label/{label}"] = labels.count(label) / len(labels) if labels else None
    for gap in ("CC", "IE", "MB"):
        outcomes = [rep for r in records for lab, rep in zip(r["labels"], r["repaired"], strict=True)
                    if lab == gap and rep is not None]  # fmt: skip
        row[f"repair/{gap}"] = sum(outcomes) / len(outcomes) if outcomes else None
    return row


def annotated_record(trace: Trace, record: dict, question: dict) -> dict | None:
    """The episode as an annotated trace (`procrl.evals.stepgap.evaluate.load_annotated`'s record: id, question,
    answer, gold_answer, steps with kind, text, query, answer, evidence, retrieved and the oracle's label as `gold`),
    or None when a step is not oracle-labelled (FORMAT: malformed; ERROR) or there is no step: such an episode has no
    typed gold for every step. `record` is the episode's `episode_record`, `question` its question row (id, answer).

    >>> from procrl.rewards.stepgap.trace import TraceStep
    >>> step = TraceStep("conclusion", "<answer> Baexmora </answer>", None, "Baexmora", [], [])
    >>> trace = Trace(question="Where?", steps=[step], answer="Baexmora", format_violations=[])
    >>> out = annotated_record(trace, {"labels": ["NONE"]}, {"id": "q1", "answer": "Baexmora"})
    >>> out["steps"][0]["gold"], out["answer"], annotated_record(trace, {"labels": ["FORMAT"]}, {"id": "q1"})
    ('NONE', 'Baexmora', None)
    """
    labels = record["labels"]
    if not labels or any(label not in ("NONE", "CC", "IE", "MB") for label in labels):
        return None

    def passages(items) -> list[dict]:
        return [{"title": p.title, "text": p.text} for p in items]

    steps = [{"kind": step.kind, "text": step.text, "query": step.query, "answer": step.answer,
              "evidence": passages(step.evidence), "retrieved": passages(step.retrieved), "gold": label}
             for step, label in zip(trace.steps, labels, strict=True)]  # fmt: skip
    return {"id": question["id"], "question": trace.question, "answer": trace.answer,
            "gold_answer": question.get("answer"), "steps": steps}  # fmt: skip
