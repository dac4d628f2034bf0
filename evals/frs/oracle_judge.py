"""The oracle judge of FRS (`judge: oracle`; part of `procrl.evals.frs`): the step oracle's labels, mapped to the four
FRS scores, instead of an LLM's (docs/architecture.md "Step oracle", the mapping table).

For a trace of a step-checkable problem (its `gold_steps`, `procrl.data_builders.arithmetic`), the oracle labels
each written step (`procrl.rewards.oracle.oracle_labels`: valid, grounded, on track; `first_error`; ProcessAcc).
With K written steps, M gold steps and the share-to-score map S(s) = 1 + floor(4·s + 1/2) (1 + 4·s rounded half up,
in exact fractions: shares in [0, 1/8), [1/8, 3/8), [3/8, 5/8), [5/8, 7/8), [7/8, 1] give 1, 2, 3, 4, 5):

    factuality   = S(#valid steps / K)                                   the written arithmetic is true
    faithfulness = S(#grounded steps / K)                                every operand comes from the problem or an
                                                                         earlier valid, grounded result
    utility      = S(ProcessAcc) = S(#gold steps credited / M)           the steps produce the gold results
    coherence    = S(first_error / K), S(1) = 5 without an error         the share of steps before the first error

A trace without any written step gets 1 on every dimension (RS 0). The final answer does not enter (FRS reports
accuracy apart). The four integers are a `ReasoningJudgement` in a `JudgeResult`, exactly what an LLM judge returns,
so RS = (sum - 4)/16·100, FRS@K, the selection gain and the intervals are computed the same way; the oracle gives no
probabilities, so RS_expected stays None. Every name says "oracle": these are not a learned judge's scores.

    >>> from procrl.rewards.oracle import gold_steps_from_json, oracle_labels
    >>> gold = gold_steps_from_json('[[14,"+",7,21],[21,"-",9,12],[12,"*",2,24]]')
    >>> question = "Tom has 14 apples, gets 7, eats 9, then doubles them (times 2)."
    >>> oracle_scores(oracle_labels("14 + 7 = 21. 21 - 9 = 12. 12 * 2 = 24.", question, gold))
    {'faithfulness': 5, 'utility': 5, 'coherence': 5, 'factuality': 5}
    >>> oracle_scores(oracle_labels("14 + 7 = 21. 21 - 9 = 12. 12 * 2 = 25.", question, gold))  # a slip at the end
    {'faithfulness': 5, 'utility': 4, 'coherence': 4, 'factuality': 4}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

from procrl.evals.frs.judging import DIMENSIONS, ReasoningJudgement
from procrl.evals.frs.traces import Trace
from procrl.judges.base import JudgeResult, JudgeStats
from procrl.rewards.oracle import GOLD_STEPS_COLUMN, OracleLabels, gold_steps_from_json, oracle_labels

__all__ = ["OracleJudge", "oracle_scores", "oracle_shares", "require_gold_steps", "score_from_share"]

_NO_GOLD = (
    "judge: oracle scores traces of step-checkable problems only (their `{column}` column, "
    "procrl.data_builders.arithmetic, e.g. dataset arith-ops3-d2-test-n64); {what}. Use an arith set, or an LLM "
    "judge (judge: local or a URL)."
)


def score_from_share(share: Fraction | float) -> int:
    """The 1-5 score of a share s in [0, 1]: 1 + floor(4·s + 1/2), i.e. 1 + 4·s rounded half up (exact for a
    `Fraction`).

    Raises:
        ValueError: a share outside [0, 1] (or NaN).

    >>> [score_from_share(Fraction(k, 8)) for k in range(9)]
    [1, 2, 2, 3, 3, 4, 4, 5, 5]
    """
    if not 0 <= share <= 1:
        raise ValueError(f"an oracle share must be in [0, 1], got {share}")
    return 1 + math.floor(4 * Fraction(share) + Fraction(1, 2))


def oracle_shares(labels: OracleLabels) -> dict[str, Fraction] | None:
    """The share behind each FRS dimension (module docstring), exact; None for a completion without steps.

    >>> from procrl.rewards.oracle import gold_steps_from_json, oracle_labels
    >>> gold = gold_steps_from_json('[[14,"+",7,21],[21,"-",9,12]]')
    >>> shares = oracle_shares(oracle_labels("14 + 7 = 22. 22 - 9 = 13.", "14 and 7, minus 9", gold))
    >>> {name: str(share) for name, share in shares.items()}  # step 1 invalid; step 2 valid but its 22 is not known
    {'faithfulness': '1/2', 'utility': '0', 'coherence': '0', 'factuality': '1/2'}
    >>> oracle_shares(oracle_labels("I do not know.", "14 and 7, minus 9", gold)) is None
    True
    """
    k = len(labels.steps)
    if k == 0:
        return None
    before_error = k if labels.first_error is None else labels.first_error
    return {
        "faithfulness": Fraction(sum(s.grounded for s in labels.steps), k),
        "utility": Fraction(sum(g is not None for g in labels.gold_matched), labels.n_gold),
        "coherence": Fraction(before_error, k),
        "factuality": Fraction(sum(s.valid for s in labels.steps), k),
    }


def oracle_scores(labels: OracleLabels) -> dict[str, int]:
    """The four FRS scores (integers 1-5, in `DIMENSIONS` order) of one labelled completion: `score_from_share` of
    each `oracle_shares`; 1 everywhere for a completion without steps."""
    shares = oracle_shares(labels)
    if shares is None:
        return dict.fromkeys(DIMENSIONS, 1)
    return {name: score_from_share(shares[name]) for name in DIMENSIONS}


def require_gold_steps(columns: Iterable[str], what: str) -> None:
    """Refuse data without a `gold_steps` column for `judge: oracle` (before anything is sampled).

    Args:
        columns: the data set's column names (or a row's keys).
        what: the data, for the message ("dataset gsm8k", "frs_eval_set svamp:0:10").

    Raises:
        ValueError: no `gold_steps` column; the message names the data and the fix.
    """
    if GOLD_STEPS_COLUMN not in set(columns):
        raise ValueError(_NO_GOLD.format(column=GOLD_STEPS_COLUMN, what=f"{what} has no `{GOLD_STEPS_COLUMN}`"))


class OracleJudge:
    """FRS's programmatic judge: each trace's four scores from the step oracle's labels (`oracle_scores`).

    Not a `procrl.judges.Judge`: an LLM judge takes chat messages, the oracle the structured problem. `compute_frs`
    hands it the traces (`judge_traces`), and its results are the same `JudgeResult[ReasoningJudgement]` an LLM
    judge gives, counted in `stats` (`JudgeStats`: every request scored, no attempt, no cache). Nothing to open or
    close; `procrl frs` and the FRS callback build it for `judge: oracle`.

    A trace is labelled against its own `gold_steps` and its problem text (the `question` column), with
    `truncated=trace.truncated` (a result at the very end of a cut trace is not a step).
    """

    name = "oracle"

    def __init__(self) -> None:
        self.stats = JudgeStats()

    def labels(self, trace: Trace) -> OracleLabels:
        """The oracle labels of one trace.

        Raises:
            ValueError: the trace has no gold steps, or they do not parse (the message names the problem).
        """
        if trace.gold_steps is None:
            raise ValueError(_NO_GOLD.format(column=GOLD_STEPS_COLUMN, what=f"problem {trace.problem_id} has none"))
        try:
            gold = gold_steps_from_json(trace.gold_steps)
        except ValueError as err:
            raise ValueError(f"judge: oracle: problem {trace.problem_id}: {err}") from None
        if not gold:
            raise ValueError(f"judge: oracle: problem {trace.problem_id} has an empty `{GOLD_STEPS_COLUMN}` list")
        return oracle_labels(trace.completion, trace.problem, gold, truncated=bool(trace.truncated))

    def judge_traces(self, traces: Sequence[Trace], **_: Any) -> list[JudgeResult[ReasoningJudgement]]:
        """One scored `JudgeResult` per trace, in order (`raw` holds the four scores as the reply would).

        Raises:
            ValueError: a trace without usable gold steps (`labels`); nothing is counted then.
        """
        labelled = [self.labels(trace) for trace in traces]  # refuse before counting anything
        results = []
        for labels in labelled:
            judgement = ReasoningJudgement(**oracle_scores(labels))
            result = JudgeResult(value=judgement, unscored=None, raw=judgement.model_dump_json(), attempts=0)
            self.stats.record(result)
            results.append(result)
        return results
