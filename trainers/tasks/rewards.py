"""The reward registry of the GRPO job (`REWARDS`) and how the settings `reward_funcs` and `step_reward_func`
become TRL reward functions and a step scorer (`build_rewards`).

A registry entry (`RewardEntry`) names the task whose data the reward reads and, by import path, the library
callable that builds it and the settings it is called with, so a module is imported only when a run names its reward
(the outcome + PiCSAR demo never imports the PUM or StepGap code). The entries with a `step` build (`pum`,
`stepgap`, `oracle`) may also be named as the run's step scorer.

Your own reward or step scorer is named by import path instead: "package.module:name" (or "package.module.name";
every name with "." or ":" is an import path, registry names have neither). The object there is used as it is,
never called to build one (give it settings with a module-level instance or `functools.partial`):

- in `reward_funcs`: a TRL reward function, `f(prompts, completions, **kwargs) -> list[float | None]`, one value
  per completion (None: does not apply). TRL passes `completion_ids`, the dataset's columns (`answer`,
  `question`, ...) and the rollout's extra fields (`completion_logps`, ...) as keywords; TRL logs it as
  `rewards/<its __name__>/mean` and weighs it with its `reward_weights` entry. Any task may use it.
- as `step_reward_func` (with `advantage_mode: process | mixed`): a step scorer, `f(prompts, completions,
  completion_ids, **kwargs) -> list[StepRewards | None]` (`procrl.step_rewards.StepRewardFunc`): one
  `StepRewards` (per-step values, token boundaries into `completion_ids`) or None per completion. It has no
  `reward_weights` entry; `process_alpha` mixes it with the outcome advantage in mixed mode.

A placebo arm names any of these with the prefix `shuffled:` (`shuffled:pum`, `shuffled:pkg.mod:obj`): the same
reward with its values shuffled within the batch (`procrl.rewards.placebo`), in `reward_funcs` or as
`step_reward_func`.

Import paths are resolved when the settings are parsed (`check_reward_names`, from `GRPOScriptArguments`): one
that does not import, or names something that is not callable, is a `ValueError` naming the setting, the path and
the failure, before any model loads.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from procrl.rewards.placebo import ShuffledReward, ShuffledStepRewards

__all__ = [
    "PLACEBO_PREFIX",
    "PUM_REWARDS",
    "REWARDS",
    "Build",
    "RewardEntry",
    "RewardSet",
    "build_rewards",
    "check_reward_names",
    "is_import_path",
    "split_placebo",
    "resolve_import_path",
]


@dataclass(frozen=True)
class Build:
    """One way to build a reward function (or step scorer) from a run's settings.

    Attributes:
        target: "package.module:name" of a library callable; with `settings` None, the object there is the reward
            function itself (e.g. `procrl.rewards.qa:em_reward`).
        settings: `(script_args, task) -> keyword arguments` of the call (the run's `GRPOScriptArguments` and the
            opened task, e.g. the search task's verifier).
        load: an attribute read once right after building, to load a model now rather than at the first reward
            call ("pum": a bad `pum_model` then fails before evaluation and training, not after).
    """

    target: str
    settings: Callable[[Any, Any], dict[str, Any]] | None = None
    load: str | None = None

    def __call__(self, script_args, task) -> Callable:
        obj = pkgutil.resolve_name(self.target)
        func = obj if self.settings is None else obj(**self.settings(script_args, task))
        if self.load is not None:
            getattr(func, self.load)
        return func


@dataclass(frozen=True)
class RewardEntry:
    """A registry entry: the task whose data and settings the reward needs, its scalar build and, for rewards that
    score steps, the step-scorer build used when the entry is named as `step_reward_func`."""

    task: str
    scalar: Build
    step: Build | None = None


class RewardSet(NamedTuple):
    """What a run trains with: TRL reward functions in `reward_funcs` order, their weights (one each), and the step
    scorer or None."""

    funcs: list[Callable]
    weights: list[float]
    step_reward_func: Callable | None


# The settings each reward is built with, from (GRPOScriptArguments, the opened task).
def _outcome(args, task) -> dict:
    return {"answer_extraction": args.answer_extraction}


def _picsar(args, task) -> dict:
    return {"evaluator": args.picsar_evaluator, "normalize": args.picsar_normalize}


def _pum(mode: str | None):
    def settings(args, task) -> dict:
        return {"model": args.pum_model, "batch_size": args.pum_batch_size, **({"mode": mode} if mode else {})}

    return settings


def _stepgap(args, task) -> dict:
    return {"verifier": task.verifier, "config": task.reward_config}


def _oracle(args, task) -> dict:
    return {"penalty": args.oracle_penalty}


_PUM = "procrl.rewards.pum_rewards"
_STEPGAP = "procrl.rewards.stepgap.reward"
_ORACLE = "procrl.rewards.oracle.scorer"

# THE reward registry: name -> the task it serves and how it is built (the callable by import path, imported only
# when a run names it, and its settings). `pum`, `stepgap` and `oracle` are also step scorers (their `step` build).
# The oracle rewards need the `gold_steps` column of a step-checkable task (procrl.data_builders.arithmetic).
REWARDS: dict[str, RewardEntry] = {
    "outcome": RewardEntry("math", Build("procrl.rewards.outcome:get_outcome_reward", _outcome)),
    "picsar_bonus": RewardEntry("math", Build("procrl.rewards.picsar:get_picsar_bonus", _picsar)),
    "pum": RewardEntry(
        "math",
        Build(f"{_PUM}:get_pum_reward", _pum("full"), load="pum"),
        step=Build(f"{_PUM}:get_pum_step_rewards", _pum(None), load="pum"),
    ),
    "pum_min": RewardEntry("math", Build(f"{_PUM}:get_pum_reward", _pum("min"), load="pum")),
    "pum_last": RewardEntry("math", Build(f"{_PUM}:get_pum_reward", _pum("last"), load="pum")),
    "em": RewardEntry("search", Build("procrl.rewards.qa:em_reward")),
    "stepgap": RewardEntry(
        "search", Build(f"{_STEPGAP}:StepGapReward", _stepgap), step=Build(f"{_STEPGAP}:StepGapStepRewards", _stepgap)
    ),
    "oracle_process": RewardEntry("math", Build(f"{_ORACLE}:oracle_process_reward")),
    "oracle": RewardEntry(
        "math",
        Build(f"{_ORACLE}:get_oracle_reward", _oracle),
        step=Build(f"{_ORACLE}:get_oracle_step_rewards", _oracle),
    ),
}
PUM_REWARDS = ("pum", "pum_min", "pum_last")  # the names that need pum_model


PLACEBO_PREFIX = "shuffled:"


def split_placebo(name: str) -> tuple[str, bool]:
    """`(the reward's own name, whether it is the placebo)`: `shuffled:<name>` names `<name>`'s placebo.

    >>> split_placebo("shuffled:pum"), split_placebo("outcome")
    (('pum', True), ('outcome', False))
    """
    if name.startswith(PLACEBO_PREFIX):
        return name[len(PLACEBO_PREFIX) :], True
    return name, False


def is_import_path(name: str) -> bool:
    """Whether a `reward_funcs` / `step_reward_func` name is an import path ("." or ":") rather than a registry
    name."""
    return "." in name or ":" in name


def resolve_import_path(path: str, setting: str) -> Callable:
    """The callable an import path names, "package.module:name" or "package.module.name" (`pkgutil.resolve_name`).

    Args:
        path: the import path.
        setting: the setting it comes from, for the error ("reward_funcs", "step_reward_func").

    Raises:
        ValueError: the module cannot be imported (or raises while importing), it has no such name, or the object
            is not callable; the message names the setting, the path and the failure.
    """
    try:
        obj = pkgutil.resolve_name(path)
    except Exception as error:  # a user module may fail in any way while importing: each is this setting's error
        raise ValueError(
            f"{setting}: cannot import {path!r} ({type(error).__name__}: {error}); give 'package.module:name' of a "
            "module on the Python path (installed, or under the working directory)."
        ) from error
    if not callable(obj):
        raise ValueError(f"{setting}: {path!r} is a {type(obj).__name__}, not a callable reward function.")
    return obj


def check_reward_names(task: str, reward_funcs: Sequence[str], step_reward_func: str | None) -> None:
    """Check the reward names of a run's settings; import paths are resolved (imported) here.

    Args:
        task: "math" or "search".
        reward_funcs: registry names of `task` or import paths.
        step_reward_func: None, a registry name of `task` with a step scorer (`pum`, `stepgap`, `oracle`) or an
            import path.

    Raises:
        ValueError: no reward, a registry name of the other task or of no task, a step scorer name without a step
            build, the same name in both settings (it would count twice), or an import path as
            `resolve_import_path` refuses it.
    """
    reward_funcs = [split_placebo(name)[0] for name in reward_funcs]
    step_reward_func = None if step_reward_func is None else split_placebo(step_reward_func)[0]
    own = sorted(name for name, entry in REWARDS.items() if entry.task == task)
    scorers = sorted(name for name, entry in REWARDS.items() if entry.task == task and entry.step is not None)
    if not reward_funcs:
        first = next(name for name, entry in REWARDS.items() if entry.task == task)  # the task's basic reward
        raise ValueError(f"reward_funcs is empty: give at least one, e.g. [{first}]")
    other = [name for name in reward_funcs if name in REWARDS and REWARDS[name].task != task]
    if other:
        fix = (
            "set reward_funcs: [em, stepgap] (and reward_weights: [0.0, 1.0], since the StepGap reward already "
            "contains EM)"
            if task == "search"
            else f"use task: search, or rewards of {own}"
        )
        raise ValueError(f"task={task} cannot use the {REWARDS[other[0]].task} rewards {other}: {fix}.")
    for name in reward_funcs:
        if is_import_path(name):
            resolve_import_path(name, "reward_funcs")
        elif name not in REWARDS:
            raise ValueError(
                f"unknown reward function {name!r}: use one of {own} or an import path 'package.module:name'"
            )
    if step_reward_func is None:
        return
    if is_import_path(step_reward_func):
        resolve_import_path(step_reward_func, "step_reward_func")
    elif step_reward_func not in scorers:
        raise ValueError(
            f"step_reward_func={step_reward_func!r} is not a step scorer of task={task}: use one of {scorers} or an "
            "import path 'package.module:name' of a callable returning one procrl.step_rewards.StepRewards (or None) "
            "per completion."
        )
    if step_reward_func in reward_funcs:
        raise ValueError(
            f"{step_reward_func!r} is both in reward_funcs and step_reward_func, so it would count twice: remove it "
            "from reward_funcs (the step scorer gives the per-step rewards)."
        )


def build_rewards(script_args, task, weights: Sequence[float] | None) -> RewardSet:
    """Build the rewards and the step scorer a run's settings name (names checked by `check_reward_names`).

    Args:
        script_args: the run's `GRPOScriptArguments` (`reward_funcs`, `step_reward_func` and the reward settings).
        task: the opened task (`procrl.trainers.tasks.GRPOTask`; the stepgap builds read its verifier), or None
            for rewards that do not read it (the math ones and import paths).
        weights: `ProcessGRPOConfig.reward_weights`, one per `reward_funcs` entry; None = 1.0 each.

    Raises:
        ValueError: a weight count that does not match `reward_funcs`, or an import path that no longer resolves.
    """
    funcs = []
    for spelled in script_args.reward_funcs:
        name, placebo = split_placebo(spelled)
        func = (
            resolve_import_path(name, "reward_funcs")
            if is_import_path(name)
            else REWARDS[name].scalar(script_args, task)
        )
        funcs.append(ShuffledReward(func, seed=script_args.placebo_seed) if placebo else func)
    step_reward_func = None
    if script_args.step_reward_func is not None:
        name, placebo = split_placebo(script_args.step_reward_func)
        if is_import_path(name):
            step_reward_func = resolve_import_path(name, "step_reward_func")
        else:
            step_reward_func = REWARDS[name].step(script_args, task)
        if placebo:
            step_reward_func = ShuffledStepRewards(step_reward_func, seed=script_args.placebo_seed)
    weights = [1.0] * len(funcs) if weights is None else list(weights)
    if len(weights) != len(funcs):
        raise ValueError(
            f"reward_weights {weights} must have one weight per reward_funcs entry {script_args.reward_funcs}."
        )
    return RewardSet(funcs, weights, step_reward_func)
