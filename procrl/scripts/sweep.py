"""`procrl sweep`: run every variant of a sweep file (wandb's sweep format), resumably.

    procrl sweep configs/sweeps/reward_ablation_svamp.yaml                 # wandb if reachable, else offline
    procrl sweep SWEEP.yaml --output-dir outputs/sweeps/mine --wandb off   # the offline runner, own folder
    procrl sweep SWEEP.yaml --dry-run                                      # print the variants' commands only
    procrl sweep SWEEP.yaml --count 8 --seed 1                             # method: random: 8 draws of seed 1
    launch/sweep.sh SWEEP.yaml [flags]                                     # the same, .venv python, WANDB_MODE=offline
    python -m procrl.scripts.sweep SWEEP.yaml                              # the same

The file (`procrl.sweeps`): `program`, `method: grid | random`, `metric`, `parameters` (`value`, `values`,
`distribution: uniform | log_uniform_values | int_uniform | categorical` with `min`/`max`), `command` with wandb's
macros (`${env} ${interpreter} ${program} ${args} ...`), `run_cap`. Alternative configs are a parameter:
`config: {values: [configs/grpo/a.yaml, configs/grpo/b.yaml]}` gives `--config=configs/grpo/a.yaml`.

`--wandb auto` (the default) uses `wandb sweep` + `wandb agent` when WANDB_MODE is not offline/disabled, an API key is
configured (WANDB_API_KEY or ~/.netrc) and `wandb.Api()` answers within `--wandb-timeout` seconds; `on` requires
that, `off` never tries. Under wandb agent the runs are wandb's: each writes where its config says (no per-variant
folder, no PROCRL_VARIANT).

The offline runner runs the variants one after another, from the current directory (as wandb agent does;
launch/sweep.sh runs from the repository root), `${interpreter}` being this Python. Variant `<name>` runs in
`<output dir>/<name>` (default output dir `outputs/sweeps/<sweep name>`): `--output_dir <that folder>` is appended
to its argv (unless the sweep sets the flag itself; `--output-flag` names another), its environment has
`PROCRL_VARIANT` = JSON {sweep, name, parameters, seed}, and its stdout and stderr are appended to `log.txt` there.
A variant whose `run.json` says `"status": "finished"` is skipped, so an interrupted sweep resumes where it stopped; a
failed variant is recorded and the sweep goes on. `<output dir>/sweep.json` records every variant's folder, argv and
state (finished | failed | interrupted | pending). Ctrl-C (or SIGTERM) stops the running variant's process group
(SIGINT / SIGTERM, SIGKILL after `--stop-timeout` seconds). Exit status: 0 when every variant finished, 1 when one
failed, 130 when interrupted, 2 on bad arguments or a bad sweep file.
"""

from __future__ import annotations

import contextlib
import json
import netrc
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import yaml
from tqdm import tqdm
from trl import TrlParser

from procrl.scripts._common import EXIT_USAGE, HelpFormatter, configure_logging, parse_or_exit, usage_error
from procrl.sweeps import Sweep, Variant, expand, load_sweep
from procrl.utils import get_logger

logger = get_logger(__name__)

PROG = "procrl sweep"
WANDB_MODES = ("auto", "on", "off")
EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
_BOOL_FLAGS = ("--dry_run", "--dry-run")
_BOOL_WORDS = ("true", "false", "yes", "no", "t", "f", "y", "n", "1", "0")


