"""Supervised warm starts on gold traces with TRL's `SFTTrainer`: the library behind `procrl sft` / `train_sft.py`.

The job (docs/architecture.md "SFT warm starts"): load rows of a math set (`load_math_dataset`: a built-in set, a
local file or directory, a hub id), turn each into a conversational prompt-completion pair (`sft_examples`:
`prompt` = the row's chat messages, `completion` = one assistant message holding its `solution`, the gold trace),
or take the episodes of a search-episodes file (`procrl.trainers.sft_episodes`: token ids, information blocks out
of the loss), key the run by content (`procrl.trainers.sft_cache`: base model, rows, settings), and either return
the cached checkpoint of that key or train the policy and publish its checkpoint (model, tokenizer with its chat template,
the manifest `sft.json`) atomically under `$PROCRL_CACHE/sft/<key>/`. The policy is a pretrained causal LM
(`model_name_or_path`, "default" = the embedded SmolLM2-135M-Instruct) or a randomly initialised organism
(`scratch:llama,...`, `procrl.scratch_models`); only its construction differs, the training is the same.

TRL facts this relies on (trl 1.16.0, trl/trainer/sft_trainer.py):
- with `completion_only_loss: null` (SFTConfig's default) a data set with `prompt` and `completion` columns trains on
  the completion tokens only (l. 961-962; the labels are masked in `_prepare_dataset`, l. 1407-1431);
- a conversational pair is tokenized as the chat template renders the prompt with the generation prompt and
  prompt + completion (l. 1323-1336), so the completion ends with the template's end-of-turn token (SmolLM2's EOS)
  and the policy learns to stop;
- rows longer than `max_length` are cut (keep_start), and rows left with no completion token are dropped without a
  word (l. 1436-1463): `prepare_sft` cannot know, so `train_sft` counts them and warns.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import torch
from accelerate.utils import broadcast_object_list
from trl import SFTConfig, SFTTrainer

from procrl.data_builders.arguments import DataColumnArguments, ProblemSliceArguments
from procrl.data_builders.arithmetic import is_arithmetic_spec
from procrl.data_builders.arithmetic_tokenizer import arithmetic_tokenizer
from procrl.data_builders.datasets import BUILTIN_DATASETS, load_math_dataset, resolve_template, validate_template
from procrl.experiment.provenance import package_versions
from procrl.experiment.tracking import write_json_atomic
from procrl.generation.runtime import BF16_HELP, resolve_config_bf16
from procrl.models import load_policy, resolve_model
from procrl.scratch_models import build_scratch_model, is_scratch_spec, parse_scratch_spec
from procrl.trainers import sft_cache
from procrl.trainers.sft_episodes import episode_examples, is_episode_file, tokenize_episodes
from procrl.utils import default_wandb_offline, get_logger

logger = get_logger(__name__)

__all__ = [
    "SFTInputError",
    "SFTPlan",
    "SFTResult",
    "SFTScriptArguments",
    "SFTTrainingConfig",
    "check_model_args",
    "TASK_TOKENIZERS",
    "load_sft_model",
    "prepare_sft",
    "with_task_tokenizer",
    "run_sft",
    "sft_examples",
    "train_sft",
]


class SFTInputError(ValueError):
    """A setting or data set `prepare_sft` refuses before anything trains (the message says how to fix it)."""


@dataclass
class SFTScriptArguments(DataColumnArguments, ProblemSliceArguments):
    """Which gold traces to train on (`ProblemSliceArguments`, `DataColumnArguments`, `solution_column`) and where
    the checkpoint cache is; `SFTTrainingConfig` holds the optimisation, TRL's `ModelConfig` the policy.

    Raises:
        ValueError: a bad row range, a prompt template without {question}, an empty solution_column.
    """

    dataset_name: str = field(
        default="gsm8k",
        metadata={
            "help": "Gold traces: any set load_math_dataset loads whose `solution` is the trace to imitate: a built-in "
            "set (gsm8k: its worked solutions ending in '#### N'; math500; not svamp, which has none), a local "
            ".jsonl/.json/.parquet/.csv file or directory, or a hub id (solution_column names the trace column). "
            "Rows with an empty solution are an error. A search-episodes file (`procrl world episodes`: rows with "
            "`segments`) trains on its episodes, information blocks out of the loss; its own prompts are used, "
            "prompt_template is ignored."
        },
    )
    dataset_end: int | None = field(default=None, metadata={"help": "End training row (exclusive); null = all."})
    prompt_template: str = field(
        default="one_shot",
        metadata={
            "help": "'one_shot', 'zero_shot', or a template with {question}; use the template the policy will be "
            "prompted with afterwards (train_grpo.py's prompt_template)."
        },
    )
    solution_column: str = field(
        default="solution",
        metadata={"help": "Column of non-built-in data that holds the gold trace (the completion to learn)."},
    )
    cache_dir: str | None = field(
        default=None,
        metadata={"help": "Where checkpoints are cached by content, one <key>/ each; null = $PROCRL_CACHE/sft."},
    )
    force: bool = field(
        default=False,
        metadata={"help": "Train even when the cache holds this key's checkpoint, and replace it."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # the row range
        validate_template(resolve_template(self.prompt_template))
        if not self.solution_column:
            raise ValueError("solution_column must name the column of gold traces (default: solution)")


@dataclass
class SFTTrainingConfig(SFTConfig):
    """`trl.SFTConfig` with procrl's defaults.

    `bf16: auto` (`procrl.generation.runtime.resolve_bf16`) = bf16 autocast where the hardware computes bf16
    natively, fp32 elsewhere. Other defaults that differ from TRL's: `output_dir` outputs/sft (the run record and
    logs: the checkpoint goes to the cache), `save_strategy` no (the final model is published to the cache; set
    steps to also keep intermediate checkpoints in output_dir), 1 epoch, activation checkpointing off (it only slows
    a small model), a log line every 5 steps.
    """

    output_dir: str | None = field(
        default="outputs/sft",
        metadata={"help": "Where run.json and the trainer's logs go; the checkpoint goes to the cache (cache_dir)."},
    )
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the training rows."})
    save_strategy: str = field(
        default="no",
        metadata={"help": "Intermediate checkpoints into output_dir: 'no' (default; the final one goes to the "
                  "cache), 'steps' or 'epoch'."},
    )  # fmt: skip
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


def check_model_args(model_args: Any) -> None:
    """Refuse what `procrl sft` cannot train: LoRA (its output must be a full checkpoint) and a bad `scratch:` spec.

    Raises:
        ValueError: with the fix.
    """
    if model_args.use_peft:
        raise ValueError(
            "use_peft: procrl sft trains the full model, so its checkpoint loads in train_grpo.py and vLLM as it is; "
            "remove use_peft (or merge a LoRA adapter yourself)."
        )
    if is_scratch_spec(model_args.model_name_or_path):
        parse_scratch_spec(model_args.model_name_or_path)


def sft_examples(dataset: datasets.Dataset, name: str) -> datasets.Dataset:
    """Conversational prompt-completion pairs (TRL's format) from rows of `load_math_dataset`: `prompt` = the row's
    chat messages, `completion` = [{"role": "assistant", "content": row's `solution`}], in row order.

    Raises:
        ValueError: rows whose solution is empty or blank (the message names the set, how many and a few ids).

    >>> rows = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": "1+1?"}], "solution": "2",
    ...                                     "problem_id": "toy/0"}])
    >>> sft_examples(rows, "toy")[0]["completion"]
    [{'role': 'assistant', 'content': '2'}]
    """
    empty = [
        pid for pid, solution in zip(dataset["problem_id"], dataset["solution"], strict=True) if not solution.strip()
    ]
    if empty:
        raise ValueError(
            f"{name}: {len(empty)} of {len(dataset)} rows have an empty solution (e.g. {empty[:3]}); SFT learns each "
            "row's gold trace, its `solution`: use a set that has them (gsm8k, math500; svamp has none), a file whose "
            "solution_column names them, or a row range (dataset_start/dataset_end) without empty ones."
        )
    completions = [[{"role": "assistant", "content": solution}] for solution in dataset["solution"]]
    return datasets.Dataset.from_dict({"prompt": list(dataset["prompt"]), "completion": completions})


@dataclass
class SFTPlan:
    """A checked run before training: its examples, the key's inputs, the key and the checkpoint's directory."""

    examples: datasets.Dataset
    model_name: str
    identity: dict
    data: dict
    settings: dict
    world_size: int
    key: str
    checkpoint: Path
    episodes: bool = False  # `examples` are search episodes (`procrl.trainers.sft_episodes`), tokenized at training


@dataclass
class SFTResult:
    """`status` "trained" or "cached"; `checkpoint`: the published directory; `summary`: the run record's result."""

    status: str
    checkpoint: Path
    key: str
    summary: dict


