"""`procrl stepgap-eval`: StepGap verifier metrics on an annotated set, with a stage ablation (DESIGN §4 "StepGap";
StepGap, arXiv 2605.24733, §"verifier evaluation").

    procrl stepgap-eval --data rewards/stepgap/data/annotated_2wiki.jsonl [--judge local|URL] \\
        [--nli judge|cross-encoder/nli-deberta-v3-large] [--output-dir runs/stepgap_eval] [--limit N]

Metrics (ERROR predictions count as "no gap flagged", and their number is reported):
- sF1: step-level F1 of gap detection, positive = any gap label (CC, IE or MB); the paper's sF1 is step-level and
  its Q-F1 trap (flagging everything) only makes sense for a binary detection score.
- Q-F1: question-level F1 of gap detection; a question is flagged when any of its steps is.
- BA: step-level balanced accuracy of gap detection, (TPR + TNR) / 2 (a verifier that flags every step gets 0.5).
- typed macro-F1: mean F1 over the four labels NONE, CC, IE, MB (does the verifier get the TYPE right).
- the label distribution of the predictions, per-label precision/recall/F1 and the confusion matrix.
The ablation re-routes the same judge outputs with one stage removed (A, B, C, D or E; see
`procrl.rewards.stepgap.verifier` for what removing a stage means), so it costs NLI calls only.

The annotated set (`build_annotated_2wiki`) is built programmatically from 2WikiMultihopQA compositional
questions; see rewards/stepgap/data/SOURCE.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from procrl.rewards.stepgap.trace import Passage, Trace, TraceStep
from procrl.rewards.stepgap.verifier import GAP_LABELS, LABELS, STAGES
from procrl.utils import get_logger

logger = get_logger(__name__)

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "annotated_2wiki.jsonl"
TYPED_LABELS = ("NONE", "CC", "IE", "MB")

__all__ = [
    "binary_f1",
    "balanced_accuracy",
    "typed_report",
    "compute_metrics",
    "load_annotated",
    "build_annotated_2wiki",
    "main",
]


# --------------------------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------------------------


def binary_f1(gold: Sequence[bool], pred: Sequence[bool]) -> dict[str, float]:
    """Precision, recall and F1 of the positive class; each is 0.0 when its denominator is 0.

    >>> binary_f1([True, True, False, False], [True, False, True, False])
    {'precision': 0.5, 'recall': 0.5, 'f1': 0.5, 'tp': 1, 'fp': 1, 'fn': 1, 'tn': 1}
    """
    if len(gold) != len(pred):
        raise ValueError(f"binary_f1: {len(gold)} gold vs {len(pred)} predictions")
    tp = sum(g and p for g, p in zip(gold, pred, strict=True))
    fp = sum((not g) and p for g, p in zip(gold, pred, strict=True))
    fn = sum(g and not p for g, p in zip(gold, pred, strict=True))
    tn = len(gold) - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn, "tn": tn}


def balanced_accuracy(gold: Sequence[bool], pred: Sequence[bool]) -> float:
    """(TPR + TNR) / 2 over the classes present in `gold` (one class present: its recall; empty: 0.0).

    >>> balanced_accuracy([True, True, True, False], [True, True, True, True])  # flag everything
    0.5
    """
    counts = binary_f1(gold, pred)
    rates = []
    if counts["tp"] + counts["fn"]:
        rates.append(counts["tp"] / (counts["tp"] + counts["fn"]))
    if counts["tn"] + counts["fp"]:
        rates.append(counts["tn"] / (counts["tn"] + counts["fp"]))
    return sum(rates) / len(rates) if rates else 0.0


def typed_report(gold: Sequence[str], pred: Sequence[str], labels: Sequence[str] = TYPED_LABELS) -> dict[str, Any]:
    """Per-label precision/recall/F1 (one-vs-rest), their macro mean over `labels`, and the confusion matrix
    `confusion[gold][pred]` (predicted labels outside `labels`, e.g. ERROR, get their own column)."""
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
        "macro_f1": sum(v["f1"] for v in per_label.values()) / len(labels),
        "per_label": per_label,
        "confusion": {g: dict(row) for g, row in confusion.items()},
    }


def compute_metrics(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, Any]:
    """All verifier metrics for gold and predicted labels, `[question][step]`.

    Returns: sF1 / step precision / step recall, Q-F1, BA (all in [0, 1]), typed macro-F1, per-label scores,
    confusion, the predicted and gold label distributions (fractions over steps) and counts.

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
        "label_distribution": {label: pred_counts.get(label, 0) / n if n else 0.0 for label in LABELS},
        "gold_distribution": {label: gold_counts.get(label, 0) / n if n else 0.0 for label in TYPED_LABELS},
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


