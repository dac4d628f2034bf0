"""Reward-hacking monitors: the pure math behind the `hacking/...` metrics of `ProcessGRPOTrainer` (docs/architecture.md "Monitors").

- `repetition_rate(tokens)`: the fraction of repeated n-grams (n = 4) in one completion,
  `1 - #distinct n-grams / #n-grams`; None for a completion with fewer than n tokens (it has no n-gram, so it is
  excluded from the batch mean rather than counted as "no repetition"). `hacking/repetition_rate` is the mean
  over the completions that have an n-gram (not logged when none has).
- `within_group_corr(values, lengths, group_size)`: the Pearson correlation of a reward with completion length
  inside each prompt's group of G completions, averaged over the groups where it is defined (at least 2
  completions with a reward, neither the reward nor the length constant); None when no group qualifies
  (`hacking/length_corr/<reward name>` is then not logged for that batch).
- `RewardAccuracyMonitor`: the rolling Pearson correlation between the weighted reward mean and task accuracy over
  the last N logging steps (`hacking/reward_accuracy_corr`), and a warning when it is negative while the reward
  rises (the least-squares slope of the reward over the window is > 0): the process-only collapse that the PUM
  paper reports for PRM rewards (the reward climbs, accuracy falls). The warning fires once per crossing.

Everything here takes plain Python sequences of floats (NaN = missing) and never returns NaN: an undefined value
is None. Sums use `math.fsum`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Sequence

__all__ = [
    "RewardAccuracyMonitor",
    "correlation",
    "mean_repetition_rate",
    "repetition_rate",
    "slope",
    "within_group_corr",
]

NGRAM = 4
MIN_WINDOW = 3  # the fewest points a correlation and a trend are computed from


def repetition_rate(tokens: Sequence[Hashable], n: int = NGRAM) -> float | None:
    """`1 - #distinct n-grams / #n-grams` of one token sequence, in [0, 1); None when it has fewer than n tokens.

    `tokens` are token ids (or any hashable units: words, characters). 0.0 = no n-gram occurs twice.

    >>> repetition_rate([1, 2, 3, 4, 1, 2, 3, 4])  # 5 four-grams, 4 distinct
    0.2
    >>> repetition_rate([7, 7, 7]) is None
    True
    """
    if n < 1:
        raise ValueError(f"repetition_rate needs n >= 1, got {n}")
    tokens = list(tokens)
    count = len(tokens) - n + 1
    if count <= 0:
        return None
    distinct = len({tuple(tokens[i : i + n]) for i in range(count)})
    return (count - distinct) / count  # = 1 - distinct / count, without its rounding


def mean_repetition_rate(rates: Sequence[float | None]) -> float | None:
    """Mean of the per-completion rates that are defined (None and NaN = excluded); None when none is."""
    valid = [r for r in rates if r is not None and not math.isnan(r)]
    return math.fsum(valid) / len(valid) if valid else None


def correlation(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson correlation of two equally long sequences, in [-1, 1]; None when undefined (fewer than 2 points, or
    either sequence constant). Pairs with a NaN in either element are dropped first.

    Raises:
        ValueError: the sequences differ in length.

    >>> correlation([1, 2, 3, 4], [2, 1, 4, 3])
    0.6
    >>> correlation([1, 1, 1], [1, 2, 3]) is None
    True
    """
    if len(xs) != len(ys):
        raise ValueError(f"correlation needs sequences of equal length, got {len(xs)} and {len(ys)}")
    pairs = [(float(x), float(y)) for x, y in zip(xs, ys, strict=True) if not (math.isnan(x) or math.isnan(y))]
    if len(pairs) < 2:
        return None
    x, y = zip(*pairs, strict=True)
    if min(x) == max(x) or min(y) == max(y):  # exact test: rounding residue must not pass for variance
        return None
    mx, my = math.fsum(x) / len(x), math.fsum(y) / len(y)
    sxy = math.fsum((a - mx) * (b - my) for a, b in pairs)
    sxx, syy = math.fsum((a - mx) ** 2 for a in x), math.fsum((b - my) ** 2 for b in y)
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def slope(ys: Sequence[float]) -> float | None:
    """Least-squares slope of `ys` against 0, 1, 2, ... (units of y per point); None for fewer than 2 points.

    >>> slope([1.0, 3.0, 5.0])
    2.0
    """
    if len(ys) < 2:
        return None
    n = len(ys)
    mx, my = (n - 1) / 2, math.fsum(ys) / n
    return math.fsum((i - mx) * (y - my) for i, y in enumerate(ys)) / math.fsum((i - mx) ** 2 for i in range(n))


