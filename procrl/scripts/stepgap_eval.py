"""`procrl stepgap-eval`: StepGap verifier metrics (sF1, Q-F1, balanced accuracy, typed macro-F1) on an annotated
set, with a stage ablation, bootstrap intervals and an LLM-only comparison (docs/architecture.md "StepGap"; StepGap, arXiv
2605.24733, §"verifier evaluation").

    procrl stepgap-eval --data evals/stepgap/data/annotated_2wiki.jsonl [--judge local|URL] \\
        [--nli judge|cross-encoder/nli-deberta-v3-large] [--output-dir runs/stepgap_eval] [--limit N]
    procrl stepgap-eval --nli-entail-min 0.8 --nli-contradict-min 0.5   # stage D/E thresholds (probabilities)
    procrl stepgap-eval --config eval.yaml --limit 4          # a YAML of these fields; flags override it
    procrl stepgap-eval --llm-only --bootstrap-resamples 1000   # + the LLM-only verifier and its prompt ablations
    python -m procrl.scripts.stepgap_eval --no-ablation

Prints the main table (`procrl.evals.stepgap.evaluate.format_table`): the full tree, each one-stage ablation (-A ... -E),
with `--llm-only` the LLM-only verifier (`procrl.evals.stepgap.llm_only`: one call of the same judge per step,
labelling it NONE/CC/IE/MB directly; ERROR when unscored) and its prompt ablations (LLM-only -definitions, -evidence,
-history, -question; one more judge call per step each, skipped with `--no-ablation`), the trivial baselines on the
same steps (all-NONE; all-IE, which flags every step: the Q-F1 inflation check; random with the gold label shares: the
mean over `--baseline-draws` seeded draws) and the paper's reference row (sF1 72.0, Q-F1 81.2, BA 60.6, strong judge;
a constant). Every row but the paper's shows `value [low, high]`: the 95% percentile bootstrap interval over QUESTIONS
(`--bootstrap-resamples`, default 1000, the same resamples for every row, seeded by `--seed`; 0 = no intervals;
`procrl.evals.stepgap.intervals`), stored as `ci` ({metric: [low, high]}, fractions) in each row of the result.
With the ablation it then prints a second table, the PAIRED differences (`procrl.evals.stepgap.evaluate.comparisons`,
`format_differences_markdown`): "full − -X" for each stage and, with `--llm-only`, "full − LLM-only" and "LLM-only −
LLM-only -<part>", in signed points with the paired bootstrap interval over questions (both rows scored on the same
resampled questions; point values only with `--bootstrap-resamples 0`), and the reading rule: removing X hurts when
the interval of full − -X lies above 0, helps when below 0, else no difference is shown. Last, where the full tree's
labels come from (`procrl.evals.stepgap.decisions`): steps per deciding rule ("C: no evidence", "D: quote neutral",
...) against their gold labels, so an error can be traced to the stage that made it.
Writes into `--output-dir` the run record `run.json` (`procrl.experiment.tracking`; `result`: the summary, the
metrics of every variant and baseline, the `differences` ({comparison: {metric: {"diff", "low", "high"}}},
fractions) and the `decisions` (rows of `decision_table`); `metrics`: the full tree's `stepgap/sF1`, `stepgap/Q-F1`,
`stepgap/BA`, `stepgap/typed_macro_f1`, step
precision and recall, their intervals `stepgap/ci/<metric>/low|high`, with `--llm-only` `stepgap/llm_only/<metric>`,
`stepgap/label_distribution/<label>`, the counts, `stepgap/judge_unscored` and each difference
`stepgap/diff/<comparison>/<metric>` with `.../<metric>/low|high` (comparison "full-minus-A", "full-minus-LLM-only",
"LLM-only-minus-LLM-only-definitions", ...); `files`: the files below; also to wandb with `--report-to wandb`),
`table.md` (the table in Markdown, the differences table and the decisions table below it), `metrics.png` (each metric
of every row with its
interval, `procrl.evals.stepgap.plot`) and `labels.jsonl` (one line per step: gold, predicted label, reason, the
judge's raw reply; with `--llm-only` each LLM-only row's label and the raw reply to the full LLM-only prompt). The judge (`--judge`, `--judge-model`,
`--judge-max-tokens` (default 512), `--judge-concurrency`, `--judge-timeout-s`, `--judge-cache-dir`,
`--judge-num-threads`, `--judge-continuous-batching false`) is `procrl.judges.JudgeArguments`, the keys of a GRPO
config's judge; `--judge none` is refused (the verifier needs a judge). Without thresholds stages D/E take the NLI argmax; `--nli-entail-min p` makes a step entailed
only when P(entailment) >= p, `--nli-contradict-min p` contradicted only when P(contradiction) >= p
(`procrl.rewards.stepgap.nli_rule.NLIThresholds`). `--no-constrain-quotes` lets the judge write a free quote (filtered
by the verbatim check) instead of choosing one of the evidence's candidate spans. Multi-word flags are accepted with
dashes or underscores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trl import TrlParser

from procrl.evals.stepgap.decisions import decision_table, format_decisions_markdown
from procrl.evals.stepgap.evaluate import (
    BASELINE_DRAWS,
    BOOTSTRAP_RESAMPLES,
    DEFAULT_DATA,
    MINUS,
    PAPER_REFERENCE,
    evaluate,
    format_differences_markdown,
    format_markdown,
    format_table,
    load_annotated,
)
from procrl.evals.stepgap.llm_only import LLMOnlyVerifier
from procrl.evals.stepgap.plot import plot_metrics
from procrl.experiment.tracking import REPORT_TO_HELP, RUN_FILE, TrackingArguments, numeric_metrics, track_run
from procrl.judges import JudgeArguments
from procrl.judges.spec import open_judge_from
from procrl.rewards.stepgap.check import JUDGE_MAX_TOKENS
from procrl.rewards.stepgap.nli import CachedNLI, NLIThresholds, make_nli
from procrl.rewards.stepgap.verifier import StepGapVerifier
from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit, usage_error

__all__ = ["FILES", "StepGapEvalArguments", "main", "make_parser"]

PROG = "procrl stepgap-eval"
FILES = {"table": "table.md", "plot": "metrics.png", "labels": "labels.jsonl"}  # role -> name in --output-dir


@dataclass
class StepGapEvalArguments:
    """The flags of `procrl stepgap-eval` (module docstring)."""

    data: str = field(default=str(DEFAULT_DATA), metadata={"help": "annotated JSONL (default: the shipped 2Wiki set)"})
    nli: str = field(default="judge", metadata={"help": "judge (LLM NLI prompt) or a cross-encoder path / hub id"})
    nli_batch_size: int = field(default=16, metadata={"help": "cross-encoder batch size"})
    output_dir: str = field(
        default="runs/stepgap_eval", metadata={"help": "where run.json, table.md, metrics.png and labels.jsonl go"}
    )
    limit: int | None = field(default=None, metadata={"help": "evaluate the first N traces only"})
    no_ablation: bool = field(default=False, metadata={"help": "skip the stage ablation"})
    nli_entail_min: float | None = field(
        default=None,
        metadata={"help": "stage D/E: entailment only if P(entailment) >= this probability (default: argmax)"},
    )
    nli_contradict_min: float | None = field(
        default=None,
        metadata={"help": "stage D/E: contradiction only if P(contradiction) >= this probability (default: argmax)"},
    )
    no_constrain_quotes: bool = field(
        default=False, metadata={"help": "let the judge write a free quote instead of choosing an evidence span"}
    )
    baseline_draws: int = field(
        default=BASELINE_DRAWS, metadata={"help": "draws of the random baseline (the table shows their mean)"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the random baseline and of the bootstrap"})
    llm_only: bool = field(
        default=False,
        metadata={
            "help": "also run the LLM-only verifier (one judge call per step, labels directly) and its prompt "
            "ablations (one more call per step each; not with --no-ablation)"
        },
    )
    bootstrap_resamples: int = field(
        default=BOOTSTRAP_RESAMPLES,
        metadata={"help": "bootstrap resamples over questions for the 95%% intervals of every row (0: no intervals)"},
    )
    report_to: list[str] = field(default_factory=lambda: ["none"], metadata={"help": REPORT_TO_HELP})

    def __post_init__(self) -> None:
        self.report_to = TrackingArguments(self.report_to).report_to  # validated, a string made a list
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit {self.limit} must be >= 1 (the first N traces); leave it out for all of them.")
        for name in ("nli_batch_size", "baseline_draws"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)} must be >= 1.")
        if self.bootstrap_resamples < 0:
            raise ValueError(f"--bootstrap-resamples {self.bootstrap_resamples} must be >= 0 (0: no intervals).")
        try:
            self.nli_thresholds = NLIThresholds(self.nli_entail_min, self.nli_contradict_min)
        except ValueError as exc:
            raise ValueError(f"--nli-entail-min / --nli-contradict-min: {exc}") from None


def make_parser() -> TrlParser:
    """The parser of `procrl stepgap-eval`: `StepGapEvalArguments` and the judge's `JudgeArguments` (`--config x.yaml`
    sets the fields; flags override it)."""
    return TrlParser(
        (StepGapEvalArguments, JudgeArguments), prog=PROG, description=__doc__, formatter_class=HelpFormatter
    )


def main(argv: list[str] | None = None) -> int:
    """Run the verifier on an annotated set; print the table and write run.json (the summary as its `result`),
    table.md, metrics.png and labels.jsonl. Returns 0, or 2 after one error line for a bad argument (an unknown flag,
    a value `StepGapEvalArguments` or `JudgeArguments` refuses, `--judge none`).

    Raises:
        SystemExit: the annotated set (after `--limit`) has no trace.
        ValueError: an annotated record that cannot be read (`load_annotated`).
    """
    parsed = parse_or_exit(make_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    args, judge = parsed
    if not judge.enabled or judge.is_oracle:
        return usage_error(
            PROG, f"the StepGap verifier needs a judge (an LLM), got --judge {judge.judge}; use --judge local or a URL"
        )
    configure_logging()
    with track_run(args.output_dir, command="stepgap-eval", argv=argv, configs=parsed, report_to=args.report_to) as run:
        summary, rows = _evaluate(args, judge)
        run.metrics = run_metrics(summary)
        run.result, run.files = summary, dict(FILES)
    print(f"StepGap verifier on {args.data}: {summary['n_questions']} questions, {summary['n_steps']} steps")
    print(
        f"judge {judge.judge}, NLI {summary['nli']} ({summary['nli_thresholds']}); judge unscored: "
        f"{summary['judge_unscored'] or 'none'}"
    )
    if summary["llm_only"] is not None:
        unscored = {name: n for name, n in summary["llm_only"]["unscored"].items() if n}
        print(f"LLM-only: same judge, one call per step per row; unscored: {unscored or 'none'}")
    print(format_table(rows))
    for note in table_notes(args):
        print(note)
    if summary["differences"]:
        print()
        print(format_differences_markdown(summary["differences"]))
    print()
    print(format_decisions_markdown(summary["decisions"]))
    out_dir = Path(args.output_dir)
    print(f"run record: {out_dir / RUN_FILE}  labels: {out_dir / FILES['labels']}")
    return 0


def run_metrics(summary: dict) -> dict[str, float]:
    """The run record's headline metrics of the summary (the run's `result`): the full tree's numbers (sF1,
    step_precision, step_recall, Q-F1, BA, typed_macro_f1, label_distribution/<label>, n_steps, n_questions, n_error;
    not the per-label table or the confusion matrix), `judge_unscored` (the count of unscored judge results) and the
    paired differences as `diff/<comparison>/<metric>` and `diff/<comparison>/<metric>/low|high` (`diff_slug`), under
    `stepgap/`."""
    full = {
        k: v for k, v in summary["metrics"]["full"].items() if k not in ("per_label", "confusion", "gold_distribution")
    }
    if "ci" in full:
        full["ci"] = {k: {"low": lo, "high": hi} for k, (lo, hi) in full["ci"].items()}
    unscored = sum(summary["judge_unscored"].values())
    out = numeric_metrics({**full, "judge_unscored": unscored}, "stepgap/")
    if llm := summary["metrics"].get("LLM-only"):
        out |= numeric_metrics({k: llm[k] for k in ("sF1", "Q-F1", "BA", "typed_macro_f1")}, "stepgap/llm_only/")
    for name, row in summary.get("differences", {}).items():
        for metric, entry in row.items():
            key = f"stepgap/diff/{diff_slug(name)}/{metric}"
            out |= numeric_metrics({key: entry["diff"], f"{key}/low": entry["low"], f"{key}/high": entry["high"]})
    return out


def diff_slug(comparison: str) -> str:
    """A comparison name as a metric key: "full − -A" -> "full-minus-A", "LLM-only − LLM-only -history" ->
    "LLM-only-minus-LLM-only-history"."""
    a, b = comparison.split(MINUS)
    return f"{a}-minus-{b.lstrip('-')}".replace(" -", "-").replace(" ", "-")


def table_notes(args: StepGapEvalArguments) -> list[str]:
    """The lines printed under the table (and written under table.md): what the brackets, all-IE and random are."""
    notes = []
    if args.bootstrap_resamples:
        notes.append(
            f"[low, high]: 95% percentile bootstrap interval over questions ({args.bootstrap_resamples} resamples, "
            f"seed {args.seed}, the same resamples for every row)"
        )
    notes.append("all-IE flags every step: the Q-F1 inflation check (a high Q-F1 with BA 50.0 carries no signal)")
    notes.append(f"random: mean over {args.baseline_draws} draws (seed {args.seed}) with the gold label shares")
    return notes


def _evaluate(args: StepGapEvalArguments, judge_args: JudgeArguments) -> tuple[dict, dict]:
    """Judge, route and score; write table.md, metrics.png and labels.jsonl (`FILES`). Returns the summary and the
    table rows."""
    data = load_annotated(args.data)
    if args.limit is not None:
        data = data[: args.limit]
    if not data:
        raise SystemExit(f"no annotated traces in {args.data}")
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open_judge_from(judge_args, output_dir=out_dir, default_max_tokens=JUDGE_MAX_TOKENS) as judge:
        nli = CachedNLI(make_nli(args.nli, judge, batch_size=args.nli_batch_size))
        verifier = StepGapVerifier(
            judge, nli, nli_thresholds=args.nli_thresholds, constrain_quotes=not args.no_constrain_quotes
        )
        report = evaluate(
            verifier,
            data,
            ablation=not args.no_ablation,
            llm_only=LLMOnlyVerifier(judge) if args.llm_only else None,
            baseline_draws=args.baseline_draws,
            seed=args.seed,
            bootstrap_resamples=args.bootstrap_resamples,
        )
        judge_stats = judge.stats.as_dict()
    summary = {
        "data": str(args.data),
        "judge": judge_args.judge,
        "judge_max_tokens": judge_args.judge_max_tokens or JUDGE_MAX_TOKENS,
        "nli": repr(nli.inner),
        "nli_thresholds": str(args.nli_thresholds),
        "constrain_quotes": not args.no_constrain_quotes,
        "n_questions": len(data),
        "n_steps": sum(len(g) for _, g in data),
        "judge_s": report["judge_s"],
        "total_s": report["total_s"],
        "judge_unscored": report["judge_unscored"],
        "llm_only": {k: report["llm_only"][k] for k in ("judge_s", "unscored")} if args.llm_only else None,
        "bootstrap": {
            "resamples": args.bootstrap_resamples,
            "confidence": 0.95,
            "seed": args.seed,
            "over": "questions",
        },
        "judge_stats": judge_stats,
        "metrics": report["metrics"],
        "baselines": report["baselines"],
        "differences": report["differences"],
        "decisions": decision_table(
            [[label.reason for label in row] for row in report["labels"]],
            [[label.label for label in row] for row in report["labels"]],
            [g for _, g in data],
        ),
        "paper_reference": PAPER_REFERENCE,
    }
    rows = report["metrics"] | report["baselines"] | {"paper (ref)": PAPER_REFERENCE}
    notes = "".join(f"\n{note}\n" for note in table_notes(args))
    if report["differences"]:
        notes += "\n" + format_differences_markdown(report["differences"]) + "\n"
    notes += "\n" + format_decisions_markdown(summary["decisions"]) + "\n"
    (out_dir / FILES["table"]).write_text(format_markdown(rows) + "\n" + notes, encoding="utf-8")
    title = f"StepGap verifier on {summary['n_steps']} steps of {len(data)} questions (judge {judge_args.judge})"
    plot_metrics(rows, out_dir / FILES["plot"], title=title)
    llm = report.get("llm_only")
    with open(out_dir / FILES["labels"], "w", encoding="utf-8") as handle:
        for q, ((trace, gold), row, checks) in enumerate(zip(data, report["labels"], report["checks"], strict=True)):
            for i, (label, g, check) in enumerate(zip(row, gold, checks, strict=True)):
                line = {
                    "question": trace.question,
                    "step": i,
                    "gold": g,
                    "pred": label.label,
                    "reason": label.reason,
                    "judge_raw": check.raw,
                    "judge_unscored": check.unscored,
                }
                if llm:  # the LLM-only rows' labels, and the raw reply of the full LLM-only prompt
                    line["llm_only"] = {name: labels[q][i].label for name, labels in llm["labels"].items()}
                    line["llm_only_raw"] = llm["results"]["LLM-only"][q][i].raw
                handle.write(json.dumps(line) + "\n")
    return summary, rows


if __name__ == "__main__":
    raise SystemExit(main())
