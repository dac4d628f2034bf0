"""Sweep files in wandb's format, expanded offline into variants (docs/architecture.md "Configs"; issue 16).

A sweep file is wandb's sweep configuration (https://docs.wandb.ai/guides/sweeps/define-sweep-configuration):

    program: train_grpo.py
    method: grid                      # grid | random (bayes needs the wandb server: refused offline)
    metric: {name: task/accuracy, goal: maximize}
    run_cap: 10                       # optional: at most this many variants
    parameters:
      config: {values: [configs/grpo/a.yaml, configs/grpo/b.yaml]}   # alternative configs, thin overrides or not
      seed: {values: [0, 1]}
      max_steps: {value: 2}           # a constant
      learning_rate: {distribution: log_uniform_values, min: 1.0e-6, max: 1.0e-4}   # random only
    command: [${env}, ${interpreter}, ${program}, ${args}]             # wandb's default

`expand` turns it into `Variant`s: grid = the cartesian product of the parameters in file order (the last one varies
fastest); random = `count` distinct seeded draws. A variant's argv is the `command` with wandb agent's macros
expanded exactly as wandb does (`command_args`: `${args}` = `--name=value` with Python's `str(value)`), and its
name is a stable, filesystem-safe `name=value,...` of the parameters that vary (`variant_name`). Pure functions: no
subprocesses, no files except `load_sweep`'s read.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from procrl.experiment.sweep_command import DEFAULT_COMMAND, build_argv, command_args, config_paths, fingerprint
from procrl.utils import get_logger

__all__ = [
    "DEFAULT_COMMAND",
    "Parameter",
    "Sweep",
    "Variant",
    "build_argv",
    "command_args",
    "config_paths",
    "expand",
    "fingerprint",
    "fix_parameters",
    "load_sweep",
    "parse_sweep",
    "variant_name",
]

logger = get_logger(__name__)

METHODS = ("grid", "random")
DISTRIBUTIONS = ("constant", "categorical", "uniform", "log_uniform_values", "int_uniform")
TOP_LEVEL_KEYS = frozenset(
    "program method metric parameters command name description project entity run_cap early_terminate".split()
)
PARAMETER_KEYS = {"value", "values", "distribution", "min", "max"}
_SAFE = re.compile(r"[^A-Za-z0-9._+-]+")
MAX_VALUE_CHARS = 40  # longer name values are cut and hashed
MAX_NAME_CHARS = 150  # a whole name, under the usual 255-byte file-name limit


@dataclass(frozen=True)
class Parameter:
    """One swept parameter: `distribution` is one of `DISTRIBUTIONS`; `values` holds the constant's one value or
    the categorical's values; `low` / `high` the numeric bounds of the others."""

    name: str
    distribution: str
    values: tuple = ()
    low: float | int | None = None
    high: float | int | None = None

    @property
    def varies(self) -> bool:
        """False for a constant: its value is the same in every variant and stays out of the names."""
        return self.distribution != "constant"


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file (`parse_sweep`); `config` is the file's mapping as read (what `wandb sweep` gets)."""

    name: str
    method: str
    parameters: tuple[Parameter, ...]
    program: str | None = None
    command: tuple[str, ...] = DEFAULT_COMMAND
    metric: dict | None = None
    run_cap: int | None = None
    config: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Variant:
    """One run of a sweep: its stable `name`, all its parameter values (file order), its `seed` (the `seed`
    parameter when there is one, else None) and its command line `argv`."""

    name: str
    parameters: dict
    seed: int | None
    argv: tuple[str, ...]

    def record(self, sweep: str, fingerprint: str | None = None) -> dict:
        """What a run learns of its variant (`PROCRL_VARIANT`, run.json's `variant`); with `fingerprint`
        (`procrl.experiment.sweep_command.fingerprint`) that key too."""
        record = {"sweep": sweep, "name": self.name, "parameters": self.parameters, "seed": self.seed}
        return record if fingerprint is None else {**record, "fingerprint": fingerprint}


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep YAML (`parse_sweep`); the sweep's name is its `name:` or the file's stem.

    Raises:
        OSError: the file cannot be read. yaml.YAMLError: it is not YAML. ValueError: as `parse_sweep`.
    """
    path = Path(path)
    config = yaml.safe_load(path.read_text())
    if not isinstance(config, dict):
        raise ValueError(f"sweep file {path} must contain a YAML mapping (program, method, parameters, ...)")
    return parse_sweep(config, default_name=path.stem)


def parse_sweep(config: Mapping, default_name: str = "sweep") -> Sweep:
    """Validate a sweep mapping in wandb's format.

    Raises:
        ValueError: with what to change — an unknown top-level key, a method other than grid/random (bayes needs
            the wandb server), a metric without name or with a goal other than minimize/maximize, no parameters, a
            bad parameter (`_parse_parameter`), a `command` that is not a list of strings, a command with
            `${program}` but no `program`, a `run_cap` that is not a positive integer.
    """
    unknown = sorted(set(config) - TOP_LEVEL_KEYS)
    if unknown:
        raise ValueError(f"unknown sweep keys {unknown}: a wandb sweep file has {sorted(TOP_LEVEL_KEYS)}")
    method = config.get("method")
    if method == "bayes":
        raise ValueError("method: bayes needs the wandb sweep server; offline use method: grid or method: random")
    if method not in METHODS:
        raise ValueError(f"method: {method!r} is not supported: use method: grid or method: random")
    metric = config.get("metric")
    if metric is not None:
        if not isinstance(metric, dict) or not isinstance(metric.get("name"), str):
            raise ValueError(
                f"metric must be a mapping with a name, e.g. {{name: task/accuracy, goal: maximize}}, got {metric!r}"
            )
        if metric.get("goal", "minimize") not in ("minimize", "maximize"):
            raise ValueError(f"metric goal {metric['goal']!r} must be minimize or maximize")
    raw = config.get("parameters")
    if not isinstance(raw, dict) or not raw:
        raise ValueError("parameters must be a non-empty mapping: parameters: {name: {value: x} | {values: [...]}}")
    parameters = tuple(_parse_parameter(str(name), spec) for name, spec in raw.items())
    if method == "grid":
        continuous = [p.name for p in parameters if p.distribution not in ("constant", "categorical")]
        if continuous:
            raise ValueError(
                f"method: grid needs value or values for every parameter; {continuous} have a distribution: "
                "list their values or use method: random"
            )
    command = config.get("command", list(DEFAULT_COMMAND))
    if not isinstance(command, list) or not command or not all(isinstance(w, str | int | float) for w in command):
        raise ValueError(f"command must be a list of words, e.g. {list(DEFAULT_COMMAND)}, got {command!r}")
    command = tuple(str(word) for word in command)
    program = config.get("program")
    if "${program}" in command and not isinstance(program, str):
        raise ValueError("the command uses ${program}: set program: <script>, e.g. program: train_grpo.py")
    run_cap = config.get("run_cap")
    if run_cap is not None and (isinstance(run_cap, bool) or not isinstance(run_cap, int) or run_cap < 1):
        raise ValueError(f"run_cap must be a positive integer, got {run_cap!r}")
    if "early_terminate" in config:
        logger.warning("early_terminate is ignored offline: every variant runs to its end")
    name = config.get("name") or default_name
    return Sweep(str(name), method, parameters, program, command, metric, run_cap, dict(config))


def fix_parameters(sweep: Sweep, values: Mapping[str, Any]) -> Sweep:
    """`sweep` with each of `values` a constant: a parameter of that name is replaced (whatever its distribution),
    any other is added after the file's. What a run-time setting uses, such as a checkpoint path resolved when the
    sweep starts (`procrl sweep --set NAME=VALUE`). `config['parameters']` is changed alike, so `sweep.json` records
    the values. A constant is in every variant's fingerprint, so a finished variant run with another value counts as
    changed; it is in no variant name, so a replaced varying parameter drops out of the names.

    Raises:
        ValueError: a name that is not a non-empty string.

    >>> spec = {"program": "t.py", "method": "grid", "parameters": {"seed": {"values": [0, 1]}, "lr": {"value": 0.1}}}
    >>> sweep = parse_sweep(spec)
    >>> fixed = fix_parameters(sweep, {"seed": 0, "model_name_or_path": "/ckpt"})
    >>> [(p.name, p.distribution, p.values) for p in fixed.parameters]
    [('seed', 'constant', (0,)), ('lr', 'constant', (0.1,)), ('model_name_or_path', 'constant', ('/ckpt',))]
    """
    bad = [name for name in values if not isinstance(name, str) or not name]
    if bad:
        raise ValueError(f"a fixed parameter needs a name (NAME=VALUE), got {bad}")
    parameters = [Parameter(p.name, "constant", (values[p.name],)) if p.name in values else p for p in sweep.parameters]
    known = {p.name for p in sweep.parameters}
    parameters += [Parameter(name, "constant", (value,)) for name, value in values.items() if name not in known]
    raw = dict(sweep.config.get("parameters") or {})
    raw.update({name: {"value": value} for name, value in values.items()})
    return replace(sweep, parameters=tuple(parameters), config={**sweep.config, "parameters": raw})


def _parse_parameter(name: str, spec: Any) -> Parameter:
    """One entry of `parameters`. Without `distribution`, `value` is a constant, `values` a categorical and
    `min`/`max` int_uniform when both are integers, else uniform (wandb's inference,
    wandb/sdk/sweeps/scheduler/optuna.py:94-101)."""

    def bad(message: str) -> ValueError:
        return ValueError(f"parameter {name}: {message}")

    if not isinstance(spec, dict):
        raise bad(f"must be a mapping such as {{value: 1}} or {{values: [1, 2]}}, got {spec!r}")
    if unknown := sorted(set(spec) - PARAMETER_KEYS):  # nested `parameters` too
        raise bad(f"unknown keys {unknown}; supported: {sorted(PARAMETER_KEYS)} (no nested parameters)")
    if "value" in spec and "values" in spec:
        raise bad("give value (a constant) or values (a list), not both")
    distribution = spec.get("distribution")
    if distribution is None and "value" in spec:
        distribution = "constant"
    elif distribution is None and "values" in spec:
        distribution = "categorical"
    elif distribution is None and "min" in spec and "max" in spec:
        integers = all(isinstance(spec[k], int) and not isinstance(spec[k], bool) for k in ("min", "max"))
        distribution = "int_uniform" if integers else "uniform"
    elif distribution is None:
        raise bad("needs value, values, or min and max")
    if distribution not in DISTRIBUTIONS:
        raise bad(f"distribution {distribution!r} is not supported offline; use one of {DISTRIBUTIONS}")
    if distribution == "constant":
        if "value" not in spec:
            raise bad("distribution constant needs value: x")
        return Parameter(name, distribution, (spec["value"],))
    if distribution == "categorical":
        values = spec.get("values")
        if not isinstance(values, list) or not values:
            raise bad(f"values must be a non-empty list, got {values!r}")
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) < len(values):
            raise bad(f"values {values} repeat a value: each variant must differ")
        return Parameter(name, distribution, tuple(values))
    low, high = spec.get("min"), spec.get("max")
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high))
    if not numbers or not low < high:
        raise bad(f"{distribution} needs finite numbers min < max, got min={low!r}, max={high!r}")
    if distribution == "int_uniform" and not all(isinstance(v, int) for v in (low, high)):
        raise bad(f"int_uniform needs integer min and max, got {low!r}, {high!r}")
    if distribution == "log_uniform_values" and low <= 0:
        raise bad(f"log_uniform_values needs min > 0 (the values, not their logs), got {low!r}")
    return Parameter(name, distribution, (), low, high)


def expand(
    sweep: Sweep,
    *,
    count: int | None = None,
    seed: int = 0,
    interpreter: str = "python",
    environ: Mapping[str, str] | None = None,
) -> list[Variant]:
    """The sweep's variants, in the order they run.

    Args:
        sweep: from `load_sweep` / `parse_sweep`.
        count: grid: at most this many (the first ones); random: the number of draws (default `run_cap`).
        seed: random draws come from `random.Random(seed)`: the same seed gives the same variants.
        interpreter: what `${interpreter}` becomes (wandb agent uses "python"; the runner passes sys.executable).
        environ: for `${envvar:NAME}` (default os.environ).

    Raises:
        ValueError: a random sweep without count or run_cap, a count < 1, fewer distinct points than asked for, or
            a command macro `build_argv` does not know.
    """
    if count is not None and count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    limit = min(n for n in (count, sweep.run_cap) if n is not None) if (count or sweep.run_cap) else None
    if sweep.method == "grid":
        points = [
            dict(zip([p.name for p in sweep.parameters], combo, strict=True))
            for combo in itertools.product(*(p.values for p in sweep.parameters))
        ]
        points = points[:limit] if limit else points
    else:
        if limit is None:
            raise ValueError("method: random needs a number of draws: --count N or run_cap: N in the sweep file")
        points = _random_points(sweep.parameters, limit, seed)
    varying = [p.name for p in sweep.parameters if p.varies]
    names = _unique_names([variant_name(point, varying) for point in points], points)
    environ = os.environ if environ is None else environ
    return [
        Variant(
            name,
            point,
            _seed_of(point),
            tuple(build_argv(sweep.command, sweep.program, point, interpreter=interpreter, environ=environ)),
        )
        for name, point in zip(names, points, strict=True)
    ]


def _random_points(parameters: tuple[Parameter, ...], count: int, seed: int) -> list[dict]:
    """`count` distinct draws, parameters drawn in file order from one `random.Random(seed)`; a repeated draw is
    drawn again (a repeat would share its directory, and resume would skip it as finished)."""
    rng = random.Random(seed)
    points: list[dict] = []
    seen: set[str] = set()
    for _ in range(100 * count):
        point = {p.name: _draw(p, rng) for p in parameters}
        key = json.dumps(point, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            points.append(point)
            if len(points) == count:
                return points
    raise ValueError(
        f"only {len(points)} distinct random draws in {100 * count} tries, {count} asked for: lower --count or use "
        "method: grid"
    )


def _draw(p: Parameter, rng: random.Random) -> Any:
    if p.distribution in ("constant", "categorical"):
        return p.values[0] if p.distribution == "constant" else rng.choice(p.values)
    if p.distribution == "int_uniform":
        return rng.randint(p.low, p.high)  # both ends included, as wandb's int_uniform
    if p.distribution == "log_uniform_values":
        return math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
    return rng.uniform(p.low, p.high)


def _seed_of(point: dict) -> int | None:
    seed = point.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def variant_name(parameters: Mapping[str, Any], names: list[str] | None = None) -> str:
    """A stable, filesystem-safe name: `name=value` of the parameters in `names` (default: all), joined by ",".

    Values: booleans `true`/`false`, floats with 4 significant digits, lists joined by "+", a path (a string with
    "/" or a YAML/JSON suffix) by its file stem; characters outside [A-Za-z0-9._+-] become "-"; a value over 40
    characters and a name over 150 are cut and end in 8 hex digits of their SHA-1. No parameter: "run".

    >>> variant_name({"reward_funcs": ["outcome", "picsar"], "seed": 1, "max_steps": 2}, ["reward_funcs", "seed"])
    'reward_funcs=outcome+picsar,seed=1'
    >>> variant_name({"config": "configs/grpo/svamp_smollm2_pum.yaml", "learning_rate": 3.16227e-05})
    'config=svamp_smollm2_pum,learning_rate=3.162e-05'
    """
    names = list(parameters) if names is None else names
    text = ",".join(f"{_safe(name)}={_name_value(parameters[name])}" for name in names) or "run"
    return _cut(text, MAX_NAME_CHARS)


def _name_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return _cut("+".join(_name_value(v) for v in value), MAX_VALUE_CHARS)
    if isinstance(value, str) and ("/" in value or value.endswith((".yaml", ".yml", ".json"))):
        value = Path(value).stem
    return _cut(_safe(str(value)), MAX_VALUE_CHARS)


def _safe(text: str) -> str:
    return _SAFE.sub("-", text).strip("-") or "-"


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[: limit - 9]}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def _unique_names(names: list[str], points: list[dict]) -> list[str]:
    """Names that two different parameter sets share (a value cut or shortened to a path stem) get 8 hex digits of
    the SHA-1 of their parameters appended, so every variant has its own directory."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    unique = []
    for name, point in zip(names, points, strict=True):
        if counts[name] > 1:
            digest = hashlib.sha1(json.dumps(point, sort_keys=True, default=str).encode()).hexdigest()[:8]
            name = f"{name}-{digest}"
        unique.append(name)
    return unique
