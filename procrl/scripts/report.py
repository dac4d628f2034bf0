"""`procrl report`: compare runs from their records, without any server: a markdown table and plots.

    procrl report outputs/sweeps/reward_ablation_svamp           # a sweep directory: every run.json below it
    procrl report outputs/grpo_a outputs/grpo_b --output-dir report --title "PiCSAR vs outcome"
    procrl report outputs/sweeps/x --finished-only                # leave out runs that did not finish
    procrl report outputs/select --metrics 'bestofn/*/acc@16,bestofn/*/auroc'    # a select run's best-of-k metrics
    procrl report outputs/sweeps/a outputs/sweeps/b --reference outcome --placebo oracle_shuffled   # paired arms
    python -m procrl.scripts.report --config report.yaml          # a YAML of these fields; flags override it

Reads each run's `run.json` (written by every procrl command, `procrl.experiment.tracking`; a run that also reported
to wandb has the same record there), groups the runs into variants (the sweep's parameters without `seed`; a run
without a variant is its own row) and writes into `--output-dir` (default: the sweep directory when one directory
is given, else ./report):

- `report.md`: one row per variant: status, seeds, final task accuracy as mean ± sample std over seeds, each seed's
  accuracy with its Wilson 95% interval (`task/correct` of `task/n`), accuracy before training, reward, completion
  length, FRS where measured, every `hacking/...` monitor, the `--metrics` keys, wall time; "–" = not measured. With the sweep's `metric`
  (`sweep.json`) the rows are sorted by it and the best is bold. Then one line per run (seed, status, commit).
- `curves.png`: task accuracy, reward, completion length and the reward-accuracy correlation against the training
  step, a line per variant (mean over seeds), the band min-max over seeds; "not logged" where no run has the key.

With `--reference ARM` (GRPO sweeps, issue 28 §3) `report.md` also gets the paired comparison of the arms
(`procrl.evals.arm_comparison`): per arm, mean ± sd over seeds of greedy accuracy, ProcessAcc, length and wall time;
the pooled paired difference in accuracy (per problem, the arm's mean over seeds minus the other arm's, bootstrap 95%
over problems) and each seed's, against the reference and against the arm's placebo (`--placebo PLACEBO` for every
arm, `ARM=PLACEBO` for one, comma-separated); whether the reward-accuracy divergence alarm fired; and the decision:
"supported" only when both intervals lie above 0 (`--decide-on process`: the ProcessAcc intervals) and, with
`--margin M` (a pre-registered margin, e.g. 0.03), the difference against the reference is not below M. An arm is
named by its config's stem without the arms' common prefix (`arith_organism_oracle` -> `oracle`) or by its variant
name. Runs that evaluated other problems are an error.

Runs that did not finish are included by default and marked in the `status` column: an interrupted sweep's partial
results are still worth seeing, and dropping them silently would hide that the table is incomplete.
Prints the table and the paths of the files.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trl import TrlParser

from procrl.evals.arm_comparison import DECIDE_ON, compare_arms, format_arm_comparison
from procrl.evals.run_report import format_report, format_table, group_variants, plot_curves
from procrl.experiment.run_records import load_runs, sweep_metric
from procrl.scripts._common import (
    EXIT_USAGE,
    HelpFormatter,
    bare_words_as_flag,
    configure_logging,
    parse_or_exit,
    usage_error,
)

__all__ = ["ReportArguments", "main", "make_parser", "paths_as_flag"]

PROG = "procrl report"
REPORT_FILE, PLOT_FILE = "report.md", "curves.png"
_VALUE_FLAGS = (
    "--output_dir",
    "--output-dir",
    "--title",
    "--config",
    "--metrics",
    "--reference",
    "--placebo",
    "--stable",
    "--decide_on",
    "--decide-on",
    "--margin",
)  # their next word is their value
_BOOL_FLAGS = ("--finished_only", "--finished-only")  # may take an optional true/false word (HfArgumentParser)


@dataclass
class ReportArguments:
    """The flags of `procrl report` (module docstring)."""

    paths: list[str] = field(
        default_factory=list,
        metadata={"help": "run directories (with run.json) or sweep directories (every run.json below them)"},
    )
    output_dir: str | None = field(
        default=None,
        metadata={
            "help": "where report.md and curves.png go; None: the sweep directory when one is given, else ./report"
        },
    )
    title: str | None = field(default=None, metadata={"help": "the report's title; None: made from the paths"})
    finished_only: bool = field(
        default=False, metadata={"help": "leave out runs whose run.json status is not 'finished'"}
    )
    metrics: str = field(
        default="",
        metadata={
            "help": "more metric keys to show: comma-separated shell-style patterns, each matching key a column "
            "(e.g. 'bestofn/*/acc@16,bestofn/*/auroc' for procrl select --ks runs, 'frs/*' for an FRS run)"
        },
    )

    reference: str | None = field(
        default=None,
        metadata={
            "help": "the reference arm (e.g. outcome): adds the paired comparison of the arms to report.md; an arm "
            "is its config's stem without the arms' common prefix, or its variant name"
        },
    )
    placebo: str = field(
        default="",
        metadata={
            "help": "the placebo arms, comma-separated: PLACEBO (every other arm's) and/or ARM=PLACEBO (that arm's), "
            "e.g. 'oracle_shuffled,pum_mixed=pum_shuffled'; needs --reference"
        },
    )

    stable: str = field(
        default="",
        metadata={
            "help": "arms judged by stability instead (comma-separated, e.g. pum_process): 'stable' when their own "
            "after - before accuracy interval does not lie below -0.03 and the divergence alarm never fired; needs "
            "--reference"
        },
    )
    decide_on: str = field(
        default="accuracy",
        metadata={
            "help": "what the paired comparison's decision reads: accuracy (greedy) or process (the step oracle's "
            "ProcessAcc, e.g. from the corrupted-step organism); needs --reference"
        },
    )
    margin: float = field(
        default=0.0,
        metadata={
            "help": "a pre-registered margin (a fraction in [0, 1], e.g. 0.03): an arm whose pooled difference "
            "against the reference is below it (strictly) is 'not supported (within <margin> of the reference)' even when both "
            "intervals lie above 0; 0 = the intervals alone; needs --reference"
        },
    )

    @property
    def metric_patterns(self) -> list[str]:
        """`metrics` as a list of patterns ("a/*,b" -> ["a/*", "b"]; empty items dropped)."""
        return [p.strip() for p in self.metrics.split(",") if p.strip()]

    def __post_init__(self) -> None:
        if not self.paths:
            raise ValueError(
                "give at least one RUN_DIR or a SWEEP_DIR: procrl report runs/sweeps/<name> (or --paths DIR ...)"
            )
        if self.stable and not self.reference:
            raise ValueError("--stable needs --reference ARM: the arms are compared in the paired comparison")
        if self.decide_on not in DECIDE_ON:
            raise ValueError(f"--decide-on {self.decide_on!r}: use one of {', '.join(DECIDE_ON)}")
        if self.decide_on != "accuracy" and not self.reference:
            raise ValueError("--decide-on needs --reference ARM: it sets what the paired comparison decides on")
        if not (math.isfinite(self.margin) and 0.0 <= self.margin <= 1.0):
            raise ValueError(f"--margin {self.margin!r}: use a fraction in [0, 1] (e.g. 0.03 for 3 points, not 3)")
        if self.margin and not self.reference:
            raise ValueError("--margin needs --reference ARM: it is a margin against the reference arm")
        if self.placebo and not self.reference:
            raise ValueError("--placebo needs --reference ARM: the paired comparison is against a reference arm")
        if self.title is not None and ("\n" in self.title or not self.title.strip()):
            raise ValueError(f"--title {self.title!r} must be one non-empty line (it is the report's heading)")


def make_parser() -> TrlParser:
    """`TrlParser` over `ReportArguments` (the paths are also accepted bare: `procrl report DIR ...`)."""
    return TrlParser((ReportArguments,), prog=PROG, description=__doc__, formatter_class=HelpFormatter)


def paths_as_flag(argv: list[str]) -> list[str]:
    """`argv` with the bare path words (anywhere, not the value of a flag) gathered into `--paths ...` at the front.

    >>> paths_as_flag(["runs/a", "--title", "T", "runs/b", "--finished-only"])
    ['--paths', 'runs/a', 'runs/b', '--title', 'T', '--finished-only']
    >>> paths_as_flag(["--finished-only", "true", "--paths", "x"])  # a bool flag's own word stays with it
    ['--paths', 'x', '--finished-only', 'true']
    >>> paths_as_flag(["runs/a", "--bogus", "1"])  # an unknown flag's value is not a path
    ['--paths', 'runs/a', '--bogus', '1']
    """
    return bare_words_as_flag(argv, "--paths", _VALUE_FLAGS, _BOOL_FLAGS)


def default_output_dir(paths: list[str]) -> Path:
    """The sweep directory when one directory without its own run.json is given, else ./report."""
    if len(paths) == 1 and Path(paths[0]).is_dir() and not (Path(paths[0]) / "run.json").is_file():
        return Path(paths[0])
    return Path("report")


def main(argv: list[str] | None = None) -> int:
    """Run `procrl report`; returns the exit status (0 on success, 2 on bad arguments or paths, 1 on bad records or a
    bad sweep.json)."""
    parsed = parse_or_exit(make_parser(), paths_as_flag(list(sys.argv[1:] if argv is None else argv)))
    if parsed is None:
        return EXIT_USAGE
    (args,) = parsed
    configure_logging()
    try:
        runs = load_runs(args.paths, include_unfinished=not args.finished_only)
        metric = next((m for p in args.paths if Path(p).is_dir() and (m := sweep_metric(p))), None)
    except FileNotFoundError as error:
        return usage_error(PROG, error)
    except ValueError as error:
        usage_error(PROG, error)
        return 1
    if not runs:
        usage_error(PROG, f"no finished run in {', '.join(args.paths)} (drop --finished-only to see the others)")
        return 1
    variants = group_variants(runs)
    arms = ""
    if args.reference:
        try:
            rows = compare_arms(
                variants, args.reference, args.placebo, stable=args.stable, decide_on=args.decide_on, margin=args.margin
            )
            arms = format_arm_comparison(rows, args.reference, args.decide_on, args.margin)
        except ValueError as error:
            usage_error(PROG, error)
            return 1
    output_dir = Path(args.output_dir) if args.output_dir else default_output_dir(args.paths)
    title = args.title or "Run report: " + ", ".join(Path(p).name or p for p in args.paths)
    plot = plot_curves(variants, output_dir / PLOT_FILE, title)
    report = output_dir / REPORT_FILE
    sections = [arms] if arms else []
    report.write_text(format_report(variants, title, metric, PLOT_FILE, args.metric_patterns, sections))
    print(format_table(variants, metric, args.metric_patterns))
    if arms:
        print(f"\n{arms}", end="")
    print(f"report: {report}\nplots: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