_R1 = ("director", "father", "composer", "performer", "mother")
_R2 = ("place of birth", "place of death", "date of death", "date of birth", "place of burial", "father", "mother")
# (inference label, conclusion label): a conclusion IE needs evidence that never names the bridge, so the
# inference step before it must be IE or MB (whose evidence does not name it either).
_COMBOS = [(a, b) for b in ("NONE", "CC", "MB") for a in TYPED_LABELS] + [("IE", "IE"), ("MB", "IE")]


def _n(text: str) -> str:
    return " ".join(text.lower().split())


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def build_annotated_2wiki(
    dev_path: str | Path,
    corpus_path: str | Path,
    *,
    cycles: int = 3,
    extra_clean: int = 6,
    max_paragraph_chars: int = 800,
    seed: int = 0,
) -> list[dict]:
    """Annotated StepGap traces with known gap types, from 2Wiki compositional questions (A -r1-> B -r2-> C).

    Each trace has an inference step claiming "The r1 of A is B." (searching for B's r2) and a conclusion claiming
    "The r2 of B is C." with answer C. Per step, the evidence is constructed for its gold label (entity = the
    claim's subject, value = the claimed object):
        NONE: the subject's paragraph, which states the value;
        CC:   the subject's paragraph, with a claimed value taken from another question with the same relation
              (absent from the evidence, while the true value is present);
        MB:   the subject's paragraph with every sentence stating the value removed (relevant, not implying);
        IE:   only paragraphs that never name the subject (nor the value).
    Distractor paragraphs never name A, B, C or a substituted value. The conclusion's evidence is the inference
    step's evidence plus what its search returned. Every construction is checked by string tests; a question that
    fails one is skipped. `cycles` runs over the 14 label combinations plus `extra_clean` NONE/NONE traces;
    paragraphs longer than `max_paragraph_chars` characters are not used (short judge prompts).
    """
    rng = random.Random(seed)
    corpus = [json.loads(line) for line in open(corpus_path, encoding="utf-8")]
    by_title = {p["title"]: p for p in corpus}
    dev = [json.loads(line) for line in open(dev_path, encoding="utf-8")]
    values: dict[str, set[str]] = collections.defaultdict(set)
    for q in dev:
        for _, rel, obj in q["evidences"]:
            values[rel].add(obj)

    candidates = []
    for q in dev:
        if q["type"] != "compositional" or len(q["evidences"]) != 2 or not q["supporting_complete"]:
            continue
        (a, r1, b), (b2, r2, c) = q["evidences"]
        if b != b2 or r1 not in _R1 or r2 not in _R2 or _n(c) != _n(q["answer"]):
            continue
        pa, pb = (by_title.get(t) for t in q["supporting_titles"][:2])
        if not pa or not pb or _n(b) not in _n(pa["text"]) or _n(c) not in _n(pb["text"]):
            continue
        if max(len(pa["text"]), len(pb["text"])) > max_paragraph_chars:
            continue
        candidates.append((q, a, r1, b, r2, c, pa, pb))
    rng.shuffle(candidates)

    def wrong_value(rel: str, true: str, avoid: str) -> str | None:
        pool = sorted(v for v in values[rel] if _n(true) not in _n(v) and _n(v) not in _n(true))
        rng.shuffle(pool)
        return next((v for v in pool if _n(v) not in _n(avoid)), None)

    def distractors(k: int, names: list[str]) -> list[dict]:
        out = []
        while len(out) < k:
            p = rng.choice(corpus)
            blob = _n(p["title"] + " " + p["text"])
            if len(p["text"]) <= max_paragraph_chars and all(_n(x) not in blob for x in names) and p not in out:
                out.append(p)
        return out

    def without_value(p: dict, value: str) -> dict | None:
        kept = [s for s in _sentences(p["text"]) if _n(value) not in _n(s)]
        text = " ".join(kept)
        return {"title": p["title"], "text": text} if kept and _n(value) not in _n(text) else None

    combos = _COMBOS * cycles + [("NONE", "NONE")] * extra_clean
    records = []
    for q, a, r1, b, r2, c, pa, pb in candidates:
        if len(records) == len(combos):
            break
        l1, l2 = combos[len(records)]
        b_wrong = wrong_value(r1, b, pa["text"] + " " + pb["text"])
        c_wrong = wrong_value(r2, c, pa["text"] + " " + pb["text"])
        if b_wrong is None or c_wrong is None:
            continue
        names = [a, b, c, b_wrong, c_wrong]
        pa_mb, pb_mb = without_value(pa, b), without_value(pb, c)
        if pa_mb is None or pb_mb is None or _n(c) in _n(pa_mb["text"]):
            continue
        plain = lambda p: {"title": p["title"], "text": p["text"]}  # noqa: E731
        evidence1 = {
            "NONE": [plain(pa)],
            "CC": [plain(pa)],
            "MB": [pa_mb],
            "IE": [],
        }[l1] + [plain(d) for d in distractors(2 if l1 == "IE" else 1, names)]
        retrieved1 = {
            "NONE": [plain(pb)],
            "CC": [plain(pb)],
            "MB": [pb_mb],
            "IE": [],
        }[l2] + [plain(d) for d in distractors(2 if l2 == "IE" else 1, names)]
        evidence2 = evidence1 + retrieved1
        claim_b = b_wrong if l1 == "CC" else b
        claim_c = c_wrong if l2 == "CC" else c

        # The checks that make each gold label true by construction.
        blob1 = _n(" ".join(p["title"] + " " + p["text"] for p in evidence1))
        blob2 = _n(" ".join(p["title"] + " " + p["text"] for p in evidence2))
        ok = {
            "NONE": _n(b) in blob1,
            "CC": _n(b) in blob1 and _n(b_wrong) not in blob1,
            "MB": _n(a) in blob1 and _n(b) not in blob1,  # the subject's own paragraph (title) is there
            "IE": _n(a) not in blob1 and _n(b) not in blob1,
        }[l1] and {
            "NONE": _n(c) in blob2,
            "CC": _n(c) in blob2 and _n(c_wrong) not in blob2,
            "MB": _n(b) in blob2 and _n(c) not in blob2,
            "IE": _n(b) not in blob2 and _n(c) not in blob2,
        }[l2]
        if not ok:
            continue
        step1 = {
            "kind": "inference",
            "text": f"<think>The {r1} of {a} is {claim_b}.</think>\n<search>{r2} of {b}</search>",
            "query": f"{r2} of {b}",
            "answer": None,
            "evidence": evidence1,
            "retrieved": retrieved1,
            "gold": l1,
            "gold_entity": a,
            "gold_value": claim_b,
            "gold_bridge": b if l1 == "MB" else None,
        }
        step2 = {
            "kind": "conclusion",
            "text": f"<think>The {r2} of {b} is {claim_c}.</think>\n<answer>{claim_c}</answer>",
            "query": None,
            "answer": claim_c,
            "evidence": evidence2,
            "retrieved": [],
            "gold": l2,
            "gold_entity": b,
            "gold_value": claim_c,
            "gold_bridge": None,
        }
        records.append(
            {
                "id": f"2wiki-stepgap-{len(records):03d}",
                "source_id": q["id"],
                "question": q["question"],
                "answer": claim_c,
                "gold_answer": q["answer"],
                "steps": [step1, step2],
            }
        )
    if len(records) < len(combos):
        logger.warning("only %d of %d annotated traces could be built", len(records), len(combos))
    return records


