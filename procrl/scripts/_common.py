"""What every command shares: the `--help` formatter, the logging set-up and the one-line argument error.

Each `procrl.scripts.<command>.main(argv)` parses with `parse_or_exit`: a bad argument (an unknown flag, a value a
dataclass's `__post_init__` refuses, an unknown key or a missing file of `--config`) prints ONE line
`<prog>: error: <message>` on stderr and the command returns `EXIT_USAGE` (2), never a traceback. argparse's own
refusals (a value that is not of the flag's type, not among its choices, a missing required flag) keep argparse's
behaviour: the usage line, `<prog>: error: <message>` and `SystemExit(2)`; `--help` is `SystemExit(0)`.

Thin override configs: a `--config` file may start with `base: <path>` (relative to that file's directory) and hold
only the keys it changes; `load_config` resolves the chain (the file's top-level keys replace its base's, flags
replace both). `parse_or_exit` and `ConfigParser` resolve it; `--config=x.yaml` (how `wandb agent` passes a swept
config) is read like `--config x.yaml`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml
from trl import TrlParser

__all__ = [
    "BOOL_WORDS",
    "CONFIG_BASE_KEY",
    "EXIT_USAGE",
    "ConfigParser",
    "HelpFormatter",
    "action_word_as_flag",
    "bare_words_as_flag",
    "configure_logging",
    "load_config",
    "parse_or_exit",
    "resolved_config_args",
    "usage_error",
]

EXIT_USAGE = 2  # the exit status of a bad command line (argparse's)
QUIET_LOGGERS = ("httpx", "httpx2")  # the openai client's HTTP loggers: warnings only
LOG_FORMAT = "%(asctime)s %(name)s: %(message)s"
LOG_DATE_FORMAT = "%H:%M:%S"
# HfArgumentParser's refusal of flags no dataclass declares (transformers/hf_argparser.py, parse_args_into_dataclasses)
_HF_UNUSED = "Some specified arguments are not used by the HfArgumentParser: "
CONFIG_BASE_KEY = "base"  # the key of a thin override config that names the file it overrides


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written (the description), and every flag's default."""


def configure_logging() -> None:
    """INFO logs with a time stamp on stderr, unless the root logger already has a handler (a caller's set-up, or
    pytest's): `HH:MM:SS <logger name>: <message>`."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=LOG_DATE_FORMAT)
    for name in QUIET_LOGGERS:  # one INFO line per HTTP request (httpx2/_client.py:105): hundreds per judged run
        logging.getLogger(name).setLevel(logging.WARNING)


def write_and_print(result: dict, out: str | Path, text: str) -> None:
    """Write `result` as indented JSON to `out` (its folder made), then print `text` and the file's path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(text)
    print(f"\nresult: {out}")


def usage_error(prog: str, message: object) -> int:
    """Print `<prog>: error: <message>` as one line on stderr (newlines of the message become spaces); returns
    `EXIT_USAGE` for the command to return."""
    text = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    print(f"{prog}: error: {text}", file=sys.stderr)
    return EXIT_USAGE


def parse_or_exit(parser: TrlParser, argv: Sequence[str] | None, prog: str | None = None) -> tuple | None:
    """`parser.parse_args_and_config(argv)` (`trl.TrlParser`: `--config x.yaml` sets the defaults, flags override),
    with the config's `base:` chain resolved first (`resolved_config_args`), for any `TrlParser`.

    Args:
        parser: the command's `TrlParser` (`make_parser()`).
        argv: the arguments after the command (None: `sys.argv[1:]`).
        prog: the name in the error line (default: `parser.prog`).

    Returns:
        The parsed dataclasses (a tuple, in the parser's order), or None after the one error line on stderr: the
        caller then returns `EXIT_USAGE`. Caught: ValueError (an unknown flag: "unrecognized arguments: ['--x',
        '1'] (--help lists the flags)"; a dataclass's `__post_init__`; an unknown key of the `--config` file), OSError
        (a `--config` file, or a `base:` of one, that cannot be read), yaml.YAMLError (one that is not YAML), a
        `base:` cycle and a `--config` without a path.

    Raises:
        SystemExit: argparse's own refusals (status 2, after its usage line) and `--help` (status 0).
    """
    prog = prog or parser.prog
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[-1] == "--config":  # TrlParser would fail on an IndexError
        usage_error(prog, "--config needs the path of a YAML file: --config x.yaml")
        return None
    try:
        with resolved_config_args(args) as resolved:
            return tuple(parser.parse_args_and_config(args=resolved))
    except (ValueError, OSError, yaml.YAMLError) as error:
        message = str(error)
        if message.startswith(_HF_UNUSED):  # argparse's wording, and where to look
            message = f"unrecognized arguments: {message.removeprefix(_HF_UNUSED)} (--help lists the flags)"
        usage_error(prog, message)
        return None


