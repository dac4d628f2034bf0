"""`procrl calibrate`: where a policy stands on a ladder of difficulty levels, and which level is its edge of
competence (docs/architecture.md "Calibration"); with `--combine`, one table over several finished runs.

    procrl calibrate --model default --levels arith-ops1-d2-test arith-ops2-d2-test --n-problems 64
    procrl calibrate --model $PROCRL_CACHE/sft/<key> --label sft-ops3 --output-dir outputs/calib/sft-ops3
    procrl calibrate --combine outputs/calib/* --out docs/results/calibration.md [--labels base sft-ops3]
    python -m procrl.scripts.calibrate --config calibrate.yaml --n-problems 8    # flags override the YAML's keys

Calibrate (`--model`). For each level of `--levels` (problem sets by name, easiest first: arith sets as in
`procrl.data_builders.arithmetic.SPEC_GRAMMAR`, or any set `load_math_dataset` loads), problems `[--start, --start +
--n-problems)`: samples `--num-samples` completions per problem at `--temperature` and decodes each problem once
greedily, both through procrl's sample store (`cache/` in `--output-dir`: a rerun with the same model, engine,
prompts and settings reads them back and generates nothing; a killed run resumes from its finished shards). Per
level: per-sample accuracy (bootstrap 95% interval over problems), greedy accuracy (Wilson 95% interval), pass@8
(unbiased, from the N samples), the share of mixed groups at `--group-size` G (a problem's first G samples neither
all right nor all wrong: the groups GRPO learns from), the step oracle's mean ProcessAcc over the samples and over
the greedy decodes (sets with `gold_steps`), the mean completion length in tokens and the share of samples without
an answer. Correctness is the strict outcome check of `procrl select`. A level is an edge level when its per-sample
accuracy lies in [`--edge-low`, `--edge-high`] and its pass@8 >= `--edge-pass`. A policy directory with an SFT
manifest (`sft.json`, `procrl sft`) has its provenance recorded (key, base model, data, steps, wall time).

Writes into `--output-dir`: `run.json` (`procrl.experiment.tracking`; `result`: the settings, the SFT provenance,
per level the metrics, the edge flag, the store's files and `from_cache` flags and every problem's per-sample
records; `metrics`: `calibrate/<level>/<metric>` and `calibrate/edge_levels`), `texts.jsonl` (every completion's
text and extracted answer), `calibration.md` (the table, also printed) and `calibration.png` (per-sample accuracy
against the level). The library: `procrl.evals.calibration` (`run_calibration`), `procrl.evals.calibration_report`.

Combine (`--combine RUN_DIR...`). Reads each finished calibrate run's run.json and writes `--out` (markdown: the edge
rule, one line per policy naming its edge level(s), one table row per (policy, level) with the SFT wall time where
known) and the plot beside it (`--plot`, default `--out` with `.png`). The policy names are `--labels` (one per run,
in order) or each run's `--label` (else its `--model`). Nothing is sampled. Bad runs or labels: one error line,
exit status 2, nothing written.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from trl import TrlParser

from procrl.evals.calibration import CalibrationConfig, run_calibration
from procrl.evals.calibration_report import calibration_markdown, plot_calibration, read_calibration_run
from procrl.experiment.tracking import TrackingArguments, numeric_metrics, track_run
from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit, usage_error

__all__ = ["CombineArguments", "main", "make_combine_parser", "make_parser", "run_metrics"]

PROG, COMBINE_PROG = "procrl calibrate", "procrl calibrate --combine"
TABLE_FILE, PLOT_FILE, TEXTS = "calibration.md", "calibration.png", "texts"


@dataclass
class CombineArguments:
    """The flags of `procrl calibrate --combine` (module docstring)."""

    combine: list[str] = field(
        default_factory=list, metadata={"help": "output directories of finished `procrl calibrate` runs (or run.json)"}
    )
    out: str = field(default="docs/results/calibration.md", metadata={"help": "the markdown table to write"})
    labels: list[str] = field(
        default_factory=list,
        metadata={"help": "the policies' names, one per run in --combine's order; empty: each run's --label / --model"},
    )
    plot: str | None = field(default=None, metadata={"help": "the plot (PNG); None: --out with the suffix .png"})
    title: str = field(default="Calibration", metadata={"help": "the page's heading"})

    def __post_init__(self) -> None:
        if not self.combine:
            raise ValueError("--combine needs run directories: procrl calibrate --combine outputs/calib/* --out T.md")
        if self.labels and len(self.labels) != len(self.combine):
            raise ValueError(
                f"--labels gives {len(self.labels)} names for {len(self.combine)} runs; give one per run, in order, "
                "or leave --labels out (each run's --label)"
            )
        if not self.out.endswith(".md"):
            raise ValueError(f"--out {self.out}: give a markdown file path ending in .md")

    @property
    def plot_path(self) -> Path:
        """`plot`, else `out` with the suffix .png."""
        return Path(self.plot) if self.plot else Path(self.out).with_suffix(".png")


def make_parser() -> TrlParser:
    """`TrlParser` over `CalibrationConfig` and `TrackingArguments` (`--report-to`): `--config x.yaml` sets the
    defaults, flags (dashed or underscored) override."""
    return TrlParser(
        (CalibrationConfig, TrackingArguments), prog=PROG, description=__doc__, formatter_class=HelpFormatter
    )


def make_combine_parser() -> TrlParser:
    """`TrlParser` over `CombineArguments` (`--combine DIR... --out T.md [--labels ...]`)."""
    return TrlParser((CombineArguments,), prog=COMBINE_PROG, description=__doc__, formatter_class=HelpFormatter)


def run_metrics(result: dict) -> dict[str, float]:
    """The run record's headline metrics: every number of each level's metrics as `calibrate/<level>/<metric>`
    (intervals as `.../per_sample_ci/low|high` are left out: lists), the level's `edge` (0/1), and
    `calibrate/edge_levels` (how many)."""
    metrics: dict[str, float] = {"calibrate/edge_levels": len(result["edge_levels"])}
    for level in result["levels"]:
        metrics |= numeric_metrics({**level["metrics"], "edge": level["edge"]}, f"calibrate/{level['level']}/")
    return metrics


def main(argv: list[str] | None = None) -> int:
    """Run `procrl calibrate` (or, with `--combine`, combine finished runs); returns the exit status (0 on success,
    2 on bad arguments or, combining, bad runs)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(word == "--combine" or word.startswith("--combine=") for word in argv):
        return combine(argv)
    parsed = parse_or_exit(make_parser(), argv)  # CalibrationConfig.__post_init__, an unknown flag or --config key
    if parsed is None:
        return EXIT_USAGE
    config, tracking = parsed
    configure_logging()
    out = Path(config.output_dir)
    with track_run(out, command="calibrate", argv=argv, configs=parsed, report_to=tracking.report_to) as run:
        result = run_calibration(config)
        run.write_rows(TEXTS, result.pop("texts"))
        policies = [(result["label"], result)]
        table = calibration_markdown(policies, title=f"Calibration of {result['label']}", plot=PLOT_FILE)
        (out / TABLE_FILE).write_text(table)
        run.files["table"] = str(out / TABLE_FILE)
        run.files["plot"] = str(plot_calibration(policies, out / PLOT_FILE))
        run.result = result
        run.metrics = run_metrics(result)
    print(table, end="")
    print(f"wall time: {result['wall_time_s']['total']:.1f} s (samples read from the store: {result['from_cache']})")
    print("\n".join(f"{role}: {path}" for role, path in {"run": run.path, **run.files}.items()))
    return 0


def combine(argv: list[str]) -> int:
    """Run `procrl calibrate --combine` (module docstring); returns the exit status (0, or 2 on bad arguments or
    runs: nothing is written then)."""
    parsed = parse_or_exit(make_combine_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    (args,) = parsed
    configure_logging()
    try:  # every run is read and checked before anything is written
        results = [read_calibration_run(path) for path in args.combine]
    except ValueError as error:
        return usage_error(COMBINE_PROG, error)
    labels = args.labels or [
        r.get("label") or r.get("model") or Path(p).name for r, p in zip(results, args.combine, strict=True)
    ]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        return usage_error(COMBINE_PROG, f"two runs are both named {twice}; name each with --labels A B ...")
    policies = list(zip(labels, results, strict=True))
    out, plot = Path(args.out), args.plot_path
    link = plot.name if plot.parent.resolve() == out.parent.resolve() else str(plot.resolve())
    table = calibration_markdown(policies, title=args.title, sources=list(args.combine), plot=link)
    out.parent.mkdir(parents=True, exist_ok=True)
    plot_calibration(policies, plot)
    out.write_text(table)
    print(table, end="")
    print(f"table: {args.out}\nplot: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
