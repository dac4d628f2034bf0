"""`procrl frs`: the Filtered Reasoning Score of a model on a benchmark, offline (docs/architecture.md "FRS"); and
`procrl frs compare`: models ranked by accuracy and by FRS@K, from such runs.

    procrl frs --model default --dataset gsm8k --start 0 --end 50 --frs-traces 16 --frs-k-percent 10 --judge local
    procrl frs --model <name|path> --judge http://127.0.0.1:8000/v1 --output-dir out/frs
    procrl frs --model <name|path> --dataset arith-ops3-d2-test-n64 --judge oracle     # the step oracle as judge
    procrl frs --config frs.yaml --frs-traces 4           # a YAML of these keys (the frs_* / judge* keys of a GRPO
                                                         # config mean the same); flags override it
    procrl frs compare out/frs_a out/frs_b --output-dir out/frs_compare [--k 20]
    procrl frs compare --help                            # the flags of the comparison

Measure (`procrl frs [flags]`). Samples `--frs-traces` traces per problem (temperature 0.7, no top-p/top-k by
default) with procrl's batched generation, takes each trace's tail confidence from the generation's own raw
logits, judges the traces FRS needs (`procrl.evals.frs.plan_judging`) and writes into `--output-dir`:

- `run.json`: the run record (`procrl.experiment.tracking`): settings, git state, versions, machine, wall time;
  `result`: the report (FRS@K, accuracies, selection gain, `rs_auc`, counts, judge statistics), its 95% bootstrap
  intervals over problems (`intervals`: `accuracy`, `accuracy@K`, `frs@K`, `selection_gain` -> [low, high];
  `bootstrap`: draws, seed, problems; `--bootstrap-resamples`, default 1000, 0 = none; no extra judging: each
  resample re-ranks its traces and re-selects the top K%), the settings and wall times; `metrics`: `frs/score`
  (FRS@K of `--frs-k-percent`), `frs/at_k/<K>`, `frs/accuracy`, `frs/selection_gain`, `frs/rs_auc`, `frs/judged`,
  `frs/unscored`, ... (`FRSReport.metrics`) and the intervals `frs/ci/<name>/low|high`; `files`: the files below.
  Also to wandb with `--report-to wandb`;
- `cache/`: procrl's sample store (content-addressed rollout shards, `procrl.data_builders.rollouts`); an
  interrupted run started again with the same settings resumes from it, and a rerun (e.g. with another judge)
  generates nothing;
- `judged_traces.jsonl`: every trace (text, confidence, correctness, `scores` and `rs`; with a judge that returns
  log-probs also `expected_scores` and `rs_expected`);
- `frs.png`: the FRS@K curve (with the accuracy of the kept traces; the intervals as bands) and histograms of the
  confidence of correct and incorrect traces.

The judge (`--judge`, `--judge-max-tokens`, ...: `procrl.judges.JudgeArguments`, the same keys as GRPO's): `local`
starts the embedded judge server for the run and stops it afterwards (vLLM's OpenAI server on the default model,
127.0.0.1; the reply's schema enforced, each score also read as a probability distribution; where vLLM cannot be
imported, a schema-constrained transformers judge in this process); `serve:transformers` is `transformers serve`
(which ignores the schema); `oracle` computes the four scores from the step oracle on step-checkable data (an
arith set with `gold_steps`; others are refused; docs/architecture.md "Step oracle"); `none` skips judging
(accuracies and confidences only). The reply budget is 96 tokens
unless `--judge-max-tokens` says otherwise. The FRS settings (`--frs-*`: `procrl.evals.frs.FRSArguments`) are the
keys a GRPO config's FRS callback reads too. Flags are dashed or underscored alike (`--frs-k-values` =
`--frs_k_values`). The library: `procrl.evals.frs.offline` (`run_frs`).

What the report holds besides FRS@K (`procrl.evals.frs.FRSReport`):

- two reasoning scores per judged trace: RS from the four validated integer scores, and RS_expected from their
  G-Eval expected values sum_v p(v) * v when the judge returns log-probs; FRS@K, the headline FRS and the selection
  gain come from both (`at_k` / `at_k_expected`, ...), the RS_expected ones only when every scored trace has
  probabilities (`n_scored_without_probs` counts those without);
- `rs_auc` / `rs_expected_auc`: the AUC of RS for correct vs incorrect final answers over the scored traces
  (Mann-Whitney, ties 1/2; None when a class is empty). `--frs-judge-sees-correctness false` drops the line
  `{"final_correct": ...}` from the judge's prompt (its judge cache entries differ, the traces need not): run
  both on the same traces (copy the sample store `cache/` into the second output dir) to see whether RS carries
  more than the flag it is given;
- unscored judgements by reason (`unscored`).

    procrl frs --model default --end 50 --judge local --output-dir out/frs            # the judge sees the flag
    mkdir -p out/frs_noflag && cp -r out/frs/cache out/frs_noflag/
    procrl frs --model default --end 50 --judge local --output-dir out/frs_noflag --frs-judge-sees-correctness false

Compare (`procrl frs compare RUN_DIR... --output-dir D`; issue 17). Reads the run.json of each `procrl frs` run
(one row per (model, benchmark): the result's `model` and `dataset`), takes its accuracy, top-K% accuracy, FRS@K
and selection gain with their 95% bootstrap intervals over problems (the result's `intervals`; a run without them
gets them from its judged traces here, nothing judged again, `--bootstrap-resamples` draws), and per benchmark
ranks the models by accuracy and by FRS@K (`--k`, default the runs' headline K). For every pair of models it says
whether the two rankings invert (point estimates), whether each pair of intervals overlaps, whether the inversion
holds beyond the intervals (neither pair overlaps), and whether FRS separates the pair where accuracy cannot
(accuracy intervals overlap, FRS@K intervals do not). Writes into `--output-dir` `table.md` (the table, `value
[lo, hi]`, and per benchmark the ranks and the pairs; also printed), `frs_compare.png` (FRS@K against K, a line
per model with its interval as a band, a panel per benchmark) and `run.json` (command "frs compare"; `result`: the
comparison, `procrl.evals.frs.compare.compare_runs`; `metrics`: `frs_compare/runs`, `.../pairs`, `.../inverted`,
`.../inverted_beyond_intervals`, `.../frs_separates`, counts of pairs). A missing or unfinished run, two runs of the
same (model, benchmark), or a K a run lacks: one error line, exit status 2, nothing written. The library:
`procrl.evals.frs.compare`.

Agreement (`procrl frs agreement RUN_DIR... --output-dir D [--reference RUN_DIR]`; issue 28 §4): how far each run's
judge agrees with the step oracle's judge on that run's own judged traces (arith tasks: their `gold_steps`), or
with another run's judge on the traces both scored: Spearman's ρ on RS with a bootstrap interval over problems,
Cohen's κ per dimension, mean RS of both and the judge's modal-RS share (`procrl.evals.frs.agreement`). Writes
`agreement.md` (also printed) and `run.json` (command "frs agreement"; `result`: per run its agreement).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from trl import TrlParser

from procrl.evals.frs import FRSArguments, FRSReport
from procrl.evals.frs.agreement import format_agreement, judge_agreement, oracle_reference, read_judged
from procrl.evals.frs.compare import build_comparison, format_table, write_comparison
from procrl.evals.frs.intervals import accuracy_key, frs_key
from procrl.evals.frs.offline import OfflineFRSConfig, run_frs
from procrl.evals.stats import BOOTSTRAP_RESAMPLES, format_estimate
from procrl.experiment.tracking import RUN_FILE, TrackingArguments, numeric_metrics, track_run
from procrl.judges import JudgeArguments
from procrl.scripts._common import (
    EXIT_USAGE,
    HelpFormatter,
    bare_words_as_flag,
    configure_logging,
    parse_or_exit,
    usage_error,
)

__all__ = ["FRSAgreementArguments", "FRSCompareArguments", "main", "make_compare_parser", "make_parser", "runs_as_flag"]

COMPARE = "compare"  # the first word of the comparison mode
COMPARE_PROG = "procrl frs compare"
AGREEMENT = "agreement"  # the first word of the agreement mode
AGREEMENT_PROG = "procrl frs agreement"
AGREEMENT_FILE = "agreement.md"
# the comparison's flags whose next word is their value (so it is not taken for a run directory)
_VALUE_FLAGS = {
    f"--{name}{sep}{rest}"
    for name, rest in (("output", "dir"), ("bootstrap", "resamples"), ("report", "to"))
    for sep in ("-", "_")
} | {"--k", "--seed", "--config", "--reference"}


@dataclass
class FRSCompareArguments:
    """The flags of `procrl frs compare` (module docstring)."""

    runs: list[str] = field(
        default_factory=list, metadata={"help": "output directories of `procrl frs` runs (or their run.json)"}
    )
    output_dir: str | None = field(default=None, metadata={"help": "where table.md, frs_compare.png and run.json go"})
    k: float | None = field(
        default=None, metadata={"help": "rank by FRS@K of this K (percent); default: the runs' headline K"}
    )
    bootstrap_resamples: int = field(
        default=BOOTSTRAP_RESAMPLES,
        metadata={"help": "bootstrap draws for a run without intervals (from its judged traces); 0 = leave it without"},
    )
    seed: int | None = field(
        default=None, metadata={"help": "seed of those draws; default: each run's FRS seed (as procrl frs uses)"}
    )

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("give at least one run: procrl frs compare RUN_DIR_A RUN_DIR_B --output-dir DIR")
        if not self.output_dir:
            raise ValueError("--output-dir DIR is required (where table.md and run.json go)")
        if self.k is not None and not 0 < self.k <= 100:
            raise ValueError(f"--k must be a percentage in (0, 100], got {self.k:g}")
        if self.bootstrap_resamples < 0:
            raise ValueError(f"--bootstrap-resamples must be >= 0 (0 = none), got {self.bootstrap_resamples}")


@dataclass
class FRSAgreementArguments:
    """The flags of `procrl frs agreement` (module docstring)."""

    runs: list[str] = field(default_factory=list, metadata={"help": "output directories of `procrl frs` runs"})
    output_dir: str | None = field(default=None, metadata={"help": "where agreement.md and run.json go"})
    reference: str = field(
        default="oracle",
        metadata={"help": "oracle (the step oracle's judge on each run's own traces) or a `procrl frs` run directory"},
    )
    bootstrap_resamples: int = field(
        default=BOOTSTRAP_RESAMPLES, metadata={"help": "bootstrap draws for ρ's interval over problems; 0 = none"}
    )
    seed: int = field(default=0, metadata={"help": "seed of those draws"})

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("give at least one run: procrl frs agreement RUN_DIR --output-dir DIR")
        if not self.output_dir:
            raise ValueError("--output-dir DIR is required (where agreement.md and run.json go)")
        if self.bootstrap_resamples < 0:
            raise ValueError(f"--bootstrap-resamples must be >= 0 (0 = none), got {self.bootstrap_resamples}")


def make_parser() -> TrlParser:
    """The parser of `procrl frs` (measuring): `OfflineFRSConfig` (policy, problems, sampling, bootstrap, output),
    `FRSArguments` (`--frs-*`), `JudgeArguments` (`--judge*`) and `TrackingArguments` (`--report-to`);
    `--config x.yaml` sets the defaults, flags (dashed or underscored) override."""
    return TrlParser(
        (OfflineFRSConfig, FRSArguments, JudgeArguments, TrackingArguments),
        prog="procrl frs",
        description=__doc__,
        formatter_class=HelpFormatter,
    )


def make_compare_parser() -> TrlParser:
    """The parser of `procrl frs compare`: `FRSCompareArguments` and `TrackingArguments` (`--report-to`); the run
    directories may be given bare: `procrl frs compare A B --output-dir D`."""
    return TrlParser(
        (FRSCompareArguments, TrackingArguments), prog=COMPARE_PROG, description=__doc__, formatter_class=HelpFormatter
    )


def runs_as_flag(argv: list[str]) -> list[str]:
    """`argv` with the bare words (not a flag's value) gathered into `--runs ...` at the front.

    >>> runs_as_flag(["out/a", "--k", "20", "out/b", "--output-dir", "d"])
    ['--runs', 'out/a', 'out/b', '--k', '20', '--output-dir', 'd']
    >>> runs_as_flag(["a", "--bogus", "1"])  # an unknown flag keeps its value: the parser reports both
    ['--runs', 'a', '--bogus', '1']
    """
    return bare_words_as_flag(argv, "--runs", tuple(_VALUE_FLAGS))


def main(argv: list[str] | None = None) -> int:
    """Run `procrl frs` (or, with the first word `compare`, `procrl frs compare`); returns the exit status (0 on
    success, 2 on bad arguments or, comparing, bad runs)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [COMPARE]:
        return compare(argv[1:])
    if argv[:1] == [AGREEMENT]:
        return agreement(argv[1:])
    configure_logging()
    parsed = parse_or_exit(make_parser(), argv)  # the dataclasses' __post_init__, an unknown flag or --config key
    if parsed is None:
        return EXIT_USAGE
    args, frs, judge, tracking = parsed
    with track_run(args.output_dir, command="frs", argv=argv, configs=parsed, report_to=tracking.report_to) as run:
        result, files = run_frs(args, frs, judge)
        run.metrics = run_metrics(result)
        run.result, run.files = result, files
    print_summary(result)
    out = Path(args.output_dir)
    print(f"run record: {out / RUN_FILE}")
    for role, name in files.items():
        print(f"{role.replace('_', ' ')}: {out / name}")
    return 0


def compare(argv: list[str]) -> int:
    """Run `procrl frs compare` (module docstring); returns the exit status (0, or 2 on bad arguments or runs)."""
    parsed = parse_or_exit(make_compare_parser(), runs_as_flag(argv))
    if parsed is None:
        return EXIT_USAGE
    args, tracking = parsed
    configure_logging()
    try:  # every run is read and checked before anything is written
        comparison = build_comparison(args.runs, k=args.k, resamples=args.bootstrap_resamples, seed=args.seed)
    except (FileNotFoundError, ValueError) as error:
        return usage_error(COMPARE_PROG, error)
    argv = [COMPARE, *argv]
    with track_run(
        args.output_dir, command="frs compare", argv=argv, configs=parsed, report_to=tracking.report_to
    ) as run:
        files = write_comparison(comparison, args.output_dir)
        run.metrics = numeric_metrics(comparison["counts"], "frs_compare/")
        run.result, run.files = comparison, files
    print(format_table(comparison), end="")
    out = Path(args.output_dir)
    print(f"run record: {out / RUN_FILE}")
    for role, name in files.items():
        print(f"{role}: {out / name}")
    return 0


def agreement(argv: list[str]) -> int:
    """Run `procrl frs agreement` (module docstring); returns the exit status (0, or 2 on bad arguments or runs)."""
    parser = TrlParser(
        (FRSAgreementArguments, TrackingArguments),
        prog=AGREEMENT_PROG,
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    parsed = parse_or_exit(parser, runs_as_flag(argv))
    if parsed is None:
        return EXIT_USAGE
    args, tracking = parsed
    configure_logging()
    try:  # every run is read and checked before anything is written
        reference = None if args.reference == "oracle" else read_judged(args.reference)
        rows = []
        for run_dir in args.runs:
            judged = read_judged(run_dir)
            ref = oracle_reference(judged) if reference is None else reference
            result = judge_agreement(judged, ref, resamples=args.bootstrap_resamples, seed=args.seed)
            rows.append((Path(run_dir).name, result))
    except (FileNotFoundError, ValueError) as error:
        return usage_error(AGREEMENT_PROG, error)
    table = format_agreement(rows)
    out = Path(args.output_dir)
    with track_run(
        out, command="frs agreement", argv=[AGREEMENT, *argv], configs=parsed, report_to=tracking.report_to
    ) as run:
        out.mkdir(parents=True, exist_ok=True)
        (out / AGREEMENT_FILE).write_text(f"Judge agreement with the reference ({args.reference})\n\n{table}")
        run.result = {"reference": args.reference, "runs": {label: ag.to_dict() for label, ag in rows}}
        run.metrics = {
            f"frs_agreement/{label}/spearman_rs": ag.spearman_rs for label, ag in rows if ag.spearman_rs is not None
        }
        run.files = {"table": AGREEMENT_FILE}
    print(table, end="")
    print(f"run record: {out / RUN_FILE}")
    return 0


def run_metrics(result: dict) -> dict[str, float]:
    """The run record's headline metrics of a `run_frs` result: `FRSReport.metrics("frs/")` (score, at_k/<K>,
    accuracy, accuracy_kept, selection_gain, rs_auc, judged, unscored, mean_confidence and the RS_expected twins; a
    metric without a value is left out) plus `frs/n_traces`, `frs/n_scored` and each bootstrap interval as
    `frs/ci/<name>/low` and `.../high` (name: accuracy, accuracy@K, frs@K, selection_gain; none without one)."""
    report = result["report"]
    metrics = {
        **FRSReport(**report).metrics("frs/"),
        "frs/n_traces": report["n_traces"],
        "frs/n_scored": report["n_scored"],
    }
    for name, interval in (result.get("intervals") or {}).items():
        if interval is not None:
            metrics[f"frs/ci/{name}/low"], metrics[f"frs/ci/{name}/high"] = float(interval[0]), float(interval[1])
    return metrics


def print_summary(result: dict) -> None:
    """The few lines people read: FRS@K (from RS and, when every scored trace has probabilities, RS_expected),
    accuracies, selection gain (each with its bootstrap interval `[low, high]` when the result has one), the AUC of
    RS for correct vs incorrect traces, judge counts and wall times; "–" for an undefined value (e.g. FRS@K with no
    kept trace scored)."""
    report = result["report"]
    intervals = result.get("intervals") or {}

    def fmt(v, scale=1.0, name=None):
        return format_estimate(v, intervals.get(name) if name is not None else None, ".1f", scale)

    fmt_auc = format_estimate

    print()
    print(f"procrl frs: {result['model']} on {result['dataset']}, {report['n_traces']} traces")
    headline = report["k_percent"]
    print(
        f"FRS@{headline:g}: {fmt(report['score'], name=frs_key(headline))}   "
        f"(RS 0-100; {report['kept_at_k'][headline]} kept)"
    )
    print("FRS@K: " + ", ".join(f"{float(k):g}: {fmt(v, name=frs_key(float(k)))}" for k, v in report["at_k"].items()))
    print(
        "accuracy@K (%): "
        + ", ".join(f"{float(k):g}: {fmt(v, 100, accuracy_key(float(k)))}" for k, v in report["accuracy_at_k"].items())
    )
    expected = report["at_k_expected"]
    print(
        "FRS@K from expected scores: "
        + ", ".join(f"{k:g}: {fmt(v)}" for k, v in expected.items())
        + f"   ({report['n_scored_without_probs']} scored traces without probabilities)"
    )
    accuracy_kept = fmt(report["accuracy_kept"], 100, accuracy_key(headline))
    print(f"accuracy (%): all {fmt(report['accuracy'], 100, 'accuracy')}, kept {accuracy_kept}")
    print(
        f"selection gain: {fmt(report['selection_gain'], name='selection_gain')} over {report['selection_gain_questions']} questions "
        f"({report['selection_gain_dropped']} dropped); from expected scores: "
        f"{fmt(report['selection_gain_expected'])}"
    )
    sees = "shown" if report["judge_sees_correctness"] else "hidden"
    print(
        f"AUC of RS, correct vs incorrect (final_correct {sees} to the judge): {fmt_auc(report['rs_auc'])}, "
        f"expected {fmt_auc(report['rs_expected_auc'])}   ({report['auc_n_correct']} correct, "
        f"{report['auc_n_incorrect']} incorrect scored traces)"
    )
    boot = result.get("bootstrap")
    if boot:
        print(
            f"[low, high]: {100 * boot['confidence']:g}% percentile bootstrap over {boot['n_problems']} problems, "
            f"{boot['resamples']} resamples (seed {boot['seed']})"
        )
    else:
        print("no bootstrap intervals (--bootstrap-resamples 0)")
    print(f"judged {report['n_judged']}, scored {report['n_scored']}, unscored {report['unscored']}")
    wall = result["wall_time_s"]
    print(
        f"wall time: generation {wall['generation']:.0f} s, judging {wall['judging']:.0f} s, total {wall['total']:.0f} s"
    )


if __name__ == "__main__":
    raise SystemExit(main())
