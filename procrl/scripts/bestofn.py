"""`procrl bestofn`: best-of-k accuracy curves of every selection method from `procrl select` reports.

    procrl bestofn outputs/select/select.json --ks 1,2,4,6,8,16 --subsets 64 --seed 0 --output-dir outputs/bestofn
    procrl bestofn pum.json picsar.json --output-dir outputs/bestofn   # two reports over the SAME samples, merged
    python -m procrl.scripts.bestofn --config bestofn.yaml             # a YAML of these fields; flags override it

From ONE sample set (the n samples per problem of the reports), the expected accuracy of random, majority vote
(self-consistency), longest, every `score_<name>` column's argmax, greedy (when the reports have it) and pass@k
(the ceiling) when each picks from k of the n samples: `subsets` random k-subsets per problem for k < n, the SAME
for every method, the full set at k == n; the mean over problems with a bootstrap 95% interval over problems.
Also the within-problem AUROC of each score column and of the length (`procrl.evals.bestofn`). So the PiCSAR
paper's "PiCSAR@6 beats self-consistency@16" and the PUM paper's best-of-N comparison read off one table.

Writes into `--output-dir` (default: `bestofn/` next to the first report): `bestofn.json` (settings, curves,
per-problem values, AUROC), `table.md`, `curves.png`, and the run record `run.json` (`procrl.experiment.tracking`) with the
metrics `bestofn/<method>/acc@<k>` (also `ci_low@<k>`, `ci_high@<k>`), `bestofn/<score>/auroc`,
`bestofn/problems` and `bestofn/unparseable_gold`; also to wandb with `--report-to wandb`. Prints the table.
A missing file, a file that is not a select report, reports over different samples, or a k > n: one error line,
exit status 2.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trl import TrlParser

from procrl.scripts._common import (
    EXIT_USAGE,
    HelpFormatter,
    bare_words_as_flag,
    configure_logging,
    parse_or_exit,
    usage_error,
)
from procrl.experiment.tracking import TrackingArguments, track_run
from procrl.evals.bestofn import DEFAULT_KS, bestofn_curves, bestofn_table, load_reports, plot_bestofn
from procrl.utils import json_safe

__all__ = ["BestOfNArguments", "main", "make_parser", "reports_as_flag", "run_metrics"]

PROG = "procrl bestofn"
RESULT_FILE, TABLE_FILE, PLOT_FILE = "bestofn.json", "table.md", "curves.png"
_VALUE_FLAGS = (
    "--ks",
    "--subsets",
    "--seed",
    "--resamples",
    "--output_dir",
    "--output-dir",
    "--report_to",
    "--report-to",
    "--config",
)  # fmt: skip  (their next word is their value, not a report)


@dataclass
class BestOfNArguments:
    """The flags of `procrl bestofn` (module docstring)."""

    reports: list[str] = field(
        default_factory=list, metadata={"help": "procrl select JSON reports over the same samples (also bare words)"}
    )
    ks: str = field(
        default=",".join(map(str, DEFAULT_KS)), metadata={"help": "subset sizes k, comma-separated, each <= n"}
    )
    subsets: int = field(default=64, metadata={"help": "random k-subsets per problem for k < n (shared by methods)"})
    seed: int = field(default=0, metadata={"help": "seed of the subsets (per problem and k) and of the bootstrap"})
    resamples: int = field(default=1000, metadata={"help": "bootstrap resamples of the 95%% intervals"})
    output_dir: str | None = field(
        default=None, metadata={"help": "where bestofn.json, table.md, curves.png go; None: <first report dir>/bestofn"}
    )

    def __post_init__(self) -> None:
        if not self.reports:
            raise ValueError("give at least one procrl select report: procrl bestofn REPORT.json [REPORT2.json ...]")
        words = [w.strip() for w in str(self.ks).split(",") if w.strip()]
        if not words:
            raise ValueError("--ks is empty; give subset sizes, e.g. --ks 1,2,4,6,8,16")
        try:
            ks = [int(w) for w in words]
        except ValueError:
            raise ValueError(f"--ks {self.ks!r} must be comma-separated integers, e.g. 1,2,4,6,8,16") from None
        if min(ks) < 1:
            raise ValueError(f"--ks {self.ks!r}: every k must be >= 1")
        if self.subsets < 1:
            raise ValueError(f"--subsets must be >= 1, got {self.subsets}")
        if self.resamples < 1:
            raise ValueError(f"--resamples must be >= 1, got {self.resamples}")

    @property
    def k_list(self) -> list[int]:
        """`ks` as sorted distinct integers."""
        return sorted({int(w) for w in str(self.ks).split(",") if w.strip()})

    @property
    def output_path(self) -> Path:
        """`output_dir`, or `bestofn/` next to the first report."""
        return Path(self.output_dir) if self.output_dir else Path(self.reports[0]).parent / "bestofn"


def make_parser() -> TrlParser:
    """`TrlParser` over `BestOfNArguments` and `TrackingArguments` (`--report-to`); the reports are also accepted
    bare: `procrl bestofn A.json B.json ...`."""
    return TrlParser(
        (BestOfNArguments, TrackingArguments), prog=PROG, description=__doc__, formatter_class=HelpFormatter
    )


def reports_as_flag(argv: list[str]) -> list[str]:
    """`argv` with the bare report words (anywhere, not the value of a flag) gathered into `--reports ...` first.

    >>> reports_as_flag(["a.json", "--ks", "1,2", "b.json"])
    ['--reports', 'a.json', 'b.json', '--ks', '1,2']
    >>> reports_as_flag(["a.json", "--bogus", "1"])  # an unknown flag keeps its value: argparse reports both
    ['--reports', 'a.json', '--bogus', '1']
    """
    return bare_words_as_flag(argv, "--reports", _VALUE_FLAGS)


def main(argv: list[str] | None = None) -> int:
    """Run `procrl bestofn`; returns the exit status (0 on success, 2 on bad arguments or reports)."""
    parsed = parse_or_exit(make_parser(), reports_as_flag(list(sys.argv[1:] if argv is None else argv)))
    if parsed is None:
        return EXIT_USAGE
    args, tracking = parsed
    configure_logging()
    try:  # every input check before the run record: bad input is a usage error, not a failed run
        samples = load_reports(args.reports)
        if max(args.k_list) > samples.n:
            small = ",".join(str(k) for k in args.k_list if k <= samples.n) or "1"
            raise ValueError(
                f"--ks {args.ks}: k = {max(args.k_list)} > n = {samples.n} samples per problem (e.g. --ks {small})"
            )
    except (OSError, ValueError) as error:
        return usage_error(PROG, error)
    output_dir = args.output_path
    with track_run(output_dir, command="bestofn", argv=argv, configs=parsed, report_to=tracking.report_to) as record:
        result = bestofn_curves(samples, args.k_list, subsets=args.subsets, seed=args.seed, resamples=args.resamples)
        (output_dir / RESULT_FILE).write_text(json.dumps(json_safe(result), indent=2))
        table = bestofn_table(result)
        (output_dir / TABLE_FILE).write_text(table)
        plot = plot_bestofn(result, output_dir / PLOT_FILE)
        record.metrics = run_metrics(result)
    print(table)
    print(f"results: {output_dir / RESULT_FILE}\ntable: {output_dir / TABLE_FILE}\nplot: {plot}")
    return 0


def run_metrics(result: dict) -> dict[str, float]:
    """The run record's flat headline metrics of a `bestofn_curves` result: `bestofn/<method>/acc@<k>` (and
    `ci_low@<k>`, `ci_high@<k>`; fractions), `bestofn/<score>/auroc` (and `auroc_problems`), `bestofn/problems`,
    `bestofn/unparseable_gold`; an undefined value (None: no problem) is left out.

    >>> metrics = run_metrics({"problems": 2, "unparseable_gold": 1, "auroc": {},
    ...     "curves": {"random": [{"k": 1, "accuracy": 0.5, "ci_low": 0.0, "ci_high": 1.0}]}})
    >>> metrics["bestofn/random/acc@1"], metrics["bestofn/random/ci_high@1"], metrics["bestofn/problems"]
    (0.5, 1.0, 2)
    """
    metrics: dict[str, float] = {}
    for method, points in result["curves"].items():
        for p in points:
            metrics[f"bestofn/{method}/acc@{p['k']}"] = p["accuracy"]
            metrics[f"bestofn/{method}/ci_low@{p['k']}"] = p["ci_low"]
            metrics[f"bestofn/{method}/ci_high@{p['k']}"] = p["ci_high"]
    for name, a in result["auroc"].items():
        if a["auroc"] is not None:
            metrics[f"bestofn/{name}/auroc"] = a["auroc"]
            metrics[f"bestofn/{name}/auroc_problems"] = a["problems"]
    metrics["bestofn/problems"] = result["problems"]
    metrics["bestofn/unparseable_gold"] = result["unparseable_gold"]
    return {key: value for key, value in metrics.items() if value is not None}  # undefined values left out


if __name__ == "__main__":
    raise SystemExit(main())