TASK_TOKENIZERS = {"arith": arithmetic_tokenizer}  # tokenizer=<name> of a scratch spec -> the task's own tokenizer


def with_task_tokenizer(name: str, root: Path) -> str:
    """`name` with a task tokenizer of a `scratch:` spec (`tokenizer=arith`, `TASK_TOKENIZERS`) saved under
    `<root>/tokenizers/<name>` (root: the SFT cache, `$PROCRL_CACHE/sft` by default) and named by that path; any
    other name unchanged. The cache key then hashes the saved files like any tokenizer directory's
    (`procrl.data_builders.arithmetic_tokenizer`).

    >>> root = Path("cache")
    >>> with_task_tokenizer("default", root), with_task_tokenizer("scratch:llama,hidden=64,tokenizer=smollm2", root)
    ('default', 'scratch:llama,hidden=64,tokenizer=smollm2')
    """
    if not is_scratch_spec(name):
        return name
    spec = parse_scratch_spec(name)
    if spec.tokenizer not in TASK_TOKENIZERS:
        return name
    directory = Path(root) / "tokenizers" / spec.tokenizer
    if not directory.is_dir():  # written once, published by one rename (another rank may race: either copy wins)
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{spec.tokenizer}-", dir=directory.parent))
        TASK_TOKENIZERS[spec.tokenizer]().save_pretrained(staging)
        try:
            staging.rename(directory)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return re.sub(r"tokenizer\s*=\s*[^,]+", f"tokenizer={directory}", name)


