"""wandb agent's command line for one sweep run, built offline exactly as the agent builds it (wandb 0.31).

`procrl.experiment.sweeps` expands a sweep file into variants; this module turns one variant's parameters into its argv: the
sweep's `command` (default `DEFAULT_COMMAND`) with `${envvar:NAME}`, `${env}`, `${interpreter}`, `${program}`,
`${args}` and the other argument forms of `command_args` replaced; `fingerprint` is what a finished variant's
settings were (a sweep reruns a variant only when it changed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_COMMAND", "FORMS", "build_argv", "command_args", "config_paths", "fingerprint"]

# wandb agent's default command (wandb/wandb_agent.py:262-267)
DEFAULT_COMMAND = ("${env}", "${interpreter}", "${program}", "${args}")
# the list forms of the parameters wandb agent offers besides `${args_json}`
FORMS = (
    "args",
    "args_no_equals",
    "args_no_hyphens",
    "args_no_boolean_flags",
    "args_append_hydra",
    "args_override_hydra",
)
# `${envvar:NAME}` inside a command word (wandb/sdk/launch/sweeps/utils.py:21)
ENVVAR = re.compile(r"\$\{envvar\:([A-Z0-9_]*)\}")


def command_args(parameters: Mapping[str, Any]) -> dict[str, list[str]]:
    """The argument forms wandb agent substitutes for `${args}` and its siblings, built as wandb builds them
    (`create_sweep_command_args`, wandb/sdk/launch/sweeps/utils.py:207-256): each value as Python's `str(value)`.

    >>> command_args({"seed": 1, "use_vllm": False, "reward_funcs": ["outcome", "pum"]})["args"]
    ['--seed=1', '--use_vllm=False', "--reward_funcs=['outcome', 'pum']"]
    >>> command_args({"seed": 1, "use_vllm": False})["args_no_boolean_flags"]
    ['--seed=1']

    A list value is one word in Python's list syntax, which argparse's `nargs="+"` flags do not read: sweep list
    fields through alternative config files (a `config` parameter) instead.
    """
    forms: dict[str, list[str]] = {k: [] for k in FORMS}
    for name, value in parameters.items():
        flag = f"{name}={value}"
        forms["args"].append("--" + flag)
        forms["args_no_hyphens"].append(flag)
        forms["args_no_equals"] += [f"--{name}", str(value)]
        forms["args_append_hydra"].append("+" + flag)
        forms["args_override_hydra"].append("++" + flag)
        if not isinstance(value, bool):
            forms["args_no_boolean_flags"].append("--" + flag)
        elif value:
            forms["args_no_boolean_flags"].append("--" + name)
    forms["args_json"] = [json.dumps(dict(parameters))]
    return forms


def build_argv(
    command: Sequence[str],
    program: str | None,
    parameters: Mapping[str, Any],
    *,
    interpreter: str = "python",
    environ: Mapping[str, str],
) -> list[str]:
    """The sweep's `command` for one variant, expanded as wandb agent does (wandb/wandb_agent.py:609-662): first
    `${envvar:NAME}` inside any word (the variable's value, else NAME: wandb/sdk/launch/sweeps/utils.py:191-204),
    then a word that is a whole macro becomes its list: `${env}` -> /usr/bin/env (none on Windows),
    `${interpreter}`, `${program}`, and the forms of `command_args`. Unlike wandb, which drops a macro it does not
    know, an unknown macro is an error (a typo would silently drop the parameters).

    Raises:
        ValueError: an unknown macro, or `${args_json_file}` (a file only the wandb agent writes).
    """
    macros: dict[str, list[str]] = command_args(parameters)
    macros["interpreter"] = [interpreter]
    macros["program"] = [program] if program else []
    macros["env"] = [] if os.name == "nt" else ["/usr/bin/env"]
    argv: list[str] = []
    for word in command:
        for match in reversed(list(ENVVAR.finditer(word))):
            word = word[: match.start()] + environ.get(match.group(1), match.group(1)) + word[match.end() :]
        if word.startswith("${") and word.endswith("}"):
            macro = word[2:-1]
            if macro not in macros:
                known = sorted(f"${{{m}}}" for m in macros)
                raise ValueError(f"command macro {word} is not supported offline; use one of {known}")
            argv += macros[macro]
        else:
            argv.append(word)
    return argv


def config_paths(argv: Sequence[str]) -> list[str]:
    """The `--config X` / `--config=X` values of an argv, in order (as given: relative to the working directory).

    >>> config_paths(["python", "train.py", "--config=a.yaml", "--seed=1", "--config", "b.yaml"])
    ['a.yaml', 'b.yaml']
    """
    paths = []
    for i, word in enumerate(argv):
        if word == "--config" and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif word.startswith("--config="):
            paths.append(word.split("=", 1)[1])
    return paths


def fingerprint(
    parameters: Mapping[str, Any],
    command: Sequence[str],
    program: str | None,
    configs: Mapping[str, Any],
) -> str:
    """The SHA-256 (hex) of a variant's settings: ALL its parameter values (constants too, which variant names
    leave out), the sweep's `command` words and `program` as written (not `${interpreter}`'s path, so another
    virtual environment is the same variant), and `configs`: {path as in the argv: its resolved content} (the caller
    resolves `base:` chains; an unreadable file may be given as its error text). Keys are sorted, so the order of
    mapping keys does not matter; values that JSON lacks count by `str`.
    """
    settings = {"parameters": dict(parameters), "command": list(command), "program": program, "configs": dict(configs)}
    text = json.dumps(settings, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
