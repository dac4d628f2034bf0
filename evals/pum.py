"""Held-out evaluation of a PUM: pairwise accuracy overall and per pair type, and the length-only baseline.

TRL's `RewardTrainer` keeps only `chosen_ids`, `rejected_ids`, `margin` for the collator when
`remove_unused_columns` is set (trl 1.16.0 trl/trainer/reward_trainer.py l. 744-749), so `pair_type` is gone and
its `eval_accuracy` is the mean of per-batch accuracies over all types: per-type pairwise accuracy comes from
`PairwiseAccuracyCallback`, which scores the held-out pairs itself (`evaluate_pairs`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from accelerate.utils import gather_object
from transformers import TrainerCallback

from procrl.rewards.pum import score_token_sequences

__all__ = [
    "PairwiseAccuracyCallback",
    "callback_result",
    "evaluate_pairs",
    "flatten_accuracy",
    "length_baseline",
    "pairwise_accuracy",
]


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


def callback_result(trainer, callback: PairwiseAccuracyCallback) -> dict:
    """Run `trainer.evaluate()` (TRL's eval loss + the callback's pairwise accuracy) and return the callback's
    result for that evaluation, with TRL's eval loss added."""
    metrics = trainer.evaluate()
    result = dict(callback.history[-1][1])
    result["eval_loss"] = metrics.get("eval_loss")
    return result
