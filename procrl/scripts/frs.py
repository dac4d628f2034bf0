"""`procrl frs`: the Filtered Reasoning Score of a model on a benchmark, offline (DESIGN §4 "FRS").

    procrl frs --model default --dataset gsm8k --start 0 --end 50 --n 16 --k 10 --judge local
    procrl frs --model <name|path> --dataset gsm8k --n 16 --k 10 --judge http://127.0.0.1:8000/v1 --output-dir out/frs
    python -m procrl.scripts.frs --config frs.yaml --n 4      # the same; flags override the YAML's keys

Samples `--n` traces per problem (temperature 0.7, no top-p/top-k by default) with procrl's batched generation,
takes each trace's tail confidence from the generation's own raw logits, judges the traces FRS needs
(`procrl.rewards.frs.plan_judging`) and writes into `--output-dir`:

- `frs.json`: the report (FRS@K, accuracies, selection gain, counts, judge statistics), the settings, wall times
  and every trace (text, confidence, correctness, scores);
- `traces.jsonl`: the sampled traces, written chunk by chunk; an interrupted run started again with the same
  settings resumes from it, and a rerun (e.g. with another judge) generates nothing;
- `frs.png`: the FRS@K curve (with the accuracy of the kept traces) and histograms of the confidence of correct and
  incorrect traces.

`--judge local` starts the embedded judge server (`transformers serve` on the default model, 127.0.0.1) for the run
and stops it afterwards; `--judge none` skips judging (accuracies and confidences only). Flags are dashed or
underscored alike (`--k-values` = `--k_values`). The library: `procrl.trainers.frs_offline` (`run_frs`).
"""

from __future__ import annotations

from trl import TrlParser

from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit
from procrl.trainers.frs_offline import OfflineFRSConfig, run_frs


def make_parser() -> TrlParser:
    """`TrlParser` over `OfflineFRSConfig`: `--config x.yaml` sets the defaults, flags (dashed or underscored)
    override."""
    return TrlParser((OfflineFRSConfig,), prog="procrl frs", description=__doc__, formatter_class=HelpFormatter)


def main(argv: list[str] | None = None) -> int:
    """Run `procrl frs`; returns the exit status (0 on success, 2 on bad arguments)."""
    configure_logging()
    parsed = parse_or_exit(make_parser(), argv)  # OfflineFRSConfig.__post_init__, an unknown flag or --config key
    if parsed is None:
        return EXIT_USAGE
    (args,) = parsed
    print_summary(run_frs(args))
    return 0


def print_summary(result: dict) -> None:
    """The few lines people read: FRS@K, accuracies, selection gain, judge counts, wall times, the output paths."""
    report = result["report"]

    def fmt(v, scale=1.0):
        return "n/a" if v is None else f"{v * scale:.1f}"

    print()
    print(f"procrl frs: {result['model']} on {result['dataset']}, {report['n_traces']} traces")
    print(
        f"FRS@{report['k_percent']:g}: {fmt(report['score'])}   (RS 0-100; {report['kept_at_k'][report['k_percent']]} kept)"
    )
    print("FRS@K: " + ", ".join(f"{k:g}: {fmt(v)}" for k, v in report["at_k"].items()))
    print(f"accuracy: all {fmt(report['accuracy'], 100)}%, kept {fmt(report['accuracy_kept'], 100)}%")
    print(
        f"selection gain: {fmt(report['selection_gain'])} over {report['selection_gain_questions']} questions "
        f"({report['selection_gain_dropped']} dropped)"
    )
    print(f"judged {report['n_judged']}, scored {report['n_scored']}, unscored {report['unscored']}")
    wall = result["wall_time_s"]
    print(
        f"wall time: generation {wall['generation']:.0f} s, judging {wall['judging']:.0f} s, total {wall['total']:.0f} s"
    )
    for key, label in (("json", "report"), ("plot", "plot")):
        print(f"{label}: {result['paths'][key]}")


if __name__ == "__main__":
    raise SystemExit(main())