# --------------------------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="procrl stepgap-eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="annotated JSONL (default: the shipped 2Wiki set)")
    parser.add_argument(
        "--judge", default="local", help="judge spec: local | local:<model> | http(s)://host:port/v1[#model]"
    )
    parser.add_argument("--judge-model", default=None, help="model id for an OpenAI-compatible judge URL")
    parser.add_argument("--nli", default="judge", help="judge (LLM NLI prompt) or a cross-encoder path / hub id")
    parser.add_argument("--nli-batch-size", type=int, default=16, help="cross-encoder batch size")
    parser.add_argument("--output-dir", default="runs/stepgap_eval", help="where metrics.json and labels.jsonl go")
    parser.add_argument("--limit", type=int, default=None, help="evaluate the first N traces only")
    parser.add_argument("--max-tokens", type=int, default=256, help="judge reply token limit")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent judge requests")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per-request judge timeout (s)")
    parser.add_argument("--cache-dir", default=None, help="judge cache directory (default: <output-dir>/judge_cache)")
    parser.add_argument(
        "--no-continuous-batching", action="store_true", help="local judge: start transformers serve without batching"
    )
    parser.add_argument("--num-threads", type=int, default=1, help="local judge: server CPU threads")
    parser.add_argument("--no-ablation", action="store_true", help="skip the stage ablation")
    return parser