def prepare_sft(script: SFTScriptArguments, training: SFTTrainingConfig, model_args: Any) -> SFTPlan:
    """Check the settings, load the rows, build the examples and compute the cache key (no model is loaded).

    Raises:
        SFTInputError: LoRA, a bad `scratch:` spec, data `load_math_dataset` refuses, a file that is not there,
            rows with an empty solution (`sft_examples`), a base directory without model files.
    """
    name = with_task_tokenizer(model_args.model_name_or_path or "default", sft_cache.sft_cache_root(script.cache_dir))
    model_args.model_name_or_path = name
    try:
        check_model_args(model_args)
        episodes = is_episode_file(script.dataset_name)
        if episodes:  # search episodes: prompt + segments, tokenized with the policy's tokenizer in train_sft
            examples = episode_examples(script.dataset_name, script.dataset_start, script.dataset_end)
        else:  # the built-in and the generated arith sets decide their own columns
            builtin = script.dataset_name in BUILTIN_DATASETS or is_arithmetic_spec(script.dataset_name)
            rows = load_math_dataset(
                script.dataset_name,
                split=script.dataset_split,
                start=script.dataset_start,
                end=script.dataset_end,
                prompt_template=resolve_template(script.prompt_template),
                question_column=script.question_column,
                answer_column=script.answer_column,
                solution_column=None if builtin else script.solution_column,
            )
            examples = sft_examples(rows, script.dataset_name)
        identity = sft_cache.model_identity(name, model_args.model_revision)
    except (ValueError, FileNotFoundError) as error:
        raise SFTInputError(str(error)) from error
    data = sft_cache.data_digest(examples)
    settings = sft_cache.keyed_settings(training, model_args)
    world_size = training.world_size
    key = sft_cache.cache_key(identity, data, settings, world_size)
    checkpoint = sft_cache.sft_cache_root(script.cache_dir) / key
    return SFTPlan(examples, name, identity, data, settings, world_size, key, checkpoint, episodes)


def load_sft_model(model_args: Any, *, trust_remote_code: bool = False) -> tuple[Any, Any]:
    """The policy to train and its tokenizer: a `scratch:` organism (`build_scratch_model`) or a pretrained causal LM
    (`procrl.models.load_policy`; `dtype` null = float32).

    Raises:
        ValueError: the tokenizer has no chat template (the prompts are chat messages).
    """
    name = model_args.model_name_or_path or "default"
    if is_scratch_spec(name):
        dtype = model_args.dtype if model_args.dtype not in (None, "auto") else "float32"
        return build_scratch_model(name, dtype=getattr(torch, dtype))
    if trust_remote_code:
        logger.warning("trust_remote_code is not passed on: procrl loads the policy with transformers' own classes")
    model, tokenizer = load_policy(
        name,
        revision=model_args.model_revision,
        dtype=model_args.dtype,
        attn_implementation=model_args.attn_implementation,
    )
    if not tokenizer.chat_template:
        raise ValueError(f"{name}: its tokenizer has no chat template; SFT prompts are chat messages.")
    return model, tokenizer


def _read_manifest(path: Path) -> dict:
    return json.loads((path / sft_cache.MANIFEST).read_text())


