"""FRS step 1 and 2 (part of `procrl.evals.frs`): the tail confidence of one trace and the pooled top-K% filter.

With p_t the probability of the t-th chosen completion token under the RAW model distribution (temperature 1) and L
the number of completion tokens (EOS included when it was generated): n_low = max(1, floor(0.1 * L)), confidence =
mean of the n_low smallest p_t. All traces of one (model, benchmark) are ranked together by confidence, highest
first (ties keep their input order); the top floor(K% * N) are kept, at least one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

__all__ = ["kept_count", "rank_by_confidence", "tail_confidence", "tail_confidence_from_logps", "tail_size"]

# Log-probabilities a little above 0 are float error of log_softmax; beyond this they are not log-probabilities.
_LOGP_TOLERANCE = 1e-5


def tail_size(num_tokens: int, tail_fraction: float = 0.1) -> int:
    """n_low = max(1, floor(tail_fraction * L)) for a trace of L tokens (exact rational arithmetic, so 0.1 * 30 is 3,
    not 3.0000000000000004 rounded by luck).

    >>> [tail_size(n) for n in (1, 9, 10, 19, 20, 30)]
    [1, 1, 1, 1, 2, 3]
    """
    if num_tokens < 0:
        raise ValueError(f"a trace cannot have {num_tokens} tokens")
    return max(1, math.floor(Fraction(str(tail_fraction)) * num_tokens))


def tail_confidence(probs: Sequence[float], tail_fraction: float = 0.1) -> float | None:
    """Mean of the n_low smallest chosen-token probabilities of one trace (FRS tail confidence).

    Args:
        probs: probability of each completion token, `(L,)`, raw model distribution (temperature 1); L counts the
            EOS token when it was generated.
        tail_fraction: share of the tokens in the tail (0.1 in the paper).

    Returns:
        The correctly rounded mean of the `tail_size(L)` smallest values (in [0, 1]); None for an empty trace.

    Raises:
        ValueError: a value is NaN or outside [0, 1].

    >>> tail_confidence([0.95] * 18 + [0.2, 0.2]) < tail_confidence([0.6] * 20)   # L = 20 -> n_low = 2
    True
    """
    values = [float(p) for p in probs]
    if not values:
        return None
    for p in values:
        if not 0.0 <= p <= 1.0:  # also catches NaN
            raise ValueError(f"token probabilities must lie in [0, 1], got {p}")
    tail = sorted(values)[: tail_size(len(values), tail_fraction)]
    return float(sum(map(Fraction, tail), Fraction(0)) / len(tail))


def tail_confidence_from_logps(logps: Sequence[float], tail_fraction: float = 0.1) -> float | None:
    """`tail_confidence` of a trace given as natural-log probabilities (procrl's `completion_logps`, raw, T = 1).

    The list holds exactly the trace's own tokens (a padded row must be cut to its length first: the mask comes
    before `exp`). -inf is a probability of 0.

    Raises:
        ValueError: a log-probability is NaN or above 0 (beyond float error): not a log-probability.

    >>> round(tail_confidence_from_logps([math.log(0.5), 0.0]), 12)
    0.5
    """
    probs = []
    for logp in logps:
        logp = float(logp)
        if math.isnan(logp) or logp > _LOGP_TOLERANCE:
            raise ValueError(f"expected natural-log probabilities (<= 0), got {logp}")
        probs.append(math.exp(min(logp, 0.0)))
    return tail_confidence(probs, tail_fraction)


def rank_by_confidence(confidences: Sequence[float | None]) -> list[int]:
    """Indices of the traces that have a confidence, most confident first; ties keep their input order.

    >>> rank_by_confidence([0.2, None, 0.5, 0.2])
    [2, 0, 3]
    """
    valid = [i for i, c in enumerate(confidences) if c is not None]
    return sorted(valid, key=lambda i: (-confidences[i], i))


def kept_count(num_ranked: int, k_percent: float) -> int:
    """floor(K% * N) traces kept by the top-K% filter, at least 1 (0 only when there is nothing to keep).

    >>> kept_count(800, 10), kept_count(5, 10), kept_count(0, 10)
    (80, 1, 0)
    """
    if num_ranked <= 0:
        return 0
    return max(1, math.floor(Fraction(str(k_percent)) * num_ranked / 100))