def format_table(rows: dict[str, dict[str, Any]]) -> str:
    """A fixed-width table of sF1, Q-F1, BA, typed macro-F1 (percent) and the predicted label distribution."""
    head = f"{'variant':<10} {'sF1':>6} {'Q-F1':>6} {'BA':>6} {'tF1':>6}  " + " ".join(f"{lab:>6}" for lab in LABELS)
    lines = [head, "-" * len(head)]
    for name, m in rows.items():
        dist = " ".join(f"{100 * m['label_distribution'][lab]:>5.1f}%" for lab in LABELS)
        lines.append(
            f"{name:<10} {100 * m['sF1']:>6.1f} {100 * m['Q-F1']:>6.1f} {100 * m['BA']:>6.1f} "
            f"{100 * m['typed_macro_f1']:>6.1f}  {dist}"
        )
    return "\n".join(lines)


def evaluate(verifier: Any, data: list[tuple[Trace, list[str]]], *, ablation: bool = True) -> dict[str, Any]:
    """Judge once, route the full tree and each one-stage ablation; metrics per variant and the full labels."""
    traces = [t for t, _ in data]
    gold = [g for _, g in data]
    began = time.monotonic()
    checks = verifier.check_steps(traces)
    judge_s = time.monotonic() - began
    variants = {"full": STAGES} | ({f"-{s}": tuple(x for x in STAGES if x != s) for s in STAGES} if ablation else {})
    results, full_labels = {}, None
    for name, stages in variants.items():
        labels = verifier.route(traces, checks, stages=stages)
        if name == "full":
            full_labels = labels
        results[name] = compute_metrics(gold, [[lab.label for lab in row] for row in labels])
    unscored = collections.Counter(getattr(r, "unscored", None) for row in checks for r in row if not r.ok)
    return {
        "metrics": results,
        "labels": full_labels,
        "checks": checks,
        "judge_s": judge_s,
        "total_s": time.monotonic() - began,
        "judge_unscored": dict(unscored),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the verifier on an annotated set; print the table and write metrics.json and labels.jsonl."""
    from procrl.rewards.judges import open_judge
    from procrl.rewards.stepgap.nli import CachedNLI, make_nli
    from procrl.rewards.stepgap.verifier import StepGapVerifier

    args = make_parser().parse_args(argv)
    data = load_annotated(args.data)
    if args.limit is not None:
        data = data[: args.limit]
    if not data:
        raise SystemExit(f"no annotated traces in {args.data}")
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    judge_kwargs: dict[str, Any] = {"max_tokens": args.max_tokens, "timeout_s": args.timeout_s}
    if args.judge == "local" or args.judge.startswith("local:"):
        judge_kwargs |= {"continuous_batching": not args.no_continuous_batching, "num_threads": args.num_threads}
    if args.judge_model:
        judge_kwargs["model"] = args.judge_model
    cache_dir = args.cache_dir or str(out_dir / "judge_cache")
    with open_judge(args.judge, cache_dir=cache_dir, max_concurrency=args.concurrency, **judge_kwargs) as judge:
        nli = CachedNLI(make_nli(args.nli, judge, batch_size=args.nli_batch_size))
        verifier = StepGapVerifier(judge, nli)
        report = evaluate(verifier, data, ablation=not args.no_ablation)
        judge_stats = judge.stats.as_dict()
    summary = {
        "data": str(args.data),
        "judge": args.judge,
        "nli": repr(nli.inner),
        "n_questions": len(data),
        "n_steps": sum(len(g) for _, g in data),
        "judge_s": report["judge_s"],
        "total_s": report["total_s"],
        "judge_unscored": report["judge_unscored"],
        "judge_stats": judge_stats,
        "metrics": report["metrics"],
    }
    (out_dir / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    with open(out_dir / "labels.jsonl", "w", encoding="utf-8") as handle:
        for (trace, gold), row, checks in zip(data, report["labels"], report["checks"], strict=True):
            for i, (label, g, check) in enumerate(zip(row, gold, checks, strict=True)):
                handle.write(
                    json.dumps(
                        {
                            "question": trace.question,
                            "step": i,
                            "gold": g,
                            "pred": label.label,
                            "reason": label.reason,
                            "judge_raw": check.raw,
                            "judge_unscored": check.unscored,
                        }
                    )
                    + "\n"
                )
    print(f"StepGap verifier on {args.data}: {summary['n_questions']} questions, {summary['n_steps']} steps")
    print(f"judge {args.judge}, NLI {summary['nli']}; judge unscored: {report['judge_unscored'] or 'none'}")
    print(format_table(report["metrics"]))
    print(f"metrics: {out_dir / 'metrics.json'}  labels: {out_dir / 'labels.jsonl'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
