"""`procrl beam`: step-level beam search guided by a PUM (an accuracy table).

    procrl beam --beams 4 --expand 4 --scorer pum --pum outputs/pum --dataset svamp --start 0 --end 100
    python -m procrl.scripts.beam --config beam.yaml --beams 8      # the same; flags override the YAML's keys

docs/architecture.md "PUM" Beam search: every unfinished beam is extended by `--expand` sampled next steps (generation stops
after the step separator "\\n\\n", at EOS, or after `--max-step-tokens`); the finished beams and all new candidates
compete and the `--beams` with the highest U(x, prefix) are kept. A beam is finished when it ends with EOS, its last
step states an answer (`extract_answer`), or it reached `--max-new-tokens`. The search stops when every kept beam
is finished or after `--max-steps` rounds; the answer is the best finished beam by U (the best beam when none
finished).

Writes into `--output-dir` the run record `run.json` (`procrl.experiment.tracking`): its `result` holds the
settings, the accuracy with a 95% Wilson interval and the summary; its `files` name `problems.jsonl` (every
problem's answer and kept beams, one line per problem). Problems whose gold answer cannot be parsed are left out of
the accuracy and counted (`unparseable_gold`). The metrics: `beam/accuracy` (also `ci_low`, `ci_high`, `correct`,
`total`, `abstained`), `beam/rounds` and `beam/unparseable_gold`; also to wandb with `--report-to wandb`. Prints the
accuracy table. The library: `procrl.evals.beam_search` (`run_beam`).
"""

from __future__ import annotations

from pathlib import Path

from trl import TrlParser

from procrl.evals.beam_search import BeamConfig, run_beam, select_curves
from procrl.evals.offline import format_accuracy_table
from procrl.evals.reporting import markdown_table
from procrl.experiment.tracking import TrackingArguments, numeric_metrics, track_run
from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit, usage_error


def make_parser() -> TrlParser:
    """`TrlParser` over `BeamConfig` and `TrackingArguments` (`--report-to`): `--config x.yaml` sets the defaults,
    flags (dashed or underscored) override."""
    return TrlParser(
        (BeamConfig, TrackingArguments), prog="procrl beam", description=__doc__, formatter_class=HelpFormatter
    )


def main(argv: list[str] | None = None) -> int:
    """Run `procrl beam`; returns the exit status (0 on success, 2 on bad arguments)."""
    parsed = parse_or_exit(make_parser(), argv)  # BeamConfig.__post_init__, an unknown flag or --config key
    if parsed is None:
        return EXIT_USAGE
    config, tracking = parsed
    configure_logging()
    if config.versus:  # refused before the search, not after it
        try:
            select_curves(config.versus, config.versus_k)
        except ValueError as error:
            return usage_error("procrl beam", error)
    output_dir = Path(config.output_dir)
    with track_run(output_dir, command="beam", argv=argv, configs=parsed, report_to=tracking.report_to) as run:
        result = run_beam(config)
        run.write_rows("problems", result.pop("problems"))
        run.result = result
        run.metrics = run_metrics(result)
    print(format_accuracy_table(result["results"]))
    if "versus" in result:
        print(format_versus(result["versus"]))
    print("\n".join(f"{role}: {path}" for role, path in {"run": run.path, **run.files}.items()))
    return 0


def format_versus(versus: dict) -> str:
    """The paired table of `--versus`: the beam against each method of the select run at k samples (points)."""
    rows = [
        [f"{method}@{versus['k']}", f"{100 * row['method']:.1f}", f"{100 * row['beam']:.1f}",
         f"{100 * row['diff']:+.1f}" + ("" if row["ci_low"] is None else
                                        f" [{100 * row['ci_low']:+.1f}, {100 * row['ci_high']:+.1f}]")]
        for method, row in versus["rows"].items()
    ]  # fmt: skip
    title = f"beam against {versus['select_dir']} ({versus['problems']} problems in common; paired, points)"
    return title + "\n" + markdown_table(["method", "its accuracy", "beam", "beam − method [95% CI]"], rows)


def run_metrics(result: dict) -> dict[str, float]:
    """The run record's headline metrics of a `run_beam` result: the numbers of its one `results` row and of
    `summary`, under `beam/`."""
    (row,) = result["results"].values()
    return numeric_metrics(row, "beam/") | numeric_metrics(result["summary"], "beam/")


if __name__ == "__main__":
    raise SystemExit(main())