@dataclass
class SweepArguments:
    """What `procrl sweep` runs and how."""

    sweep: str = field(metadata={"help": "the sweep YAML (wandb's format); also the first bare word"})
    output_dir: str | None = field(
        default=None, metadata={"help": "the sweep's folder (variants in <dir>/<name>); default outputs/sweeps/<name>"}
    )
    count: int | None = field(
        default=None, metadata={"help": "random: the number of draws (default run_cap); grid: run only the first N"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the random draws (method: random)"})
    dry_run: bool = field(default=False, metadata={"help": "print each variant's folder and command, run nothing"})
    wandb: str = field(
        default="auto",
        metadata={"help": "auto: wandb sweep + agent when a server is reachable; on: require it; off: offline only"},
    )
    wandb_timeout: float = field(default=10.0, metadata={"help": "seconds wandb.Api() gets to answer (auto/on)"})
    stop_timeout: float = field(
        default=30.0, metadata={"help": "seconds a stopped variant gets after SIGINT/SIGTERM before SIGKILL"}
    )
    output_flag: str = field(
        default="output_dir",
        metadata={"help": "the programs' output-folder flag, appended per variant ('' appends none)"},
    )

    def __post_init__(self) -> None:
        if self.wandb not in WANDB_MODES:
            raise ValueError(f"wandb={self.wandb!r} must be one of {WANDB_MODES}: --wandb auto | on | off")
        if self.count is not None and self.count < 1:
            raise ValueError(f"count={self.count} must be at least 1 (or leave --count out)")
        if self.wandb_timeout <= 0 or self.stop_timeout < 0:
            raise ValueError("--wandb-timeout must be > 0 and --stop-timeout >= 0 (seconds)")


def make_parser() -> TrlParser:
    """`TrlParser` over `SweepArguments` (the sweep file is also accepted as the first bare word)."""
    return TrlParser((SweepArguments,), prog=PROG, description=__doc__, formatter_class=HelpFormatter)


def sweep_file_as_flag(argv: list[str]) -> list[str]:
    """`argv` with the first bare word (not a flag's value) turned into `--sweep <word>` at the front.

    >>> sweep_file_as_flag(["--dry-run", "s.yaml", "--count", "3"])
    ['--sweep', 's.yaml', '--dry-run', '--count', '3']
    >>> sweep_file_as_flag(["--dry-run", "true", "--output-dir", "out"])  # values stay with their flags
    ['--dry-run', 'true', '--output-dir', 'out']
    """
    for i, word in enumerate(argv):
        before = argv[i - 1] if i else ""
        is_value = before.startswith("--") and "=" not in before and before not in _BOOL_FLAGS
        if word.startswith("-") or is_value or (before in _BOOL_FLAGS and word.lower() in _BOOL_WORDS):
            continue
        return ["--sweep", word, *argv[:i], *argv[i + 1 :]]
    return list(argv)


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
        variants = expand(sweep, count=args.count, seed=args.seed, interpreter=sys.executable)
        sweep_dir = Path(args.output_dir or Path("outputs") / "sweeps" / sweep.name)
        plan = [(v, *variant_dir_and_argv(v, sweep_dir, args.output_flag)) for v in variants]
        if len({str(d) for _, d, _ in plan}) < len(plan):
            raise ValueError(
                f"several variants share an output folder: give each its own {args.output_flag} or leave it to the "
                "runner"
            )
    except (OSError, ValueError, yaml.YAMLError) as error:
        return usage_error(PROG, error)
    if args.dry_run:
        for variant, folder, command in plan:
            print(f"# {variant.name} [{read_run_status(folder / 'run.json') or 'not run'}] -> {folder}")
            print(shlex.join(command))
        return 0
    try:
        backend, reason = choose_backend(args.wandb, os.environ, args.wandb_timeout)
    except RuntimeError as error:
        return usage_error(PROG, error)
    logger.info("sweep %s: %d variants, %s (%s)", sweep.name, len(plan), backend, reason)
    if backend == "wandb":
        return run_wandb(Path(args.sweep), args.count)
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


def read_run_status(path: Path) -> str | None:
    """run.json's `status` ("running" | "finished" | "failed"), or None when there is no readable record."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record.get("status") if isinstance(record, dict) else None


# --------------------------------------------------------------------------------------------------------------------
# wandb: `wandb sweep` + `wandb agent`, when a server answers
# --------------------------------------------------------------------------------------------------------------------


def choose_backend(mode: str, environ, timeout: float) -> tuple[str, str]:
    """("wandb" | "offline", why). `mode` "off" is offline; "auto" is wandb only when WANDB_MODE is not
    offline/disabled/dryrun, an API key is configured and `probe_wandb` succeeds; "on" raises RuntimeError (with the
    reason) where "auto" would fall back."""
    if mode == "off":
        return "offline", "--wandb off"
    wandb_mode = environ.get("WANDB_MODE", "").lower()
    if wandb_mode in ("offline", "disabled", "dryrun"):
        reason = f"WANDB_MODE={wandb_mode}"
    elif not has_wandb_api_key(environ):
        reason = "no wandb API key (WANDB_API_KEY or ~/.netrc)"
    else:
        reason = probe_wandb(timeout)
    if reason is None:
        return "wandb", "the wandb server answered"
    if mode == "on":
        raise RuntimeError(f"--wandb on, but {reason}: fix that or use --wandb auto/off")
    return "offline", reason


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


# --------------------------------------------------------------------------------------------------------------------
# The offline runner
# --------------------------------------------------------------------------------------------------------------------


class _Stopped(Exception):
    """SIGINT or SIGTERM arrived while a variant ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run_offline(sweep: Sweep, plan: list[tuple[Variant, Path, list[str]]], sweep_dir: Path, stop_timeout: float) -> int:
    """Run the variants one after another (see the module docstring); returns 0, 1 (a variant failed) or 130."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    rows = [
        {"name": v.name, "dir": str(d), "parameters": v.parameters, "seed": v.seed, "argv": a, "state": "pending"}
        for v, d, a in plan
    ]
    record = {"sweep": sweep.name, "method": sweep.method, "metric": sweep.metric, "variants": rows}
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        signal.signal(signum, _raise_stopped)
    try:  # a signal between two variants (no child running) stops the sweep too
        with tqdm(total=len(plan), desc=sweep.name, unit="variant", file=sys.stderr) as bar:
            for (variant, folder, argv), row in zip(plan, rows, strict=True):
                bar.set_postfix_str(variant.name)
                if read_run_status(folder / "run.json") == "finished":
                    row.update(state="finished", skipped=True)
                else:
                    row.update(state="running", started_at=_now(), skipped=False)
                    _write_json(sweep_dir / "sweep.json", record)
                    row.update(_run_variant(sweep.name, variant, folder, argv, stop_timeout))
                _write_json(sweep_dir / "sweep.json", record)
                bar.update()
                if row["state"] == "interrupted":
                    break
    except _Stopped:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _write_json(sweep_dir / "sweep.json", record)
    stopped = [row["name"] for row in rows if row["state"] in ("interrupted", "running")]
    if stopped or any(row["state"] == "pending" for row in rows):
        where = ", ".join(stopped) or "between variants"
        logger.warning("sweep interrupted (%s); run the same command again to resume", where)
        return EXIT_INTERRUPTED
    failed = [row["name"] for row in rows if row["state"] != "finished"]
    if failed:
        logger.warning("%d of %d variants failed: %s (see their log.txt)", len(failed), len(rows), ", ".join(failed))
    return EXIT_FAILED if failed else 0


def _run_variant(sweep: str, variant: Variant, folder: Path, argv: list[str], stop_timeout: float) -> dict:
    """One variant as a child process in its own process group; returns its row's new fields."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PROCRL_VARIANT": json.dumps(variant.record(sweep))}
    proc = None
    with (folder / "log.txt").open("ab") as log:
        log.write(f"\n=== {_now()} procrl sweep {sweep}: {shlex.join(argv)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
            returncode = proc.wait()
        except OSError as error:  # a program that does not exist or cannot run
            error_text = f"{type(error).__name__}: {error}"
            return {"state": "failed", "returncode": None, "error": error_text, "finished_at": _now()}
        except _Stopped as stop:
            if proc is not None:
                _stop_group(proc, stop.signum, stop_timeout)
            returncode = proc.returncode if proc is not None else None
            error_text = f"stopped by {stop}"
            return {"state": "interrupted", "returncode": returncode, "error": error_text, "finished_at": _now()}
    status = read_run_status(folder / "run.json")
    row = {"returncode": returncode, "finished_at": _now(), "error": None}
    if returncode == 0 and status == "finished":
        return {**row, "state": "finished"}
    if returncode == 0:
        row["error"] = f"exited 0 but {folder / 'run.json'} says {status!r}, not 'finished'"
    else:
        row["error"] = _run_error(folder / "run.json") or f"exit status {returncode}; see {folder / 'log.txt'}"
    logger.warning("variant %s failed: %s", variant.name, row["error"])
    return {**row, "state": "failed"}


def _stop_group(proc: subprocess.Popen, signum: int, timeout: float) -> None:
    """SIGINT (Ctrl-C) or SIGTERM to the variant's process group, SIGKILL after `timeout` s or a second signal;
    then SIGKILL to whatever of the group is left (a server the variant started)."""
    try:
        os.killpg(proc.pid, signum)
        proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, _Stopped):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _raise_stopped(signum, frame) -> None:
    raise _Stopped(signum)


def _run_error(path: Path) -> str | None:
    """run.json's `error` ("<ExceptionType: message>"), if it has one."""
    try:
        error = json.loads(path.read_text()).get("error")
    except (OSError, ValueError, AttributeError):
        return None
    return error if isinstance(error, str) else None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_json(path: Path, data: dict) -> None:
    """Write atomically (temp file + os.replace): a reader, or a killed runner, never leaves half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    raise SystemExit(main())
