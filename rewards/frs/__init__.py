"""FRS, the Filtered Reasoning Score: reasoning quality on a model's most confident traces (arXiv 2604.11996;
DESIGN §4 "FRS").

The computation, in the order it happens:

1. **Tail confidence of a trace** (no labels needed). With p_t the probability of the t-th chosen completion token
   under the RAW model distribution (temperature 1, no top-p/top-k), and L the number of completion tokens
   (EOS included when it was generated):

       n_low = max(1, floor(0.1 * L))          confidence = mean of the n_low smallest p_t

   Inputs are natural-log probabilities (procrl's `completion_logps`, taken from the sampler's own logits); they
   are masked (a trace's own length) before `exp`. An empty trace (L = 0) has no confidence: it is left out of
   the ranking and counted (`n_no_confidence`), never given a made-up value.
2. **Pooled top-K% filter.** All traces of one (model, benchmark) are ranked together (not per problem) by
   confidence, highest first; equal confidences keep their input order (a stable sort on (-confidence, index)).
   The top floor(K% * N) traces are kept, at least one. FRS@K is reported for K in {10, 20, 30, 40, 50}; FRS is
   FRS@10 *(default)*.
3. **Reasoning score** from an LLM judge (`procrl.judges`): faithfulness, utility, coherence and factuality,
   integers 1-5, given the problem, the trace, the gold answer and {"final_correct": bool}; the rubric is ours
   (`RUBRIC`). RS = (sum - 4) / 16 * 100, in [0, 100]. A trace whose judgement fails is dropped from every mean and
   counted by reason (`unscored`).
4. **FRS@K** = mean RS over the kept traces that have a score.

Also reported: accuracy over all traces, accuracy of the kept traces (both need no judge), and the selection gain:
the mean, over questions with >= 2 ranked traces, of RS(most confident trace) - RS(random trace).

Cost: only the traces that are used are judged. Top-K estimator: the top floor(max(K%) * N) traces (400 of 800 for
K up to 50%), plus what the selection gain needs: with `random_baseline="sample"` *(default)* the most confident and
one seeded random trace of each question (<= 2 per question, often fewer since the top traces overlap), with
`random_baseline="mean"` every trace of every question with >= 2 traces (all N). The paper's bin estimator
(`estimator="bins"`) bounds the cost for large N: equal-count confidence bins, at most `max_per_bin` (50) judged
per bin, drawn deterministically from a hash seed, and only the bins that overlap the top max(K)%.

    >>> tail_confidence([0.9] * 27 + [0.1, 0.2, 0.3])   # L = 30 -> n_low = 3: mean(0.1, 0.2, 0.3)
    0.2
    >>> tail_size(19), tail_size(30)
    (1, 3)
    >>> reasoning_score(ReasoningJudgement(faithfulness=5, utility=4, coherence=5, factuality=4))
    87.5
"""

from procrl.rewards.frs.compute import compute_frs, judge_traces, plan_judging, summarize
from procrl.rewards.frs.confidence import (
    kept_count,
    rank_by_confidence,
    tail_confidence,
    tail_confidence_from_logps,
    tail_size,
)
from procrl.rewards.frs.judging import (
    DIMENSIONS,
    REPLY_FORMAT,
    RUBRIC,
    ReasoningJudgement,
    judge_messages,
    reasoning_score,
)
from procrl.rewards.frs.traces import DEFAULT_K_VALUES, FRSConfig, FRSReport, Trace

__all__ = [
    "DEFAULT_K_VALUES",
    "DIMENSIONS",
    "REPLY_FORMAT",
    "RUBRIC",
    "FRSConfig",
    "FRSReport",
    "ReasoningJudgement",
    "Trace",
    "compute_frs",
    "judge_messages",
    "judge_traces",
    "kept_count",
    "plan_judging",
    "rank_by_confidence",
    "reasoning_score",
    "summarize",
    "tail_confidence",
    "tail_confidence_from_logps",
    "tail_size",
]
