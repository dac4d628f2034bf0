"""GRPO with process-reward modules: the `train_grpo.py` command (math problems, or multi-hop QA with StepGap).

    accelerate launch train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml
    python train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml --max_steps 5
    ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml
    procrl train-grpo --config configs/grpo/svamp_smollm2_picsar.yaml      # the same command
    procrl demo --max_steps 3                                              # with the demo config (procrl/cli.py)

(On CPU, `accelerate launch --num_processes 2 --cpu` starts only ONE process; use torchrun as above for two
ranks.) The job: load the policy (`model_name_or_path: default` is the embedded SmolLM2-135M-Instruct), open the
task, build its rewards, evaluate the policy greedily on the eval sets, train with `ProcessGRPOTrainer`, evaluate
again, and write `summary.json` and `curves.png` into `output_dir`; the main process prints the report.

Settings (`TrlParser`: `--config x.yaml`, flags override it, `--a_b` or `--a-b`): `GRPOScriptArguments` (below:
task, data, prompt, rewards), `MathTaskArguments`, `SearchTaskArguments` (`procrl.trainers.tasks.arguments`),
`FRSArguments` (`procrl.trainers.callbacks`), `ProcessGRPOConfig` (`trl.GRPOConfig` + procrl's) and `ModelConfig`.

`task: math` (default; `procrl.trainers.tasks.math`) trains on math word problems; `task: search`
(`procrl.trainers.tasks.search`; configs/grpo/stepgap_2wiki_smollm2.yaml, launch/grpo_stepgap.sh) on multi-hop QA
with search episodes and the StepGap reward, without the math evaluation. `reward_funcs` names come from
`REWARDS`, the one reward registry, or are dotted paths of your own reward functions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from trl import ModelConfig, TrlParser, get_peft_config

from procrl.data_builders.datasets import BUILTIN_DATASETS
from procrl.models import load_policy
from procrl.reporting import finish_wandb_run, format_summary, plot_curves
from procrl.rewards.outcome import ANSWER_EXTRACTION_MODES
from procrl.trainers.callbacks import FRSArguments, add_frs_callback
from procrl.trainers.evaluation import evaluate
from procrl.trainers.grpo import ProcessGRPOConfig, ProcessGRPOTrainer
from procrl.trainers.tasks.arguments import SEARCH_TEMPLATES, MathTaskArguments, SearchTaskArguments
from procrl.trainers.tasks.rewards import Build, RewardEntry, RewardSet, build_rewards, scalar_reward_weights
from procrl.utils import default_wandb_offline, get_logger, import_object, json_safe

logger = get_logger(__name__)

# task name -> its opener (`procrl.trainers.tasks`), imported when a run uses the task
TASKS = {"math": "procrl.trainers.tasks.math:open_math_task", "search": "procrl.trainers.tasks.search:open_search_task"}

_PUM = "procrl.rewards.pum_rewards"
_STEPGAP = "procrl.rewards.stepgap.reward"


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


# THE reward registry: reward_funcs name -> the task it serves and how it is built (`procrl.trainers.tasks.rewards`:
# the callable by dotted path, imported only when a run names it, and its settings). In advantage_mode process /
# mixed, `pum` and `stepgap` are the step scorer (their `step` build) instead of a scalar reward.
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
}
PUM_REWARDS = ("pum", "pum_min", "pum_last")  # the rewards that need pum_model


@dataclass
class GRPOScriptArguments:
    """What to train on and which rewards to use, common to both tasks (the task's own settings are
    `MathTaskArguments` / `SearchTaskArguments`; `ProcessGRPOConfig` holds the optimisation)."""

    task: str = field(
        default="math",
        metadata={
            "help": "'math' (single-turn math problems, math rewards, before/after evaluation) or 'search' "
            "(multi-hop QA with <search> episodes and the StepGap reward; dataset_name is then a QA set such as "
            "2wiki_dev_sample, reward_funcs names em / stepgap, and the math evaluation is skipped)."
        },
    )
    dataset_name: str = field(
        default="svamp",
        metadata={"help": "Training problems: a built-in set (svamp, gsm8k, math500), a hub id or a local file/dir."},
    )
    dataset_start: int = field(default=0, metadata={"help": "First training row (0-based, inclusive)."})
    dataset_end: int | None = field(default=700, metadata={"help": "End training row (exclusive); null = all."})
    prompt_template: str = field(
        default="one_shot",
        metadata={
            "help": "'one_shot' (ends answers with 'The answer is N'), 'zero_shot', or a template with {question}. "
            "task=search: 'search_one_shot' (or one_shot: the search instruction after one worked search episode), "
            "'search' (or zero_shot: the instruction alone), or a template with {question}."
        },
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["outcome", "picsar_bonus"],
        metadata={
            "help": "Reward functions: registry names (task=math: outcome, picsar_bonus; pum, pum_min, pum_last with "
            "pum_model; task=search: em, stepgap) or dotted paths 'module.func' / 'module:func'. With advantage_mode "
            "process or mixed, 'pum' / 'stepgap' is not a scalar reward but the step scorer behind the process "
            "advantages (its reward_weights entry is dropped)."
        },
    )
    answer_extraction: str = field(
        default="strict",
        metadata={
            "help": "How the outcome reward (and task/accuracy, the before/after evaluation) finds a completion's final "
            "answer: 'strict' (an explicit marker: the last \\boxed{}, 'The answer is ...' or '#### ...'; a sound "
            "default for RL rewards, since a policy could learn to spray numbers) or 'flexible' (also the last number "
            "of the final sentence, e.g. 'The total is $9{,}500$.'). The reward is then named outcome_reward_flexible "
            "and completions without an answer are logged as task/no_answer_<mode>."
        },
    )
    pum_model: str | None = field(
        default=None,
        metadata={
            "help": "Prefix Utility Model for the pum* rewards: a train_pum.py output directory (full checkpoint or "
            "LoRA adapter with its score head). Scores U(x, y) of the problem (`question` column) and the completion."
        },
    )
    pum_batch_size: int = field(default=16, metadata={"help": "Inputs per PUM forward pass."})
    picsar_evaluator: str | None = field(
        default=None, metadata={"help": "Model for PiCSAR's answer term; null = the live policy."}
    )
    picsar_normalize: str = field(
        default="mean", metadata={"help": "PiCSAR bonus: 'mean' (per-token mean of each term) or 'sum'."}
    )

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r} must be one of {tuple(TASKS)} (e.g. task: search for StepGap)")
        search = self.task == "search"
        if search and "{question}" not in self.prompt_template and self.prompt_template not in SEARCH_TEMPLATES:
            raise ValueError(
                f"task=search: prompt_template={self.prompt_template!r} is not one of {SEARCH_TEMPLATES} and has "
                "no {question} placeholder; use search_one_shot (the StepGap configs' default) or a template."
            )
        if self.answer_extraction not in ANSWER_EXTRACTION_MODES:
            raise ValueError(
                f"answer_extraction={self.answer_extraction!r} must be one of {ANSWER_EXTRACTION_MODES}: use "
                "answer_extraction: strict (the default: boxed / 'The answer is' / '####' answers only) or "
                "answer_extraction: flexible (also the last number of the final sentence)."
            )
        if search and self.answer_extraction != "strict":
            raise ValueError(
                f"answer_extraction={self.answer_extraction!r} has no effect with task=search: its reward (EM) compares "
                "normalised answer strings and never extracts numbers. Remove answer_extraction from the config (or set "
                "answer_extraction: strict), or use task: math."
            )
        if search and self.dataset_name in BUILTIN_DATASETS:
            raise ValueError(
                f"task=search cannot train on the math set {self.dataset_name!r}: set dataset_name: 2wiki_dev_sample "
                "(or a JSONL file of {question, answer} records)."
            )
        if self.picsar_normalize not in ("mean", "sum"):
            raise ValueError(f"picsar_normalize must be 'mean' or 'sum', got {self.picsar_normalize!r}")
        if self.pum_batch_size < 1:
            raise ValueError(f"pum_batch_size must be >= 1, got {self.pum_batch_size}")
        if self.dataset_end is not None and self.dataset_end <= self.dataset_start:
            raise ValueError(f"dataset_end ({self.dataset_end}) must be > dataset_start ({self.dataset_start})")
        self._check_reward_names()

    def _check_reward_names(self) -> None:
        if not self.reward_funcs:
            raise ValueError("reward_funcs is empty: give at least one, e.g. [outcome]")
        own = sorted(name for name, entry in REWARDS.items() if entry.task == self.task)
        other = [name for name in self.reward_funcs if name in REWARDS and REWARDS[name].task != self.task]
        if other:
            fix = (
                "set reward_funcs: [em, stepgap] (and reward_weights: [0.0, 1.0], since the StepGap reward already "
                "contains EM)"
                if self.task == "search"
                else f"use task: search, or rewards of {own}"
            )
            raise ValueError(f"task={self.task} cannot use the {REWARDS[other[0]].task} rewards {other}: {fix}.")
        for name in self.reward_funcs:
            if name not in REWARDS and "." not in name and ":" not in name:
                raise ValueError(f"unknown reward function {name!r}: use one of {own} or 'module.func'")
        uses_pum = [name for name in self.reward_funcs if name in PUM_REWARDS]
        if uses_pum and not self.pum_model:
            raise ValueError(
                f"reward_funcs {uses_pum} need a Prefix Utility Model: set pum_model to a train_pum.py output "
                "directory (accelerate launch train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml)."
            )


class GRPOParser(TrlParser):
    """`TrlParser` that derives TRL's `reward_weights` from the parsed values BEFORE `ProcessGRPOConfig` is built:
    one per scalar reward, the step scorer's dropped in process/mixed mode. No parsed config changes afterwards."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, remaining = super().parse_known_args(args, namespace)
        if getattr(namespace, "task", None) in TASKS and getattr(namespace, "reward_funcs", None):
            namespace.reward_weights = scalar_reward_weights(
                REWARDS, namespace.task, namespace.reward_funcs, namespace.reward_weights, namespace.advantage_mode
            )
        return namespace, remaining


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """This docstring as written, and every flag's default."""


