"""Train a Prefix Utility Model (PUM) with TRL's `RewardTrainer`: the library behind `procrl.scripts.train_pum`.

`train_pum.py` and `procrl train-pum` run `procrl.scripts.train_pum.main` (its docstring has the launch commands);
`train(script_args, training_args, model_args)` here is the job, with its two config dataclasses.

The job (docs/architecture.md "Data flow", §4 "PUM"): read a PUM-Math pair set (columns `prompt` = problem text, `chosen`/`rejected` =
prefix texts, `margin` = ΔG >= 0, `pair_type`, `problem_id`), hold out whole problems for evaluation (no problem
in both splits), render and tokenize every prefix with `procrl.rewards.pum.render_prefix` (the same function the
scorer uses; it truncates to `max_length - 1` and counts what it cut), drop pairs that are identical after
rendering (counted), and train `AutoModelForSequenceClassification(num_labels=1)` built from any causal LM with
the Bradley-Terry loss -log σ(U_c - U_r - m), m = `margin_scale` · margin (TRL's `margin` column).

TRL facts this relies on (trl 1.16.0, trl/trainer/reward_trainer.py):
- `_prepare_dataset` (l. 656-669) skips its own EOS-appending and tokenization when the data set already has
  `chosen_ids` and `rejected_ids` (l. 676-728 only run when it has not), so our rendered ids go in unchanged;
- it then drops, silently, every pair with a side longer than `max_length` (l. 730-740): we truncate to
  `max_length - 1` ourselves and assert afterwards that it dropped none;
- `DataCollatorForPreference` right-pads with the pad token (l. 203-229) and the loss is
  `-logsigmoid(r_c - r_r - margin)` (l. 789-792); transformers pools at the rightmost non-pad token
  (transformers 5.24 modeling_layers.py l. 178-182, `GenericForSequenceClassification.forward`), which is the last
  real token because rendered inputs never end with the pad/EOS token (pairs that would are dropped and counted);
- with `remove_unused_columns` only `chosen_ids`, `rejected_ids`, `margin` reach the collator (l. 744-749), so
  `pair_type` is gone and TRL's `eval_accuracy` is the mean of per-batch accuracies over all types: per-type
  pairwise accuracy comes from `PairwiseAccuracyCallback`, which scores the held-out pairs itself.

Outputs in `output_dir`: the model (full weights, or the LoRA adapter with the trained `score` head), its tokenizer
and `pum_config.json` (rendering settings for `PrefixUtilityModel.from_pretrained`). `train` returns the summary
(data counts, held-out pairwise accuracy overall and per pair type before and after training, a length-only
baseline, in-trainer scores of a few held-out prefixes, the log history), which `train_pum.py` records as the
`result` of the run's `run.json`.
"""

from __future__ import annotations

import codecs
import copy
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, set_seed
from trl import RewardConfig, RewardTrainer, get_peft_config

from procrl.evals import pum as pum_evaluation
from procrl.generation.runtime import BF16_HELP, resolve_config_bf16
from procrl.models import resolve_model
from procrl.rewards.pum import PUM_CONFIG_NAME, PrefixUtilityModel
from procrl.rewards.steps import DEFAULT_SEPARATOR
from procrl.trainers import pum_data
from procrl.utils import default_wandb_offline, get_logger, prompt_to_text

logger = get_logger(__name__)

__all__ = ["PUMScriptArguments", "PUMTrainingConfig", "build_model", "train"]