def load_config(path: str | Path) -> dict:
    """The mapping of a YAML config file with its `base:` chain resolved.

    A thin override file names the config it changes with a top-level `base: <path>` (relative to the directory of
    the file that says it; absolute paths work too) and holds only the keys it changes. The merge is top-level only:
    each key of the override replaces the base's value whole (a list or a mapping such as `env` is not merged item
    by item); keys the override does not name keep the base's values. A base may have its own `base:` (a chain,
    resolved from the root down). The `base` key itself is not in the result.

    Args:
        path: the config file.

    Returns:
        The resolved mapping, keys in the root base's order, then the keys each override adds.

    Raises:
        OSError: the file or one of its bases cannot be read (the message names the file that refers to it).
        yaml.YAMLError: a file is not YAML.
        ValueError: a file is not a YAML mapping, `base` is not a path, or the chain has a cycle.
    """
    chain: list[tuple[Path, dict]] = []
    seen: list[Path] = []
    current, referrer = Path(path), None
    while True:
        key = current.resolve()
        if key in seen:
            cycle = " -> ".join(str(p) for p in [*seen, key])
            raise ValueError(f"config base cycle: {cycle}; remove the `{CONFIG_BASE_KEY}:` that closes the loop")
        seen.append(key)
        try:
            text = current.read_text()
        except OSError as error:
            if referrer is None:
                raise
            raise type(error)(f"{referrer}: {CONFIG_BASE_KEY}: {current} cannot be read ({error})") from error
        config = yaml.safe_load(text)
        if not isinstance(config, dict):  # TRL's own check and wording (trl/scripts/utils.py:328-329)
            raise ValueError(f"Config file {current} must contain a YAML mapping.")
        base = config.pop(CONFIG_BASE_KEY, None)
        chain.append((current, config))
        if base is None:
            break
        if not isinstance(base, str) or not base:
            raise ValueError(f"{current}: {CONFIG_BASE_KEY}: must be the path of a YAML file, got {base!r}")
        current, referrer = current.parent / base, current  # an absolute base replaces the parent
    resolved: dict = {}
    for _, config in reversed(chain):  # root first, so every override replaces what it names
        resolved.update(config)
    return resolved


@contextlib.contextmanager
def resolved_config_args(args: Sequence[str]) -> Iterator[list[str]]:
    """`args` for `TrlParser.parse_args_and_config`, with the `--config` file's `base:` chain resolved.

    TRL finds the file as the word after a literal `--config` and reads that path itself (trl/scripts/utils.py:321-
    327, TRL 1.16), so `--config=x.yaml` (the form `wandb agent` gives a swept `config` parameter) becomes
    `--config x.yaml`, and a file with a `base:` is replaced by a temporary YAML of the resolved mapping
    (`load_config`) for the duration of the `with` block. A file without `base:` is passed as it is: TRL's parse is
    then unchanged. Only the first `--config` is looked at, as TRL does.

    Raises:
        As `load_config`.
    """
    args = list(args)
    for i, word in enumerate(args):
        if word.startswith("--config="):
            args[i : i + 1] = ["--config", word.removeprefix("--config=")]
            break
        if word == "--config":
            break
    if "--config" not in args or args.index("--config") + 1 >= len(args):
        yield args  # no config (or no path: TRL's error) — nothing to resolve
        return
    at = args.index("--config") + 1
    path = Path(args[at])
    with path.open() as handle:
        has_base = isinstance(raw := yaml.safe_load(handle), dict) and CONFIG_BASE_KEY in raw
    if not has_base:
        yield args
        return
    resolved = load_config(path)
    with tempfile.TemporaryDirectory(prefix="procrl-config-") as tmp:
        merged = Path(tmp) / path.name
        merged.write_text(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True))
        yield [*args[:at], str(merged), *args[at + 1 :]]


