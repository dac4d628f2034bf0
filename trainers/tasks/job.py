"""The GRPO job of `train_grpo.py` (`procrl.scripts.train_grpo`, `procrl train-grpo`, `procrl demo`): load the policy,
open the task, build its rewards, evaluate greedily, train with `ProcessGRPOTrainer`, evaluate again, and plot the
curves.

`GRPOJob` is one run's parsed settings (the command's parser returns the dataclasses of `JOB_ARGUMENTS`, in
`GRPOJob`'s field order) and checks the settings that span two of them; `run_grpo_job(job)` runs it and returns a
`GRPOResult`: the summary (the run record's `result`) and the files it wrote beside it (the record's `files`). The
command (`procrl.scripts.train_grpo`) records it with `procrl.experiment.tracking.track_run` and prints it. The
rewards come from the registry of `procrl.trainers.tasks.rewards` (`make_rewards`); the task from the opener
`TASKS` names (`procrl.trainers.tasks.math` / `.search`), imported only when a run uses the task.
"""

from __future__ import annotations

import contextlib
import os
import pkgutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from trl import ModelConfig, get_peft_config

from procrl.evals.accuracy import evaluate, paired_comparison
from procrl.evals.reporting import finish_wandb_run, plot_curves
from procrl.evals.stats import format_estimate
from procrl.models import load_policy
from procrl.trainers.advantages import func_name
from procrl.trainers.grpo import ProcessGRPOConfig, ProcessGRPOTrainer
from procrl.trainers.monitoring import COMPLETIONS_FILE
from procrl.trainers.tasks import GRPOTask
from procrl.trainers.tasks.arguments import (
    TASKS,
    FRSCallbackArguments,
    GRPOScriptArguments,
    MathTaskArguments,
    SearchTaskArguments,
)
from procrl.trainers.tasks.rewards import REWARDS, RewardSet, build_rewards
from procrl.trainers.vllm_colocate import colocate_engine
from procrl.utils import default_wandb_offline, get_logger

logger = get_logger(__name__)

__all__ = ["JOB_ARGUMENTS", "GRPOJob", "GRPOResult", "make_rewards", "run_grpo_job"]

FRS_CALLBACK = "procrl.trainers.frs_callback:add_frs_callback"  # attached when frs_every_n_steps > 0
# The dataclasses the command parses, in GRPOJob's field order
JOB_ARGUMENTS = (
    GRPOScriptArguments,
    MathTaskArguments,
    SearchTaskArguments,
    FRSCallbackArguments,
    ProcessGRPOConfig,
    ModelConfig,
)


@dataclass(frozen=True)
class GRPOJob:
    """One run's parsed settings: `GRPOJob(*parser.parse_args_and_config(argv))` with the dataclasses of
    `JOB_ARGUMENTS`.

    Attributes:
        script: task, data and rewards. math, search: the two tasks' own settings. frs: FRS during training.
        training: `ProcessGRPOConfig` (TRL's `GRPOConfig` + procrl's). model: TRL's `ModelConfig` (the policy).

    Raises:
        ValueError: advantage_mode process / mixed without `step_reward_func`, outcome with one, or
            `reward_weights` that do not have one weight per `reward_funcs` entry (each message says the fix).
    """

    script: GRPOScriptArguments
    math: MathTaskArguments
    search: SearchTaskArguments
    frs: FRSCallbackArguments
    training: ProcessGRPOConfig
    model: ModelConfig

    def __post_init__(self) -> None:
        mode, scorer = self.training.advantage_mode, self.script.step_reward_func
        if mode != "outcome" and scorer is None:
            scorers = [name for name, entry in REWARDS.items() if entry.task == self.script.task and entry.step]
            raise ValueError(
                f"advantage_mode={mode!r} needs a step scorer: set step_reward_func ({' or '.join(scorers)}, or an "
                "import path 'package.module:name' of your own), or use advantage_mode: outcome."
            )
        if mode == "outcome" and scorer is not None:
            raise ValueError(
                f"step_reward_func={scorer!r} is used only with advantage_mode process or mixed: set advantage_mode: "
                "mixed (process advantage + process_alpha x outcome advantage) or process, or remove step_reward_func."
            )
        weights, names = self.training.reward_weights, self.script.reward_funcs
        if weights is not None and len(weights) != len(names):
            raise ValueError(
                f"reward_weights {list(weights)} must have one weight per reward_funcs entry {list(names)} (the step "
                "scorer has none)."
            )


class GRPOResult(NamedTuple):
    """What `run_grpo_job` returns.

    Attributes:
        summary: JSON-able (NaN aside): model, task, world size, `train` (dataset slice, steps, wall time in s, loss,
            reward names and weights, step scorer name or None, answer extraction), `before` / `after`
            (`EvalResult.to_dict()` rows; empty off the main process), TRL's `log_history`, `total_wall_time_s`,
            and the task's own facts under its name (task=search: retriever, verifier, judge statistics).
        files: {role: path} of what the main process wrote into `output_dir`: `checkpoint` (the trained model),
            `curves` (curves.png), `completions` (completions.jsonl, when written), `frs_step<N>` (FRS reports) and
            `wandb` (the local wandb run directory, when one is active); empty off the main process.
    """

    summary: dict
    files: dict[str, str]