@dataclass
class PUMScriptArguments:
    """Which pairs to train and evaluate on, and how prefixes are rendered (`PUMTrainingConfig` holds the rest)."""

    dataset_name: str = field(
        default="pum_math_gsm8k_cpu",
        metadata={
            "help": "PUM-Math pairs: a shipped set (pum_math_gsm8k_cpu: the pairs the builder made from GSM8K test "
            "problems 0-20 on CPU, see data_builders/data/SOURCE.md), a `save_to_disk` directory, a "
            ".parquet/.jsonl/.json/.csv file, a directory of such files, or a Hub dataset id. Columns: prompt, "
            "chosen, rejected, margin, pair_type, problem_id."
        },
    )
    dataset_split: str = field(default="train", metadata={"help": "Split to read (Hub sets, DatasetDicts)."})
    eval_dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Separate held-out pairs (same formats). null: hold out `eval_fraction` of the problems of "
            "dataset_name. Problems found in both sets raise."
        },
    )
    eval_dataset_split: str | None = field(
        default=None, metadata={"help": "Split of eval_dataset_name; null = dataset_split."}
    )
    eval_fraction: float = field(
        default=0.3,
        metadata={
            "help": "Fraction of problem_ids held out for evaluation (whole problems, so no leakage; 0.3 suits the "
            "shipped 20-problem set, 0.1 a large one); 0 = no held-out set (then set eval_strategy: no)."
        },
    )
    split_seed: int = field(default=0, metadata={"help": "Seed of the problem-level train/eval split."})
    max_train_pairs: int | None = field(
        default=None, metadata={"help": "Use at most this many training pairs (the first ones after the split)."}
    )
    max_eval_pairs: int | None = field(
        default=None, metadata={"help": "Use at most this many held-out pairs (the first ones after the split)."}
    )
    step_separator: str = field(
        default=DEFAULT_SEPARATOR,
        metadata={
            "help": "Step separator used to split prefixes into pieces that are tokenized one by one (escapes such "
            "as '\\n' are decoded). Saved in pum_config.json so scoring splits the same way."
        },
    )
    margin_scale: float = field(
        default=1.0,
        metadata={"help": "Bradley-Terry margin m = margin_scale * margin (ΔG); 0 trains without a margin."},
    )
    eval_before_training: bool = field(
        default=True, metadata={"help": "Evaluate the held-out pairs once before training (the untrained head)."}
    )
    probe_size: int = field(
        default=4,
        metadata={
            "help": "Held-out chosen prefixes whose in-trainer scores go into the summary (run.json), to check a "
            "reloaded checkpoint against (PrefixUtilityModel.from_pretrained must reproduce them)."
        },
    )

    def __post_init__(self):
        if "\\" in self.step_separator:  # "\n\n" typed on a command line arrives as backslash-n
            self.step_separator = codecs.decode(self.step_separator, "unicode_escape")
        if not self.step_separator:
            raise ValueError("step_separator must be non-empty (default '\\n\\n')")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1), got {self.eval_fraction}")
        if self.margin_scale < 0 or not math.isfinite(self.margin_scale):
            raise ValueError(f"margin_scale must be a finite number >= 0, got {self.margin_scale}")
        for name in ("max_train_pairs", "max_eval_pairs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or null (all pairs), got {value}")
        if self.probe_size < 0:
            raise ValueError(f"probe_size must be >= 0, got {self.probe_size}")


