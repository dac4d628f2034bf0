"""PiCSAR: training-free confidence of a reasoning chain and its answer (arXiv 2508.21787; docs/architecture.md "PiCSAR").

    Score(r, y) = sum_t log p(r_t | x, r_<t)  +  sum_t log p(y_t | a, x, r, y_<t)
                  (reasoning confidence)          (answer confidence)

All log-probabilities are natural logs under the RAW model distribution (temperature 1).

- Reasoning term: the log-probs of the completion tokens r given the prompt x, exactly as sampled. Inside GRPO
  they arrive as `completion_logps` from procrl's rollout function (no extra forward pass); otherwise one
  teacher-forced forward of the policy computes them.
- Answer term: the final answer y (extracted from the completion with `procrl.rewards.outcome.extract_answer`)
  teacher-forced after the instruction a. Input layout *(defaults)*: user message = a + "\\n\\n" + x (x alone
  when a is ""; rendered with the evaluator's chat template when it has one, plain text otherwise), then r, then
  the separator "<sep>\\nFinal answer: ", then y. Every piece is tokenized separately and the ids concatenated,
  so exactly y's own tokens are scored (a byte-level BPE tokenizer would otherwise merge " 42" across the
  boundary). With `join_space`, the separator's trailing whitespace moves to the front of the answer piece
  (lm-evaluation-harness's `_encode_pair` rule), so the scored tokens are those of " " + y: for a tokenizer
  whose words and digits carry their leading space (the arith word-level tokenizer's " 4"), where y tokenized
  after a lone " " token is text the model never saw (measured on the clean SFT organism, 48 samples: a mean
  answer term of -20.7 nats after "The answer is ", -1.8 with `join_space`, -0.001 with `join_space` after
  "\\n\\nThe answer is ", the trace's own last line).
  The evaluator may be a different model from the generator; by default it is the live policy.

Two normalisations: `sum` (the paper's choice, used by `select_best_of_n`) and `mean` (each term averaged over its
own tokens, then added; the GRPO bonus default, because the sum tracks length: measured within-group correlation
with completion length -0.37 to -0.87).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from procrl.generation import render_prompts, sequence_logps
from procrl.models import resolve_model
from procrl.rewards.outcome import extract_answer
from procrl.utils import check_reward_length, completion_to_text, prompt_to_text

DEFAULT_INSTRUCTION = "When you see a reasoning followed by <sep>, output the final answer."
DEFAULT_SEPARATOR = "<sep>\nFinal answer: "
NORMALIZATIONS = ("mean", "sum")


@dataclass(frozen=True)
class PiCSARScore:
    """Both PiCSAR terms of one completion (natural-log probabilities, raw distribution).

    Attributes:
        reasoning_logps: per-token log-probs of the completion, one entry per completion token (EOS included
            when sampled).
        answer_logps: per-token log-probs of the extracted answer's tokens.
        answer: the extracted answer text.
    """

    reasoning_logps: tuple[float, ...]
    answer_logps: tuple[float, ...]
    answer: str

    @property
    def sum(self) -> float:
        """log p(r | x) + log p(y | a, x, r): the paper's unnormalised score."""
        return math.fsum(self.reasoning_logps) + math.fsum(self.answer_logps)

    @property
    def mean(self) -> float:
        """Per-token mean of each term, added: mean_t log p(r_t) + mean_t log p(y_t)."""
        reasoning = math.fsum(self.reasoning_logps) / max(1, len(self.reasoning_logps))
        return reasoning + math.fsum(self.answer_logps) / max(1, len(self.answer_logps))


