"""Train a Prefix Utility Model (PUM) with TRL's `RewardTrainer`: the implementation behind `train_pum.py`.

    accelerate launch train_pum.py            # the shipped GSM8K pairs, the embedded model: a few minutes on CPU
    accelerate launch train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml
    python train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml --max_steps 20
    ACCELERATE_USE_CPU=True torchrun --nproc_per_node 2 train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml
    accelerate launch --config_file configs/accelerate/zero2.yaml train_pum.py --config configs/pum/train_gsm8k_smollm2.yaml --bf16 true
    python train_pum.py --config configs/pum/train_gsm8k_smollm2_lora.yaml         # LoRA (lora_task_type: SEQ_CLS)

(On CPU, `accelerate launch --num_processes 2 --cpu` starts only ONE process; use torchrun as above for two ranks.)

The job (DESIGN §2.3, §4 "PUM"): read a PUM-Math pair set (columns `prompt` = problem text, `chosen`/`rejected` =
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

Outputs in `output_dir`: the model (full weights, or the LoRA adapter with the trained `score` head), its tokenizer,
`pum_config.json` (rendering settings for `PrefixUtilityModel.from_pretrained`) and `summary.json` (data counts,
held-out pairwise accuracy overall and per pair type before and after training, a length-only baseline, in-trainer
scores of a few held-out prefixes, the log history).
"""

from __future__ import annotations

import codecs
import json
import math
import os
import random
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from trl import RewardConfig

from procrl.data_builders.datasets import builtin_data_file
from procrl.rewards.pum import (
    PUM_CONFIG_NAME,
    PrefixUtilityModel,
    render_prefix,
    render_prompt_ids,
    score_token_sequences,
)
from procrl.rewards.steps import DEFAULT_SEPARATOR
from procrl.utils import get_logger, prompt_to_text

logger = get_logger(__name__)

REQUIRED_COLUMNS = ("prompt", "chosen", "rejected", "margin", "pair_type", "problem_id")
# Pair sets shipped as package data of procrl.data_builders (data/SOURCE.md gives the command that built each one).
BUILTIN_PAIRS = {"pum_math_gsm8k_cpu": "pum_math_gsm8k_cpu.jsonl"}
BUILD_COMMAND = "procrl build-pum-data --config configs/pum/build_gsm8k_cpu.yaml"
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


