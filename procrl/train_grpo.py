"""GRPO with process-reward modules on math problems: the implementation behind `train_grpo.py`.

    accelerate launch train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml
    python train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml --max_steps 5
    ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 train_grpo.py --config configs/grpo/svamp_smollm2_picsar.yaml

(On CPU, `accelerate launch --num_processes 2 --cpu` starts only ONE process; use torchrun as above for two
ranks.) The job: load the policy (`model_name_or_path: default` is the embedded SmolLM2-135M-Instruct), evaluate
it greedily on the eval sets, train with `ProcessGRPOTrainer` and the configured reward functions, evaluate
again, and write `summary.json` and `curves.png` into `output_dir`.

`task: search` trains on multi-hop QA with search episodes and the StepGap reward instead (`procrl.stepgap_grpo`;
configs/grpo/stepgap_2wiki_smollm2.yaml, launch/grpo_stepgap.sh); the math evaluation is then skipped.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from procrl.rewards.outcome import ANSWER_EXTRACTION_MODES
from procrl.stepgap_grpo import SEARCH_TEMPLATES, SearchTaskArguments
from procrl.trainers.callbacks import FRSArguments
from procrl.utils import default_wandb_offline, get_logger, json_safe

logger = get_logger(__name__)


TASKS = ("math", "search")
PUM_REWARDS = {"pum": "full", "pum_min": "min", "pum_last": "last"}  # reward name -> PUMReward mode


@dataclass
class GRPOScriptArguments(SearchTaskArguments, FRSArguments):
    """What to train on, which rewards to use and how to evaluate (the `GRPOConfig` holds the rest); the settings
    of `task: search` are inherited from `procrl.stepgap_grpo.SearchTaskArguments`, the `frs_*` fields (FRS logged
    during training, off unless `frs_every_n_steps` > 0) from `procrl.trainers.callbacks.FRSArguments`."""

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
    dataset_split: str | None = field(default=None, metadata={"help": "Split for hub/local data sets."})
    dataset_start: int = field(default=0, metadata={"help": "First training row (0-based, inclusive)."})
    dataset_end: int | None = field(default=700, metadata={"help": "End training row (exclusive); null = all."})
    question_column: str = field(default="question", metadata={"help": "Question column of non-built-in data."})
    answer_column: str = field(default="answer", metadata={"help": "Gold answer column of non-built-in data."})
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
            "help": "Reward functions: registry names (outcome, picsar_bonus; pum, pum_min, pum_last with pum_model) "
            "or dotted paths 'module.func'. With advantage_mode process or mixed, 'pum' is not a scalar reward but "
            "the step scorer (per-step PUM increments) behind the process advantages."
        },
    )
    answer_extraction: str = field(
        default="strict",
        metadata={
            "help": "How the outcome reward (and task/accuracy, the before/after evaluation) finds a completion's final "
            "answer: 'strict' (an explicit marker: the last \\boxed{}, 'The answer is ...' or '#### ...'; a sound "
            "default for RL rewards, since a policy could learn to spray numbers) or 'flexible' (also the last number "
            "of the final sentence, e.g. 'The total is $9{,}500$.'). The reward is then named outcome_reward_flexible "
            "and completions without an answer are logged as outcome/no_answer_<mode>."
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
    eval_sets: list[str] = field(
        default_factory=lambda: ["svamp:700:850:96", "gsm8k:0:50:256"],
        metadata={"help": "Evaluation sets as name:start:end:max_new_tokens (greedy), run before and after training."},
    )
    eval_batch_size: int = field(default=32, metadata={"help": "Prompts per generate call in evaluation."})
    run_eval: bool = field(default=True, metadata={"help": "Evaluate before and after training."})

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r} must be one of {TASKS} (e.g. task: search for StepGap)")
        if self.task == "search" and "{question}" not in self.prompt_template:
            if self.prompt_template not in SEARCH_TEMPLATES:
                raise ValueError(
                    f"task=search: prompt_template={self.prompt_template!r} is not one of {SEARCH_TEMPLATES} and has "
                    "no {question} placeholder; use search_one_shot (the StepGap configs' default) or a template."
                )
        for spec in self.eval_sets:
            parse_eval_set(spec)
        if self.eval_batch_size < 1:
            raise ValueError("eval_batch_size must be >= 1")
        if self.answer_extraction not in ANSWER_EXTRACTION_MODES:
            raise ValueError(
                f"answer_extraction={self.answer_extraction!r} must be one of {ANSWER_EXTRACTION_MODES}: use "
                "answer_extraction: strict (the default: boxed / 'The answer is' / '####' answers only) or "
                "answer_extraction: flexible (also the last number of the final sentence)."
            )
        if self.task == "search" and self.answer_extraction != "strict":
            raise ValueError(
                f"answer_extraction={self.answer_extraction!r} has no effect with task=search: its reward (EM) compares "
                "normalised answer strings and never extracts numbers. Remove answer_extraction from the config (or set "
                "answer_extraction: strict), or use task: math."
            )
        if self.picsar_normalize not in ("mean", "sum"):
            raise ValueError("picsar_normalize must be 'mean' or 'sum'")
        if not self.reward_funcs:
            raise ValueError("reward_funcs is empty: give at least one, e.g. [outcome]")
        uses_pum = [name for name in self.reward_funcs if name in PUM_REWARDS]
        if uses_pum and not self.pum_model:
            raise ValueError(
                f"reward_funcs {uses_pum} need a Prefix Utility Model: set pum_model to a train_pum.py output "
                "directory (accelerate launch train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml)."
            )
        if self.pum_batch_size < 1:
            raise ValueError(f"pum_batch_size must be >= 1, got {self.pum_batch_size}")
        if self.dataset_end is not None and self.dataset_end <= self.dataset_start:
            raise ValueError(f"dataset_end ({self.dataset_end}) must be > dataset_start ({self.dataset_start})")
        super().__post_init__()
        FRSArguments.__post_init__(self)


def parse_eval_set(spec: str) -> tuple[str, int, int | None, int]:
    """'svamp:700:850:96' -> ('svamp', 700, 850, 96). `end` may be empty (all rows); tokens default to 256."""
    parts = spec.split(":")
    if not 1 <= len(parts) <= 4 or not parts[0]:
        raise ValueError(f"eval set {spec!r} must look like name:start:end:max_new_tokens, e.g. svamp:700:850:96")
    try:
        start = int(parts[1]) if len(parts) > 1 and parts[1] else 0
        end = int(parts[2]) if len(parts) > 2 and parts[2] else None
        tokens = int(parts[3]) if len(parts) > 3 and parts[3] else 256
    except ValueError as err:
        raise ValueError(f"eval set {spec!r}: start, end and max_new_tokens must be integers") from err
    return parts[0], start, end, tokens


def make_parser():
    from trl import ModelConfig, TrlParser

    from procrl.trainers.grpo import ProcessGRPOConfig

    return TrlParser((GRPOScriptArguments, ProcessGRPOConfig, ModelConfig))


def build_reward_funcs(script_args: GRPOScriptArguments, training_args=None) -> tuple[list, list[float], object]:
    """The math task's rewards: (TRL reward functions, their weights, the step scorer or None).

    Names come from one explicit registry (outcome, picsar_bonus, pum, pum_min, pum_last) or are dotted import paths
    for user rewards. In `advantage_mode: process | mixed`, "pum" becomes the step scorer (per-step increments
    U(x, p_k) - U(x, p_{k-1}), `procrl.rewards.pum_rewards.PUMStepRewards`) and leaves the scalar rewards, with its
    weight, so it is not counted twice (DESIGN §4 "Process advantages").

    Raises:
        ValueError: an unknown name, a weight list that does not match `reward_funcs`, or process/mixed mode
            without a step scorer ("pum") or without a scalar reward left.
    """
    from procrl.rewards.outcome import get_outcome_reward
    from procrl.rewards.picsar import get_picsar_bonus
    from procrl.rewards.pum_rewards import get_pum_reward, get_pum_step_rewards

    def pum(mode):
        return lambda: get_pum_reward(script_args.pum_model, mode, batch_size=script_args.pum_batch_size)

    registry = {
        "outcome": lambda: get_outcome_reward(script_args.answer_extraction),
        "picsar_bonus": lambda: get_picsar_bonus(
            evaluator=script_args.picsar_evaluator, normalize=script_args.picsar_normalize
        ),
        **{name: pum(mode) for name, mode in PUM_REWARDS.items()},
    }
    mode = getattr(training_args, "advantage_mode", "outcome")
    given = list(training_args.reward_weights) if training_args is not None and training_args.reward_weights else None
    names = script_args.reward_funcs
    if given is not None and len(given) != len(names):
        raise ValueError(f"reward_weights {given} must have one weight per reward_funcs entry {names}.")
    funcs, weights, step_reward_func = [], [], None
    for k, name in enumerate(names):
        if name == "pum" and mode in ("process", "mixed"):
            step_reward_func = get_pum_step_rewards(script_args.pum_model, batch_size=script_args.pum_batch_size)
            continue
        if name in registry:
            funcs.append(registry[name]())
        elif "." in name or ":" in name:
            module, _, attr = name.replace(":", ".").rpartition(".")
            funcs.append(getattr(importlib.import_module(module), attr))
        else:
            raise ValueError(f"unknown reward function {name!r}: use one of {sorted(registry)} or 'module.func'")
        weights.append(given[k] if given is not None else 1.0)
    if mode in ("process", "mixed"):
        if step_reward_func is None:
            raise ValueError(
                f"advantage_mode={mode} needs a step scorer: add 'pum' to reward_funcs and set pum_model "
                "(or use advantage_mode: outcome)."
            )
        if not funcs:
            raise ValueError(
                f"advantage_mode={mode}: add a scalar reward besides 'pum', e.g. reward_funcs: [outcome, pum]."
            )
    return funcs, weights, step_reward_func


def resolve_template(name: str):
    """'one_shot' / 'zero_shot' -> the shipped templates; anything else is a custom `{question}` template."""
    from procrl.data_builders.datasets import ONE_SHOT_TEMPLATE, ZERO_SHOT_TEMPLATE

    return {"one_shot": ONE_SHOT_TEMPLATE, "zero_shot": ZERO_SHOT_TEMPLATE}.get(name, name)


def main(script_args: GRPOScriptArguments, training_args, model_args) -> dict:
    """Evaluate, train with GRPO, evaluate again; returns the summary also written to `summary.json`."""
    with contextlib.ExitStack() as stack:  # closes what a task opened (the StepGap judge server), also on error
        return _main(script_args, training_args, model_args, stack)


def _main(script_args: GRPOScriptArguments, training_args, model_args, stack: contextlib.ExitStack) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import get_peft_config

    from procrl.data_builders.datasets import load_math_dataset
    from procrl.models import resolve_model
    from procrl.reporting import plot_curves
    from procrl.rewards.outcome import get_outcome_reward
    from procrl.rewards.pum_rewards import PUMHolder
    from procrl.trainers.evaluation import evaluate
    from procrl.trainers.grpo import ProcessGRPOTrainer

    t0 = time.perf_counter()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # we use rollout_func knowingly (TRL pinned)
    default_wandb_offline(training_args.report_to)
    if script_args.run_eval and training_args.deepspeed and "zero3" in str(training_args.deepspeed).lower():
        raise ValueError(
            "The before/after evaluation generates on rank 0 alone, which hangs with ZeRO-3 (partitioned weights). "
            "Set run_eval: false, or use ZeRO-2."
        )
    model_path = resolve_model(model_args.model_name_or_path or "default")
    dtype = model_args.dtype if model_args.dtype in (None, "auto") else getattr(torch, model_args.dtype)
    model = AutoModelForCausalLM.from_pretrained(
        model_path,
        revision=model_args.model_revision,
        dtype=dtype if dtype is not None else torch.float32,
        attn_implementation=model_args.attn_implementation,
    )
    model.to(training_args.device)  # evaluate on the accelerator, not on the CPU where from_pretrained left it
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    template = resolve_template(script_args.prompt_template)
    search = None
    if script_args.task == "search":
        from procrl.stepgap_grpo import open_search_task

        search = stack.enter_context(open_search_task(script_args, training_args))
        if script_args.run_eval:
            logger.info("task=search: the math before/after evaluation is skipped (EM is logged during training)")
        train_dataset = search.train_dataset
    else:
        train_dataset = load_math_dataset(
            script_args.dataset_name,
            split=script_args.dataset_split,
            start=script_args.dataset_start,
            end=script_args.dataset_end,
            prompt_template=template,
            question_column=script_args.question_column,
            answer_column=script_args.answer_column,
        )
    eval_sets = []
    for spec in script_args.eval_sets if script_args.run_eval and not search else []:
        name, start, end, tokens = parse_eval_set(spec)
        data = load_math_dataset(name, start=start, end=end, prompt_template=template)
        eval_sets.append((f"{name}[{start}:{start + len(data)}]", data, tokens))

    if search:
        reward_funcs, trainer_kwargs = search.reward_funcs, search.trainer_kwargs
    else:
        reward_funcs, weights, step_reward_func = build_reward_funcs(script_args, training_args)
        if training_args.reward_weights and len(weights) != len(training_args.reward_weights):
            logger.info("'pum' is the step scorer in advantage_mode=%s: reward_weights -> %s",
                        training_args.advantage_mode, weights)  # fmt: skip
            training_args.reward_weights = weights  # TRL needs one weight per scalar reward function
        trainer_kwargs = {"step_reward_func": step_reward_func} if step_reward_func is not None else {}
    # One answer extraction mode per run: the outcome reward, task/accuracy and the before/after evaluation use the
    # same check (the very object among reward_funcs when "outcome" is one, so the trainer reuses its column).
    outcome_func = get_outcome_reward(script_args.answer_extraction)
    outcome_func = next((func for func in reward_funcs if func is outcome_func or func == outcome_func), outcome_func)
    if not search:
        trainer_kwargs["outcome_func"] = outcome_func
    weights = training_args.reward_weights or [1.0] * len(reward_funcs)
    for func in [*reward_funcs, trainer_kwargs.get("step_reward_func")]:
        if hasattr(func, "bind_policy"):
            func.bind_policy(model, tokenizer)
        if isinstance(func, PUMHolder):
            func.pum  # noqa: B018 - load the PUM now: a bad pum_model fails before evaluation and training, not after

    def run_eval(stage: str) -> list[dict]:
        results = []
        for label, data, tokens in eval_sets:
            result = evaluate(
                model,
                tokenizer,
                data,
                name=label,
                outcome_func=outcome_func,
                reward_funcs=reward_funcs,
                reward_weights=weights,
                max_new_tokens=tokens,
                batch_size=script_args.eval_batch_size,
                progress=training_args.process_index == 0,
            )
            logger.info("%s %s: accuracy %.3f", stage, label, result.accuracy)
            results.append(result.to_dict())
        return results

    before = run_eval("before") if training_args.process_index == 0 else []
    trainer = ProcessGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        **trainer_kwargs,
    )
    if not search:  # FRS judges math reasoning; no-op unless frs_every_n_steps > 0
        from procrl.trainers.callbacks import add_frs_callback

        add_frs_callback(script_args, trainer, prompt_template=template)
    train_start = time.perf_counter()
    train_output = trainer.train()
    train_time = time.perf_counter() - train_start
    trainer.save_model(training_args.output_dir)
    model = trainer.accelerator.unwrap_model(trainer.model)
    after = run_eval("after") if trainer.accelerator.is_main_process else []

    summary = {
        "model": model_args.model_name_or_path or "default",
        "task": script_args.task,
        "world_size": trainer.accelerator.num_processes,
        "train": {
            "dataset": f"{script_args.dataset_name}[{script_args.dataset_start}:{script_args.dataset_end}]",
            "steps": trainer.state.global_step,
            "wall_time_s": train_time,
            "train_loss": train_output.training_loss,
            "reward_funcs": [getattr(f, "__name__", str(f)) for f in reward_funcs],
            "reward_weights": list(weights),
            "answer_extraction": script_args.answer_extraction,
        },
        "before": before,
        "after": after,
        "log_history": trainer.state.log_history,
        "total_wall_time_s": time.perf_counter() - t0,
    }
    if search:
        summary["search"] = search.summary()
    if trainer.accelerator.is_main_process:
        out = Path(training_args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        plot_curves(trainer.state.log_history, out / "curves.png", title=Path(training_args.output_dir).name)
        summary["curves"] = str(out / "curves.png")
        summary["wandb_dir"] = _finish_wandb(summary)
        (out / "summary.json").write_text(json.dumps(json_safe(summary), indent=2))
        summary["summary_path"] = str(out / "summary.json")
    return summary


def _finish_wandb(summary: dict) -> str | None:
    """Add the before/after numbers to the wandb run (if any), close it and return its local directory."""
    try:
        import wandb
    except ImportError:
        return None
    run = wandb.run
    if run is None:
        return None
    for stage in ("before", "after"):
        for result in summary[stage]:
            for key in ("accuracy", "mean_reward", "mean_length"):
                run.summary[f"{stage}/{result['name']}/{key}"] = result[key]
    directory = str(Path(run.dir).parent)
    run.finish()
    return directory


def cli_main(argv: list[str] | None = None) -> dict:
    """Parse `--config x.yaml` plus flag overrides and run `main`."""
    parser = make_parser()
    script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    return main(script_args, training_args, model_args)