def train_sft(plan: SFTPlan, script: SFTScriptArguments, training: SFTTrainingConfig, model_args: Any) -> SFTResult:
    """Return the cached checkpoint of `plan.key`, or train and publish it (module docstring).

    The main process decides hit or miss and makes the staging directory; the other processes follow it. A run
    that fails deletes its staging directory; one that is killed leaves it (hidden, never taken for a checkpoint).
    """
    main = training.process_index == 0
    hit = sft_cache.is_complete(plan.checkpoint) and not script.force
    staging = None if hit or not main else sft_cache.staging_dir(plan.checkpoint.parent, plan.key)
    hit, staging = broadcast_object_list([hit, None if staging is None else str(staging)])
    base = _summary_base(plan, script, training)
    if hit:
        logger.info("SFT checkpoint %s is cached: not training (force: true retrains)", plan.checkpoint)
        manifest = _read_manifest(plan.checkpoint)
        data = {**base["data"], **manifest.get("data", {})}  # the token counts of the run that trained it
        summary = {**base, "status": "cached", "data": data, "train": manifest.get("train"), "log_history": []}
        return SFTResult("cached", plan.checkpoint, plan.key, summary)
    staging = Path(staging)
    try:
        default_wandb_offline(training.report_to)
        model, tokenizer = load_sft_model(model_args, trust_remote_code=training.trust_remote_code)
        train_set = tokenize_episodes(plan.examples, tokenizer) if plan.episodes else plan.examples
        trainer = SFTTrainer(model=model, args=training, train_dataset=train_set, processing_class=tokenizer)
        data = _token_counts(trainer.train_dataset, len(plan.examples), training.max_length, training.packing)
        start = time.perf_counter()
        output = trainer.train()
        wall = time.perf_counter() - start
        trainer.save_model(str(staging))
        steps = trainer.state.global_step
        train_info = {
            "steps": steps,
            "wall_time_s": wall,
            "step_time_s": wall / steps if steps else None,
            "train_loss": output.training_loss,
            "bf16": bool(training.bf16),
        }
        summary = {**base, "status": "trained", "data": {**base["data"], **data}, "train": train_info}
        if main:
            manifest = {
                "key": plan.key,
                "key_inputs": summary["key_inputs"],
                "base_model": plan.model_name,
                "dataset": base["dataset"],
                "prompt_template": base["prompt_template"],  # what the policy should be prompted with afterwards
                "data": summary["data"],
                "train": train_info,
                "created_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "packages": package_versions(),
            }
            write_json_atomic(staging / sft_cache.MANIFEST, manifest)  # last: it marks the checkpoint finished
            sft_cache.publish(staging, plan.checkpoint, replace=script.force)
        trainer.accelerator.wait_for_everyone()
    finally:
        if main and staging.exists():  # a failure before publishing
            shutil.rmtree(staging, ignore_errors=True)
    summary["log_history"] = trainer.state.log_history
    return SFTResult("trained", plan.checkpoint, plan.key, summary)


def _summary_base(plan: SFTPlan, script: SFTScriptArguments, training: SFTTrainingConfig) -> dict:
    end = "" if script.dataset_end is None else script.dataset_end
    return {
        "key": plan.key,
        "checkpoint": str(plan.checkpoint),
        "model": plan.model_name,
        "model_path": plan.model_name if is_scratch_spec(plan.model_name) else resolve_model(plan.model_name),
        "dataset": f"{script.dataset_name}[{script.dataset_start}:{end}]",
        "prompt_template": script.prompt_template,
        "data": {"rows": plan.data["rows"]},
        "bf16": bool(training.bf16),
        "world_size": plan.world_size,
        "key_inputs": {
            "model": plan.identity,
            "data": plan.data,
            "settings": plan.settings,
            "world_size": plan.world_size,
        },
    }


def _token_counts(prepared: Any, rows: int, max_length: int | None, packing: bool) -> dict[str, int]:
    """Tokens of TRL's prepared training set: all and those in the loss; without packing also the rows at
    `max_length` (likely cut) and the rows TRL dropped (no completion token left after the cut), with packing the
    number of packed sequences."""
    ids, labels = prepared["input_ids"], prepared["labels"]
    counts = {"tokens": sum(len(x) for x in ids), "loss_tokens": sum(sum(1 for t in x if t != -100) for x in labels)}
    if packing:
        return {**counts, "packed_sequences": len(ids)}
    counts["rows_at_max_length"] = sum(1 for x in ids if max_length is not None and len(x) >= max_length)
    counts["rows_dropped"] = rows - len(ids)
    if counts["rows_dropped"] or counts["rows_at_max_length"]:
        logger.warning(
            "SFT data: %d of %d rows reach max_length=%s (their traces are cut, so they do not end with the end-of-turn "
            "token) and %d lost every completion token and were dropped by TRL; raise max_length to keep them.",
            counts["rows_at_max_length"],
            rows,
            max_length,
            counts["rows_dropped"],
        )
    return counts


def run_sft(script: SFTScriptArguments, training: SFTTrainingConfig, model_args: Any) -> SFTResult:
    """`prepare_sft` then `train_sft`: the whole job for library callers."""
    return train_sft(prepare_sft(script, training, model_args), script, training, model_args)