# ----------------------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------------------


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
            "help": "Held-out chosen prefixes whose in-trainer scores go into summary.json, to check a reloaded "
            "checkpoint against (PrefixUtilityModel.from_pretrained must reproduce them)."
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

    `bf16: null` resolves to True only when a CUDA GPU supports bf16 and neither `fp16` nor `use_cpu` is set
    (TRL resolves it to True, which raises on a CPU-only machine); an explicit value is left to transformers.
    Other defaults that differ from TRL's: `output_dir` outputs/pum, `learning_rate` 1e-5 (a full fine-tune of a
    small model; TRL's 1e-4 suits LoRA), 1 epoch, activation checkpointing off (it only slows a 135M model),
    a log line every 5 steps.
    """

    output_dir: str | None = field(
        default="outputs/pum",
        metadata={"help": "Where the PUM checkpoint, pum_config.json and summary.json are written."},
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
    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision. null (default): on when a CUDA GPU supports bf16 and neither fp16 nor "
            "use_cpu is set, off otherwise (CPU)."
        },
    )

    def __post_init__(self):
        if self.bf16 is None:
            use_cpu = self.use_cpu or os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
            gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
            self.bf16 = bool(gpu_bf16 and not self.fp16 and not use_cpu)
        super().__post_init__()


def make_parser():
    from trl import ModelConfig, TrlParser

    return TrlParser((PUMScriptArguments, PUMTrainingConfig, ModelConfig))


# ----------------------------------------------------------------------------------------------------------
# Data: load, split by problem, render + tokenize
# ----------------------------------------------------------------------------------------------------------


class PairsNotFoundError(FileNotFoundError):
    """A PUM-Math pair set that is neither a local path, a shipped set nor loadable from the Hub."""


def load_pairs(name_or_path: str, split: str = "train"):
    """Load a PUM-Math pair set as a `datasets.Dataset` and check its columns.

    Args:
        name_or_path: a `save_to_disk` directory (Dataset or DatasetDict), a .parquet/.jsonl/.json/.csv file, a
            directory of data files, a shipped set (`BUILTIN_PAIRS`; a local path of the same name wins), or a
            Hub dataset id.
        split: split to read from a DatasetDict, a data directory or the Hub (files have one split).

    Raises:
        PairsNotFoundError: no such local path or shipped set, and the Hub did not give it either (the message is
            one line naming the path and the builder command).
        ValueError: an unsupported file type, a missing split, or missing columns (REQUIRED_COLUMNS).
    """
    import datasets

    path = Path(name_or_path)
    if not path.exists() and name_or_path in BUILTIN_PAIRS:
        try:
            path = Path(str(builtin_data_file(BUILTIN_PAIRS[name_or_path])))
        except FileNotFoundError as error:  # a broken install: one line, like any other missing pair set
            raise PairsNotFoundError(str(error).replace("\n", " ")) from error
    if path.is_dir() and any(
        (path / marker).is_file() for marker in ("dataset_info.json", "state.json", "dataset_dict.json")
    ):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ValueError(f"{name_or_path!r} has splits {list(loaded)}, not {split!r}: set dataset_split")
            loaded = loaded[split]
    elif path.is_file():
        builder = _FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise ValueError(f"Cannot read {name_or_path!r}: use one of {sorted(_FILE_BUILDERS)} or a directory")
        loaded = datasets.load_dataset(builder, data_files=str(path), split="train")
    else:
        where = f"No PUM-Math pairs at {name_or_path!r} (no such file or directory, not a shipped set {sorted(BUILTIN_PAIRS)}"
        how = (
            f"build them with `{BUILD_COMMAND}` and pass its dataset/ folder, or leave dataset_name at its default "
            "(the shipped pairs)"
        )
        text = str(name_or_path)
        if text.startswith((".", "/", "~")) or text.count("/") > 1 or path.suffix.lower() in _FILE_BUILDERS:
            raise PairsNotFoundError(f"{where}); {how}.")  # a local path, not a Hub id ("name" or "owner/name")
        try:
            loaded = datasets.load_dataset(text, split=split)
        except (FileNotFoundError, ConnectionError) as error:  # DatasetNotFoundError is a FileNotFoundError
            raise PairsNotFoundError(f"{where}, not loadable from the Hub: {type(error).__name__}); {how}.") from error
    missing = [c for c in REQUIRED_COLUMNS if c not in loaded.column_names]
    if missing:
        raise ValueError(
            f"{name_or_path!r} lacks the PUM-Math columns {missing} (has {loaded.column_names}); build the pairs "
            "with the PUM-Math builder or rename the columns."
        )
    return loaded


def split_by_problem(pairs, eval_fraction: float, seed: int = 0):
    """Split pairs into (train, eval) by `problem_id`: a problem's pairs all land on one side.

    `round(eval_fraction * n_problems)` problems (at least 1 when `eval_fraction > 0`) chosen by a seeded shuffle of
    the sorted ids are held out; row order is kept within each side.

    Raises:
        ValueError: fewer than 2 problems while a held-out split is requested.
    """
    ids = sorted({str(p) for p in pairs["problem_id"]})
    if eval_fraction <= 0:
        return pairs, pairs.select([])
    if len(ids) < 2:
        raise ValueError(f"Cannot hold out problems from {len(ids)} problem(s); set eval_fraction: 0 or add data")
    random.Random(seed).shuffle(ids)
    n_eval = min(max(1, round(eval_fraction * len(ids))), len(ids) - 1)
    held_out = set(ids[:n_eval])
    flags = [str(p) in held_out for p in pairs["problem_id"]]
    train = pairs.select([i for i, f in enumerate(flags) if not f])
    evaluation = pairs.select([i for i, f in enumerate(flags) if f])
    return train, evaluation


@dataclass
class PairStats:
    """Counts from `tokenize_pairs` (one set of pairs). Tokens are model tokens."""

    pairs_in: int = 0
    pairs_kept: int = 0
    dropped_ties: int = 0  # `is_tie` rows of the builder (ΔG = 0, order arbitrary): no Bradley-Terry target
    dropped_identical_text: int = 0  # chosen == rejected before rendering
    dropped_identical_after_truncation: int = 0  # different texts, same ids after the right cut
    dropped_prompt_too_long: int = 0  # the rendered problem alone exceeds max_length - 1
    dropped_ends_with_pad: int = 0  # the cut ends right after a pad/EOS token (transformers would pool elsewhere)
    truncated_sequences: int = 0  # chosen or rejected inputs that were cut (each side counts)
    truncated_tokens: int = 0  # prefix tokens cut, summed over all kept and dropped inputs
    max_input_tokens: int = 0  # longest kept input
    kept_by_type: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tokenize_pairs(
    pairs,
    tokenizer: Any,
    max_length: int | None,
    *,
    separator: str = DEFAULT_SEPARATOR,
    margin_scale: float = 1.0,
    progress: bool = True,
):
    """Render and tokenize PUM pairs for `RewardTrainer` with `render_prefix` (the scorer's renderer).

    Args:
        pairs: a Dataset with REQUIRED_COLUMNS (`prompt` is the problem text, or chat messages whose last user
            message is the problem); rows with a true `is_tie` (the builder's optional ΔG = 0 pairs) are dropped
            and counted, since a tie has no preferred side (DESIGN's optional tie regulariser is not implemented).
        tokenizer: the model's tokenizer (chat template, pad token set).
        max_length: `RewardConfig.max_length`; inputs keep at most `max_length - 1` tokens (None: no cut).
        separator: step separator for splitting prefixes into tokenization pieces.
        margin_scale: the `margin` column becomes `margin_scale * margin`; 0 leaves the column out.

    Returns:
        (dataset, stats): columns `chosen_ids`, `rejected_ids`, [`margin`], `pair_type`, `problem_id`,
        `chosen_prefix_tokens`, `rejected_prefix_tokens` (prefix lengths in tokens before truncation, for the
        length baseline), plus `PairStats`.

    Raises:
        ValueError: a non-finite or negative margin, or an empty chosen/rejected text.
    """
    import datasets
    from tqdm.auto import tqdm

    stats = PairStats(pairs_in=len(pairs))
    rows: dict[str, list] = defaultdict(list)
    prompt_cache: dict[str, list[int]] = {}
    for i, ex in enumerate(tqdm(pairs, desc="procrl: rendering PUM pairs", disable=not progress)):
        margin = float(ex["margin"])
        if not math.isfinite(margin) or margin < 0:
            raise ValueError(
                f"pair {i} (problem {ex['problem_id']}): margin must be finite and >= 0, got {ex['margin']}"
            )
        if ex.get("is_tie"):
            stats.dropped_ties += 1
            continue
        chosen, rejected = ex["chosen"], ex["rejected"]
        if not isinstance(chosen, str) or not isinstance(rejected, str) or not chosen.strip() or not rejected.strip():
            raise ValueError(
                f"pair {i} (problem {ex['problem_id']}): chosen and rejected must be non-empty prefix texts"
            )
        if chosen == rejected:
            stats.dropped_identical_text += 1
            continue
        problem = prompt_to_text(ex["prompt"])
        try:
            if problem not in prompt_cache:
                prompt_cache[problem] = render_prompt_ids(tokenizer, problem)
            sides = [
                render_prefix(
                    tokenizer, problem, text, max_length, separator=separator, prompt_ids=prompt_cache[problem]
                )
                for text in (chosen, rejected)
            ]
        except ValueError as err:
            if "never cut" not in str(err):
                raise
            stats.dropped_prompt_too_long += 1
            continue
        for side in sides:
            stats.truncated_sequences += side.truncated_tokens > 0
            stats.truncated_tokens += side.truncated_tokens
        c, r = sides
        if c.input_ids == r.input_ids:
            stats.dropped_identical_after_truncation += 1
            continue
        if tokenizer.pad_token_id in (c.input_ids[-1], r.input_ids[-1]):
            stats.dropped_ends_with_pad += 1
            continue
        rows["chosen_ids"].append(c.input_ids)
        rows["rejected_ids"].append(r.input_ids)
        if margin_scale > 0:
            rows["margin"].append(margin_scale * margin)
        rows["pair_type"].append(str(ex["pair_type"]))
        rows["problem_id"].append(str(ex["problem_id"]))
        rows["chosen_prefix_tokens"].append(len(c.input_ids) + c.truncated_tokens - c.prompt_length)
        rows["rejected_prefix_tokens"].append(len(r.input_ids) + r.truncated_tokens - r.prompt_length)
        stats.max_input_tokens = max(stats.max_input_tokens, len(c.input_ids), len(r.input_ids))
        stats.kept_by_type[str(ex["pair_type"])] = stats.kept_by_type.get(str(ex["pair_type"]), 0) + 1
    stats.pairs_kept = len(rows["chosen_ids"])
    dropped = stats.pairs_in - stats.pairs_kept
    if dropped or stats.truncated_sequences:
        logger.info("PUM pairs: kept %d of %d; %s", stats.pairs_kept, stats.pairs_in, stats.to_dict())
    columns = [
        "chosen_ids",
        "rejected_ids",
        *(["margin"] if margin_scale > 0 else []),
        "pair_type",
        "problem_id",
        "chosen_prefix_tokens",
        "rejected_prefix_tokens",
    ]
    return datasets.Dataset.from_dict({c: rows[c] for c in columns}), stats


# ----------------------------------------------------------------------------------------------------------
# Evaluation: pairwise accuracy overall and per pair type, and the length-only baseline
# ----------------------------------------------------------------------------------------------------------


def pairwise_accuracy(correct: Sequence[float], pair_types: Sequence[str]) -> dict[str, Any]:
    """`{"accuracy", "n", "by_type": {type: {"accuracy", "n"}}}` from per-pair credit (1, 0, or 0.5 for a tie
    in the baseline). Types are reported in sorted order; an empty set gives accuracy None."""
    by_type: dict[str, list[float]] = defaultdict(list)
    for value, kind in zip(correct, pair_types, strict=True):
        by_type[kind].append(value)

    def acc(values):
        return sum(values) / len(values) if values else None

    return {
        "accuracy": acc(list(correct)),
        "n": len(correct),
        "by_type": {k: {"accuracy": acc(v), "n": len(v)} for k, v in sorted(by_type.items())},
    }


def length_baseline(pairs) -> dict[str, Any]:
    """Held-out accuracy of "the longer prefix wins" (prefix length in tokens, before truncation).

    A tie counts 1/2 (a coin flip) and is counted in `ties`.

    >>> import datasets
    >>> ds = datasets.Dataset.from_dict({"chosen_prefix_tokens": [9, 3, 5], "rejected_prefix_tokens": [4, 7, 5],
    ...                                  "pair_type": ["vertical", "vertical", "horizontal"]})
    >>> r = length_baseline(ds); r["accuracy"], r["by_type"]["vertical"]["accuracy"], r["ties"]
    (0.5, 0.5, 1)
    """
    chosen, rejected = pairs["chosen_prefix_tokens"], pairs["rejected_prefix_tokens"]
    credit = [1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen, rejected, strict=True)]
    result = pairwise_accuracy(credit, pairs["pair_type"])
    result["ties"] = sum(c == r for c, r in zip(chosen, rejected, strict=True))
    return result


def evaluate_pairs(model: Any, pairs, *, pad_token_id: int, batch_size: int = 16, accelerator: Any = None) -> dict:
    """Pairwise accuracy of a PUM on tokenized pairs: a pair is correct when U(chosen) > U(rejected) (strictly).

    Scores are pooled at the last real token (`score_token_sequences`), in eval mode, without gradients. With an
    `accelerator` of several processes the pairs are sharded over ranks (every rank runs the same number of forward
    passes, which ZeRO-3 needs) and gathered; every rank returns the full result.

    Returns:
        `pairwise_accuracy(...)` plus `mean_margin` = mean of U(chosen) - U(rejected).
    """
    n = len(pairs)
    if n == 0:
        return {**pairwise_accuracy([], []), "mean_margin": None}
    world = accelerator.num_processes if accelerator is not None else 1
    rank = accelerator.process_index if accelerator is not None else 0
    shard = list(range(rank, n, world))
    per_rank = math.ceil(n / world)
    shard += [shard[-1] if shard else 0] * (per_rank - len(shard))  # equal work on every rank; duplicates dropped
    chosen = [pairs[i]["chosen_ids"] for i in shard]
    rejected = [pairs[i]["rejected_ids"] for i in shard]
    was_training = model.training
    model.eval()
    try:
        scores = score_token_sequences(model, chosen + rejected, pad_token_id=pad_token_id, batch_size=batch_size)
    finally:
        model.train(was_training)
    local = [(i, scores[j], scores[len(shard) + j]) for j, i in enumerate(shard)]
    if world > 1:
        from accelerate.utils import gather_object

        local = gather_object(local)
    by_index = {i: (c, r) for i, c, r in local}
    types = pairs["pair_type"]
    correct = [1.0 if by_index[i][0] > by_index[i][1] else 0.0 for i in range(n)]
    result = pairwise_accuracy(correct, types)
    result["mean_margin"] = sum(by_index[i][0] - by_index[i][1] for i in range(n)) / n
    return result


def flatten_accuracy(result: dict, prefix: str = "eval_pairwise_accuracy") -> dict[str, float]:
    """`{"eval_pairwise_accuracy": a, "eval_pairwise_accuracy_vertical": ..., ...}` for `Trainer.log` (wandb shows
    them as eval/pairwise_accuracy...)."""
    logs = {prefix: result["accuracy"]}
    for kind, row in result["by_type"].items():
        logs[f"{prefix}_{kind}"] = row["accuracy"]
    if result.get("mean_margin") is not None:
        logs[prefix.replace("accuracy", "margin")] = result["mean_margin"]
    return {k: v for k, v in logs.items() if v is not None}


class PairwiseAccuracyCallback(TrainerCallback):
    """After every evaluation, score the held-out pairs and log pairwise accuracy overall and per pair type.

    TRL's `RewardTrainer` drops `pair_type` before the collator and averages per-batch accuracies, so this
    callback keeps its own tokenized copy (with `pair_type`) and scores it with `evaluate_pairs`. Call
    `attach(trainer)` once the trainer exists (the callback logs through `trainer.log`, so the values reach
    `log_history`, wandb and the dict `trainer.evaluate()` returns).
    """

    def __init__(self, pairs, *, pad_token_id: int, batch_size: int = 16):
        self.pairs = pairs
        self.pad_token_id = pad_token_id
        self.batch_size = batch_size
        self.trainer = None
        self.history: list[tuple[int, dict]] = []

    def attach(self, trainer) -> PairwiseAccuracyCallback:
        self.trainer = trainer
        return self

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.trainer is None:
            raise RuntimeError("PairwiseAccuracyCallback.attach(trainer) was not called")
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        result = evaluate_pairs(
            model,
            self.pairs,
            pad_token_id=self.pad_token_id,
            batch_size=self.batch_size,
            accelerator=self.trainer.accelerator,
        )
        self.history.append((state.global_step, result))
        logs = flatten_accuracy(result)
        if metrics is not None:
            metrics.update(logs)
        self.trainer.log(logs)


# ----------------------------------------------------------------------------------------------------------
# The job
# ----------------------------------------------------------------------------------------------------------


def build_model(model_path: str, model_args: Any, tokenizer: Any, *, trust_remote_code: bool = False):
    """`AutoModelForSequenceClassification(num_labels=1)` from a causal LM (new score head) or a PUM checkpoint.

    Raises:
        ValueError: body weights (anything but `score.weight`) are missing from the checkpoint.
    """
    from transformers import AutoModelForSequenceClassification

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
    from trl import get_peft_config

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
        model_args.lora_modules_to_save = [*modules, "score"]  # the head must train and be saved with the adapter
    return get_peft_config(model_args)


def train(script_args: PUMScriptArguments, training_args: PUMTrainingConfig, model_args) -> dict:
    """Split, render, train, evaluate and save a PUM; returns the summary also written to `summary.json`."""
    from transformers import AutoTokenizer, set_seed
    from trl import RewardTrainer

    from procrl.models import resolve_model
    from procrl.utils import default_wandb_offline, json_safe

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
    pairs = load_pairs(script_args.dataset_name, script_args.dataset_split)
    if script_args.eval_dataset_name:
        train_raw = pairs
        eval_raw = load_pairs(
            script_args.eval_dataset_name, script_args.eval_dataset_split or script_args.dataset_split
        )
        shared = {str(p) for p in train_raw["problem_id"]} & {str(p) for p in eval_raw["problem_id"]}
        if shared:
            raise ValueError(
                f"{len(shared)} problems are in both the training and the held-out pairs, e.g. {sorted(shared)[:3]}"
            )
    else:
        train_raw, eval_raw = split_by_problem(pairs, script_args.eval_fraction, script_args.split_seed)
    if script_args.max_train_pairs is not None:
        train_raw = train_raw.select(range(min(script_args.max_train_pairs, len(train_raw))))
    if script_args.max_eval_pairs is not None:
        eval_raw = eval_raw.select(range(min(script_args.max_eval_pairs, len(eval_raw))))
    render = {
        "separator": script_args.step_separator,
        "margin_scale": script_args.margin_scale,
        "progress": main_process,
    }
    train_pairs, train_stats = tokenize_pairs(train_raw, tokenizer, training_args.max_length, **render)
    eval_pairs, eval_stats = tokenize_pairs(eval_raw, tokenizer, training_args.max_length, **render)
    if len(train_pairs) == 0:
        raise ValueError(f"No training pairs left after rendering: {train_stats.to_dict()}")
    has_eval = len(eval_pairs) > 0
    if not has_eval and training_args.eval_strategy != "no":
        raise ValueError("No held-out pairs: set eval_fraction > 0 (or eval_dataset_name), or eval_strategy: 'no'.")
    trl_columns = ["chosen_ids", "rejected_ids", *(["margin"] if script_args.margin_scale > 0 else [])]

    set_seed(training_args.seed)  # the new score head's init
    model = build_model(model_path, model_args, tokenizer, trust_remote_code=training_args.trust_remote_code)
    callback = PairwiseAccuracyCallback(
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

    before = callback_result(trainer, callback) if has_eval and script_args.eval_before_training else None
    train_start = time.perf_counter()
    train_output = trainer.train()
    train_time = time.perf_counter() - train_start
    after = callback_result(trainer, callback) if has_eval else None

    # In-trainer scores of a few held-out prefixes: a reloaded checkpoint must reproduce them.
    probe_source = eval_raw if len(eval_raw) else train_raw
    probe_raw = probe_source.select(range(min(script_args.probe_size, len(probe_source))))
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
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
            "length_baseline": length_baseline(eval_pairs) if has_eval else None,
        },
        "probe": probe,
        "checkpoint": str(training_args.output_dir),
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
        (out / "summary.json").write_text(json.dumps(json_safe(summary), indent=2))
        summary["summary_path"] = str(out / "summary.json")
    trainer.accelerator.wait_for_everyone()
    return summary


def callback_result(trainer, callback: PairwiseAccuracyCallback) -> dict:
    """Run `trainer.evaluate()` (TRL's eval loss + the callback's pairwise accuracy) and return the callback's
    result for that evaluation, with TRL's eval loss added."""
    metrics = trainer.evaluate()
    result = dict(callback.history[-1][1])
    result["eval_loss"] = metrics.get("eval_loss")
    return result


def format_summary(summary: dict) -> str:
    """The held-out table people read: PUM pairwise accuracy before/after training and the length baseline."""
    data, train_info, heldout = summary["data"], summary["train"], summary["heldout"]
    lines = [
        f"procrl PUM: {summary['model']}{' (LoRA)' if summary['lora'] else ''} on {data['dataset']}, "
        f"{train_info['steps']} steps in {train_info['wall_time_s']:.0f} s, {summary['world_size']} process(es)",
        f"pairs: train {data['train']['pairs_kept']} of {data['train']['pairs_in']} ({data['train_problems']} problems), "
        f"held out {data['eval']['pairs_kept']} of {data['eval']['pairs_in']} ({data['eval_problems']} problems); "
        f"truncated inputs {data['train']['truncated_sequences'] + data['eval']['truncated_sequences']}, "
        f"dropped identical after truncation "
        f"{data['train']['dropped_identical_after_truncation'] + data['eval']['dropped_identical_after_truncation']}",
    ]
    if heldout["after"] is not None:
        header = f"{'pair type':<12} {'n':>5} {'PUM before':>10} {'PUM after':>10} {'longer wins':>11}"
        lines += ["", header, "-" * len(header)]
        rows = [("all", heldout["after"], heldout["before"], heldout["length_baseline"])]
        for kind in heldout["after"]["by_type"]:
            rows.append(
                (
                    kind,
                    heldout["after"]["by_type"][kind],
                    (heldout["before"] or {}).get("by_type", {}).get(kind),
                    heldout["length_baseline"]["by_type"].get(kind),
                )
            )

        def fmt(row):
            return f"{row['accuracy']:.3f}" if row and row.get("accuracy") is not None else "-"

        for name, after, before, base in rows:
            lines.append(f"{name:<12} {after['n']:>5} {fmt(before):>10} {fmt(after):>10} {fmt(base):>11}")
    if summary.get("summary_path"):
        lines += ["", f"summary: {summary['summary_path']}", f"checkpoint: {summary['checkpoint']}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse `--config x.yaml` plus flag overrides, train, and print the held-out table (rank 0)."""
    parser = make_parser()
    script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    try:
        summary = train(script_args, training_args, model_args)
    except PairsNotFoundError as error:
        print(f"train_pum.py: error: {error}", file=sys.stderr)
        return 2
    if training_args.process_index == 0:
        print(format_summary(summary))
    return 0
