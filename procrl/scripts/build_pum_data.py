"""`procrl build-pum-data`: PUM-Math preference pairs from student rollouts (docs/architecture.md "PUM").

    procrl build-pum-data --config configs/pum/build_gsm8k.yaml [--end 10 ...]    # flags override the YAML's keys
    python -m procrl.scripts.build_pum_data --config configs/pum/build_gsm8k.yaml   # the same
    accelerate launch -m procrl.scripts.build_pum_data --config configs/pum/build_gsm8k.yaml          # GPUs
    ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 -m procrl.scripts.build_pum_data -- --config ...  # CPU ranks
    launch/build_pum_math.sh                                                           # picks one of the above

On CPU ranks the "--" keeps torchrun from reading an abbreviation such as --start as its own --start-method. The
rollouts are sharded over the processes and cached in `<output_dir>/cache/` (a killed run resumes); the main
process writes dataset/, pairs.parquet, prefixes.jsonl, stats.json, gains.png and the run record run.json
(`procrl.experiment.tracking`; metrics `pum_data/pairs/<type>`, `pum_data/pairs/total`, `pum_data/problems`, `pum_data/prefixes`,
`pum_data/rollouts/...`, `pum_data/tokens_generated`) to `output_dir` and prints the stats. Every flag is a field of
`PUMMathConfig` (`procrl.data_builders.pum_math.config`); the library is `procrl.data_builders.pum_math.build_pum_math`.
"""

from __future__ import annotations

import json
from pathlib import Path

from trl import TrlParser

from procrl.data_builders.pum_math import PUMMathConfig, build_pum_math
from procrl.data_builders.pum_math.config import PAIR_TYPES
from procrl.experiment.tracking import TrackingArguments, numeric_metrics, track_run
from procrl.scripts._common import EXIT_USAGE, ConfigParser, HelpFormatter, configure_logging, parse_or_exit


def make_parser() -> TrlParser:
    """`TrlParser` over `PUMMathConfig` and `TrackingArguments` (`--report-to`): `--config x.yaml` sets the defaults,
    flags (dashed or underscored) override."""
    return ConfigParser(
        (PUMMathConfig, TrackingArguments),
        prog="procrl build-pum-data",
        description=__doc__,
        formatter_class=HelpFormatter,
    )


def main(argv: list[str] | None = None) -> int:
    """`procrl build-pum-data --config configs/pum/build_gsm8k.yaml [--flag value ...]`; returns 0 when it is done, 2
    after one error line for a bad argument (an unknown flag, a setting `PUMMathConfig.__post_init__` refuses).

    Raises:
        ValueError: no problem with a parseable gold answer.
    """
    configure_logging()
    parsed = parse_or_exit(make_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    config, tracking = parsed
    with track_run(
        config.output_dir, command="build-pum-data", argv=argv, configs=parsed, report_to=tracking.report_to
    ) as record:
        dataset, stats = build_pum_math(config)
        record.metrics = run_metrics(stats)
    if dataset is not None:  # the main process
        print(json.dumps({k: v for k, v in stats.items() if k != "config"}, indent=2))
        print(f"pairs: {len(dataset)} -> {Path(config.output_dir).resolve()}")
    return 0


def run_metrics(stats: dict) -> dict[str, float]:
    """The run record's headline metrics of `build_pum_math`'s stats, under `pum_data/`: pairs kept per type and
    their total (a type without pairs counts 0), problems, prefixes, rollouts (per_student, total, generated_this_run,
    from_cache), tokens generated."""
    pairs = {kind: 0 for kind in PAIR_TYPES} | stats.get("pairs", {})
    counts = {key: stats[key] for key in ("problems", "prefixes", "rollouts", "tokens_generated") if key in stats}
    return numeric_metrics({"pairs": {**pairs, "total": sum(pairs.values())}, **counts}, "pum_data/")


if __name__ == "__main__":
    raise SystemExit(main())