def make_rewards(job: GRPOJob, task: GRPOTask | None = None) -> RewardSet:
    """The run's rewards, weights and step scorer (`procrl.trainers.tasks.rewards.build_rewards`; `task`: the
    opened task, which the stepgap builds read; the math rewards and import paths do not)."""
    return build_rewards(job.script, task, job.training.reward_weights)


def run_grpo_job(job: GRPOJob) -> GRPOResult:
    """Evaluate, train with GRPO, evaluate again; returns the summary and the files written (`GRPOResult`).

    The order of operations is the command's contract (a rerun with the same settings gives the same numbers):
    the policy is loaded, the task opened, the rewards built (`make_rewards(job, task)`: after the task, whose
    verifier the StepGap reward reads; the PUM loads here, so a bad `pum_model` fails before any evaluation), then
    the trainer, and only then the "before" evaluation. The trainer comes first because it binds the policy, once,
    to the rewards that need it (PiCSAR's answer term), which the evaluation also scores with. By then TRL's
    `set_seed` has run (`Trainer.__init__`), and with `use_peft` TRL has injected the LoRA adapters into the policy
    with B = 0, so the policy's outputs are still those of the base model; the evaluation is greedy (on TRL's
    colocated vLLM engine when `use_vllm` is on in colocate mode, its weights synced from the policy first). Only
    the main process evaluates (before on process 0, after on the main process) and writes the files.

    Raises:
        ValueError: `run_eval` with DeepSpeed ZeRO-3 (the evaluation generates on rank 0 alone and would hang).
    """
    with contextlib.ExitStack() as stack:  # closes what a task opened (the StepGap judge server), also on error
        return _run(job, stack)


def _run(job: GRPOJob, stack: contextlib.ExitStack) -> GRPOResult:
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
    open_task = pkgutil.resolve_name(TASKS[script.task])  # a context manager: closes what the task started
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

    # With TRL's colocated vLLM engine the evaluation generates on it too (the weights synced first for "after").
    engine = colocate_engine(trainer) if trainer.use_vllm and trainer.vllm_mode == "colocate" else None

    def run_eval(stage: str, policy) -> list[dict]:
        results = []
        for label, data, tokens in task.eval_sets:
            result = evaluate(policy, tokenizer, data, name=label, max_new_tokens=tokens, engine=engine, **eval_kwargs)
            logger.info("%s %s: accuracy %s", stage, label, format_estimate(result.accuracy))  # "–": no problem
            results.append(result.to_dict())
        return results

    # After the trainer is built (docstring): seeded by TRL, policy bound to the rewards, LoRA B = 0 (base outputs).
    if engine is not None and task.eval_sets:
        trainer.vllm_generation.sync_weights()  # the engine loaded the checkpoint; the policy is what counts
    before = run_eval("before", model) if training.process_index == 0 else []
    if task.frs_template is not None and job.frs.frs_every_n_steps > 0:  # FRS judges math reasoning
        # imported only when on (the callback loads the FRS and judge code); the run's one judge: its JudgeArguments
        # are parsed as part of SearchTaskArguments
        add_frs_callback = pkgutil.resolve_name(FRS_CALLBACK)
        add_frs_callback(job.frs, trainer, judge=job.search, prompt_template=task.frs_template)
    train_start = time.perf_counter()
    train_output = trainer.train()
    train_time = time.perf_counter() - train_start
    trainer.save_model(training.output_dir)
    # without accelerate's autocast wrapper (bf16: auto): 'after' runs in the same precision as 'before'
    policy = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    if engine is not None and task.eval_sets:
        trainer.vllm_generation.sync_weights()  # on every rank: gathering sharded parameters is collective
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
            "step_reward_func": None if rewards.step_reward_func is None else func_name(rewards.step_reward_func),
            "answer_extraction": script.answer_extraction,
        },
        "before": before,
        "after": after,
        # after - before on the same problems, with paired bootstrap intervals (`paired_comparison`)
        "paired": {b["name"]: paired_comparison(b, a) for b in before for a in after if a["name"] == b["name"]},
        "log_history": trainer.state.log_history,
        "total_wall_time_s": time.perf_counter() - t0,
    }
    task_summary = task.summary()
    if task_summary is not None:
        summary[script.task] = task_summary
    files: dict[str, str] = {}
    if trainer.accelerator.is_main_process:
        out = Path(training.output_dir)
        plot_curves(trainer.state.log_history, out / "curves.png", title=out.name)
        files = {"checkpoint": str(out), "curves": str(out / "curves.png")}
        if (out / COMPLETIONS_FILE).is_file():
            files["completions"] = str(out / COMPLETIONS_FILE)
        files.update({path.stem: str(path) for path in sorted(out.glob("frs_step*.json"))})  # FRSCallback's
        wandb_dir = finish_wandb_run(summary)
        if wandb_dir:
            files["wandb"] = wandb_dir
    return GRPOResult(summary, files)
