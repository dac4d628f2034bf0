"""`procrl frs-compare`: rank models by accuracy and by FRS@K on each benchmark, with bootstrap intervals (issue 17).

    procrl frs-compare out/frs_smollm2/frs.json out/frs_gemma/frs.json --output-dir out/frs_compare
    procrl frs-compare out/frs_a out/frs_b --k 20 --output-dir out/frs_compare      # run directories work too
    python -m procrl.scripts.frs_compare --reports a/frs.json b/frs.json --output-dir D   # the same

Reads the frs.json of each `procrl frs` run (one row per (model, benchmark): the report's `model` and `dataset`),
takes its accuracy, top-K% accuracy, FRS@K and selection gain with their 95% bootstrap intervals over problems (the
report's `intervals`; a report written without them gets them from its traces here, nothing judged again,
`--bootstrap-resamples` draws), and per benchmark ranks the models by accuracy and by FRS@K (`--k`, default the
reports' headline K). For every pair of models it says whether the two rankings invert (point estimates), whether
each pair of intervals overlaps, whether the inversion holds beyond the intervals (neither pair overlaps), and
whether FRS separates the pair where accuracy cannot (accuracy intervals overlap, FRS@K intervals do not).
Writes into `--output-dir`:

- `table.md`: the table (`value [lo, hi]`) and per benchmark the ranks and the pairs (also printed);
- `frs_compare.json`: the same as data (`procrl.evals.frs.compare.compare_runs`);
- `frs_compare.png`: FRS@K against K, a line per model with its interval as a band, a panel per benchmark;
- `run.json`: the run record (`procrl.experiment.tracking`), metrics `frs_compare/runs`, `.../pairs`, `.../inverted`,
  `.../inverted_beyond_intervals`, `.../frs_separates` (counts of pairs).

A missing or unreadable report, two reports of the same (model, benchmark), or a K a report lacks: one error line,
exit status 2. The library: `procrl.evals.frs.compare` (`build_comparison`, `write_comparison`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from trl import TrlParser

from procrl.scripts._common import (
    EXIT_USAGE,
    HelpFormatter,
    bare_words_as_flag,
    configure_logging,
    parse_or_exit,
    usage_error,
)
from procrl.evals.stats import BOOTSTRAP_RESAMPLES
from procrl.experiment.tracking import TrackingArguments, numeric_metrics, track_run
from procrl.evals.frs.compare import build_comparison, format_table, write_comparison

__all__ = ["FRSCompareArguments", "main", "make_parser", "reports_as_flag"]

PROG = "procrl frs-compare"
# flags whose next word is their value (so it is not taken for a report path)
_VALUE_FLAGS = {
    f"--{name}{sep}{rest}"
    for name, rest in (("output", "dir"), ("bootstrap", "resamples"), ("report", "to"))
    for sep in ("-", "_")
} | {"--k", "--seed", "--config"}


@dataclass
class FRSCompareArguments:
    """The flags of `procrl frs-compare` (module docstring)."""

    reports: list[str] = field(
        default_factory=list, metadata={"help": "frs.json files of `procrl frs` (or their run directories)"}
    )
    output_dir: str | None = field(
        default=None, metadata={"help": "where table.md, frs_compare.json, frs_compare.png and run.json go"}
    )
    k: float | None = field(
        default=None, metadata={"help": "rank by FRS@K of this K (percent); default: the reports' headline K"}
    )
    bootstrap_resamples: int = field(
        default=BOOTSTRAP_RESAMPLES,
        metadata={"help": "bootstrap draws for a report without intervals (from its traces); 0 = leave it without"},
    )
    seed: int | None = field(
        default=None, metadata={"help": "seed of those draws; default: each run's FRS seed (as procrl frs uses)"}
    )

    def __post_init__(self) -> None:
        if not self.reports:
            raise ValueError("give at least one frs.json: procrl frs-compare A/frs.json B/frs.json --output-dir DIR")
        if not self.output_dir:
            raise ValueError("--output-dir DIR is required (where table.md and frs_compare.json go)")
        if self.k is not None and not 0 < self.k <= 100:
            raise ValueError(f"--k must be a percentage in (0, 100], got {self.k:g}")
        if self.bootstrap_resamples < 0:
            raise ValueError(f"--bootstrap-resamples must be >= 0 (0 = none), got {self.bootstrap_resamples}")


def make_parser() -> TrlParser:
    """`TrlParser` over `FRSCompareArguments` and `TrackingArguments` (`--report-to`); the reports may also be given
    bare: `procrl frs-compare A B --output-dir D`."""
    return TrlParser(
        (FRSCompareArguments, TrackingArguments), prog=PROG, description=__doc__, formatter_class=HelpFormatter
    )


def reports_as_flag(argv: list[str]) -> list[str]:
    """`argv` with the bare words (not a flag's value) gathered into `--reports ...` at the front.

    >>> reports_as_flag(["a/frs.json", "--k", "20", "b/frs.json", "--output-dir", "d"])
    ['--reports', 'a/frs.json', 'b/frs.json', '--k', '20', '--output-dir', 'd']
    >>> reports_as_flag(["a", "--bogus", "1"])  # an unknown flag keeps its value: the parser reports both
    ['--reports', 'a', '--bogus', '1']
    """
    return bare_words_as_flag(argv, "--reports", tuple(_VALUE_FLAGS))


def main(argv: list[str] | None = None) -> int:
    """Run `procrl frs-compare`; returns the exit status (0 on success, 2 on bad arguments or reports)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parsed = parse_or_exit(make_parser(), reports_as_flag(argv))
    if parsed is None:
        return EXIT_USAGE
    args, tracking = parsed
    configure_logging()
    try:  # every report is read and checked before anything is written
        comparison = build_comparison(args.reports, k=args.k, resamples=args.bootstrap_resamples, seed=args.seed)
    except (FileNotFoundError, ValueError) as error:
        return usage_error(PROG, error)
    with track_run(
        args.output_dir, command="frs-compare", argv=argv, configs=parsed, report_to=tracking.report_to
    ) as record:
        paths = write_comparison(comparison, args.output_dir)
        record.metrics = numeric_metrics(comparison["counts"], "frs_compare/")
    print(format_table(comparison), end="")
    for key, label in (("table", "table"), ("json", "data"), ("plot", "plot")):
        print(f"{label}: {paths[key]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