def make_parser() -> GRPOParser:
    """The command's parser; `parse_args_and_config(argv)` returns the six dataclasses in `GRPOJob` order."""
    parser = GRPOParser(
        (GRPOScriptArguments, MathTaskArguments, SearchTaskArguments, FRSArguments, ProcessGRPOConfig, ModelConfig),
        prog="train_grpo.py",
        description=__doc__,
        formatter_class=_HelpFormatter,
    )
    for action in parser._actions:  # argparse %-formats help: a lone "%" ("the top K% ...") would break --help
        if action.help:
            action.help = re.sub(r"(?<!%)%(?![(%])", "%%", action.help)
    return parser


class GRPOJob(NamedTuple):
    """One run's parsed settings."""

    script: GRPOScriptArguments
    math: MathTaskArguments
    search: SearchTaskArguments
    frs: FRSArguments
    training: ProcessGRPOConfig
    model: ModelConfig


def parse_args(argv: list[str] | None = None) -> GRPOJob:
    """`--config x.yaml` plus flag overrides (default: the command line) -> `GRPOJob`.

    Raises:
        ValueError: a setting a dataclass refuses (the message says how to fix it), or `reward_weights` that do not
            match `reward_funcs`, or process/mixed mode without a step scorer or without a scalar reward.
    """
    return GRPOJob(*make_parser().parse_args_and_config(args=argv))


