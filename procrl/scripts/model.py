"""`procrl model`: the embedded default models.

    procrl model prepare [--all] [--force]    # convert the embedded SmolLM2-135M-Instruct GGUF to safetensors (once);
                                              # --all also the Gemma 3 270M student of the PUM-Math builder
    procrl model path                         # print the converted default model's directory
    python -m procrl.scripts.model prepare    # the same

`prepare` prints the directory of each converted model; the conversion is cached under `$PROCRL_CACHE/models`
(default `~/.cache/procrl/models`, see `procrl.models`). The action may also be given as `--action prepare`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from trl import TrlParser

from procrl.models import default_model_dir, prepare_default_model, prepare_gemma_model

ACTIONS = ("prepare", "path")


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


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """This docstring as written, and every flag's default."""


def make_parser() -> TrlParser:
    """`TrlParser` over `ModelCommandArguments` (the action is also accepted bare, first: `procrl model path`)."""
    return TrlParser((ModelCommandArguments,), prog="procrl model", description=__doc__, formatter_class=_HelpFormatter)


def main(argv: list[str] | None = None) -> int:
    """Run `procrl model`; returns the exit status (0 on success, 2 on bad arguments)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ACTIONS:  # `procrl model prepare --all`: the documented positional form
        argv = ["--action", *argv]
    try:
        (args,) = make_parser().parse_args_and_config(args=argv)
    except ValueError as error:
        print(f"procrl model: {error}", file=sys.stderr)
        return 2
    if args.action == "prepare":
        print(prepare_default_model(force=args.force))
        if args.all:
            print(prepare_gemma_model(force=args.force))
    else:
        print(default_model_dir())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
