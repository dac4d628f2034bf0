"""StepGap verifier metrics on an annotated set, with a stage ablation (docs/architecture.md "StepGap"; StepGap, arXiv
2605.24733, §"verifier evaluation"). The command is `procrl stepgap-eval` (`procrl/scripts/stepgap_eval.py`):

    procrl stepgap-eval --data evals/stepgap/data/annotated_2wiki.jsonl [--judge local|URL] \\
        [--nli judge|cross-encoder/nli-deberta-v3-large] [--output-dir runs/stepgap_eval] [--limit N]

Metrics (ERROR predictions count as "no gap flagged", and their number is reported):
- sF1: step-level F1 of gap detection, positive = any gap label (CC, IE or MB); the paper's sF1 is step-level and
  its Q-F1 trap (flagging everything) only makes sense for a binary detection score.
- Q-F1: question-level F1 of gap detection; a question is flagged when any of its steps is.
- BA: step-level balanced accuracy of gap detection, (TPR + TNR) / 2 (a verifier that flags every step gets 0.5).
- typed macro-F1: mean F1 over the four labels NONE, CC, IE, MB (does the verifier get the TYPE right).
- the label distribution of the predictions, per-label precision/recall/F1 and the confusion matrix.
A metric over an empty denominator is None (undefined, "–" in the tables), never 0 (`binary_f1`, `compute_metrics`).
The ablation (`evaluate`) re-routes the same judge outputs with one stage removed (A, B, C, D or E; see
`procrl.rewards.stepgap.verifier` for what removing a stage means), so it costs NLI calls only. With an
`LLMOnlyVerifier` (`procrl.evals.stepgap.llm_only`) it adds the LLM-only rows ("LLM-only" and, with the ablation,
"LLM-only -<part>" for each prompt part dropped): one judge call per step per row.

Intervals (`metric_intervals`): the percentile bootstrap over QUESTIONS (`procrl.evals.stats.bootstrap_interval`, 1000
resamples, 95%) of sF1, Q-F1, BA and typed macro-F1, each resample recomputing the metrics on the resampled questions
(from per-question counts, `question_counts`); every row uses the same seed, so all rows see the same resamples.

Differences (`comparisons`, `paired_difference_intervals`): with the ablation, the paired bootstrap over questions of
"full − -X" for each stage X, and with the LLM-only verifier "full − LLM-only" and "LLM-only − LLM-only -<part>" for
each prompt part: both sides scored on the same resampled questions, so the interval decides what two overlapping
per-row intervals cannot. Positive "full − -X": removing X hurts; `format_differences_markdown` prints them in points
with the reading rule (`DIFFERENCE_RULE`).

Beside them (`baselines`), three trivial verifiers on the same steps, with the same metrics, so a reader sees whether
the judge carries any signal: all-NONE (never flags), all-IE (flags every step: the Q-F1 inflation check, a high
Q-F1 with BA 50) and random (each step drawn independently from the gold label shares of the evaluated steps; the
MEAN of each metric over 200 seeded draws). `PAPER_REFERENCE` is the paper's row (sF1 72.0, Q-F1 81.2, BA 60.6 with a strong judge), a constant for
comparison, not something computed here; `format_table` / `format_markdown` print all rows.

The annotated set (`load_annotated`) is built programmatically from 2WikiMultihopQA compositional questions by
`procrl.data_builders.stepgap_annotated.build_annotated_2wiki`; see evals/stepgap/data/SOURCE.md.
"""

from __future__ import annotations

import collections
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from procrl.evals.stats import BOOTSTRAP_RESAMPLES, MISSING, format_estimate, ratio
from procrl.evals.stepgap.intervals import (
    CI_METRICS,
    TYPED_LABELS,
    metric_intervals,
    paired_difference_intervals,
    question_counts,
)
from procrl.evals.stepgap.llm_only import variant_parts
from procrl.rewards.stepgap.trace import Passage, Trace, TraceStep
from procrl.rewards.stepgap.verifier import GAP_LABELS, LABELS, STAGES
from procrl.utils import get_logger