class ConfigParser(TrlParser):
    """`trl.TrlParser` whose `parse_args_and_config` resolves a `--config` file's `base:` chain first
    (`resolved_config_args`): for code that parses without `parse_or_exit` (tests, `train_grpo.parse_args`)."""

    def parse_args_and_config(self, args: Sequence[str] | None = None, *rest, **kwargs) -> tuple:
        with resolved_config_args(sys.argv[1:] if args is None else args) as resolved:
            return super().parse_args_and_config(resolved, *rest, **kwargs)


# transformers' string_to_bool words: a bool flag may take one of them as its value (HfArgumentParser)
BOOL_WORDS = ("yes", "true", "t", "y", "1", "no", "false", "f", "n", "0")


def action_word_as_flag(argv: Sequence[str], actions: Sequence[str], value_flags: Sequence[str]) -> list[str]:
    """`argv` with its first bare action word (one of `actions`, anywhere, not the value of one of `value_flags`)
    turned into `--action <word>` at the front, so that a command can read `procrl model prepare` or
    `procrl world --out d build` through a dataclass field `action`; `argv` unchanged when it has none.

    >>> action_word_as_flag(["--out", "build", "build"], ["build"], ["--out"])  # a folder named build
    ['--action', 'build', '--out', 'build']
    """
    argv = list(argv)
    for i, word in enumerate(argv):
        if word in actions and (i == 0 or argv[i - 1] not in value_flags):
            return ["--action", word, *argv[:i], *argv[i + 1 :]]
    return argv


def bare_words_as_flag(
    argv: Sequence[str], flag: str, value_flags: Sequence[str], bool_flags: Sequence[str] = ()
) -> list[str]:
    """`argv` with its bare words (anywhere, not the value of a flag) gathered into `flag ...` at the front, so a
    command can take positional paths (`procrl report DIR ...`) through a dataclass list field.

    Args:
        argv: the command line after the program name.
        flag: the list field's flag (e.g. "--paths"); given explicitly, its words are bare words too.
        value_flags: the flags whose next word is their value; bool_flags: flags that may take a `BOOL_WORDS` word.

    An unknown flag keeps the word after it (argparse then reports both), so a typo is never taken as a path.

    >>> bare_words_as_flag(["runs/a", "--title", "T", "runs/b", "--finished-only"], "--paths", ["--title"])
    ['--paths', 'runs/a', 'runs/b', '--title', 'T', '--finished-only']
    >>> bare_words_as_flag(["--finished-only", "true", "x"], "--paths", [], ["--finished-only"])
    ['--paths', 'x', '--finished-only', 'true']
    >>> bare_words_as_flag(["a.json", "--bogus", "1"], "--reports", [])
    ['--reports', 'a.json', '--bogus', '1']
    """
    words, rest, i = [], [], 0
    known = {*value_flags, *bool_flags, "-h", "--help"}
    while i < len(argv):
        word = argv[i]
        if word in value_flags and i + 1 < len(argv):
            rest += argv[i : i + 2]
            i += 2
            continue
        if word in bool_flags and i + 1 < len(argv) and argv[i + 1].lower() in BOOL_WORDS:
            rest += argv[i : i + 2]
            i += 2
            continue
        if word == flag:
            pass
        elif word.startswith("-"):
            rest.append(word)
            if word.split("=", 1)[0] not in known and "=" not in word and i + 1 < len(argv):
                if not argv[i + 1].startswith("-"):
                    rest.append(argv[i + 1])
                    i += 1
        else:
            words.append(word)
        i += 1
    return ([flag, *words] if words else []) + list(rest)