class PiCSARScorer:
    """Scores completions with PiCSAR; also a TRL reward function (`picsar_bonus`).

    Args:
        model: the generator used for the reasoning term when `completion_logps` are not given. None: the
            live policy, bound by `ProcessGRPOTrainer` via `bind_policy` (or pass one here for offline use).
        tokenizer: tokenizer of `model`.
        evaluator: model for the answer term (may differ from the generator). None: use `model`.
        evaluator_tokenizer: tokenizer of `evaluator` (defaults to `tokenizer`).
        instruction: the instruction a placed before the problem in the answer-term input ("": the problem alone,
            for a policy whose vocabulary lacks the default's words).
        separator: text between the reasoning and the answer.
        join_space: move the separator's trailing whitespace into the answer piece (module docstring).
        normalize: "mean" (reward default) or "sum" (the paper's selection score).
        batch_size: sequences per forward pass.

    As a reward function: `scorer(prompts, completions, completion_ids, completion_logps=None, **kwargs)`
    returns the raw score per completion (`normalize`), or None when no answer can be extracted. It never
    normalises within a group (TRL's `multi_objective_aggregation` does that).
    """

    __name__ = "picsar_bonus"
    needs_logps = True  # the reasoning term reads the rollout's raw log-probs (procrl.utils.reads_completion_logps)

    def __init__(
        self,
        model=None,
        tokenizer=None,
        evaluator=None,
        evaluator_tokenizer=None,
        instruction: str = DEFAULT_INSTRUCTION,
        separator: str = DEFAULT_SEPARATOR,
        normalize: str = "mean",
        batch_size: int = 8,
        join_space: bool = False,
    ):
        if normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.evaluator = evaluator
        self.evaluator_tokenizer = evaluator_tokenizer
        # A name or path given as evaluator is remembered, so a pickled copy reloads it instead of silently
        # falling back to the policy.
        self.evaluator_name = evaluator if isinstance(evaluator, str) else None
        self.instruction = instruction
        self.separator = separator
        self.join_space = join_space
        self.normalize = normalize
        self.batch_size = batch_size

    # -- binding and pickling -------------------------------------------------------------------------------
    def bind_policy(self, model, tokenizer) -> None:
        """Use `model` (the live policy) wherever no explicit model or evaluator was given."""
        if self.model is None:
            self.model, self.tokenizer = model, tokenizer

    def __getstate__(self):
        # Live models do not travel: a copy sent to another process re-binds to its own policy, and reloads an
        # evaluator given by name. An evaluator passed as a model object cannot travel: refuse rather than
        # silently scoring with the policy.
        state = self.__dict__.copy()
        if state["evaluator"] is not None and not isinstance(state["evaluator"], str):
            if self.evaluator_name is None:
                raise TypeError(
                    "a PiCSARScorer holding an evaluator model object cannot be pickled; pass its name or path"
                )
            state["evaluator"], state["evaluator_tokenizer"] = self.evaluator_name, None
        if state["model"] is not None:
            state["model"], state["tokenizer"] = None, None
        return state

    def _evaluator(self):
        model = self.evaluator if self.evaluator is not None else self.model
        tokenizer = self.evaluator_tokenizer or self.tokenizer
        if isinstance(model, str):  # a name or path: load once
            path = resolve_model(model)
            device = next(self.model.parameters()).device if self.model is not None else "cpu"
            self.evaluator = model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
            self.evaluator_tokenizer = tokenizer = AutoTokenizer.from_pretrained(path)
        if model is None or tokenizer is None:
            raise RuntimeError(
                "PiCSARScorer has no model: pass model/tokenizer (or evaluator), or use it inside "
                "ProcessGRPOTrainer, which binds the live policy."
            )
        return model, tokenizer

    # -- the two terms ----------------------------------------------------------------------------------------
    def reasoning_logps(self, prompts: Sequence, completion_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        """log p(r_t | x, r_<t) for every completion token, by one teacher-forced pass of `model`.

        Args:
            prompts: chat messages or strings (rendered like the rollout renders them).
            completion_ids: sampled token ids, `(L_i,)` each.
        """
        if self.model is None or self.tokenizer is None:
            raise RuntimeError("reasoning_logps needs `model` and `tokenizer` (or completion_logps)")
        prompt_ids = render_prompts(self.tokenizer, prompts)
        sequences = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids, strict=True)]
        starts = [len(p) for p in prompt_ids]
        with _eval_mode(self.model):
            return sequence_logps(
                self.model, sequences, starts, pad_token_id=_pad_id(self.tokenizer), batch_size=self.batch_size
            )

    def answer_logps(self, problems: Sequence[str], reasonings: Sequence[str], answers: Sequence[str]):
        """log p(y_t | a, x, r, y_<t) for the tokens of each answer, one teacher-forced pass of the evaluator.

        Args:
            problems: problem texts x.
            reasonings: completion texts r (special tokens removed).
            answers: answer texts y (non-empty).

        Returns:
            One list per example with one log-prob per token of `tokenizer(answer, add_special_tokens=False)`
            (with `join_space`: of the separator's trailing whitespace + answer).
        """
        model, tokenizer = self._evaluator()
        separator, lead = self.separator, ""
        if self.join_space:  # the trailing whitespace goes with the answer (lm-evaluation-harness's `_encode_pair`)
            separator = self.separator.rstrip()
            lead = self.separator[len(separator) :]
        sequences, starts = [], []
        for problem, reasoning, answer in zip(problems, reasonings, answers, strict=True):
            context = self._context_ids(tokenizer, problem, reasoning, separator)
            answer_ids = _encode(tokenizer, lead + answer)
            sequences.append(context + answer_ids)
            starts.append(len(context))
        with _eval_mode(model):
            return sequence_logps(model, sequences, starts, pad_token_id=_pad_id(tokenizer), batch_size=self.batch_size)

    def _context_ids(self, tokenizer, problem: str, reasoning: str, separator: str | None = None) -> list[int]:
        """The answer term's context ids: the user turn (a + "\\n\\n" + x, or x alone when a is ""), r, then
        `separator` (None: `self.separator`), each piece tokenized separately."""
        user = f"{self.instruction}\n\n{problem}" if self.instruction else problem
        if getattr(tokenizer, "chat_template", None):
            head = tokenizer.apply_chat_template(
                [{"role": "user", "content": user}], add_generation_prompt=True, tokenize=False
            )
        else:
            head = user + "\n\n"
        separator = self.separator if separator is None else separator
        ids = _encode(tokenizer, head) + _encode(tokenizer, reasoning) + _encode(tokenizer, separator)
        if not ids:
            raise ValueError("the answer-term context is empty")
        return ids

    # -- scoring ----------------------------------------------------------------------------------------------
    def score(
        self,
        prompts: Sequence,
        completions: Sequence,
        completion_ids: Sequence[Sequence[int]] | None = None,
        completion_logps: Sequence[Sequence[float]] | None = None,
    ) -> list[PiCSARScore | None]:
        """PiCSAR terms for each completion; None where no final answer can be extracted.

        Args:
            prompts: B prompts (chat messages or strings).
            completions: B completions (strings or message lists).
            completion_ids: B sampled id lists; needed when `completion_logps` is None.
            completion_logps: B lists of raw per-token log-probs of the completion (from the rollout).

        Raises:
            ValueError: the argument lengths differ, or neither ids nor log-probs are given.
        """
        texts = [completion_to_text(c) for c in completions]
        n = len(texts)
        if len(prompts) != n:
            raise ValueError(f"got {len(prompts)} prompts for {n} completions")
        answers = [extract_answer(t) for t in texts]
        keep = [i for i, a in enumerate(answers) if a is not None and a.strip()]
        if not keep:
            return [None] * n
        if completion_logps is not None:
            if len(completion_logps) != n:
                raise ValueError(f"got {len(completion_logps)} completion_logps rows for {n} completions")
            reasoning = [list(completion_logps[i]) for i in keep]
        elif completion_ids is not None:
            reasoning = self.reasoning_logps([prompts[i] for i in keep], [completion_ids[i] for i in keep])
        else:
            raise ValueError("PiCSAR needs completion_logps (from procrl's rollout) or completion_ids")
        answer_term = self.answer_logps(
            [prompt_to_text(prompts[i]) for i in keep], [texts[i] for i in keep], [answers[i] for i in keep]
        )
        scores: list[PiCSARScore | None] = [None] * n
        for j, i in enumerate(keep):
            values = (*reasoning[j], *answer_term[j])
            if not values or not all(math.isfinite(v) for v in values):
                continue  # a non-finite log-prob (e.g. -inf from a masked vocabulary entry) is not a score
            scores[i] = PiCSARScore(tuple(reasoning[j]), tuple(answer_term[j]), answers[i])
        return scores

    def __call__(self, prompts=None, completions=None, completion_ids=None, completion_logps=None, **kwargs):
        scores = self.score(prompts, completions, completion_ids, completion_logps)
        values = [None if s is None else (s.mean if self.normalize == "mean" else s.sum) for s in scores]
        return check_reward_length(self.__name__, values, len(completions))


