"""`procrl world`: the synthetic multi-hop world of StepGap (docs/architecture.md "Synthetic multi-hop world";
`procrl.data_builders.synthetic_world`).

    procrl world build --out data/world0                      # seed 0: 1000 / 200 / 500 train / dev / test questions
    procrl world build --out data/world1 --seed 1 --n-train 200 --n-dev 50 --n-test 50 --hops 2
    procrl world --out data/world0 build                      # the same: the action word may come after the flags

Writes `<out>/<split>/questions.jsonl` and `<out>/<split>/corpus.jsonl` for train, dev and test (the 2Wiki sample's
format, plus `facts` per passage) and `<out>/world.json` (config, relation schema, counts); prints the counts per
split. The search task reads a split unchanged, e.g.

    RETRIEVER=data/world0/train/corpus.jsonl launch/grpo_stepgap.sh \\
        --dataset_name data/world0/train/questions.jsonl --dataset_end 1000

The same seed and counts write the same files. The action may also be given as `--action build`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from trl import TrlParser

from procrl.data_builders.synthetic_world import SPLITS, SyntheticWorldConfig, build_worlds, world_paths, write_worlds
from procrl.evals.reporting import markdown_table
from procrl.scripts._common import (
    EXIT_USAGE,
    HelpFormatter,
    action_word_as_flag,
    configure_logging,
    parse_or_exit,
    usage_error,
)

__all__ = ["ACTIONS", "WorldCommandArguments", "main", "make_parser"]

PROG = "procrl world"
ACTIONS = ("build",)
# the flags whose next word is their value, never the action word (a folder may be called "build")
_VALUE_FLAGS = ("--action", "--config", "--out", "--seed", "--n_train", "--n-train", "--n_dev", "--n-dev", "--n_test",
                "--n-test", "--namesake_rate", "--namesake-rate", "--mention_rate", "--mention-rate")  # fmt: skip


@dataclass
class WorldCommandArguments:
    """What `procrl world` does and where it writes."""

    action: str = field(metadata={"help": "build (generate the three splits and write them)", "choices": ACTIONS})
    out: str = field(default="", metadata={"help": "the folder to write the world into (created; files replaced)"})

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action={self.action!r} must be one of {ACTIONS}: procrl world build --out DIR")
        if not self.out:
            raise ValueError("give the folder to write: procrl world build --out data/world0")


def make_parser() -> TrlParser:
    """`TrlParser` over `WorldCommandArguments` and `SyntheticWorldConfig` (the action word is also accepted bare)."""
    return TrlParser(
        (WorldCommandArguments, SyntheticWorldConfig), prog=PROG, description=__doc__, formatter_class=HelpFormatter
    )


def main(argv: list[str] | None = None) -> int:
    """Run `procrl world`; returns 0, or 2 after one error line for bad arguments or an unwritable folder."""
    words = list(sys.argv[1:] if argv is None else argv)
    parsed = parse_or_exit(make_parser(), action_word_as_flag(words, ACTIONS, _VALUE_FLAGS))
    if parsed is None:
        return EXIT_USAGE
    args, config = parsed
    configure_logging()
    worlds = build_worlds(config)
    try:
        meta = write_worlds(worlds, config, args.out)
    except OSError as error:
        return usage_error(PROG, error)
    rows = []
    for split in SPLITS:
        summary = worlds[split].summary()
        by_hops = ", ".join(f"{h}-hop {n}" for h, n in summary["questions_by_hops"].items())
        entities = sum(summary["entities"].values())
        rows.append([split, summary["questions"], by_hops, summary["passages"], entities, summary["namesakes"],
                     summary["mention_passages"], str(world_paths(args.out, split)[0].parent)])  # fmt: skip
    header = ["split", "questions", "by hops", "passages", "entities", "near-namesakes", "mention passages", "folder"]
    print(markdown_table(header, rows))
    print(f"\nworld: {meta}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
