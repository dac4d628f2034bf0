"""Small helpers shared by every procrl module: logging, completion text, reward-output checks, JSON output, wandb."""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

_LOGGER_NAME = "procrl"


def get_logger(name: str | None = None) -> logging.Logger:
    """The one procrl logger (library code never prints); `name` makes a child, e.g. "procrl.rewards"."""
    return logging.getLogger(_LOGGER_NAME if not name else f"{_LOGGER_NAME}.{name.removeprefix('procrl.')}")


def completion_to_text(completion: Any) -> str:
    """Text of one completion as TRL passes it to reward functions.

    TRL gives a string for standard prompts and a message list (`[{"role": "assistant", "content": ...}]`)
    for conversational ones. Anything else (None, a number) becomes "" so a reward returns its neutral value.

    >>> completion_to_text([{"role": "assistant", "content": "The answer is 4"}])
    'The answer is 4'
    >>> completion_to_text("x = 2")
    'x = 2'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        content = completion.get("content", "")
        return content if isinstance(content, str) else completion_to_text(content)
    if isinstance(completion, Sequence):
        parts = []
        for message in completion:
            if isinstance(message, dict):
                if message.get("role", "assistant") != "assistant":
                    continue
                content = message.get("content", "")
                if isinstance(content, list):  # typed content blocks: [{"type": "text", "text": ...}]
                    content = "".join(block.get("text", "") for block in content if isinstance(block, dict))
                parts.append(content if isinstance(content, str) else "")
            elif isinstance(message, str):
                parts.append(message)
        return "".join(parts)
    return ""


def prompt_to_text(prompt: Any) -> str:
    """The user-visible problem text of a prompt (a string, or the last user message of a message list)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
    return ""


def check_reward_length(name: str, values: Sequence[Any], expected: int) -> list[Any]:
    """Return `values` as a list, or raise `ValueError` naming the reward function when the count is wrong.

    TRL performs the same check inside its trainer; procrl repeats it wherever it calls reward functions
    itself (evaluation, best-of-N) so a wrong count never misaligns rewards and completions silently.
    """
    values = list(values)
    if len(values) != expected:
        raise ValueError(
            f"Reward function '{name}' returned {len(values)} values for {expected} completions; "
            "it must return exactly one value (float or None) per completion."
        )
    return values


def reads_completion_logps(func: Any) -> bool:
    """Whether a reward function or step scorer consumes the rollout's raw log-probs (`completion_logps`), so that
    procrl's rollout computes them (on vLLM with a tempered sampler that is one extra scoring pass a step).

    The rule: the callable's `needs_logps` attribute when it has one; else whether its signature names a
    `completion_logps` parameter. A function that reads them from `**kwargs` must set `needs_logps = True`, or the
    rollout may leave the field out. A callable whose signature cannot be read counts as a reader.

    >>> def outcome(completions, answer, **kwargs): ...
    >>> def confidence(completions, completion_logps=None, **kwargs): ...
    >>> reads_completion_logps(outcome), reads_completion_logps(confidence)
    (False, True)
    """
    declared = getattr(func, "needs_logps", None)
    if declared is not None:
        return bool(declared)
    try:
        return "completion_logps" in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return True


def json_safe(value: Any) -> Any:
    """`value` with non-finite floats replaced by None and dict keys as strings, so `json.dumps` writes valid JSON
    (NaN and inf are not JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def default_wandb_offline(report_to: Sequence[str] | None) -> None:
    """With `report_to: wandb` and no wandb credentials (`WANDB_API_KEY`, `WANDB_MODE` or an api.wandb.ai entry in
    ~/.netrc), set `WANDB_MODE=offline` so the run logs locally instead of failing at its first log call."""
    if "wandb" not in (report_to or []) or os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return
    netrc = Path.home() / ".netrc"
    if netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore"):
        return
    os.environ["WANDB_MODE"] = "offline"
    get_logger(__name__).warning("No wandb credentials found: logging to wandb in offline mode (WANDB_MODE=offline).")


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for a package whose public names are imported from their module on first use
    (PEP 562), so importing one light module of the package loads none of the others.

    Args:
        package: the package's `__name__`.
        exports: public name -> the module in `package` that defines it.

    Usage, in the package's `__init__.py`: `__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)`. The returned
    `__getattr__` raises `AttributeError` for a name not in `exports`.
    """
    module = sys.modules[package]

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        setattr(module, name, value)  # later lookups are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted([*vars(module), *exports])

    return __getattr__, __dir__


def read_jsonl(source: str | os.PathLike | Traversable) -> list[dict]:
    """The records of a JSONL file (a path or an `importlib.resources` file), blank lines skipped.

    Raises:
        ValueError: a line that is not valid JSON (the message names the line).
    """
    source = Path(source) if isinstance(source, str | os.PathLike) else source
    rows = []
    with source.open("r", encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{source}: line {line_no} is not valid JSON ({err}).") from err
    return rows
