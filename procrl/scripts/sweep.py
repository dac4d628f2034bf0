"""`procrl sweep`: run every variant of a sweep file (wandb's sweep format), resumably.

    procrl sweep configs/sweeps/reward_ablation_svamp.yaml                 # the offline runner, resumable
    procrl sweep SWEEP.yaml --output-dir outputs/sweeps/mine --wandb off   # the offline runner, own folder
    procrl sweep SWEEP.yaml --dry-run                                      # print the variants' commands only
    procrl sweep SWEEP.yaml --count 8 --seed 1                             # method: random: 8 draws of seed 1
    procrl sweep SWEEP.yaml --rerun                                        # also rerun variants whose settings changed
    procrl sweep SWEEP.yaml --set model_name_or_path=/ckpt max_steps=3     # fixed parameters, chosen at run time
    procrl sweep SWEEP.yaml --wandb on                                     # wandb sweep + wandb agent (see below)
    launch/sweep.sh SWEEP.yaml [flags]                                     # the same, .venv python, WANDB_MODE=offline
    python -m procrl.scripts.sweep SWEEP.yaml                              # the same

The file (`procrl.experiment.sweeps`): `program`, `method: grid | random`, `metric`, `parameters` (`value`, `values`,
`distribution: uniform | log_uniform_values | int_uniform | categorical` with `min`/`max`), `command` with wandb's
macros (`${env} ${interpreter} ${program} ${args} ...`), `run_cap`. Alternative configs are a parameter:
`config: {values: [configs/grpo/a.yaml, configs/grpo/b.yaml]}` gives `--config=configs/grpo/a.yaml`.

`--set NAME=VALUE ...` makes each NAME a constant parameter with VALUE (read as YAML: `3` is a number, a path a
string), replacing the file's parameter of that name or added after them (`procrl.experiment.sweeps.fix_parameters`):
a setting known only when the sweep starts, such as the SFT checkpoint a GRPO sweep starts from (launch/results.sh
grpo). It enters every variant's fingerprint like any constant, so a finished variant run with another value counts as
changed. The offline runner only: `--wandb on` refuses it (wandb sweep reads the file as it is).

`--wandb auto` (the default) and `--wandb off` run the offline runner below, even when a wandb server answers: under
`wandb agent` the variants get no per-variant output folder and no PROCRL_VARIANT (not implemented), so each writes
where its config says and the seeds of one config overwrite each other's output directory. Only `--wandb on` uses
`wandb sweep` + `wandb agent`, and requires WANDB_MODE not offline/disabled, an API key (WANDB_API_KEY or
~/.netrc) and `wandb.Api()` answering within `--wandb-timeout` seconds (launch/sweep.sh sets WANDB_MODE=offline
unless you set it: `WANDB_MODE=online launch/sweep.sh SWEEP.yaml --wandb on`).

The offline runner runs the variants one after another, from the current directory (as wandb agent does;
launch/sweep.sh runs from the repository root), `${interpreter}` being this Python. Variant `<name>` runs in
`<output dir>/<name>` (default output dir `outputs/sweeps/<sweep name>`): `--output_dir <that folder>` is appended
to its argv (unless the sweep sets the flag itself; `--output-flag` names another), its environment has
`PROCRL_VARIANT` = JSON {sweep, name, parameters, seed}, and its stdout and stderr are appended to `log.txt` there.
PROCRL_VARIANT's `fingerprint` (`procrl.experiment.sweep_command.fingerprint`: all the
parameters, constants included, the sweep's command and program, and the resolved content of every `--config` file,
`base:` chain included) goes into run.json's `variant`. A variant whose `run.json` says `"status": "finished"` with
the same fingerprint is skipped, so an interrupted sweep resumes where it stopped; a finished variant whose settings
changed since (or whose run.json has no fingerprint) refuses the whole sweep with one line, before anything runs,
unless `--rerun` (it runs again). Before a variant runs, an earlier `run.json` of its folder is moved to
`run.json.prev`, so a run that dies before writing its own is never judged by the old one. A failed variant is
recorded and the sweep goes on. `<output dir>/sweep.json` records every variant's folder, argv and
state (finished | failed | interrupted | pending). Ctrl-C (or SIGTERM) stops the running variant's process group
(SIGINT / SIGTERM, SIGKILL after `--stop-timeout` seconds). Exit status: 0 when every variant finished, 1 when one
failed, 130 when interrupted, 2 on bad arguments, a bad sweep file or changed settings without `--rerun`.
The runner itself is procrl/experiment/sweep_runner.py.
"""

