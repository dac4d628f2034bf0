"""The GRPO job of `train_grpo.py` (`procrl.scripts.train_grpo`, `procrl train-grpo`, `procrl demo`): load the policy,
open the task, build its rewards, evaluate greedily, train with `ProcessGRPOTrainer`, evaluate again, and write
`summary.json` and `curves.png` into `output_dir`.

The command parses the settings and owns the reward registry (`procrl.scripts.train_grpo.REWARDS`); it hands this
job the parsed settings and a reward builder, and prints the returned summary. `TASKS` maps a `task` setting to the
opener of its task module (`procrl.trainers.tasks.math` / `.search`), imported only when a run uses the task.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trl import get_peft_config

from procrl.models import load_policy
from procrl.experiment.reporting import finish_wandb_run, plot_curves
from procrl.evals.stats import format_estimate
from procrl.evals.accuracy import evaluate
from procrl.trainers.frs_callback import add_frs_callback
from procrl.trainers.grpo import ProcessGRPOTrainer
from procrl.trainers.tasks.rewards import RewardSet
from procrl.trainers.vllm_colocate import colocate_engine
from procrl.utils import default_wandb_offline, get_logger, import_object, json_safe

logger = get_logger(__name__)

__all__ = ["TASKS", "run_grpo_job"]

# task name -> its opener (`procrl.trainers.tasks`), imported when a run uses the task
TASKS = {"math": "procrl.trainers.tasks.math:open_math_task", "search": "procrl.trainers.tasks.search:open_search_task"}


def run_grpo_job(job: Any, make_rewards: Callable[[Any], RewardSet]) -> dict:
    """Evaluate, train with GRPO, evaluate again; returns the summary also written to `summary.json`.

    The order of operations is the command's contract (a rerun with the same settings gives the same numbers):
    the policy is loaded, the task opened, the rewards built (`make_rewards(task)`: after the task, whose verifier
    the StepGap reward reads; the PUM loads here, so a bad `pum_model` fails before any evaluation), then the
    trainer, and only then the "before" evaluation. The trainer comes first because it binds the policy, once, to
    the rewards that need it (PiCSAR's answer term), which the evaluation also scores with. By then TRL's `set_seed`
    has run (`Trainer.__init__`), and with `use_peft` TRL has injected the LoRA adapters into the policy with B = 0,
    so the policy's outputs are still those of the base model; the evaluation is greedy (on TRL's colocated vLLM
    engine when `use_vllm` is on in colocate mode, its weights synced from the policy first). Only the main process
    evaluates (before on process 0, after on the main process) and writes the files.

    Args:
        job: the parsed settings (`procrl.scripts.train_grpo.GRPOJob`): `script` (`GRPOScriptArguments`: task,
            data, rewards), `math` (`MathTaskArguments`), `search` (`SearchTaskArguments`, with the run's judge),
            `frs` (`FRSCallbackArguments`),
            `training` (`ProcessGRPOConfig`) and `model` (TRL's `ModelConfig`).
        make_rewards: the opened task (a `procrl.trainers.tasks.GRPOTask`) -> the run's `RewardSet` (scalar reward
            functions, their weights, the step scorer or None).

    Returns:
        The summary: model, task, world size, `train` (dataset slice, steps, wall time in s, loss, reward names and
        weights, answer extraction), `before` / `after` (`EvalResult.to_dict()` rows; empty off the main process),
        TRL's `log_history`, `total_wall_time_s`, the task's own facts under its name, and on the main process
        `curves`, `wandb_dir` and `summary_path`.

    Raises:
        ValueError: `run_eval` with DeepSpeed ZeRO-3 (the evaluation generates on rank 0 alone and would hang).
    """
    with contextlib.ExitStack() as stack:  # closes what a task opened (the StepGap judge server), also on error
        return _run(job, make_rewards, stack)


def _run(job: Any, make_rewards: Callable[[Any], RewardSet], stack: contextlib.ExitStack) -> dict:
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
    rewards = make_rewards(task)
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
    if task.frs_template is not None:  # FRS judges math reasoning; no-op unless frs_every_n_steps > 0
        # the run's one judge: its JudgeArguments are parsed as part of SearchTaskArguments
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
