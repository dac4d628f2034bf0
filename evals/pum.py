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

import numpy as np
from accelerate.utils import gather_object
from transformers import TrainerCallback

from procrl.evals.stats import bootstrap_interval
from procrl.rewards.pum import score_token_sequences

__all__ = [
    "PairwiseAccuracyCallback",
    "callback_result",
    "evaluate_pairs",
    "flatten_accuracy",
    "length_baseline",
    "length_credit",
    "pairwise_accuracy",
    "versus_length",
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
    result = pairwise_accuracy(length_credit(pairs), pairs["pair_type"])
    result["ties"] = sum(c == r for c, r in zip(chosen, rejected, strict=True))
    return result


def length_credit(pairs) -> list[float]:
    """Per-pair credit of "the longer prefix wins": 1, 0, or 1/2 for equal lengths (columns `chosen_prefix_tokens`,
    `rejected_prefix_tokens`)."""
    chosen, rejected = pairs["chosen_prefix_tokens"], pairs["rejected_prefix_tokens"]
    return [1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen, rejected, strict=True)]


def versus_length(correct: Sequence[float], pairs, *, resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The PUM's pairwise accuracy minus the length baseline's on the same pairs, with a paired 95% interval.

    The interval is the percentile bootstrap over PROBLEMS (column `problem_id`): a resample draws problems with
    replacement and keeps all their pairs, so the pairs of one problem (which share prefixes) are never treated as
    independent. The statistic is the pair-weighted difference sum(correct - credit) / pairs over the drawn problems.

    Args:
        correct: per-pair credit of the PUM (1/0), aligned with `pairs`.
        pairs: rows with `problem_id`, `chosen_prefix_tokens`, `rejected_prefix_tokens`.

    Returns:
        `{"difference", "interval": [low, high], "n_problems", "n_pairs"}`; difference None for no pairs; interval
        None for fewer than 2 problems or `resamples` 0.

    >>> import datasets
    >>> ds = datasets.Dataset.from_dict({"problem_id": ["a", "a", "b"], "chosen_prefix_tokens": [9, 3, 5],
    ...                                  "rejected_prefix_tokens": [4, 7, 5]})
    >>> r = versus_length([1.0, 1.0, 0.0], ds); r["difference"], r["n_problems"]
    (0.16666666666666666, 2)
    """
    credit = length_credit(pairs)
    if len(correct) != len(credit):
        raise ValueError(f"versus_length: {len(correct)} credits for {len(credit)} pairs")
    if not credit:
        return {"difference": None, "interval": None, "n_problems": 0, "n_pairs": 0}
    ids = sorted({str(p) for p in pairs["problem_id"]})
    index = {p: i for i, p in enumerate(ids)}
    sums, counts = np.zeros(len(ids)), np.zeros(len(ids))
    for value, base, problem in zip(correct, credit, pairs["problem_id"], strict=True):
        sums[index[str(problem)]] += value - base
        counts[index[str(problem)]] += 1
    interval = None
    if len(ids) > 1 and resamples > 0:
        low, high = bootstrap_interval(
            len(ids), lambda idx: float(sums[idx].sum() / counts[idx].sum()), resamples=resamples, seed=seed
        )
        interval = [low, high]
    return {
        "difference": float(sums.sum() / counts.sum()),
        "interval": interval,
        "n_problems": len(ids),
        "n_pairs": len(credit),
    }


def evaluate_pairs(model: Any, pairs, *, pad_token_id: int, batch_size: int = 16, accelerator: Any = None) -> dict:
    """Pairwise accuracy of a PUM on tokenized pairs: a pair is correct when U(chosen) > U(rejected) (strictly).

    Scores are pooled at the last real token (`score_token_sequences`), in eval mode, without gradients. With an
    `accelerator` of several processes the pairs are sharded over ranks (every rank runs the same number of forward
    passes, which ZeRO-3 needs) and gathered; every rank returns the full result.

    Returns:
        `pairwise_accuracy(...)` plus `mean_margin` = mean of U(chosen) - U(rejected) and, when `pairs` has the
        columns `problem_id`, `chosen_prefix_tokens`, `rejected_prefix_tokens`, `vs_length` = `versus_length(...)`.
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
    if {"problem_id", "chosen_prefix_tokens", "rejected_prefix_tokens"} <= set(pairs.column_names):
        result["vs_length"] = versus_length(correct, pairs)
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
