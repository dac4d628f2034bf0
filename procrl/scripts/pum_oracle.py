"""`procrl pum-oracle`: a PUM against the step oracle on the samples of a `procrl select` run of a step-checkable set
(issue 28 §2): ProcessBench's first-error detection (F1 with a cross-fitted threshold) and the within-problem AUROC
of the PUM's U(x, y) beside every score the select run holds, error-free completions against the others.

    procrl pum-oracle outputs/results/select_arith_organism_pum --pum outputs/pum_arith_organism
    procrl pum-oracle SELECT_DIR --pum PUM --folds 4 --resamples 0 --out result.json

The library is `procrl.evals.pum_oracle.pum_oracle_agreement` (its docstring has every step). Prints the tables and
writes the result to `<select_dir>/pum_oracle.json` (or `--out`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from trl import TrlParser

from procrl.evals.pum_oracle import pum_oracle_agreement
from procrl.evals.reporting import markdown_table
from procrl.evals.stats import BOOTSTRAP_RESAMPLES
from procrl.rewards.pum import PrefixUtilityModel
from procrl.scripts._common import (
    EXIT_USAGE,
    HelpFormatter,
    bare_words_as_flag,
    configure_logging,
    parse_or_exit,
    usage_error,
    write_and_print,
)

__all__ = ["PUMOracleArguments", "format_report", "main", "make_parser"]

PROG = "procrl pum-oracle"
RESULT_FILE = "pum_oracle.json"
_VALUE_FLAGS = ("--select-dir", "--pum", "--folds", "--resamples", "--seed", "--batch-size", "--device", "--out")


@dataclass
class PUMOracleArguments:
    """The flags of `procrl pum-oracle` (module docstring)."""

    select_dir: str = field(
        default="", metadata={"help": "a finished `procrl select` run on a set with gold_steps (also accepted bare)"}
    )
    pum: str = field(default="", metadata={"help": "the PUM checkpoint directory (train_pum.py's output_dir)"})
    folds: int = field(default=2, metadata={"help": "cross-fitting folds of the first-error threshold (>= 2)"})
    resamples: int = field(
        default=BOOTSTRAP_RESAMPLES, metadata={"help": "bootstrap draws over problems for the intervals (0: none)"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the bootstrap"})
    batch_size: int = field(default=64, metadata={"help": "prefixes the PUM scores per forward pass"})
    device: str = field(default="cpu", metadata={"help": "torch device of the PUM"})
    out: str | None = field(default=None, metadata={"help": "the JSON result; None: <select_dir>/pum_oracle.json"})
    no_progress: bool = field(default=False, metadata={"help": "no progress bar"})

    def __post_init__(self) -> None:
        if not self.select_dir:
            raise ValueError("give the select run's directory: procrl pum-oracle SELECT_DIR --pum PUM")
        if not self.pum:
            raise ValueError("give the PUM: --pum DIR (train_pum.py's output_dir)")
        if self.folds < 2:
            raise ValueError(f"--folds must be >= 2, got {self.folds}")
        if self.resamples < 0:
            raise ValueError(f"--resamples must be >= 0, got {self.resamples}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")


def make_parser() -> TrlParser:
    """`TrlParser` over `PUMOracleArguments` (the select directory is also accepted bare)."""
    return TrlParser((PUMOracleArguments,), prog=PROG, description=__doc__, formatter_class=HelpFormatter)


def _value(value: float | None, interval) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")


def format_report(report: dict) -> str:
    """The tables people read from `pum_oracle_agreement`'s result."""
    counts, fe = report["counts"], report["first_error"]
    lines = [
        f"PUM against the step oracle: {report['select_dir']} ({report['dataset']}): {counts['problems']} problems, "
        f"{counts['completions']} completions: {counts['error_free']} error-free, {counts['incomplete']} without an "
        f"error step but incomplete, {counts['erroneous']} with an error step, {counts['without_steps']} without a "
        "step",
        "",
    ]
    if "undefined" in fe:
        lines += [f"first-error detection: undefined ({fe['undefined']})", ""]
    else:
        thresholds = ", ".join(f"{t:.4g}" for t in fe["thresholds"])
        lines += [
            f"first-error detection (threshold cross-fitted over {fe['folds']} folds: {thresholds})",
            markdown_table(
                ["F1", "acc (with an error step)", "acc (no error step)", "with an error step", "no error step"],
                [
                    [_value(fe[k], fe["intervals"].get(k)) for k in ("f1", "acc_erroneous", "acc_correct")]
                    + [fe["n_erroneous"], fe["n_correct"]]
                ],
            ),  # fmt: skip
            "",
        ]
    lines += [
        "within-problem AUROC, error-free completions against the others",
        markdown_table(
            ["score", "AUROC", "problems", "undefined", "unscored"],
            [
                [name, _value(row["auroc"], row["interval"]), row["n_problems"], row["n_undefined"], row["n_unscored"]]
                for name, row in report["within_problem_auroc"].items()
            ],
        ),
        "",
        "step AUROC of the PUM's prefix utilities U_k and of its step increments U_k - U_{k-1}",
        markdown_table(
            ["step score", "positive steps", "AUROC", "positive", "negative"],
            [
                [score, name, _value(row["auroc"], row["interval"]), row["n_positive"], row["n_negative"]]
                for score, key in (("utility", "step_auroc"), ("increment", "step_auroc_increments"))
                for name, row in report.get(key, {}).items()
            ],
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Score and report; returns 0, or 2 after one error line for a bad argument, a select run that cannot be read,
    a set without gold steps or a PUM that does not load."""
    words = list(sys.argv[1:] if argv is None else argv)
    parsed = parse_or_exit(make_parser(), bare_words_as_flag(words, "--select_dir", _VALUE_FLAGS))
    if parsed is None:
        return EXIT_USAGE
    (args,) = parsed
    configure_logging()
    try:
        pum = PrefixUtilityModel.from_pretrained(args.pum, device=args.device, batch_size=args.batch_size)
        report = pum_oracle_agreement(
            args.select_dir, pum, folds=args.folds, resamples=args.resamples, seed=args.seed,
            progress=not args.no_progress,
        )  # fmt: skip
    except (FileNotFoundError, OSError, ValueError) as error:
        return usage_error(PROG, error)
    write_and_print(report, args.out or Path(args.select_dir) / RESULT_FILE, format_report(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