logger = get_logger(__name__)

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "annotated_2wiki.jsonl"
# StepGap (arXiv 2605.24733), the verifier evaluation with a strong judge: fractions, like `compute_metrics`.
PAPER_REFERENCE = {"sF1": 0.720, "Q-F1": 0.812, "BA": 0.606}
BASELINE_DRAWS = 200
_SCALARS = ("sF1", "step_precision", "step_recall", "Q-F1", "BA", "typed_macro_f1")
MINUS = " \N{MINUS SIGN} "  # between the two rows of a comparison name: "full − -A"
DIFFERENCE_RULE = (  # the reading rule under the differences table
    "a − b in points; full − -X: removing X hurts when the interval lies above 0, helps when below 0, else no "
    "difference shown"
)
_INTERVAL_NOTE = "[low, high]: paired bootstrap interval over questions (both rows on the same resamples); "

__all__ = [
    "DEFAULT_DATA",
    "TYPED_LABELS",
    "PAPER_REFERENCE",
    "CI_METRICS",
    "baselines",
    "metric_intervals",
    "paired_difference_intervals",
    "comparisons",
    "format_differences_markdown",
    "DIFFERENCE_RULE",
    "MINUS",
    "question_counts",
    "format_markdown",
    "binary_f1",
    "balanced_accuracy",
    "typed_report",
    "compute_metrics",
    "load_annotated",
    "evaluate",
    "format_table",
]

# --------------------------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------------------------


def binary_f1(gold: Sequence[bool], pred: Sequence[bool]) -> dict[str, float | None]:
    """Precision tp / (tp + fp), recall tp / (tp + fn) and F1 2tp / (2tp + fp + fn) (= 2PR / (P + R)) of the
    positive class, and the counts; a rate is None (undefined) when its denominator is 0. Raises ValueError when
    `gold` and `pred` differ in length.

    >>> binary_f1([True, True, False, False], [True, False, True, False])
    {'precision': 0.5, 'recall': 0.5, 'f1': 0.5, 'tp': 1, 'fp': 1, 'fn': 1, 'tn': 1}
    >>> binary_f1([True, False], [False, False])  # nothing flagged: precision undefined, the missed gap makes F1 0
    {'precision': None, 'recall': 0.0, 'f1': 0.0, 'tp': 0, 'fp': 0, 'fn': 1, 'tn': 1}
    """
    if len(gold) != len(pred):
        raise ValueError(f"binary_f1: {len(gold)} gold vs {len(pred)} predictions")
    tp = sum(g and p for g, p in zip(gold, pred, strict=True))
    fp = sum((not g) and p for g, p in zip(gold, pred, strict=True))
    fn = sum(g and not p for g, p in zip(gold, pred, strict=True))
    tn = len(gold) - tp - fp - fn
    precision, recall, f1 = ratio(tp, tp + fp), ratio(tp, tp + fn), ratio(2 * tp, 2 * tp + fp + fn)
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn, "tn": tn}


def balanced_accuracy(gold: Sequence[bool], pred: Sequence[bool]) -> float | None:
    """(TPR + TNR) / 2 over the classes present in `gold` (one class present: its recall; empty: None, undefined).

    >>> balanced_accuracy([True, True, True, False], [True, True, True, True])  # flag everything
    0.5
    """
    counts = binary_f1(gold, pred)
    rates = []
    if counts["tp"] + counts["fn"]:
        rates.append(counts["tp"] / (counts["tp"] + counts["fn"]))
    if counts["tn"] + counts["fp"]:
        rates.append(counts["tn"] / (counts["tn"] + counts["fp"]))
    return ratio(sum(rates), len(rates))


def typed_report(gold: Sequence[str], pred: Sequence[str], labels: Sequence[str] = TYPED_LABELS) -> dict[str, Any]:
    """Per-label precision/recall/F1 (one-vs-rest, `binary_f1`), their macro mean over `labels` (a label neither
    gold nor predicted has no F1 and counts 0, as in `metric_intervals`; None without steps), and the confusion
    matrix `confusion[gold][pred]` (predicted labels outside `labels`, e.g. ERROR, get their own column)."""
    per_label = {}
    for label in labels:
        scores = binary_f1([g == label for g in gold], [p == label for p in pred])
        per_label[label] = {k: scores[k] for k in ("precision", "recall", "f1")} | {
            "support": scores["tp"] + scores["fn"]
        }
    confusion: dict[str, dict[str, int]] = {g: collections.Counter() for g in labels}
    for g, p in zip(gold, pred, strict=True):
        confusion.setdefault(g, collections.Counter())[p] += 1
    return {
        "macro_f1": sum(v["f1"] or 0.0 for v in per_label.values()) / len(labels) if gold else None,
        "per_label": per_label,
        "confusion": {g: dict(row) for g, row in confusion.items()},
    }


