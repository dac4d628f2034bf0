"""`procrl frs`: the Filtered Reasoning Score of a model on a benchmark, offline (DESIGN §4 "FRS").

    procrl frs --model default --dataset gsm8k --start 0 --end 50 --n 16 --k 10 --judge local
    procrl frs --model <name|path> --dataset gsm8k --n 16 --k 10 --judge http://127.0.0.1:8000/v1 --output-dir out/frs
    python -m procrl.scripts.frs --config frs.yaml --n 4      # the same; flags override the YAML's keys

Samples `--n` traces per problem (temperature 0.7, no top-p/top-k by default) with procrl's batched generation,
takes each trace's tail confidence from the generation's own raw logits, judges the traces FRS needs
(`procrl.evals.frs.plan_judging`) and writes into `--output-dir`:

- `frs.json`: the report (FRS@K, accuracies, selection gain, `rs_auc`, counts, judge statistics), its 95%
  bootstrap intervals over problems (`intervals`: `accuracy`, `accuracy@K`, `frs@K`, `selection_gain` ->
  [low, high]; `bootstrap`: draws, seed, problems; `--bootstrap-resamples`, default 1000, 0 = none; no extra
  judging: each resample re-ranks its traces and re-selects the top K%), the settings, wall times and every trace (text, confidence, correctness, `scores` and `rs`; with a judge that returns
  log-probs also `expected_scores` and `rs_expected`);
- `cache/`: procrl's sample store (content-addressed rollout shards, `procrl.data_builders.rollouts`); an
  interrupted run started again with the same settings resumes from it, and a rerun (e.g. with another judge)
  generates nothing;
- `frs.png`: the FRS@K curve (with the accuracy of the kept traces; the intervals as bands) and histograms of the confidence of correct and
  incorrect traces;
- `run.json`: the run record (`procrl.experiment.tracking`): settings, git state, versions, machine, wall time and the headline
  metrics `frs/score` (FRS@K of `--k`), `frs/at_k/<K>`, `frs/accuracy`, `frs/selection_gain`, `frs/rs_auc`,
  `frs/judged`, `frs/unscored`, ... (`FRSReport.metrics`) and the intervals `frs/ci/<name>/low|high`; also to
  wandb with `--report-to wandb`.

Intervals for an frs.json written without them (an older run): `procrl.evals.frs.intervals.
intervals_from_frs_json(path)` (from its traces, nothing judged again); `procrl frs-compare` does it itself.

`--judge local` starts the embedded judge server for the run and stops it afterwards: vLLM's OpenAI server on the
default model (127.0.0.1; the reply's schema enforced, each score also read as a probability distribution), or,
where vLLM cannot be imported, a schema-constrained transformers judge in this process; `--judge serve:transformers`
is `transformers serve` (which ignores the schema); `--judge none` skips judging (accuracies and confidences only).
Flags are dashed or underscored alike (`--k-values` = `--k_values`). The library: `procrl.evals.frs.offline`
(`run_frs`).

What the report holds besides FRS@K (`procrl.evals.frs.FRSReport`):

- two reasoning scores per judged trace: RS from the four validated integer scores, and RS_expected from their
  G-Eval expected values sum_v p(v) * v when the judge returns log-probs; FRS@K, the headline FRS and the selection
  gain come from both (`at_k` / `at_k_expected`, ...), the RS_expected ones only when every scored trace has
  probabilities (`n_scored_without_probs` counts those without);
- `rs_auc` / `rs_expected_auc`: the AUC of RS for correct vs incorrect final answers over the scored traces
  (Mann-Whitney, ties 1/2; None when a class is empty). `--judge-sees-correctness false` drops the line
  `{"final_correct": ...}` from the judge's prompt (its judge cache entries differ, the traces need not): run
  both on the same traces (copy the sample store `cache/` into the second output dir) to see whether RS carries
  more than the flag it is given;
- unscored judgements by reason (`unscored`).

    procrl frs --model default --end 50 --n 16 --judge local --output-dir out/frs            # the judge sees the flag
    mkdir -p out/frs_noflag && cp -r out/frs/cache out/frs_noflag/
    procrl frs --model default --end 50 --n 16 --judge local --output-dir out/frs_noflag --judge-sees-correctness false
"""

from __future__ import annotations

from trl import TrlParser

from procrl.evals.frs import FRSReport
from procrl.evals.frs.intervals import accuracy_key, frs_key
from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit
from procrl.evals.stats import format_estimate
from procrl.experiment.tracking import TrackingArguments, track_run
from procrl.evals.frs.offline import OfflineFRSConfig, run_frs


def make_parser() -> TrlParser:
    """`TrlParser` over `OfflineFRSConfig` and `TrackingArguments` (`--report-to`): `--config x.yaml` sets the
    defaults, flags (dashed or underscored) override."""
    return TrlParser(
        (OfflineFRSConfig, TrackingArguments), prog="procrl frs", description=__doc__, formatter_class=HelpFormatter
    )


def main(argv: list[str] | None = None) -> int:
    """Run `procrl frs`; returns the exit status (0 on success, 2 on bad arguments)."""
    configure_logging()
    parsed = parse_or_exit(make_parser(), argv)  # OfflineFRSConfig.__post_init__, an unknown flag or --config key
    if parsed is None:
        return EXIT_USAGE
    args, tracking = parsed
    with track_run(args.output_dir, command="frs", argv=argv, configs=parsed, report_to=tracking.report_to) as record:
        result = run_frs(args)
        record.metrics = run_metrics(result)
    print_summary(result)
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
    RS for correct vs incorrect traces, judge counts, wall times, the output paths; "–" for an undefined value
    (e.g. FRS@K with no kept trace scored)."""
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
    for key, label in (("json", "report"), ("plot", "plot")):
        print(f"{label}: {result['paths'][key]}")


if __name__ == "__main__":
    raise SystemExit(main())
