"""NLI probabilities and the decision rule of StepGap stages D and E (docs/architecture.md "StepGap"; arXiv 2605.24733).

An NLI backend (`procrl.rewards.stepgap.nli`) gives, per (premise, hypothesis), the probabilities
{"entailment": P(e), "neutral": P(n), "contradiction": P(c)}; `NLIThresholds` turns them into one label (argmax by
default, or configurable thresholds). Plain Python, no model: the verifier and the backends share it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NLI_LABELS = ("entailment", "neutral", "contradiction")

__all__ = ["NLI_LABELS", "NLIThresholds", "ARGMAX", "normalize_probs", "one_hot", "nli_probabilities"]


def normalize_probs(dist: Any) -> dict[str, float] | None:
    """`dist` as {"entailment", "neutral", "contradiction"} -> probability, renormalised to sum 1 (a missing label
    gets 0: e.g. a judge's top log-probs that did not cover it). None for anything that is not such a distribution
    (not a dict, an unknown key, a non-number, a negative or non-finite value, all zero): unscored, never a guess.

    >>> normalize_probs({"entailment": 3.0, "contradiction": 1.0})
    {'entailment': 0.75, 'neutral': 0.0, 'contradiction': 0.25}
    >>> normalize_probs({"entailment": 0.5, "maybe": 0.5}) is None
    True
    """
    if not isinstance(dist, dict) or not dist or set(dist) - set(NLI_LABELS):
        return None
    values = {label: dist.get(label, 0.0) for label in NLI_LABELS}
    if not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in values.values()
    ):
        return None
    total = sum(values.values())
    if total <= 0:
        return None
    return {label: v / total for label, v in values.items()}


@dataclass(frozen=True)
class NLIThresholds:
    """The decision rule from NLI probabilities to a label (stages D and E of the StepGap verifier).

    Both None (the default): the argmax, ties going to the earlier of entailment, neutral, contradiction. Otherwise:

        entailment     if P(e) >= entail_min and P(e) >= P(c)   (entail_min None: if P(e) is the argmax)
        contradiction  else, if P(c) >= contradict_min          (contradict_min None: if P(c) is the argmax)
        neutral        otherwise

    So `entail_min=0.9` says "entailment only when the NLI is 90% sure": a step it does not entail becomes neutral
    (MB/IE), never contradiction unless contradiction is the likeliest label; and `contradict_min=0.5` "a
    contradiction needs P(c) >= 0.5" (fewer CC, more MB). Thresholds are probabilities.

    Raises:
        ValueError: a threshold outside (0, 1] (or not a number).

    >>> NLIThresholds(entail_min=0.6).decide({"entailment": 0.5, "neutral": 0.2, "contradiction": 0.3})
    'neutral'
    """

    entail_min: float | None = None
    contradict_min: float | None = None

    def __post_init__(self) -> None:
        for name in ("entail_min", "contradict_min"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= 1):
                raise ValueError(f"NLIThresholds: {name} must be a probability in (0, 1] or None, got {value!r}")

    def decide(self, dist: dict[str, float] | None) -> str | None:
        """The label for one distribution (see the class docstring); None for None or an invalid distribution."""
        probs = normalize_probs(dist)
        if probs is None:
            return None
        e, n, c = (probs[label] for label in NLI_LABELS)
        if (e >= self.entail_min and e >= c) if self.entail_min is not None else (e >= n and e >= c):
            return "entailment"
        if (c >= self.contradict_min) if self.contradict_min is not None else (c > n and c > e):
            return "contradiction"
        return "neutral"

    def __str__(self) -> str:
        if self.entail_min is None and self.contradict_min is None:
            return "argmax"
        return f"entail_min={self.entail_min}, contradict_min={self.contradict_min}"


ARGMAX = NLIThresholds()


def one_hot(label: str | None) -> dict[str, float] | None:
    """{label: 1.0, others: 0.0} for an NLI label; None for None or anything else."""
    if label not in NLI_LABELS:
        return None
    return {x: float(x == label) for x in NLI_LABELS}


def nli_probabilities(nli: Any, pairs: Sequence[tuple[str, str]]) -> list[dict[str, float] | None]:
    """`nli.predict_proba(pairs)`, or one-hots of `nli.predict(pairs)` for a backend that only gives labels (a
    scripted NLI in tests, a third-party object). Each result is normalised (`normalize_probs`); None = unscored.

    Raises:
        RuntimeError: the backend returned a different number of results than pairs.
    """
    if hasattr(nli, "predict_proba"):
        raw = [normalize_probs(d) for d in nli.predict_proba(pairs)]
    else:
        raw = [one_hot(label) for label in nli.predict(pairs)]
    if len(raw) != len(pairs):
        raise RuntimeError(f"NLI backend {nli!r} returned {len(raw)} results for {len(pairs)} pairs")
    return raw