def compute_metrics(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, Any]:
    """All verifier metrics for gold and predicted labels, `[question][step]`.

    Returns: sF1 / step precision / step recall, Q-F1, BA (all in [0, 1]), typed macro-F1, per-label scores,
    confusion, the predicted and gold label distributions (fractions over steps) and counts; None where undefined
    (sF1 without any gold or predicted gap; every rate without steps).

    Raises:
        ValueError: mismatched shapes or an unknown gold label.
    """
    if len(gold) != len(pred) or any(len(g) != len(p) for g, p in zip(gold, pred, strict=True)):
        raise ValueError("compute_metrics: gold and pred must have the same questions and steps")
    flat_gold = [label for row in gold for label in row]
    flat_pred = [label for row in pred for label in row]
    if bad := set(flat_gold) - set(TYPED_LABELS):
        raise ValueError(f"compute_metrics: unknown gold labels {sorted(bad)}; gold must be one of {TYPED_LABELS}")
    gap_gold = [g in GAP_LABELS for g in flat_gold]
    gap_pred = [p in GAP_LABELS for p in flat_pred]
    step = binary_f1(gap_gold, gap_pred)
    question = binary_f1(
        [any(g in GAP_LABELS for g in row) for row in gold], [any(p in GAP_LABELS for p in row) for row in pred]
    )
    typed = typed_report(flat_gold, flat_pred)
    n = len(flat_pred)
    pred_counts = collections.Counter(flat_pred)
    gold_counts = collections.Counter(flat_gold)
    return {
        "sF1": step["f1"],
        "step_precision": step["precision"],
        "step_recall": step["recall"],
        "Q-F1": question["f1"],
        "BA": balanced_accuracy(gap_gold, gap_pred),
        "typed_macro_f1": typed["macro_f1"],
        "per_label": typed["per_label"],
        "confusion": typed["confusion"],
        "label_distribution": {label: ratio(pred_counts.get(label, 0), n) for label in LABELS},
        "gold_distribution": {label: ratio(gold_counts.get(label, 0), n) for label in TYPED_LABELS},
        "n_steps": n,
        "n_questions": len(gold),
        "n_error": pred_counts.get("ERROR", 0),
    }


# --------------------------------------------------------------------------------------------------------------------
# The annotated set
# --------------------------------------------------------------------------------------------------------------------


def load_annotated(path: str | Path) -> list[tuple[Trace, list[str]]]:
    """Read an annotated JSONL file: one trace per line with a gold label per step.

    Record: {"id", "question", "answer", "steps": [{"kind", "text", "query", "answer", "evidence": [{"title",
    "text"}], "retrieved": [...], "gold": "NONE"|"CC"|"IE"|"MB", ...}], ...}.

    Raises:
        ValueError: a line that is not such a record (the message names the line).
    """
    out = []
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                steps, gold = [], []
                for s in record["steps"]:
                    steps.append(
                        TraceStep(
                            kind=s["kind"],
                            text=s["text"],
                            query=s.get("query"),
                            answer=s.get("answer"),
                            evidence=[Passage(title=p["title"], text=p["text"]) for p in s.get("evidence", [])],
                            retrieved=[Passage(title=p["title"], text=p["text"]) for p in s.get("retrieved", [])],
                        )
                    )
                    if s["gold"] not in TYPED_LABELS:
                        raise ValueError(f"gold label {s['gold']!r} not in {TYPED_LABELS}")
                    gold.append(s["gold"])
                trace = Trace(
                    question=record["question"], steps=steps, answer=record.get("answer"), format_violations=[]
                )
            except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
                raise ValueError(
                    f"{path}:{lineno}: not an annotated trace record ({type(exc).__name__}: {exc})"
                ) from exc
            out.append((trace, gold))
    return out