from __future__ import annotations

import netrc
import os
import re
import shlex
import subprocess
import sys
from argparse import ArgumentTypeError
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import yaml
from transformers.hf_argparser import string_to_bool
from trl import TrlParser

from procrl.experiment.sweep_runner import EXIT_FAILED, run_offline, run_state
from procrl.experiment.sweeps import Sweep, Variant, config_paths, expand, fingerprint, fix_parameters, load_sweep
from procrl.scripts._common import (
    EXIT_USAGE,
    HelpFormatter,
    configure_logging,
    load_config,
    parse_or_exit,
    usage_error,
)
from procrl.utils import get_logger

logger = get_logger(__name__)

PROG = "procrl sweep"
WANDB_MODES = ("auto", "on", "off")
_BOOL_FLAGS = ("--dry_run", "--dry-run", "--rerun")
_LIST_FLAGS = ("--set",)  # every word up to the next flag is theirs
CHANGED = "settings changed since this variant finished: use another --output-dir or --rerun"
# argparse's ArgumentDefaultsHelpFormatter appends "(default: ...)" unless the help names %(default) (argparse.py:718);
# "%(default).0s" prints nothing, for the helps that say their default in words (no "(default: None)" after them)
_OWN_DEFAULT = "%(default).0s"


@dataclass
class SweepArguments:
    """What `procrl sweep` runs and how."""

    sweep: str = field(metadata={"help": "the sweep YAML (wandb's format); also the first bare word" + _OWN_DEFAULT})
    output_dir: str | None = field(
        default=None,
        metadata={
            "help": "the sweep's folder (variants in <dir>/<name>; default: outputs/sweeps/<name>)" + _OWN_DEFAULT
        },
    )
    count: int | None = field(
        default=None,
        metadata={"help": "random: the number of draws (default: run_cap); grid: run only the first N" + _OWN_DEFAULT},
    )
    seed: int = field(default=0, metadata={"help": "seed of the random draws (method: random)"})
    dry_run: bool = field(default=False, metadata={"help": "print each variant's folder and command, run nothing"})
    rerun: bool = field(
        default=False,
        metadata={
            "help": "run again the finished variants whose settings changed (their run.json becomes run.json.prev); "
            "without it such a sweep is refused"
        },
    )
    wandb: str = field(
        default="auto",
        metadata={
            "help": "auto and off: the offline runner (per-variant folders); on: wandb sweep + wandb agent (needs a "
            "reachable server; the runs write where their configs say)"
        },
    )
    wandb_timeout: float = field(default=10.0, metadata={"help": "seconds wandb.Api() gets to answer (--wandb on)"})
    stop_timeout: float = field(
        default=30.0, metadata={"help": "seconds a stopped variant gets after SIGINT/SIGTERM before SIGKILL"}
    )
    output_flag: str = field(
        default="output_dir",
        metadata={"help": "the programs' output-folder flag, appended per variant ('' appends none)"},
    )
    set: list[str] = field(
        default_factory=list,
        metadata={
            "help": "NAME=VALUE ...: fixed parameters (VALUE read as YAML), replacing the file's of that name or added "
            "(e.g. the checkpoint a sweep starts from); the offline runner only" + _OWN_DEFAULT
        },
    )

    def __post_init__(self) -> None:
        if self.wandb not in WANDB_MODES:
            raise ValueError(f"wandb={self.wandb!r} must be one of {WANDB_MODES}: --wandb auto | on | off")
        if self.count is not None and self.count < 1:
            raise ValueError(f"count={self.count} must be at least 1 (or leave --count out)")
        if self.wandb_timeout <= 0 or self.stop_timeout < 0:
            raise ValueError("--wandb-timeout must be > 0 and --stop-timeout >= 0 (seconds)")
        self.fixed()  # a bad NAME=VALUE fails here, with the parse
        if self.set and self.wandb == "on":
            raise ValueError("--set needs the offline runner (wandb sweep reads the file as it is): drop --wandb on")

    def fixed(self) -> dict:
        """`set` as {NAME: VALUE}, each VALUE read as YAML (a later NAME wins).

        Raises:
            ValueError: a word without "=", with an empty NAME or VALUE, or a VALUE that is not YAML.
        """
        values = {}
        for word in self.set:
            name, equals, text = word.partition("=")
            if not equals or not name.strip() or not text.strip():
                raise ValueError(f"--set {word!r}: write NAME=VALUE, e.g. --set model_name_or_path=/path/to/checkpoint")
            try:
                values[name.strip()] = yaml.safe_load(text)
            except yaml.YAMLError as error:
                raise ValueError(f"--set {word!r}: the value is not YAML ({error}); quote it") from error
        return values