def within_group_corr(values: Sequence[float], lengths: Sequence[float], group_size: int) -> float | None:
    """Mean over prompt groups of corr(reward, length) inside each group; None when no group has a defined one.

    Args:
        values: one reward per completion `(N,)`, NaN = the reward did not apply; groups are consecutive blocks of
            `group_size` (TRL's layout: `rewards_per_func.view(-1, num_generations)`).
        lengths: completion lengths in tokens `(N,)`.
        group_size: G, completions per prompt (>= 1; a group of 1 never has a correlation).

    Raises:
        ValueError: unequal lengths, or N not a multiple of `group_size`.
    """
    if group_size < 1 or len(values) % group_size or len(values) != len(lengths):
        raise ValueError(
            f"within_group_corr needs equally long values and lengths made of whole groups; got {len(values)} values, "
            f"{len(lengths)} lengths, group_size {group_size}"
        )
    corrs = []
    for start in range(0, len(values), group_size):
        corr = correlation(values[start : start + group_size], lengths[start : start + group_size])
        if corr is not None:
            corrs.append(corr)
    return math.fsum(corrs) / len(corrs) if corrs else None


class RewardAccuracyMonitor:
    """Rolling reward-accuracy correlation over the last `window` logging steps, with the collapse warning.

    `update(reward, accuracy)` adds one logging step (skipped when either is None or NaN) and returns the Pearson
    correlation over the points in the window (the last `window`, or all of them before the window fills), None
    while there are fewer than 3 or either series is constant. `collapsing` is then True when that correlation is
    < 0 and the reward's least-squares slope over the same points is > 0; `update` returns `(corr, warn)`, where
    `warn` is True only on the update at which `collapsing` turns True (once per crossing: it must turn False,
    including an undefined correlation, before it can warn again).

    Raises:
        ValueError: `window` < 3.
    """

    def __init__(self, window: int = 10):
        if window < MIN_WINDOW:
            raise ValueError(f"hacking_window must be >= {MIN_WINDOW} (logging steps), got {window}")
        self.window = window
        self.rewards: deque[float] = deque(maxlen=window)
        self.accuracies: deque[float] = deque(maxlen=window)
        self.collapsing = False

    def update(self, reward: float | None, accuracy: float | None) -> tuple[float | None, bool]:
        if reward is None or accuracy is None or math.isnan(reward) or math.isnan(accuracy):
            return None, False
        self.rewards.append(float(reward))
        self.accuracies.append(float(accuracy))
        corr = correlation(self.rewards, self.accuracies) if len(self.rewards) >= MIN_WINDOW else None
        trend = slope(self.rewards)
        collapsing = corr is not None and corr < 0 and trend is not None and trend > 0
        warn = collapsing and not self.collapsing
        self.collapsing = collapsing
        return corr, warn

    def describe(self) -> str:
        """The window's numbers for the warning text."""
        return (
            f"reward {self.rewards[0]:.3g} -> {self.rewards[-1]:.3g} (slope {slope(self.rewards):+.3g}/step), "
            f"accuracy {self.accuracies[0]:.3g} -> {self.accuracies[-1]:.3g} over the last {len(self.rewards)} "
            "logging steps"
        )
