"""The scorers of `procrl select` (part of `procrl.evals.selection`): pure selection rules and the score passes.

A scorer either picks by a rule (`majority`, `random`: `PICK_RULES`) or is the argmax of one score column
(`select_argmax`: ties to the earliest, None never picked). Score columns come from score passes (`SCORE_PASSES`),
each run at most once per `procrl select` run whichever of its columns are asked for, and each writes ALL its
columns (the report's candidate keys `score_<column>`):

- pass `pum`: column `pum` = U(x, y_i), the PUM's utility of the full completion (`PUMReward` mode "full");
- pass `picsar` (PiCSAR, arXiv 2508.21787): columns `picsar` = log p(r|x) + log p(y|a,x,r) (the paper's
  unnormalised selection score), `picsar_reasoning` = log p(r|x) (math.fsum of `PiCSARScore.reasoning_logps`,
  the sampler's own raw log-probs, nats) and `picsar_answer` = log p(y|a,x,r) (math.fsum of
  `PiCSARScore.answer_logps`), so `picsar` = `picsar_reasoning` + `picsar_answer`. The answer term is
  teacher-forced by the policy itself, or by `picsar_evaluator` (the paper's decoupled evaluator; the reasoning
  term stays the sampler's), with the instruction `picsar_instruction`, the separator `picsar_separator` and
  `picsar_join_space` (`PiCSARScorer`'s `instruction`, `separator`, `join_space`). A completion without an
  extractable answer gets None in all three columns;
- pass `pum_steps`: columns `pum_min`, `pum_last`, `pum_mean` = min / last / mean over k of U(x, p_k), the step
  prefixes' utilities, from ONE `PrefixUtilityModel.score_steps` pass per completion (made by `PUMReward` mode
  "min", which splits the steps; `procrl.step_rewards.aggregate_step_values` reduces them). A completion the PUM
  cannot score fully (no text, or longer than its `max_length`) gets None, never NaN;
- pass `certainty` (the policy's own confidence, no answer needed): columns `mean_logprob` = (1/L) sum_t log p(y_t |
  x, y_<t), the mean of the sampler's raw per-token log-probs (nats/token: the length-normalised likelihood
  baseline, no forward pass) and `self_certainty` = (1/L) sum_t KL(U || p_t) (Kang et al. 2025, arXiv 2502.18581;
  `procrl.generation.sequence_self_certainty`: one teacher-forced forward of the policy over the sampled prompt
  and completion ids). Over the L completion tokens, EOS included when sampled; higher = more confident. A
  completion without tokens, or with a non-finite mean, gets None.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from procrl.evals.offline import Setup, load_pum
from procrl.evals.selection_rules import select_argmax, select_majority, select_random
from procrl.generation import sequence_self_certainty
from procrl.models import resolve_model
from procrl.rewards.picsar import PiCSARScorer
from procrl.rewards.pum import PrefixUtilityModel
from procrl.rewards.pum_rewards import PUMReward
from procrl.step_rewards import aggregate_step_values

if TYPE_CHECKING:
    from procrl.evals.selection import SelectConfig

__all__ = [
    "PICK_RULES",
    "SCORERS",
    "SCORE_PASSES",
    "Candidates",
    "ScoringContext",
    "load_evaluator",
    "pass_of",
    "score_candidates",
    "select_argmax",
    "select_majority",
    "select_random",
]

# Per problem, per candidate: one score or None (not scored: never picked).
ScoreTable = list[list[float | None]]


# ----------------------------------------------------------------------------------------------------------
# What the scorers read
# ----------------------------------------------------------------------------------------------------------


@dataclass
class Candidates:
    """The `n` samples of every problem, problem-major: `texts[p][i]` is sample i of problem p (decoded without
    special tokens), `ids[p][i]` its token ids, `logps[p][i]` the sampler's log-prob of each of them (nats, same
    length as the ids) and `answers[p][i]` its `extract_answer` (None: no answer)."""

    texts: list[list[str]]
    ids: list[list[list[int]]]
    logps: list[list[list[float]]]
    answers: list[list[str | None]]


@dataclass
class ScoringContext:
    """The settings, the loaded policy and the candidates of one run; the PUM is loaded once, on first use, and
    shared by the `pum` and `pum_steps` passes."""

    config: SelectConfig
    setup: Setup
    candidates: Candidates
    _pum: PrefixUtilityModel | None = field(default=None, repr=False)

    @property
    def pum(self) -> PrefixUtilityModel:
        if self._pum is None:
            self._pum = load_pum(self.config)
        return self._pum

    def flat_texts_and_questions(self) -> tuple[list[str], list[str]]:
        """Every candidate's text and its problem's `question`, problem-major (what the PUM rewards take)."""
        n = self.config.n
        texts = [t for row in self.candidates.texts for t in row]
        return texts, [row["question"] for row in self.setup.dataset for _ in range(n)]


def load_evaluator(name: str, device: str) -> tuple[Any, Any]:
    """(model, tokenizer) of a PiCSAR evaluator, loaded like the policy (`procrl.evals.offline.load_setup` and
    `Setup.model`): `resolve_model(name)` ("default", an embedded name like "gemma3-270m", a hub id or a directory),
    float32, eval mode, on `device`; pad = EOS when the tokenizer has none."""
    path = resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    return model, tokenizer


# ----------------------------------------------------------------------------------------------------------
# The score passes
# ----------------------------------------------------------------------------------------------------------


def _group(values: list, n: int) -> list[list]:
    """Consecutive runs of `n` values (problem-major samples -> one list per problem)."""
    return [values[i : i + n] for i in range(0, len(values), n)]


def _pass_pum(ctx: ScoringContext) -> dict[str, ScoreTable]:
    texts, questions = ctx.flat_texts_and_questions()
    values = PUMReward(ctx.pum, "full")(completions=texts, question=questions)
    return {"pum": _group(values, ctx.config.n)}


def _pass_picsar(ctx: ScoringContext) -> dict[str, ScoreTable]:
    config, s, c = ctx.config, ctx.setup, ctx.candidates
    settings = {
        "instruction": config.picsar_instruction,
        "separator": config.picsar_separator,
        "join_space": config.picsar_join_space,
        "normalize": "sum",
        "batch_size": config.batch_size,
    }
    if config.picsar_evaluator is None:  # the policy teacher-forces the answer term
        picsar = PiCSARScorer(model=s.model, tokenizer=s.tokenizer, **settings)
    else:  # the reasoning term is the sampler's log-probs either way: the policy's model is not needed
        evaluator, evaluator_tokenizer = load_evaluator(config.picsar_evaluator, s.device)
        picsar = PiCSARScorer(
            tokenizer=s.tokenizer, evaluator=evaluator, evaluator_tokenizer=evaluator_tokenizer, **settings
        )
    columns: dict[str, ScoreTable] = {"picsar": [], "picsar_reasoning": [], "picsar_answer": []}
    rows = zip(s.dataset, c.texts, c.ids, c.logps, strict=True)
    for row, t_row, i_row, l_row in tqdm(rows, total=len(s.dataset), desc="picsar", disable=config.no_progress):
        result = picsar.score([row["prompt"]] * config.n, t_row, i_row, l_row)
        columns["picsar"].append([None if r is None else r.sum for r in result])
        columns["picsar_reasoning"].append([None if r is None else math.fsum(r.reasoning_logps) for r in result])
        columns["picsar_answer"].append([None if r is None else math.fsum(r.answer_logps) for r in result])
    return columns


def _aggregate(row: Sequence[float | None] | None, how: str) -> float | None:
    """`aggregate_step_values(row, how)`, None for no row, an unscored step (None) or a non-finite result."""
    if row is None:
        return None
    value = aggregate_step_values([math.nan if u is None else u for u in row], how)
    return value if math.isfinite(value) else None


def _pass_pum_steps(ctx: ScoringContext) -> dict[str, ScoreTable]:
    texts, questions = ctx.flat_texts_and_questions()
    reward = PUMReward(ctx.pum, "min")
    # PUMReward hands the per-step utilities of the completions it scored (None for the others) to `log_extra`
    # (TRL's completions-table hook): the one score_steps pass, split exactly as its "min"/"last" modes split.
    captured: dict[str, list] = {}
    minimum = reward(completions=texts, question=questions, log_extra=lambda _key, column: captured.update(rows=column))
    steps = captured.get("rows", [None] * len(texts))
    n = ctx.config.n
    return {
        "pum_min": _group([None if v is None else float(v) for v in minimum], n),
        "pum_last": _group([_aggregate(row, "last") for row in steps], n),
        "pum_mean": _group([_aggregate(row, "mean") for row in steps], n),
    }


def _mean(values: Sequence[float]) -> float | None:
    """The mean of `values`; None for none or a non-finite mean (never NaN)."""
    mean = math.fsum(values) / len(values) if values else math.nan
    return mean if math.isfinite(mean) else None


def _pass_mean_logprob(ctx: ScoringContext) -> dict[str, ScoreTable]:
    return {"mean_logprob": [[_mean(lp) for lp in row] for row in ctx.candidates.logps]}  # the sampler's: no forward


def _pass_certainty(ctx: ScoringContext) -> dict[str, ScoreTable]:
    config, s, c = ctx.config, ctx.setup, ctx.candidates
    pad = s.tokenizer.pad_token_id if s.tokenizer.pad_token_id is not None else 0  # masked: its value is moot
    certainty: ScoreTable = []
    rows = zip(s.prompt_ids, c.ids, strict=True)
    for prompt, i_row in tqdm(rows, total=len(c.ids), desc="self-certainty", disable=config.no_progress):
        sequences = [list(prompt) + list(ids) for ids in i_row]  # what the sampler saw and wrote
        values = sequence_self_certainty(
            s.model, sequences, [len(prompt)] * len(i_row), pad_token_id=pad, batch_size=config.batch_size
        )
        certainty.append([_mean(v) for v in values])
    return {"self_certainty": certainty}


# A score pass: context -> {column: table}; every column is also a scorer (the argmax of that column).
PassFunc = Callable[[ScoringContext], dict[str, ScoreTable]]
SCORE_PASSES: dict[str, tuple[tuple[str, ...], PassFunc]] = {
    "pum": (("pum",), _pass_pum),
    "picsar": (("picsar", "picsar_reasoning", "picsar_answer"), _pass_picsar),
    "pum_steps": (("pum_min", "pum_last", "pum_mean"), _pass_pum_steps),
    "mean_logprob": (("mean_logprob",), _pass_mean_logprob),
    "certainty": (("self_certainty",), _pass_certainty),
}

# A pick rule: context -> one pick per problem (None: abstain); no scores.
PICK_RULES: dict[str, Callable[[ScoringContext], list[int | None]]] = {
    "majority": lambda ctx: [select_majority(a) for a in ctx.candidates.answers],
    "random": lambda ctx: [
        select_random(ctx.config.n, ctx.config.seed, row["problem_id"]) for row in ctx.setup.dataset
    ],
}

SCORERS = (
    "pum", "picsar", "majority", "random", "picsar_reasoning", "picsar_answer", "pum_min", "pum_last", "pum_mean",
    "mean_logprob", "self_certainty",
)  # fmt: skip


def pass_of(scorer: str) -> str | None:
    """The score pass computing `scorer`'s column (None for a pick rule).

    Raises:
        ValueError: `scorer` is not in `SCORERS`.

    >>> pass_of("picsar_answer"), pass_of("pum_last"), pass_of("self_certainty"), pass_of("majority")
    ('picsar', 'pum_steps', 'certainty', None)
    """
    if scorer in PICK_RULES:
        return None
    for name, (columns, _) in SCORE_PASSES.items():
        if scorer in columns:
            return name
    raise ValueError(f"unknown scorer {scorer!r}; choose from {SCORERS}")


def score_candidates(
    ctx: ScoringContext, scorers: Sequence[str]
) -> tuple[dict[str, list[int | None]], dict[str, ScoreTable]]:
    """(picks, scores): one pick per problem for each of `scorers` (in that order), and every column of each pass
    they need (each pass run once, in the order first needed).

    Raises:
        ValueError: a scorer not in `SCORERS`.
    """
    picks: dict[str, list[int | None]] = {}
    scores: dict[str, ScoreTable] = {}
    done: set[str] = set()
    for scorer in scorers:
        name = pass_of(scorer)
        if name is None:
            picks[scorer] = PICK_RULES[scorer](ctx)
            continue
        if name not in done:
            scores.update(SCORE_PASSES[name][1](ctx))
            done.add(name)
        picks[scorer] = [select_argmax(v) for v in scores[scorer]]
    return picks, scores