def make_parser() -> TrlParser:
    """`TrlParser` over `SweepArguments` (the sweep file is also accepted as the first bare word)."""
    return TrlParser((SweepArguments,), prog=PROG, description=__doc__, formatter_class=HelpFormatter)


def sweep_file_as_flag(argv: list[str]) -> list[str]:
    """`argv` with the first bare word (not a flag's value) turned into `--sweep <word>` at the front.

    >>> sweep_file_as_flag(["--dry-run", "s.yaml", "--count", "3"])
    ['--sweep', 's.yaml', '--dry-run', '--count', '3']
    >>> sweep_file_as_flag(["--dry-run", "true", "--output-dir", "out"])  # values stay with their flags
    ['--dry-run', 'true', '--output-dir', 'out']
    >>> sweep_file_as_flag(["--set", "a=1", "b=2", "--rerun", "s.yaml"])  # --set takes every word up to a flag
    ['--sweep', 's.yaml', '--set', 'a=1', 'b=2', '--rerun']
    """
    in_list = False
    for i, word in enumerate(argv):
        before = argv[i - 1] if i else ""
        in_list = word in _LIST_FLAGS or (in_list and not word.startswith("-"))
        is_value = before.startswith("--") and "=" not in before and before not in _BOOL_FLAGS
        if word.startswith("-") or is_value or in_list or (before in _BOOL_FLAGS and _is_bool_word(word)):
            continue
        return ["--sweep", word, *argv[:i], *argv[i + 1 :]]
    return list(argv)