# --------------------------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------------------------


def _random_draws(gold: Sequence[Sequence[str]], draws: int, seed: int) -> list[list[list[str]]]:
    """The random baseline's `draws` predictions `[question][step]`: each step's label drawn independently from the
    gold label shares (`random.Random(seed)`, one `choices` call per draw)."""
    counts = collections.Counter(label for row in gold for label in row)
    weights = [counts.get(label, 0) for label in TYPED_LABELS]
    rng = random.Random(seed)
    out = []
    for _ in range(draws):
        labels = iter(rng.choices(TYPED_LABELS, weights=weights, k=sum(len(row) for row in gold)))
        out.append([[next(labels) for _ in row] for row in gold])
    return out


def baselines(
    gold: Sequence[Sequence[str]], *, draws: int = BASELINE_DRAWS, seed: int = 0
) -> dict[str, dict[str, Any]]:
    """The trivial verifiers on the steps of `gold` (`[question][step]`), as `compute_metrics` dicts.

    Returns:
        {"all-NONE": ..., "all-IE": ..., "random": ...}. "random" draws every step's label independently from the
        gold label shares of these steps (`random.Random(seed)`), `draws` times; its sF1, step precision/recall,
        Q-F1, BA, typed macro-F1 and label distribution are the MEANS over the draws (over the draws where the
        metric is defined; None where none is, e.g. sF1 of gold without gaps), with "std" (the population standard
        deviation of the first six, over the same draws), "draws" and "seed" added; its per-label scores and
        confusion are those of the first draw.

    Raises:
        ValueError: `draws` < 1, no steps, or an unknown gold label (`compute_metrics`).
    """
    if draws < 1:
        raise ValueError(f"baselines: draws must be >= 1, got {draws}")
    flat = [label for row in gold for label in row]
    if not flat:
        raise ValueError("baselines: gold has no steps")
    out = {
        name: compute_metrics(gold, [[label] * len(row) for row in gold])
        for name, label in (("all-NONE", "NONE"), ("all-IE", "IE"))
    }
    runs = [compute_metrics(gold, pred) for pred in _random_draws(gold, draws, seed)]
    mean, std = dict(runs[0]), {}
    for key in _SCALARS:
        values = [r[key] for r in runs if r[key] is not None]  # a draw where the metric is undefined is left out
        mean[key] = ratio(sum(values), len(values))
        std[key] = None if mean[key] is None else (sum((v - mean[key]) ** 2 for v in values) / len(values)) ** 0.5
    mean["label_distribution"] = {
        label: sum(r["label_distribution"][label] for r in runs) / draws for label in runs[0]["label_distribution"]
    }
    mean |= {"std": std, "draws": draws, "seed": seed}
    out["random"] = mean
    return out


def _cells(m: dict[str, Any]) -> list[str]:
    """sF1, Q-F1, BA, typed macro-F1 (percent, "value [low, high]" where the row has an interval under "ci") and the
    predicted label shares; "–" where a row has no value or it is undefined (None)."""
    ci = m.get("ci") or {}
    cells = [format_estimate(m.get(key), ci.get(key), ".1f", 100) for key in CI_METRICS]
    dist = m.get("label_distribution") or {}
    return cells + [MISSING if dist.get(lab) is None else f"{100 * dist[lab]:.1f}%" for lab in LABELS]


def format_table(rows: dict[str, dict[str, Any]]) -> str:
    """A fixed-width table of sF1, Q-F1, BA, typed macro-F1 (percent, with "[low, high]" where a row has intervals)
    and the predicted label distribution; a row without some of them (e.g. `PAPER_REFERENCE`) or with an undefined
    one (None) shows "–"."""
    cells = {name: _cells(m) for name, m in rows.items()}
    name_w = max([12, *(len(name) for name in rows)])
    metric_w = max([6, *(len(c) for row in cells.values() for c in row[:4])])
    head = f"{'variant':<{name_w}} " + " ".join(f"{h:>{metric_w}}" for h in ("sF1", "Q-F1", "BA", "tF1"))
    head += "  " + " ".join(f"{lab:>6}" for lab in LABELS)
    lines = [head, "-" * len(head)]
    for name, c in cells.items():
        metrics = " ".join(f"{x:>{metric_w}}" for x in c[:4])
        lines.append(f"{name:<{name_w}} {metrics}  " + " ".join(f"{x:>6}" for x in c[4:]))
    return "\n".join(lines)


