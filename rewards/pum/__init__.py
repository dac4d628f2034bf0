"""Prefix Utility Model (PUM): the input renderer shared by training and scoring, and the scorer.

PUM ("From Correctness to Utility: Gain-Based Prefix Evaluation", arXiv 2606.07190; docs/architecture.md "PUM") is a
sequence-classification model with one output, U_θ(x, p), trained with Bradley-Terry on pairs of prefixes p of
solutions to a problem x, preferring the prefix with the larger estimated gain in solve rate.

Input rendering (`render_prefix`, used by `procrl.trainers.pum_data` AND by `PrefixUtilityModel`):

* the chat template with one user message (the problem) and the generation prompt (`add_generation_prompt=True`),
  then the prefix's ids with NO end-of-turn token: the state a policy is in while it is still writing;
* the prefix is tokenized piece by piece (`procrl.rewards.steps.tokenize_steps`): a string is first split into
  steps with `split_steps(prefix, separator)`, so the ids of "steps 1..k" are the same whether they are rendered
  alone or as the start of a longer trajectory, and step boundaries are exact token indices;
* a trailing EOS (and pad) token text is stripped from the prefix first: transformers' sequence-classification
  head pools at the rightmost token that is not the pad token, and pad == eos for SmolLM2 (docs/architecture.md "Sequence-classification pooling");
* truncation (`max_length`): the rendered input keeps at most `max_length - 1` tokens (one token of slack under
  TRL's `RewardTrainer` filter `len(ids) <= max_length`, which drops longer pairs silently). The problem is
  always kept whole and the PREFIX IS CUT FROM THE RIGHT. Why right and not left: the score of a right-cut
  prefix is exactly the score of an earlier prefix of the same trajectory (the model sees a state that really
  occurred, in full), and one forward pass over a cut trajectory gives, at every boundary, the same ids and hence
  the same value as rendering that prefix alone (left-cutting would make every prefix need its own window and
  show the model a solution without its beginning). The cost: a cut prefix is scored as its first
  `max_length - 1 - len(prompt)` tokens (by `score` and in training), and two long prefixes that share those tokens
  become identical; the training data preparation drops such pairs and counts them. Step scoring (`score_steps`)
  instead reports every step whose end was cut as unscored (NaN), see below. A problem whose rendered prompt alone
  exceeds the budget raises `ValueError` (raise `max_length`).

Scoring (`PrefixUtilityModel`): `score_prefixes(problem, steps)` gives U after every step of one trajectory from
ONE forward pass (the score head applied to the final hidden states at the boundary positions, i.e. at position
`boundary - 1`). Each distinct boundary is scored once: an empty step has the boundary of the step before it and
gets a copy of that step's value (the same float, not a second evaluation). A step whose end lies beyond the
budget (cut whole or in part: `RenderedPrefix.complete` is False) is UNSCORED, NaN: the model never saw the state
after it, and a partly kept step is not the step. `score(problems, prefixes)` scores independent prefixes in padded batches, pooling at the last
position with attention_mask == 1 (never "first pad/eos", docs/architecture.md "Sequence-classification pooling") and with position ids from the mask, so
left- and right-padded batches give the same values. Scores are raw head outputs (real numbers, no sigmoid):
only differences are meaningful, P(a preferred to b) = σ(U_a - U_b).
"""

from procrl.rewards.pum.model import PUM_CONFIG_NAME, PrefixUtilityModel
from procrl.rewards.pum.pooling import pooled_scores, score_token_sequences
from procrl.rewards.pum.render import (
    RenderedPrefix,
    prefix_pieces,
    render_prefix,
    render_prompt_ids,
    strip_trailing_eos,
)

__all__ = [
    "PUM_CONFIG_NAME",
    "PrefixUtilityModel",
    "RenderedPrefix",
    "pooled_scores",
    "prefix_pieces",
    "render_prefix",
    "render_prompt_ids",
    "score_token_sequences",
    "strip_trailing_eos",
]