def make_rewards(job: GRPOJob, task=None) -> RewardSet:
    """The run's rewards from `REWARDS` (`task`: the opened task; the math rewards do not read it)."""
    return build_rewards(REWARDS, job.script, task, job.training.advantage_mode, job.training.reward_weights)


def run(job: GRPOJob) -> dict:
    """Evaluate, train with GRPO, evaluate again; returns the summary also written to `summary.json`."""
    with contextlib.ExitStack() as stack:  # closes what a task opened (the StepGap judge server), also on error
        return _run(job, stack)


def _run(job: GRPOJob, stack: contextlib.ExitStack) -> dict:
    script, training, model_args = job.script, job.training, job.model
    t0 = time.perf_counter()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # we use rollout_func knowingly (TRL pinned)
    default_wandb_offline(training.report_to)
    if job.math.run_eval and training.deepspeed and "zero3" in str(training.deepspeed).lower():
        raise ValueError(
            "The before/after evaluation generates on rank 0 alone, which hangs with ZeRO-3 (partitioned weights). "
            "Set run_eval: false, or use ZeRO-2."
        )
    model, tokenizer = load_policy(
        model_args.model_name_or_path or "default",
        revision=model_args.model_revision,
        dtype=model_args.dtype,
        attn_implementation=model_args.attn_implementation,
        device=training.device,
    )
    open_task = import_object(TASKS[script.task])  # a context manager: closes what the task started
    task_args = job.search if script.task == "search" else job.math
    task = stack.enter_context(open_task(script, task_args, output_dir=training.output_dir))
    if script.task == "search" and job.math.run_eval:
        logger.info("task=search: the math before/after evaluation is skipped (EM is logged during training)")
    rewards = make_rewards(job, task)
    # One answer check per run: task/accuracy and the before/after evaluation use the task's outcome check (the very
    # object among reward_funcs when the outcome reward is one, so the trainer reuses its column).
    outcome_func = next(
        (f for f in rewards.funcs if f is task.outcome_func or f == task.outcome_func), task.outcome_func
    )
    trainer_kwargs = {} if task.rollout_func is None else {"rollout_func": task.rollout_func}
    # The trainer binds the policy to the rewards that need it (PiCSAR's answer term), also for the evaluation below.
    trainer = ProcessGRPOTrainer(
        model=model,
        reward_funcs=rewards.funcs,
        args=training,
        train_dataset=task.train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        outcome_func=outcome_func,
        step_reward_func=rewards.step_reward_func,
        **trainer_kwargs,
    )

    eval_kwargs = {
        "outcome_func": outcome_func,
        "reward_funcs": rewards.funcs,
        "reward_weights": rewards.weights,
        "batch_size": job.math.eval_batch_size,
        "progress": training.process_index == 0,
    }

    def run_eval(stage: str, policy) -> list[dict]:
        results = []
        for label, data, tokens in task.eval_sets:
            result = evaluate(policy, tokenizer, data, name=label, max_new_tokens=tokens, **eval_kwargs)
            logger.info("%s %s: accuracy %.3f", stage, label, result.accuracy)
            results.append(result.to_dict())
        return results

    before = run_eval("before", model) if training.process_index == 0 else []
    if task.frs_template is not None:  # FRS judges math reasoning; no-op unless frs_every_n_steps > 0
        add_frs_callback(job.frs, trainer, prompt_template=task.frs_template)
    train_start = time.perf_counter()
    train_output = trainer.train()
    train_time = time.perf_counter() - train_start
    trainer.save_model(training.output_dir)
    policy = trainer.accelerator.unwrap_model(trainer.model)
    after = run_eval("after", policy) if trainer.accelerator.is_main_process else []

    summary = {
        "model": model_args.model_name_or_path or "default",
        "task": script.task,
        "world_size": trainer.accelerator.num_processes,
        "train": {
            "dataset": f"{script.dataset_name}[{script.dataset_start}:{script.dataset_end}]",
            "steps": trainer.state.global_step,
            "wall_time_s": train_time,
            "train_loss": train_output.training_loss,
            "reward_funcs": [getattr(f, "__name__", str(f)) for f in rewards.funcs],
            "reward_weights": list(rewards.weights),
            "answer_extraction": script.answer_extraction,
        },
        "before": before,
        "after": after,
        "log_history": trainer.state.log_history,
        "total_wall_time_s": time.perf_counter() - t0,
    }
    task_summary = task.summary()
    if task_summary is not None:
        summary[script.task] = task_summary
    if trainer.accelerator.is_main_process:
        out = Path(training.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        plot_curves(trainer.state.log_history, out / "curves.png", title=Path(training.output_dir).name)
        summary["curves"] = str(out / "curves.png")
        summary["wandb_dir"] = finish_wandb_run(summary)
        (out / "summary.json").write_text(json.dumps(json_safe(summary), indent=2))
        summary["summary_path"] = str(out / "summary.json")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Parse `--config x.yaml` plus flag overrides, run the job and print its report (main process); returns the
    exit status (0 on success, 2 on bad settings, with the message)."""
    try:
        job = parse_args(argv)
    except ValueError as error:  # a dataclass's __post_init__, the reward weights, or an unknown key of --config
        print(f"train_grpo.py: error: {error}", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    summary = run(job)
    if job.training.process_index == 0:
        print(format_summary(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