def format_markdown(rows: dict[str, dict[str, Any]]) -> str:
    """The `format_table` rows as a Markdown table (percent, "value [low, high]" with intervals; "–" for a missing
    or undefined value)."""
    head = ["variant", "sF1", "Q-F1", "BA", "typed F1", *LABELS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([name, *_cells(m)]) + " |" for name, m in rows.items()]
    return "\n".join(lines)


def _points(value: float) -> str:
    """A fraction as signed points, one decimal ("+3.1", "-0.5"; "+0.0", never "-0.0")."""
    return f"{round(100 * value, 1) + 0.0:+.1f}"


def format_differences_markdown(differences: dict[str, dict[str, dict[str, float | None]]]) -> str:
    """The paired differences (`evaluate`'s "differences": {comparison: `paired_difference_intervals` dict}) as a
    Markdown table, one row per comparison, sF1 / Q-F1 / BA / typed F1 as signed points "+x.x [low, high]" ("+x.x"
    without an interval, "–" for a metric undefined for either side), and on one line below `DIFFERENCE_RULE`, after
    what the brackets are where the table has an interval.

    >>> text = format_differences_markdown({"full − -A": {"BA": {"diff": 0.05, "low": 0.01, "high": 0.1}}})
    >>> print("\\n".join(text.splitlines()[:3]))
    | comparison | sF1 | Q-F1 | BA | typed F1 |
    |---|---|---|---|---|
    | full − -A | – | – | +5.0 [+1.0, +10.0] | – |
    >>> text.splitlines()[-1].endswith(DIFFERENCE_RULE)
    True
    """
    head = ["comparison", "sF1", "Q-F1", "BA", "typed F1"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    note = ""
    for name, row in differences.items():
        cells = []
        for metric in CI_METRICS:
            entry = row.get(metric)
            text = MISSING if entry is None else _points(entry["diff"])
            if entry is not None and entry["low"] is not None and entry["high"] is not None:
                text += f" [{_points(entry['low'])}, {_points(entry['high'])}]"
                note = _INTERVAL_NOTE
            cells.append(text)
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines) + "\n\n" + note + DIFFERENCE_RULE


def comparisons(ablation: bool, llm_only: bool) -> dict[str, tuple[str, str]]:
    """The paired differences `evaluate` reports, {name: (row a, row b)} for a − b: none without the ablation; else
    "full − -X" for each stage X of `STAGES` and, with `llm_only`, "full − LLM-only" and "LLM-only − LLM-only -<part>"
    for each prompt part (`variant_parts`).

    >>> list(comparisons(True, False))
    ['full − -A', 'full − -B', 'full − -C', 'full − -D', 'full − -E']
    """
    if not ablation:
        return {}
    out = {f"full{MINUS}-{stage}": ("full", f"-{stage}") for stage in STAGES}
    if llm_only:
        out[f"full{MINUS}LLM-only"] = ("full", "LLM-only")
        out |= {f"LLM-only{MINUS}{name}": ("LLM-only", name) for name in variant_parts() if name != "LLM-only"}
    return out


