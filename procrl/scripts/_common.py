"""What every command shares: the `--help` formatter, the logging set-up and the one-line argument error.

Each `procrl.scripts.<command>.main(argv)` parses with `parse_or_exit`: a bad argument (an unknown flag, a value a
dataclass's `__post_init__` refuses, an unknown key or a missing file of `--config`) prints ONE line
`<prog>: error: <message>` on stderr and the command returns `EXIT_USAGE` (2), never a traceback. argparse's own
refusals (a value that is not of the flag's type, not among its choices, a missing required flag) keep argparse's
behaviour: the usage line, `<prog>: error: <message>` and `SystemExit(2)`; `--help` is `SystemExit(0)`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import yaml
from trl import TrlParser

__all__ = ["EXIT_USAGE", "HelpFormatter", "configure_logging", "parse_or_exit", "usage_error"]

EXIT_USAGE = 2  # the exit status of a bad command line (argparse's)
LOG_FORMAT = "%(asctime)s %(name)s: %(message)s"
LOG_DATE_FORMAT = "%H:%M:%S"
# HfArgumentParser's refusal of flags no dataclass declares (transformers/hf_argparser.py, parse_args_into_dataclasses)
_HF_UNUSED = "Some specified arguments are not used by the HfArgumentParser: "


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written (the description), and every flag's default."""


def configure_logging() -> None:
    """INFO logs with a time stamp on stderr, unless the root logger already has a handler (a caller's set-up, or
    pytest's): `HH:MM:SS <logger name>: <message>`."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=LOG_DATE_FORMAT)


def usage_error(prog: str, message: object) -> int:
    """Print `<prog>: error: <message>` as one line on stderr (newlines of the message become spaces); returns
    `EXIT_USAGE` for the command to return."""
    text = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    print(f"{prog}: error: {text}", file=sys.stderr)
    return EXIT_USAGE


def parse_or_exit(parser: TrlParser, argv: Sequence[str] | None, prog: str | None = None) -> tuple | None:
    """`parser.parse_args_and_config(argv)` (`trl.TrlParser`: `--config x.yaml` sets the defaults, flags override).

    Args:
        parser: the command's `TrlParser` (`make_parser()`).
        argv: the arguments after the command (None: `sys.argv[1:]`).
        prog: the name in the error line (default: `parser.prog`).

    Returns:
        The parsed dataclasses (a tuple, in the parser's order), or None after the one error line on stderr: the
        caller then returns `EXIT_USAGE`. Caught: ValueError (an unknown flag: "unrecognized arguments: ['--x',
        '1'] (--help lists the flags)"; a dataclass's `__post_init__`; an unknown key of the `--config` file), OSError
        (a `--config` file that cannot be read), yaml.YAMLError (one that is not YAML) and a `--config` without a
        path.

    Raises:
        SystemExit: argparse's own refusals (status 2, after its usage line) and `--help` (status 0).
    """
    prog = prog or parser.prog
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[-1] == "--config":  # TrlParser would fail on an IndexError
        usage_error(prog, "--config needs the path of a YAML file: --config x.yaml")
        return None
    try:
        return tuple(parser.parse_args_and_config(args=args))
    except (ValueError, OSError, yaml.YAMLError) as error:
        message = str(error)
        if message.startswith(_HF_UNUSED):  # argparse's wording, and where to look
            message = f"unrecognized arguments: {message.removeprefix(_HF_UNUSED)} (--help lists the flags)"
        usage_error(prog, message)
        return None
