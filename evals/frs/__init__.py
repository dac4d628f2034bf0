"""FRS, the Filtered Reasoning Score: reasoning quality on a model's most confident traces (arXiv 2604.11996;
docs/architecture.md "FRS").

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
   integers 1-5, given the problem, the trace, the gold answer and {"final_correct": bool} (left out with
   `FRSConfig(judge_sees_correctness=False)`); the rubric is ours (`RUBRIC`). The reply is validated strictly
   (`ReasoningJudgement`: a bool, "3", 3.0, 0 or 6 is `schema_mismatch`, never coerced). RS = (sum - 4) / 16 * 100,
   in [0, 100]. When the judge returns probabilities for the four scores (`JudgeResult.probs`, a backend with
   log-probs), the trace also gets expected scores E[s] = sum_v p(v) * v (G-Eval) and RS_expected = (sum of E[s] -
   4) / 16 * 100. A trace whose judgement fails is dropped from every mean and counted by reason (`unscored`).
4. **FRS@K** = mean RS over the kept traces that have a score (`at_k`); `at_k_expected` is the same with
   RS_expected, reported only when every scored trace has expected scores (else None; `n_scored_without_probs`).

Also reported: accuracy over all traces, accuracy of the kept traces (both need no judge), the selection gain
(the mean, over questions with >= 2 ranked traces, of RS(most confident trace) - RS(random trace)), and `rs_auc`:
the AUC (Mann-Whitney, ties 1/2) of RS for correct vs incorrect final answers over the scored traces, which says
whether the judge's RS tracks the final-answer check (run once with and once without the flag in the prompt).

Cost: only the traces that are used are judged. Top-K estimator: the top floor(max(K%) * N) traces (400 of 800 for
K up to 50%), plus what the selection gain needs: with `random_baseline="sample"` *(default)* the most confident and
one seeded random trace of each question (<= 2 per question, often fewer since the top traces overlap), with
`random_baseline="mean"` every trace of every question with >= 2 traces (all N). The paper's bin estimator
(`estimator="bins"`) bounds the cost for large N: equal-count confidence bins, at most `max_per_bin` (50) judged
per bin, drawn deterministically from a hash seed, and only the bins that overlap the top max(K)%.

    >>> from procrl.evals.frs import ReasoningJudgement, reasoning_score, tail_confidence, tail_size
    >>> tail_confidence([0.9] * 27 + [0.1, 0.2, 0.3])   # L = 30 -> n_low = 3: mean(0.1, 0.2, 0.3)
    0.2
    >>> tail_size(19), tail_size(30)
    (1, 3)
    >>> reasoning_score(ReasoningJudgement(faithfulness=5, utility=4, coherence=5, factuality=4))
    87.5
    >>> reasoning_score({"faithfulness": 4.5, "utility": 4.0, "coherence": 5.0, "factuality": 4.5})   # RS_expected
    87.5

The names below are imported from their module on first use (PEP 562): `procrl.evals.frs.arguments` (the settings
every FRS user parses) loads no judge.
"""

from procrl.utils import lazy_exports

# public name -> its module in this package
_EXPORTS = {
    "FRSArguments": "arguments",
    "compute_frs": "compute",
    "judge_traces": "compute",
    "plan_judging": "compute",
    "summarize": "compute",
    "kept_count": "confidence",
    "rank_by_confidence": "confidence",
    "tail_confidence": "confidence",
    "tail_confidence_from_logps": "confidence",
    "tail_size": "confidence",
    "DIMENSIONS": "judging",
    "REPLY_FORMAT": "judging",
    "RUBRIC": "judging",
    "RUBRIC_WITHOUT_CORRECTNESS": "judging",
    "ReasoningJudgement": "judging",
    "expected_scores": "judging",
    "judge_messages": "judging",
    "reasoning_score": "judging",
    "DEFAULT_K_VALUES": "arguments",
    "FRSConfig": "arguments",
    "FRSReport": "traces",
    "Trace": "traces",
}
__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