def evaluate(
    verifier: Any,
    data: list[tuple[Trace, list[str]]],
    *,
    ablation: bool = True,
    llm_only: Any = None,
    baseline_draws: int = BASELINE_DRAWS,
    seed: int = 0,
    bootstrap_resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Judge once, route the full tree and each one-stage ablation; optionally the LLM-only rows; metrics per
    variant with bootstrap intervals, the trivial baselines and the full labels.

    Args:
        verifier: a `StepGapVerifier` (`check_steps(traces)` for stages A-C, `route(traces, checks, stages=...)`).
        data: (trace, gold labels per step) pairs, as `load_annotated` returns them.
        ablation: also route with each stage A-E removed (variants "-A" ... "-E"; judge outputs reused) and, with
            `llm_only`, judge its prompt ablations ("LLM-only -<part>").
        llm_only: an `LLMOnlyVerifier` (`judge_variants`, `labels`, `unscored`) or None; its rows join "metrics".
        baseline_draws, seed: the random baseline's draws and seed (`baselines`); `seed` also seeds the bootstrap.
        bootstrap_resamples, confidence: `metric_intervals` of every variant and baseline row, stored under the
            row's "ci" ({metric: [low, high]}), and `paired_difference_intervals` of the `comparisons`; 0
            resamples: no intervals (the differences keep their point value, low and high None).

    Returns:
        {"metrics": {variant: `compute_metrics` dict}, "baselines": `baselines(gold)` ({} without steps), "labels": the
        full tree's `StepLabel`s `[question][step]`, "checks": the judge results `[question][step]`, "judge_s" /
        "total_s": wall seconds of the A-C judge calls / of everything, "judge_unscored": {reason: count} of unscored
        A-C judge results, and with `llm_only` "llm_only": {"labels" / "results": {variant: `[question][step]`},
        "judge_s", "unscored": {variant: {reason: count}}}}, and "differences": {comparison: {metric: {"diff",
        "low", "high"}}} for the `comparisons` (fractions; positive "full − -X": removing X hurts; {} without the
        ablation).

    Raises:
        ValueError: `bootstrap_resamples` < 0 or a bad `confidence`.
    """
    if bootstrap_resamples < 0:
        raise ValueError(f"evaluate: bootstrap_resamples must be >= 0 (0: no intervals), got {bootstrap_resamples}")
    traces = [t for t, _ in data]
    gold = [g for _, g in data]
    began = time.monotonic()
    checks = verifier.check_steps(traces)
    judge_s = time.monotonic() - began
    variants = {"full": STAGES} | ({f"-{s}": tuple(x for x in STAGES if x != s) for s in STAGES} if ablation else {})
    preds, full_labels = {}, None
    for name, stages in variants.items():
        labels = verifier.route(traces, checks, stages=stages)
        if name == "full":
            full_labels = labels
        preds[name] = [[[lab.label for lab in row] for row in labels]]
    extra = {}
    if llm_only is not None:
        llm_began = time.monotonic()
        results = llm_only.judge_variants(traces, variant_parts(ablation))
        labels = {name: llm_only.labels(rows) for name, rows in results.items()}
        preds |= {name: [[[lab.label for lab in row] for row in rows]] for name, rows in labels.items()}
        extra["llm_only"] = {
            "labels": labels,
            "results": results,
            "judge_s": time.monotonic() - llm_began,
            "unscored": {name: llm_only.unscored(rows) for name, rows in results.items()},
        }
    metrics = {name: compute_metrics(gold, runs[0]) for name, runs in preds.items()}
    differences = {
        name: paired_difference_intervals(
            gold, preds[a][0], preds[b][0], resamples=bootstrap_resamples, confidence=confidence, seed=seed
        )
        for name, (a, b) in comparisons(ablation, llm_only is not None).items()
        if gold
    }
    base = baselines(gold, draws=baseline_draws, seed=seed) if any(gold) else {}
    if base:
        constant = {
            name: [[[label] * len(row) for row in gold]] for name, label in (("all-NONE", "NONE"), ("all-IE", "IE"))
        }
        preds |= constant | {"random": _random_draws(gold, baseline_draws, seed)}
    if bootstrap_resamples and gold:
        for name, row in (metrics | base).items():
            row["ci"] = metric_intervals(
                gold, preds[name], resamples=bootstrap_resamples, confidence=confidence, seed=seed
            )
    unscored = collections.Counter(getattr(r, "unscored", None) for row in checks for r in row if not r.ok)
    return {
        "metrics": metrics,
        "baselines": base,
        "labels": full_labels,
        "checks": checks,
        "judge_s": judge_s,
        "total_s": time.monotonic() - began,
        "judge_unscored": dict(unscored),
        "differences": differences,
        **extra,
    }