@dataclass
class PUMTrainingConfig(RewardConfig):
    """`trl.RewardConfig` with defaults that train the shipped pairs in a few minutes on CPU.

    `bf16: auto` (`procrl.generation.runtime.resolve_bf16`) = bf16 autocast where the hardware computes bf16
    natively (a CUDA GPU that supports it, a CPU with AMX or AVX512-BF16), fp32 elsewhere; an explicit true/false is
    left to transformers.
    Other defaults that differ from TRL's: `output_dir` outputs/pum, `learning_rate` 1e-5 (a full fine-tune of a
    small model; TRL's 1e-4 suits LoRA), 1 epoch, activation checkpointing off (it only slows a 135M model),
    a log line every 5 steps.
    """

    output_dir: str | None = field(
        default="outputs/pum",
        metadata={"help": "Where the PUM checkpoint, pum_config.json and run.json are written."},
    )
    learning_rate: float = field(default=1e-5, metadata={"help": "The initial learning rate for AdamW."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the training pairs."})
    # TRL's base config sets the deprecated alias to True; None leaves `activation_checkpointing` (default off) in
    # charge, without transformers' deprecation warning (transformers 5.24 training_args.py l. 1533-1545).
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Deprecated alias of activation_checkpointing (recompute activations in the backward pass: "
            "saves memory, costs time); null = activation_checkpointing, off by default."
        },
    )
    logging_steps: float = field(
        default=5, metadata={"help": "Log every N optimizer steps (a float < 1 is a fraction of the steps)."}
    )
    bf16: str = field(default="auto", metadata={"help": BF16_HELP})

    def __post_init__(self):
        resolve_config_bf16(self)
        super().__post_init__()


def build_model(model_path: str, model_args: Any, tokenizer: Any, *, trust_remote_code: bool = False):
    """`AutoModelForSequenceClassification(num_labels=1)` from a causal LM (new score head) or a PUM checkpoint.

    Raises:
        ValueError: body weights (anything but `score.weight`) are missing from the checkpoint.
    """
    dtype = model_args.dtype if model_args.dtype in (None, "auto") else getattr(torch, model_args.dtype)
    model, info = AutoModelForSequenceClassification.from_pretrained(
        model_path,
        num_labels=1,
        revision=model_args.model_revision,
        dtype=dtype if dtype is not None else torch.float32,
        attn_implementation=model_args.attn_implementation,
        trust_remote_code=trust_remote_code,
        output_loading_info=True,
    )
    missing = sorted(set(info["missing_keys"]) - {"score.weight"})
    if missing:
        raise ValueError(f"{model_path}: weights missing from the checkpoint: {missing[:8]}")
    if "score.weight" in info["missing_keys"]:
        logger.info("New score head (random init, seed-controlled) on %s; it is trained below.", model_path)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def _peft_config(model_args):
    if not model_args.use_peft:
        return None
    task = str(model_args.lora_task_type or "").upper()
    if task != "SEQ_CLS":
        raise ValueError(
            f"LoRA on a PUM needs lora_task_type: SEQ_CLS (got {model_args.lora_task_type!r}); TRL's default "
            "CAUSAL_LM crashes on a sequence-classification model and would not train the score head."
        )
    modules = list(model_args.lora_modules_to_save or [])
    if "score" not in modules:
        # the head must train and be saved with the adapter; a copy, so the parsed ModelConfig stays as given
        model_args = copy.copy(model_args)
        model_args.lora_modules_to_save = [*modules, "score"]
    return get_peft_config(model_args)


def train(script_args: PUMScriptArguments, training_args: PUMTrainingConfig, model_args) -> dict:
    """Split, render, train, evaluate and save a PUM (the model and `pum_config.json` into `output_dir`, by the
    main process); returns the summary (module docstring)."""
    t0 = time.perf_counter()
    default_wandb_offline(training_args.report_to)
    peft_config = _peft_config(model_args)
    main_process = training_args.process_index == 0
    model_path = resolve_model(model_args.model_name_or_path or "default")
    tokenizer = AutoTokenizer.from_pretrained(
        model_path, revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    # Data: hold out whole problems, then render with the scorer's renderer.
    pairs = pum_data.load_pairs(script_args.dataset_name, script_args.dataset_split)
    if script_args.eval_dataset_name:
        train_raw = pairs
        eval_raw = pum_data.load_pairs(
            script_args.eval_dataset_name, script_args.eval_dataset_split or script_args.dataset_split
        )
        shared = {str(p) for p in train_raw["problem_id"]} & {str(p) for p in eval_raw["problem_id"]}
        if shared:
            raise ValueError(
                f"{len(shared)} problems are in both the training and the held-out pairs, e.g. {sorted(shared)[:3]}"
            )
    else:
        train_raw, eval_raw = pum_data.split_by_problem(pairs, script_args.eval_fraction, script_args.split_seed)
    if script_args.max_train_pairs is not None:
        train_raw = train_raw.select(range(min(script_args.max_train_pairs, len(train_raw))))
    if script_args.max_eval_pairs is not None:
        eval_raw = eval_raw.select(range(min(script_args.max_eval_pairs, len(eval_raw))))
    render = {
        "separator": script_args.step_separator,
        "margin_scale": script_args.margin_scale,
        "progress": main_process,
    }
    train_pairs, train_stats = pum_data.tokenize_pairs(train_raw, tokenizer, training_args.max_length, **render)
    eval_pairs, eval_stats = pum_data.tokenize_pairs(eval_raw, tokenizer, training_args.max_length, **render)
    if len(train_pairs) == 0:
        raise ValueError(f"No training pairs left after rendering: {train_stats.to_dict()}")
    has_eval = len(eval_pairs) > 0
    if not has_eval and training_args.eval_strategy != "no":
        raise ValueError("No held-out pairs: set eval_fraction > 0 (or eval_dataset_name), or eval_strategy: 'no'.")
    trl_columns = ["chosen_ids", "rejected_ids", *(["margin"] if script_args.margin_scale > 0 else [])]

    set_seed(training_args.seed)  # the new score head's init
    model = build_model(model_path, model_args, tokenizer, trust_remote_code=training_args.trust_remote_code)
    callback = pum_evaluation.PairwiseAccuracyCallback(
        eval_pairs, pad_token_id=tokenizer.pad_token_id, batch_size=training_args.per_device_eval_batch_size
    )
    trainer = RewardTrainer(
        model=model,
        args=training_args,
        train_dataset=train_pairs.select_columns(trl_columns),
        eval_dataset=eval_pairs.select_columns(trl_columns) if has_eval else None,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[callback] if has_eval else None,
    )
    callback.attach(trainer)
    # RewardTrainer filters pairs longer than max_length without a word (reward_trainer.py l. 730-740).
    if len(trainer.train_dataset) != len(train_pairs) or (has_eval and len(trainer.eval_dataset) != len(eval_pairs)):
        raise RuntimeError(
            f"RewardTrainer dropped pairs ({len(trainer.train_dataset)} of {len(train_pairs)} training pairs left): "
            "render_prefix must keep every input within max_length - 1 tokens"
        )
    head = [p.requires_grad for n, p in trainer.model.named_parameters() if ".score." in f".{n}"]
    if not head or not any(head):
        raise RuntimeError("The score head is not trainable; with LoRA keep `score` in lora_modules_to_save")

    before = (
        pum_evaluation.callback_result(trainer, callback) if has_eval and script_args.eval_before_training else None
    )
    train_start = time.perf_counter()
    train_output = trainer.train()
    train_time = time.perf_counter() - train_start
    after = pum_evaluation.callback_result(trainer, callback) if has_eval else None

    # In-trainer scores of a few held-out prefixes: a reloaded checkpoint must reproduce them.
    probe_source = eval_raw if len(eval_raw) else train_raw
    probe_raw = probe_source.select(range(min(script_args.probe_size, len(probe_source))))
    # without accelerate's autocast wrapper (bf16: auto), as a reloaded checkpoint scores
    unwrapped = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    unwrapped.eval()
    scorer = PrefixUtilityModel(
        unwrapped,
        tokenizer,
        max_length=training_args.max_length,
        separator=script_args.step_separator,
        batch_size=training_args.per_device_eval_batch_size,
    )
    problems = [prompt_to_text(p) for p in probe_raw["prompt"]]
    probe_scores = scorer.score(problems, list(probe_raw["chosen"])) if len(probe_raw) else []
    probe = [
        {"problem": x, "prefix": p, "score": s}
        for x, p, s in zip(problems, probe_raw["chosen"], probe_scores, strict=True)
    ]

    trainer.save_model(training_args.output_dir)
    summary = {
        "model": model_args.model_name_or_path or "default",
        "lora": bool(peft_config),
        "world_size": trainer.accelerator.num_processes,
        "data": {
            "dataset": script_args.dataset_name,
            "train_problems": len(set(train_pairs["problem_id"])),
            "eval_problems": len(set(eval_pairs["problem_id"])) if has_eval else 0,
            "train": train_stats.to_dict(),
            "eval": eval_stats.to_dict(),
            "max_length": training_args.max_length,
            "step_separator": script_args.step_separator,
            "margin_scale": script_args.margin_scale,
        },
        "train": {
            "steps": trainer.state.global_step,
            "wall_time_s": train_time,
            "train_loss": train_output.training_loss,
        },
        "heldout": {
            "before": before,
            "after": after,
            "length_baseline": pum_evaluation.length_baseline(eval_pairs) if has_eval else None,
        },
        "probe": probe,
        "log_history": trainer.state.log_history,
        "total_wall_time_s": time.perf_counter() - t0,
    }
    if trainer.accelerator.is_main_process:
        out = Path(training_args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        pum_config = {
            "max_length": training_args.max_length,
            "step_separator": script_args.step_separator,
            "base_model": model_path,
            "lora": bool(peft_config),
        }
        (out / PUM_CONFIG_NAME).write_text(json.dumps(pum_config, indent=2))
    trainer.accelerator.wait_for_everyone()
    return summary
