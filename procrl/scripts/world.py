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

    procrl world episodes --out data/world0 [--gap_rate 0.5] [--topk 3] [--max_turns 4]

builds and writes the world as `build` does, then the SFT episodes of the train and dev splits,
`<out>/<split>/episodes.jsonl` (`procrl.data_builders.world_episodes`: the gold episode of every question, and a
gap-and-repair episode for a `gap_rate` share, each checked with the StepGap oracle, information blocks from the
split's BM25 index), and prints the counts per kind. `procrl sft` trains on such a file
(configs/sft/world_organism.yaml).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trl import TrlParser

from procrl.data_builders.synthetic_world import (
    SPLITS,
    WORLD_RELATIONS,
    SyntheticWorldConfig,
    build_worlds,
    world_paths,
    write_worlds,
)
from procrl.data_builders.world_episodes import WorldEpisodeConfig, episode_rows, world_episodes
from procrl.data_builders.world_tokenizer import DEFAULT_VOCAB_SIZE, MIN_VOCAB_SIZE, episode_texts, world_tokenizer
from procrl.evals.reporting import markdown_table
from procrl.rewards.stepgap.oracle import StepGapOracle
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
ACTIONS = ("build", "episodes")
EPISODE_SPLITS = ("train", "dev")  # the splits `episodes` writes SFT data for (test stays for evaluation)
# the flags whose next word is their value, never the action word (a folder may be called "build")
_VALUE_FLAGS = ("--action", "--config", "--out", "--seed", "--n_train", "--n-train", "--n_dev", "--n-dev", "--n_test",
                "--n-test", "--namesake_rate", "--namesake-rate", "--mention_rate", "--mention-rate", "--topk",
                "--max_turns", "--gap_rate", "--gap_kinds", "--gap_loss", "--prompt_template", "--example",
                "--episode_seed", "--tokenizer_vocab_size", "--tokenizer-vocab-size")  # fmt: skip


@dataclass
class WorldCommandArguments:
    """What `procrl world` does and where it writes."""

    action: str = field(
        metadata={
            "help": "build (generate the three splits and write them); episodes (build, then write the train and dev "
            "splits' SFT episodes)",
            "choices": ACTIONS,
        }
    )
    out: str = field(default="", metadata={"help": "the folder to write the world into (created; files replaced)"})
    tokenizer_vocab_size: int = field(
        default=DEFAULT_VOCAB_SIZE,
        metadata={
            "help": "episodes: also write <out>/tokenizer, a byte-level BPE of this many tokens trained on the train "
            "split's passages and episodes, for policies trained from scratch (configs/sft/world_organism.yaml); "
            "0 writes none",
        },
    )

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action={self.action!r} must be one of {ACTIONS}: procrl world build --out DIR")
        if not self.out:
            raise ValueError(f"give the folder to write: procrl world {self.action} --out data/world0")
        if self.tokenizer_vocab_size and self.tokenizer_vocab_size < MIN_VOCAB_SIZE:
            raise ValueError(
                f"tokenizer_vocab_size={self.tokenizer_vocab_size} is below {MIN_VOCAB_SIZE} (256 bytes + 3 special "
                "tokens): use e.g. 2000, or 0 for no tokenizer"
            )


def make_parser() -> TrlParser:
    """`TrlParser` over `WorldCommandArguments`, `SyntheticWorldConfig` and `WorldEpisodeConfig` (the action word
    is also accepted bare)."""
    return TrlParser(
        (WorldCommandArguments, SyntheticWorldConfig, WorldEpisodeConfig),
        prog=PROG,
        description=__doc__,
        formatter_class=HelpFormatter,
    )


def main(argv: list[str] | None = None) -> int:
    """Run `procrl world`; returns 0, or 2 after one error line for bad arguments or an unwritable folder."""
    words = list(sys.argv[1:] if argv is None else argv)
    parsed = parse_or_exit(make_parser(), action_word_as_flag(words, ACTIONS, _VALUE_FLAGS))
    if parsed is None:
        return EXIT_USAGE
    args, config, episode_config = parsed
    configure_logging()
    worlds = build_worlds(config)
    try:
        meta = write_worlds(worlds, config, args.out)
        written, train_rows = _write_episodes(worlds, episode_config, args.out) if args.action == "episodes" else ({}, [])
        tokenizer_dir = _write_tokenizer(worlds, train_rows, args) if written and args.tokenizer_vocab_size else None
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
    if written:
        header = ["split", "questions", "gold", "IE", "CC", "MB", "gold dropped", "gap dropped", "file"]
        keys = ["questions", "gold", "IE", "CC", "MB", "gold_dropped", "gap_dropped"]
        print()
        print(markdown_table(header, [[split, *(c[k] for k in keys), path] for split, (path, c) in written.items()]))
    if tokenizer_dir:
        print(f"\ntokenizer: {tokenizer_dir} (byte-level BPE, {args.tokenizer_vocab_size} tokens, trained on train)")
    return 0


def _write_episodes(worlds: dict, config: WorldEpisodeConfig, out: str) -> tuple[dict[str, tuple[str, dict]], list]:
    """Write `<out>/<split>/episodes.jsonl` for `EPISODE_SPLITS`; ({split: (path, counts)}, the train split's rows)."""
    written, train_rows = {}, []
    for split in EPISODE_SPLITS:
        world = worlds[split]
        oracle = StepGapOracle.from_rows(world.corpus, world.questions, WORLD_RELATIONS)
        episodes, counts = world_episodes(world.questions, world.corpus, config, oracle=oracle)
        path = world_paths(out, split)[0].parent / "episodes.jsonl"
        rows = episode_rows(episodes, oracle, config)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        written[split] = (str(path), counts)
        train_rows = rows if split == "train" else train_rows
    return written, train_rows


def _write_tokenizer(worlds: dict, train_rows: list, args: WorldCommandArguments) -> str:
    """Train the world tokenizer on the train split's passages and episode rows; write it to `<out>/tokenizer`."""
    texts = episode_texts(worlds["train"].corpus, train_rows)
    folder = Path(args.out) / "tokenizer"
    world_tokenizer(texts, args.tokenizer_vocab_size).save_pretrained(str(folder))
    return str(folder)


if __name__ == "__main__":
    raise SystemExit(main())
