"""What a rollout engine is asked and what it returns (core layer): `SamplingParams`, `Rollout`, `RolloutEngine`, the
one rule that says whether a sampler draws from the raw model distribution (`draws_raw_distribution`), and the one
rule that says where a completion ends (EOS, stop strings, length), for every engine, the search episodes' turns and
the judges' replies.

Every engine (`procrl.generation.transformers_engine.TransformersEngine`, `procrl.generation.vllm_engine.VLLMEngine`)
returns one `Rollout` per prompt row: the sampled token ids cut after the first EOS (kept) or after the first token
that completes a stop string (kept), their text, and their log-probabilities under the RAW model distribution
(temperature 1, no top-p/top-k; natural log), whatever the sampling settings were.

The stop rule: `cut_completion` decides after generation where a completion ends (`eos_length`: after its first EOS
id; then `first_stop`: after the first token that completes a stop string) and why (one of `FINISH_REASONS`);
`completion_lengths` applies the EOS part to a batch of generated ids; `stop_criteria` ends a transformers `generate`
row as soon as the stop-string part would, so no tokens are wasted past a stop string; `strip_stop` drops a stop
string and what follows it from a completion's text (the text of a completion ended by a stop string may run past it).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "FINISH_REASONS",
    "Rollout",
    "RolloutEngine",
    "SamplingParams",
    "StopInCompletion",
    "completion_lengths",
    "cut_completion",
    "draws_raw_distribution",
    "eos_length",
    "first_stop",
    "stop_criteria",
    "strip_stop",
]

FINISH_REASONS = ("eos", "stop", "length")

# vllm.SamplingParams fields that leave the sampling distribution alone, whatever their value
NEUTRAL_FIELDS = frozenset({
    "n", "seed", "max_tokens", "logprobs", "prompt_logprobs", "stop", "stop_token_ids", "include_stop_str_in_output",
    "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "detokenize", "output_kind",
})  # fmt: skip
# vllm.SamplingParams fields that change the distribution, with the values that turn them off (None is off too, as in
# `vllm.SamplingParams.from_optional`); any field in neither table counts as changing it
OFF_VALUES: dict[str, tuple] = {
    "temperature": (1.0,),
    "top_p": (1.0,),
    "top_k": (0, -1),
    "min_p": (0.0,),
    "repetition_penalty": (1.0,),
    "presence_penalty": (0.0,),
    "frequency_penalty": (0.0,),
    "min_tokens": (0,),
    "logit_bias": ({},),
    "bad_words": ([],),
    "allowed_token_ids": (),
    "structured_outputs": (),
}


def draws_raw_distribution(fields: Mapping[str, Any]) -> bool:
    """Whether a sampler with these `vllm.SamplingParams` fields draws from the RAW model distribution (T = 1,
    top_p = 1, top_k and min_p off, no penalties, no min_tokens, no logit bias, banned words or grammar), so that the
    log-probs it reports after its processing (vLLM's "processed_logprobs") are the raw ones. The one rule of procrl:
    the vLLM engine, the search episodes and GRPO's vLLM rollouts all ask it (through `sampled_logprobs_are_raw`;
    `SamplingParams.vllm_fields()` names procrl's settings so).

    A field that only shapes the output (`NEUTRAL_FIELDS`: seed, stop, max_tokens, ...) is ignored; a field that
    changes the distribution must hold its off value (`OFF_VALUES`; None counts as off); an unknown field counts as a
    change. vLLM applies the logits processors (min_tokens, penalties, min_p, logit bias), then temperature and
    top-k/top-p, and its processed log-probs are the log_softmax after them (vllm/v1/sample/sampler.py:98-103,
    274-290; vllm/v1/sample/ops/topk_topp_sampler.py:163-167, vLLM 0.30): all the identity at the off values.

    >>> draws_raw_distribution({"temperature": 1.0, "top_k": -1, "seed": 3, "max_tokens": 8})
    True
    >>> draws_raw_distribution({"temperature": 0.7}), draws_raw_distribution({"min_tokens": 2})
    (False, False)
    """
    for name, value in fields.items():
        if name in NEUTRAL_FIELDS:
            continue
        if name not in OFF_VALUES or not (value is None or any(value == off for off in OFF_VALUES[name])):
            return False
    return True


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion. Hashable and canonical (`to_dict`), so it can key the rollout cache.

    The sampling knobs act on the sampler only: `Rollout.logprobs` are always raw (temperature 1) log-probs.

    Raises:
        ValueError: a value out of range (the message names the field and its valid range).
    """

    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature; 0 means greedy decoding."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass in (0, 1]; 1 = off."})
    top_k: int = field(default=0, metadata={"help": "Keep the k most likely tokens; 0 = off."})
    max_new_tokens: int = field(default=256, metadata={"help": "Most tokens generated per completion (>= 1)."})
    stop: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "Stop strings: a completion ends with the first token that completes one of them in the "
            "completion's text (the token, hence the stop string, is kept). Text of the prompt never matches."
        },
    )
    min_new_tokens: int = field(
        default=0,
        metadata={"help": "EOS is suppressed before this many tokens (benchmarks use it to force lengths); 0 = off."},
    )

    def __post_init__(self):
        # Canonical types, so SamplingParams(temperature=1) and (temperature=1.0) key the same cache entry.
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        object.__setattr__(self, "stop", stop)
        for name, kind in (("temperature", float), ("top_p", float), ("top_k", int)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        for name in ("max_new_tokens", "min_new_tokens"):
            object.__setattr__(self, name, int(getattr(self, name)))
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 turns it off), got {self.top_p}.")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 turns it off), got {self.top_k}.")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}.")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise ValueError(
                f"min_new_tokens must be in [0, max_new_tokens={self.max_new_tokens}], got {self.min_new_tokens}."
            )
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must hold non-empty strings, got {self.stop!r}; use () for no stop strings.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def vllm_fields(self) -> dict[str, Any]:
        """These settings under `vllm.SamplingParams`'s names: temperature, top_p, top_k (0 -> -1, "off" in every
        vLLM version), max_tokens, min_tokens and stop (None without stop strings)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k if self.top_k > 0 else -1,
            "max_tokens": self.max_new_tokens,
            "min_tokens": self.min_new_tokens,
            "stop": list(self.stop) or None,
        }

    def to_dict(self) -> dict:
        """Canonical JSON-able dict (stop strings as a list), e.g. for cache keys."""
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d


@dataclass
class Rollout:
    """One sampled completion.

    Attributes:
        token_ids: generated ids `(L,)`, cut after the first EOS (kept) or after the first token that completes a
            stop string (kept); never longer than `max_new_tokens`.
        text: `tokenizer.decode(token_ids, skip_special_tokens=True)`. With a stop string it may run a few characters
            past the stop string when the completing token does (e.g. token "\\n\\nThe" for stop "\\n\\n").
        logprobs: natural-log probabilities of `token_ids` under the RAW model distribution (temperature 1, no
            top-p/top-k), `(L,)`; logits at position t score token t + 1.
        finish_reason: "eos" (ends with an EOS id), "stop" (a stop string), or "length" (`max_new_tokens` reached).

    Raises:
        ValueError: `logprobs` and `token_ids` differ in length, or `finish_reason` is not one of `FINISH_REASONS`.
    """

    token_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: str

    def __post_init__(self):
        if len(self.logprobs) != len(self.token_ids):
            raise ValueError(f"Rollout has {len(self.token_ids)} token ids but {len(self.logprobs)} log-probs.")
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason must be one of {FINISH_REASONS}, got {self.finish_reason!r}.")

    def to_dict(self) -> dict:
        return {
            "token_ids": list(self.token_ids),
            "text": self.text,
            "logprobs": list(self.logprobs),
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Rollout:
        return cls(
            token_ids=[int(t) for t in d["token_ids"]],
            text=str(d["text"]),
            logprobs=[float(x) for x in d["logprobs"]],
            finish_reason=str(d["finish_reason"]),
        )


class RolloutEngine(abc.ABC):
    """Generates one `Rollout` per prompt row.

    Attributes:
        model_id: stable identity of the model weights and dtype (engine kind, resolved path or hub id, dtype, and a
            fingerprint of local weight files), used in cache keys.
        tokenizer: the model's tokenizer (decoding, stop strings).
    """

    model_id: str
    tokenizer: PreTrainedTokenizerBase

    @abc.abstractmethod
    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams, *, seed: int) -> list[Rollout]:
        """One rollout per row of `prompt_ids` (B lists of ids), in order; callers repeat a row for n samples.

        Deterministic given (rows, params, seed, engine): the same call returns the same rollouts.
        """

    def cache_key(self) -> str:
        """Everything about the engine that changes what `generate` returns; `run_rollouts` hashes it into shard
        names. Defaults to `model_id`; engines whose samples depend on more (device, batch size) add it."""
        return self.model_id


# ----------------------------------------------------------------------------------------------------------------
# Where a completion ends
def eos_length(token_ids: Sequence[int], eos_ids: Sequence[int]) -> int | None:
    """Length of a completion that ends at its first EOS id, that EOS included; None when it holds no EOS id.

    >>> eos_length([5, 2, 7, 2], eos_ids=[2]), eos_length([5, 7], eos_ids=[2])
    (2, None)
    """
    eos = set(eos_ids)
    return next((k + 1 for k, token in enumerate(token_ids) if token in eos), None)


def completion_lengths(sequences: torch.Tensor, eos_ids: Sequence[int]) -> list[int]:
    """Length of each row of `(B, T)` generated ids up to and including the first EOS (T when none): `eos_length`
    per row."""
    return [eos_length(row, eos_ids) or len(row) for row in sequences.tolist()]


def cut_completion(
    token_ids: Sequence[int], *, eos_ids: Sequence[int], stop: Sequence[str], tokenizer
) -> tuple[int, str]:
    """Where a completion ends and why: `(length in tokens, finish_reason)`.

    The completion ends after the first EOS id ("eos"), or earlier after the first token k such that a stop string
    occurs in `decode(token_ids[:k], skip_special_tokens=True)` ("stop"); otherwise it keeps every token
    ("length"). Only the completion's own text is searched, never the prompt's.
    """
    cut = eos_length(token_ids, eos_ids)
    cut, reason = (len(token_ids), "length") if cut is None else (cut, "eos")
    if stop:
        k_stop = first_stop(token_ids[:cut], stop, tokenizer)
        if k_stop is not None:
            cut, reason = k_stop, "stop"
    return cut, reason


def first_stop(token_ids: Sequence[int], stop: Sequence[str], tokenizer) -> int | None:
    """Smallest k such that a stop string is in decode(token_ids[:k]); None if none is (binary search: containing a
    stop string is monotone in k because a longer prefix decodes to a longer text)."""

    def has_stop(k: int) -> bool:
        text = tokenizer.decode(list(token_ids[:k]), skip_special_tokens=True)
        return any(s in text for s in stop)

    if not token_ids or not has_stop(len(token_ids)):
        return None
    lo, hi = 1, len(token_ids)  # has_stop(hi) holds
    while lo < hi:
        mid = (lo + hi) // 2
        if has_stop(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


class StopInCompletion(StoppingCriteria):
    """True for each row whose generated text (after `prompt_width` left-padded prompt columns) contains a stop
    string: the same predicate as `cut_completion`. Returns a `(B,)` bool tensor on the ids' device."""

    def __init__(self, tokenizer, stop: Sequence[str], prompt_width: int):
        self.tokenizer, self.stop, self.prompt_width = tokenizer, tuple(stop), prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width :].tolist(), skip_special_tokens=True)
        return torch.tensor([any(s in t for s in self.stop) for t in texts], dtype=torch.bool, device=input_ids.device)


def stop_criteria(tokenizer, stop: Sequence[str], prompt_width: int) -> StoppingCriteriaList:
    """A `StoppingCriteriaList` that ends a row as soon as its generated text (after `prompt_width` left-padded
    prompt columns) contains a stop string: the same predicate as `cut_completion`. transformers' own
    `stop_strings` would also match text that starts in the prompt, which we must not do."""
    return StoppingCriteriaList([StopInCompletion(tokenizer, stop, prompt_width)])


def strip_stop(text: str, stop: Sequence[str]) -> str:
    """`text` cut before each stop string in turn (each one's first occurrence, and what follows it, dropped): the
    answer text of a completion, whose `Rollout.text` may run past the stop string that ended it.

    >>> strip_stop("x = 2.\\nQuestion: next", ("\\nQuestion:",))
    'x = 2.'
    """
    for s in stop:
        pos = text.find(s)
        if pos >= 0:
            text = text[:pos]
    return text
