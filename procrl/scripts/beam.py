"""`procrl beam`: step-level beam search guided by a PUM (an accuracy table).

    procrl beam --beams 4 --expand 4 --scorer pum --pum outputs/pum --dataset svamp --start 0 --end 100
    python -m procrl.scripts.beam --config beam.yaml --beams 8      # the same; flags override the YAML's keys

DESIGN §4 "PUM" Beam search: every unfinished beam is extended by `--expand` sampled next steps (generation stops
after the step separator "\\n\\n", at EOS, or after `--max-step-tokens`); the finished beams and all new candidates
compete and the `--beams` with the highest U(x, prefix) are kept. A beam is finished when it ends with EOS, its last
step states an answer (`extract_answer`), or it reached `--max-new-tokens`. The search stops when every kept beam
is finished or after `--max-steps` rounds; the answer is the best finished beam by U (the best beam when none
finished).

Writes a JSON report (settings, accuracy with a 95% Wilson interval, every problem's answer and kept beams) to
`--output` and prints the accuracy table. Problems whose gold answer cannot be parsed are left out of the accuracy
and counted (`unparseable_gold`). The library: `procrl.trainers.beam_search` (`run_beam`).
"""

from __future__ import annotations

from trl import TrlParser

from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit
from procrl.trainers.beam_search import BeamConfig, run_beam
from procrl.trainers.offline import format_accuracy_table


def make_parser() -> TrlParser:
    """`TrlParser` over `BeamConfig`: `--config x.yaml` sets the defaults, flags (dashed or underscored) override."""
    return TrlParser((BeamConfig,), prog="procrl beam", description=__doc__, formatter_class=HelpFormatter)


def main(argv: list[str] | None = None) -> int:
    """Run `procrl beam`; returns the exit status (0 on success, 2 on bad arguments)."""
    parsed = parse_or_exit(make_parser(), argv)  # BeamConfig.__post_init__, an unknown flag or --config key
    if parsed is None:
        return EXIT_USAGE
    (config,) = parsed
    configure_logging()
    result = run_beam(config)
    print(format_accuracy_table(result["results"]))
    print(f"report: {config.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