def _is_bool_word(word: str) -> bool:
    """Whether HfArgumentParser reads `word` as a bool flag's value (transformers/hf_argparser.py:36-46)."""
    try:
        string_to_bool(word)
    except ArgumentTypeError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run `procrl sweep`; returns the exit status (see the module docstring)."""
    argv = sweep_file_as_flag(list(sys.argv[1:] if argv is None else argv))
    parsed = parse_or_exit(make_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    (args,) = parsed
    configure_logging()
    try:
        sweep = load_sweep(args.sweep)
        if args.set:
            sweep = fix_parameters(sweep, args.fixed())
        variants = expand(sweep, count=args.count, seed=args.seed, interpreter=sys.executable)
        sweep_dir = Path(args.output_dir or Path("outputs") / "sweeps" / sweep.name)
        plan = [(v, *variant_dir_and_argv(v, sweep_dir, args.output_flag), settings_of(sweep, v)) for v in variants]
        if len({str(d) for _, d, _, _ in plan}) < len(plan):
            raise ValueError(
                f"several variants share an output folder: give each its own {args.output_flag} or leave it to the "
                "runner"
            )
    except (OSError, ValueError, yaml.YAMLError) as error:
        return usage_error(PROG, error)
    if args.dry_run:
        for variant, folder, command, settings in plan:
            state = run_state(folder, settings)
            print(f"# {variant.name} [{'finished, settings changed' if state == 'changed' else state}] -> {folder}")
            print(shlex.join(command))
        return 0
    try:
        backend, reason = choose_backend(args.wandb, os.environ, args.wandb_timeout)
    except RuntimeError as error:
        return usage_error(PROG, error)
    logger.info("sweep %s: %d variants, %s (%s)", sweep.name, len(plan), backend, reason)
    if backend == "wandb":
        return run_wandb(Path(args.sweep), args.count)
    changed = [variant.name for variant, folder, _, settings in plan if run_state(folder, settings) == "changed"]
    if changed and not args.rerun:
        if len(changed) == 1:
            return usage_error(PROG, f"variant {changed[0]}: {CHANGED}")
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        return usage_error(PROG, f"variants {shown}: {CHANGED.replace('this variant', 'these variants')}")
    return run_offline(sweep, plan, sweep_dir, args.stop_timeout)


def variant_dir_and_argv(variant: Variant, sweep_dir: Path, flag: str) -> tuple[Path, list[str]]:
    """The variant's folder and final argv: the sweep's own `--<flag> X` / `--<flag>=X` (a parameter or a command
    word) is kept and names the folder; otherwise `<sweep_dir>/<name>`, appended as `--<flag> <folder>` (nothing is
    appended when `flag` is '')."""
    argv = list(variant.argv)
    if flag:
        for i, word in enumerate(argv):
            if word == f"--{flag}" and i + 1 < len(argv):
                return Path(argv[i + 1]), argv
            if word.startswith(f"--{flag}="):
                return Path(word.split("=", 1)[1]), argv
    folder = sweep_dir / variant.name
    return folder, [*argv, f"--{flag}", str(folder)] if flag else argv


def settings_of(sweep: Sweep, variant: Variant) -> str:
    """The variant's `fingerprint`, with every `--config` of its argv resolved by `load_config` (from the working
    directory, where the variant runs); a config that cannot be read counts by its error text (the variant will fail
    on it by itself)."""
    configs: dict[str, object] = {}
    for path in config_paths(variant.argv):
        try:
            configs[path] = load_config(path)
        except (OSError, ValueError, yaml.YAMLError) as error:
            configs[path] = f"unreadable: {type(error).__name__}: {error}"
    return fingerprint(variant.parameters, sweep.command, sweep.program, configs)


# --------------------------------------------------------------------------------------------------------------------
# wandb: `wandb sweep` + `wandb agent`, with --wandb on
# --------------------------------------------------------------------------------------------------------------------


def choose_backend(mode: str, environ, timeout: float) -> tuple[str, str]:
    """("wandb" | "offline", why). "off" and "auto" are offline without asking wandb (see the module docstring:
    under wandb agent the variants would share their output folders); "on" is wandb when WANDB_MODE is not
    offline/disabled/dryrun, an API key is configured and `probe_wandb` succeeds, and raises RuntimeError with the
    reason otherwise."""
    if mode != "on":
        return "offline", f"--wandb {mode}; wandb sweep + agent only with --wandb on"
    wandb_mode = environ.get("WANDB_MODE", "").lower()
    if wandb_mode in ("offline", "disabled", "dryrun"):
        reason = f"WANDB_MODE={wandb_mode}"
    elif not has_wandb_api_key(environ):
        reason = "no wandb API key (WANDB_API_KEY or ~/.netrc)"
    else:
        reason = probe_wandb(timeout)
    if reason is None:
        return "wandb", "the wandb server answered"
    raise RuntimeError(f"--wandb on, but {reason}: fix that or use --wandb off")


def has_wandb_api_key(environ) -> bool:
    """WANDB_API_KEY, or a ~/.netrc (NETRC) entry for the host of WANDB_BASE_URL (default api.wandb.ai), where
    `wandb login` stores the key."""
    if environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(environ.get("NETRC") or None).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def probe_wandb(timeout: float) -> str | None:
    """None when `wandb.Api().viewer` answers within `timeout` seconds, else why not. It runs in a child process (no
    stdin: a login prompt fails at once), so a hanging connection cannot hang the sweep."""
    code = f"import wandb; wandb.Api(timeout={max(1, int(timeout))}).viewer"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"wandb.Api() did not answer within {timeout:g} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"wandb.Api() failed ({last})"
    return None


def run_wandb(path: Path, count: int | None) -> int:
    """`wandb sweep <file>` (prints the sweep's path) then `wandb agent [--count N] <path>`; the agent's exit status.
    The agent runs `${interpreter}` as "python" (wandb/wandb_agent.py:650), so this Python's folder leads PATH."""
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    created = subprocess.run(
        [sys.executable, "-m", "wandb", "sweep", str(path)], capture_output=True, text=True, env=env
    )
    output = re.sub(r"\x1b\[[0-9;]*m", "", created.stdout + created.stderr)  # click.style colours
    found = re.search(r"wandb agent (\S+)", output)  # wandb/cli/cli.py:1050-1051
    if created.returncode != 0 or not found:
        print(f"{PROG}: error: `wandb sweep {path}` failed:\n{output.strip()}", file=sys.stderr)
        return EXIT_FAILED
    agent = [sys.executable, "-m", "wandb", "agent", *(["--count", str(count)] if count else []), found.group(1)]
    logger.info("running %s", shlex.join(agent))
    return subprocess.call(agent, env=env)


if __name__ == "__main__":
    raise SystemExit(main())
