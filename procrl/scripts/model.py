"""`procrl model`: the embedded default models.

    procrl model prepare [--all] [--force]    # convert the embedded SmolLM2-135M-Instruct GGUF to safetensors (once);
                                              # --all also the Gemma 3 270M student of the PUM-Math builder
    procrl model path                         # print the converted default model's directory
    procrl model --all --force prepare        # the same: the flags may come before the action word
    python -m procrl.scripts.model prepare    # the same

`prepare` prints the directory of each converted model; the conversion is cached under `$PROCRL_CACHE/models`
(default `~/.cache/procrl/models`, see `procrl.models`). The action may also be given as `--action prepare`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from trl import TrlParser

from procrl.models import default_model_dir, prepare_default_model, prepare_gemma_model
from procrl.scripts._common import EXIT_USAGE, HelpFormatter, action_word_as_flag, configure_logging, parse_or_exit

ACTIONS = ("prepare", "path")
_VALUE_FLAGS = ("--action", "--config")  # the flags whose next word is their value, never the action word


@dataclass
class ModelCommandArguments:
    """What `procrl model` does."""

    action: str = field(metadata={"help": "prepare (convert once) or path (print the directory)", "choices": ACTIONS})
    force: bool = field(default=False, metadata={"help": "convert again even if a converted copy exists"})
    all: bool = field(default=False, metadata={"help": "also prepare the Gemma 3 270M student (PUM-Math builder)"})

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(
                f"action={self.action!r} must be one of {ACTIONS}: procrl model prepare | procrl model path"
            )


def make_parser() -> TrlParser:
    """`TrlParser` over `ModelCommandArguments` (the action word is also accepted bare: `procrl model path`)."""
    return TrlParser((ModelCommandArguments,), prog="procrl model", description=__doc__, formatter_class=HelpFormatter)


def action_as_flag(argv: list[str]) -> list[str]:
    """`argv` with the bare action word (`prepare` / `path`, anywhere: before or after `--all` / `--force`) turned
    into `--action <word>` at the front, so that the boolean flags never read it as their optional value
    (`procrl.scripts._common.action_word_as_flag`).

    >>> action_as_flag(["--all", "prepare", "--force"])
    ['--action', 'prepare', '--all', '--force']
    >>> action_as_flag(["--config", "path", "--action", "path"])  # values of --config / --action stay in place
    ['--config', 'path', '--action', 'path']
    """
    return action_word_as_flag(argv, ACTIONS, _VALUE_FLAGS)


def main(argv: list[str] | None = None) -> int:
    """Run `procrl model`; returns the exit status (0 on success, 2 on bad arguments)."""
    argv = action_as_flag(list(sys.argv[1:] if argv is None else argv))
    if sum(word == "--action" or word.startswith("--action=") for word in argv) > 1:  # argparse would keep the last
        print("procrl model: error: give the action once (procrl model prepare | procrl model path)", file=sys.stderr)
        return EXIT_USAGE
    parsed = parse_or_exit(make_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    (args,) = parsed
    configure_logging()
    if args.action == "prepare":
        print(prepare_default_model(force=args.force))
        if args.all:
            print(prepare_gemma_model(force=args.force))
    else:
        print(default_model_dir())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