def get_picsar_bonus(
    evaluator: str | None = None,
    instruction: str = DEFAULT_INSTRUCTION,
    separator: str = DEFAULT_SEPARATOR,
    normalize: str = "mean",
    batch_size: int = 8,
    join_space: bool = False,
) -> PiCSARScorer:
    """The PiCSAR GRPO bonus as a picklable reward function named `picsar_bonus`.

    Without `evaluator` the answer term uses the live policy (bound by `ProcessGRPOTrainer`); with a model
    name or path, that model is loaded once on first use. Weight it with `reward_weights` (default 0.1) and
    `multi_objective_aggregation: normalize_then_sum` so it cannot dominate groups where every answer is wrong.
    """
    return PiCSARScorer(
        evaluator=evaluator,
        instruction=instruction,
        separator=separator,
        normalize=normalize,
        batch_size=batch_size,
        join_space=join_space,
    )


def select_best_of_n(scores: Sequence[PiCSARScore | None], normalize: str = "sum") -> int | None:
    """Index of the best of N candidates by PiCSAR (`sum`, the paper's choice); ties go to the earliest.

    Candidates without a score (no extractable answer) are never chosen; returns None when none has one.

    >>> a = PiCSARScore((-1.0, -1.0), (-0.1,), "4")
    >>> b = PiCSARScore((-0.5,), (-0.2,), "5")
    >>> select_best_of_n([None, a, b])
    2
    """
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    best, best_value = None, -math.inf
    for i, s in enumerate(scores):
        if s is None:
            continue
        value = s.sum if normalize == "sum" else s.mean
        if value > best_value:
            best, best_value = i, value
    return best


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def _pad_id(tokenizer) -> int:
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if token_id is not None:
            return int(token_id)
    return 0


@contextlib.contextmanager
def _eval_mode(model):
    """Score without dropout, then restore the training mode the trainer had set."""
    was_training = getattr(model, "training", False)
    if was_training:
        model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training:
            model.train()
