"""`procrl pum-gain-check`: on a finished PUM-Math build of a step-checkable set, the gain of prefixes that end in an
oracle-correct step against those that end at the first wrong step, and the pair counts (issue 28 §2).

    procrl pum-gain-check outputs/pum_math/arith_organism                  # the build's output_dir
    procrl pum-gain-check outputs/pum_math/arith_organism --resamples 0    # no bootstrap intervals (faster)

Reads the build's stats.json, prefixes.jsonl and pairs.parquet (`procrl.evals.pum_gain.gain_check`), prints one table
per wrong-step rule (error: the oracle's first_error; error_or_off_track: also a valid, grounded step with no gold
result): per value (G, the students' mean raw gain, each student's raw gain) the mean of the correct, first-wrong and
after-wrong prefixes with bootstrap 95% intervals over problems, their counts and the difference correct −
first-wrong; then the pairs per type and the share of oracle-decided pairs whose chosen side is the correct one;
then the pairwise accuracy on all pairs of "the longer prefix wins" and of the oracle's progress key (error-free
prefixes above those with an error, then more correct steps or a later first error: `oracle_progress`).
Writes everything to `<build_dir>/gain_check.json` (or `--out`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from trl import TrlParser

from procrl.evals.pum_gain import PREFIX_CLASSES, WRONG_RULES, gain_check
from procrl.evals.reporting import markdown_table
from procrl.evals.stats import BOOTSTRAP_RESAMPLES
from procrl.scripts._common import (
    EXIT_USAGE,
    HelpFormatter,
    bare_words_as_flag,
    configure_logging,
    parse_or_exit,
    usage_error,
    write_and_print,
)

__all__ = ["GainCheckArguments", "format_report", "main", "make_parser"]

PROG = "procrl pum-gain-check"
RESULT_FILE = "gain_check.json"
_VALUE_FLAGS = ("--build-dir", "--resamples", "--seed", "--out")  # their next word is their value


@dataclass
class GainCheckArguments:
    """The flags of `procrl pum-gain-check` (module docstring)."""

    build_dir: str = field(default="", metadata={"help": "the PUM-Math build's output_dir (also accepted bare)"})
    resamples: int = field(
        default=BOOTSTRAP_RESAMPLES, metadata={"help": "bootstrap draws over problems for the intervals (0: none)"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the bootstrap"})
    out: str | None = field(default=None, metadata={"help": "the JSON result; None: <build_dir>/gain_check.json"})

    def __post_init__(self) -> None:
        if not self.build_dir:
            raise ValueError("give the build's directory: procrl pum-gain-check outputs/pum_math/<name>")
        if self.resamples < 0:
            raise ValueError(f"--resamples must be >= 0, got {self.resamples}")


def make_parser() -> TrlParser:
    """`TrlParser` over `GainCheckArguments` (the build directory is also accepted bare)."""
    return TrlParser((GainCheckArguments,), prog=PROG, description=__doc__, formatter_class=HelpFormatter)


def _value(value: float | None, interval, fmt: str) -> str:
    """`value` as `fmt`, with its interval in brackets when there is one; "–" for no value."""
    if value is None:
        return "–"
    return format(value, fmt) + (f" [{format(interval[0], fmt)}, {format(interval[1], fmt)}]" if interval else "")


def format_report(report: dict) -> str:
    """The tables people read (module docstring) from `gain_check`'s result."""
    lines = [
        f"PUM-Math gain check: {report['build_dir']} ({report['problems']} problems, {report['prefixes']} prefixes)"
    ]
    for rule in WRONG_RULES:
        lines += ["", f"wrong step = {rule}; prefix classes {report['classes'][rule]}"]
        rows = []
        for name, contrast in report["contrast"][rule].items():
            cells = [
                f"{_value(g['mean'], g['interval'], '+.3f')} (n={g['n_prefixes']})"
                for g in (contrast["groups"][c] for c in PREFIX_CLASSES)
            ]
            rows.append([name, *cells, _value(contrast["difference"], contrast["difference_interval"], "+.3f")])
        lines.append(markdown_table(["value", *PREFIX_CLASSES, "correct − first_wrong"], rows))
        pairs = report["pairs"][rule]
        pair_rows = [
            [kind, n, pairs["decided"][kind], _value(pairs["agree"][kind], pairs["intervals"][kind], ".3f")]
            for kind, n in pairs["pairs"].items()
        ]
        lines += ["", markdown_table(["pair type", "pairs", "oracle-decided", "chosen = correct side"], pair_rows)]
    refs = report.get("references")
    if refs:
        kinds = list(refs["length"])
        lines += [
            "",
            "pairwise accuracy of two rankings on these pairs (what a PUM's held-out accuracy is read against)",
            markdown_table(
                ["ranking", *kinds],
                [
                    [name, *(_value(refs[name].get(k, {}).get("accuracy"), refs[name].get(k, {}).get("interval"),
                                    ".3f") for k in kinds)]
                    for name in ("length", "oracle_progress")
                ],
            ),  # fmt: skip
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the check; returns 0, or 2 after one error line for a bad argument or a build that cannot be read."""
    words = list(sys.argv[1:] if argv is None else argv)
    parsed = parse_or_exit(make_parser(), bare_words_as_flag(words, "--build_dir", _VALUE_FLAGS))
    if parsed is None:
        return EXIT_USAGE
    (args,) = parsed
    configure_logging()
    try:
        report = gain_check(args.build_dir, resamples=args.resamples, seed=args.seed)
    except (FileNotFoundError, ValueError) as error:
        return usage_error(PROG, error)
    write_and_print(report, args.out or Path(args.build_dir) / RESULT_FILE, format_report(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
