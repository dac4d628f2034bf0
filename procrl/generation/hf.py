"""Token log-probabilities of a transformers causal LM (core layer): of the completions it samples (`generate`, keeping
the sampler's log-probabilities) and of given token ids (`sequence_logps`, teacher-forced).

One `generate(output_logits=True, return_dict_in_generate=True)` call yields, for every sampled token,

- `logprobs`: log p_T(token) at the sampling temperature T, i.e. `log_softmax(logits / T)`, the quantity TRL
  computes for the policy in its loss (trl/trainer/grpo_trainer.py `_get_per_token_logps_and_entropies`);
- `completion_logps`: log p(token) under the RAW model distribution (temperature 1, no top-p/top-k/penalties),
  the extra field procrl's rollout hands to every reward function as the keyword `completion_logps` (PiCSAR, FRS).

Both come from the generation's own logits: no second forward pass of the policy. Used by the GRPO rollout
(`procrl.trainers.rollout.ProcessRollout`), the evaluation, the judges' in-process model and the data builders.

`sequence_logps` scores given sequences in batches, padding-invariant; `sequence_self_certainty` reads the same
forward's full next-token distributions (their KL from uniform, Kang et al. 2025). Convention (docs/architecture.md
"Log-probabilities"): raw model distribution (temperature 1), natural log; the logits at position t score token t+1;
`log_softmax` always; position ids are passed explicitly so left or right padding never changes a score (tested to
1e-4 in fp32; the GPT-2 case, with absolute position embeddings, is the one that fails when position ids are wrong,
since rotary embeddings are invariant to a shift of every position).
"""

from __future__ import annotations

import copy
import inspect
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from procrl.generation.sampling import completion_lengths
from procrl.utils import get_logger

logger = get_logger(__name__)


@dataclass
class GenerationOutput:
    """Completions of one batch, cut after the first EOS (the EOS token is kept).

    Attributes:
        completion_ids: one list of token ids per prompt (length L_i, EOS included when generated).
        logprobs: log-probabilities (natural log) of those tokens at the sampling temperature, `(L_i,)` each;
            None when not requested.
        completion_logps: log-probabilities under the raw distribution (temperature 1), `(L_i,)` each; None when
            not requested.
    """

    completion_ids: list[list[int]]
    logprobs: list[list[float]] | None = None
    completion_logps: list[list[float]] | None = None


def eos_token_ids(tokenizer, generation_config=None) -> list[int]:
    """All ids that end a completion: the tokenizer's EOS plus every id in `generation_config.eos_token_id`."""
    ids: list[int] = []
    configured = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    if isinstance(configured, int):
        configured = [configured]
    for token_id in [tokenizer.eos_token_id, *(configured or [])]:
        if token_id is not None and token_id not in ids:
            ids.append(int(token_id))
    return ids


def render_prompts(tokenizer, prompts: Sequence, chat_template_kwargs: dict | None = None) -> list[list[int]]:
    """Token ids of each prompt: chat messages through the chat template (with the generation prompt), plain
    strings through the tokenizer as TRL does (`processing_class(text=prompts)`). A tokenizer without a chat
    template (a base model) renders messages as plain "role: content" lines (`plain_chat_template`, logged)."""
    if prompts and not isinstance(prompts[0], str):
        plain = plain_chat_template(tokenizer)
        if plain is not None:
            logger.info("the tokenizer has no chat template: chat prompts rendered as plain 'role: content' lines")
        rendered = tokenizer.apply_chat_template(
            list(prompts),
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            **({"chat_template": plain} if plain is not None else {}),
            **(chat_template_kwargs or {}),
        )
        return [list(ids) for ids in rendered["input_ids"]]
    return [list(ids) for ids in tokenizer(text=list(prompts))["input_ids"]]


def plain_chat_template(tokenizer) -> str | None:
    """A jinja chat template rendering chat messages as plain "role: content" lines (`TransformersJudge`'s plain
    prompt) for a tokenizer without a chat template (a base model: Gemma 3 270M); None when the tokenizer has one.

    The plain prompt is `"".join(f"{role}: {content}\\n" ...) + "assistant:"`, tokenised with the tokenizer's
    special tokens (`tokenizer(text)`, `procrl.generation.render_prompts`); vLLM tokenises a rendered chat prompt
    without them, so the special tokens the tokenizer puts in front (Gemma's `<bos>`) are written into the template.
    Special tokens a tokenizer appends at the end are not reproduced (no tokenizer here appends any).
    """
    if getattr(tokenizer, "chat_template", None):
        return None
    with_special = tokenizer("x")["input_ids"]
    plain = tokenizer("x", add_special_tokens=False)["input_ids"]
    n_prefix = next((i for i in range(len(with_special) + 1) if with_special[i:] == plain), 0)
    prefix = "".join(tokenizer.convert_ids_to_tokens(with_special[:n_prefix]))
    # json.dumps quotes and escapes like a jinja string literal (jinja decodes backslash escapes in literals).
    return (
        "{{- " + json.dumps(prefix) + " -}}\n"
        "{%- for message in messages -%}\n"
        "{{- message['role'] + ': ' + message['content'] + '\\n' -}}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}{{- 'assistant:' -}}{%- endif -%}\n"
    )


def left_pad(sequences: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad id lists into `(B, T)` input ids and attention mask (1 = real token)."""
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if len(seq):
            input_ids[row, width - len(seq) :] = torch.as_tensor(list(seq), dtype=torch.long)
            attention_mask[row, width - len(seq) :] = 1
    return input_ids, attention_mask


@torch.no_grad()
def generate_completions(
    model,
    prompt_ids: Sequence[Sequence[int]],
    generation_config,
    *,
    pad_token_id: int,
    eos_ids: Sequence[int],
    return_logprobs: bool = True,
    logprobs_temperature: float | None = None,
    device: torch.device | str | None = None,
    stopping_criteria=None,
) -> GenerationOutput:
    """Batched `generate` with left padding and KV cache; one completion per prompt, cut after the first EOS.

    Args:
        model: a causal LM (already unwrapped for generation).
        prompt_ids: token ids of each prompt (B lists).
        generation_config: a `transformers.GenerationConfig`; it is copied, never modified.
        pad_token_id: id used for left padding (masked out).
        eos_ids: ids that end a completion (any of them).
        return_logprobs: also return `logprobs` and `completion_logps` (raw, T = 1), gathered from the logits
            `generate` returns.
        logprobs_temperature: temperature of `logprobs`; default: the config's temperature when sampling, else 1.
            The rollout passes the trainer's temperature, the one TRL's loss divides the logits by.
        stopping_criteria: optional `transformers.StoppingCriteriaList` passed to `generate` (the data builders'
            stop strings); a row it stops is filled with `pad_token_id` after its last token.

    Returns:
        A `GenerationOutput` (natural-log probabilities).
    """
    device = device if device is not None else next(model.parameters()).device
    input_ids, attention_mask = left_pad(prompt_ids, pad_token_id)
    config = copy.deepcopy(generation_config)
    config.return_dict_in_generate = True
    config.output_logits = return_logprobs
    config.output_scores = False
    extra = {} if stopping_criteria is None else {"stopping_criteria": stopping_criteria}
    out = model.generate(
        input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), generation_config=config, **extra
    )
    sequences = out.sequences[:, input_ids.shape[1] :].cpu()  # (B, T_new)
    lengths = completion_lengths(sequences, eos_ids)

    completion_ids = [sequences[i, : lengths[i]].tolist() for i in range(len(lengths))]
    if not return_logprobs:
        return GenerationOutput(completion_ids)

    if out.logits is None:
        raise RuntimeError("generate() returned no logits although output_logits=True was requested")
    temperature = logprobs_temperature
    if temperature is None:
        temperature = float(config.temperature or 1.0) if config.do_sample else 1.0
    raw_logps, tempered_logps = [], []
    # `out.logits` holds one (B, V) tensor per generated position, BEFORE any logits processor (raw model output).
    for logits in out.logits:
        logits = logits.float().cpu()
        token = sequences[:, len(raw_logps)].unsqueeze(-1)  # (B, 1)
        raw_logps.append(torch.log_softmax(logits, dim=-1).gather(-1, token).squeeze(-1))
        if temperature == 1.0:
            tempered_logps.append(raw_logps[-1])
        else:
            tempered_logps.append(torch.log_softmax(logits / temperature, dim=-1).gather(-1, token).squeeze(-1))
    raw = torch.stack(raw_logps, dim=1)  # (B, T_new)
    tempered = torch.stack(tempered_logps, dim=1)  # (B, T_new)
    return GenerationOutput(
        completion_ids=completion_ids,
        logprobs=[tempered[i, : lengths[i]].tolist() for i in range(len(lengths))],
        completion_logps=[raw[i, : lengths[i]].tolist() for i in range(len(lengths))],
    )


@torch.no_grad()
def sequence_logps(
    model,
    sequences: Sequence[Sequence[int]],
    score_from: Sequence[int],
    *,
    pad_token_id: int = 0,
    padding_side: str = "left",
    batch_size: int = 8,
) -> list[list[float]]:
    """Log-probabilities of the tokens `sequences[i][score_from[i]:]` given everything before them.

    Args:
        model: a causal LM returning `.logits` of shape `(B, T, V)`; called with `input_ids`, `attention_mask`
            and `position_ids`.
        sequences: token ids, one list per example (lengths T_i).
        score_from: index of the first token to score in each sequence (>= 1: the first token has no context).
        pad_token_id: id used to fill padding (masked out, so its value does not matter).
        padding_side: "left" (default) or "right"; results are identical up to float error. With left padding
            every scored span ends at the last position, so only the last `max(T_i - score_from[i]) + 1`
            positions go through the LM head (`logits_to_keep`, when the model accepts it): scoring a short
            answer after a long context then skips almost all of the `(B, T, V)` logits.
        batch_size: sequences per forward pass.

    Returns:
        For each example, a list of `T_i - score_from[i]` log-probabilities (natural log, raw distribution).

    Raises:
        ValueError: `score_from` is out of range or the lengths of `sequences` and `score_from` differ.
    """
    spans = _span_logits(model, sequences, score_from, pad_token_id, padding_side, batch_size)
    return [
        torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1).tolist()
        for logits, targets in spans
    ]


@torch.no_grad()
def sequence_self_certainty(
    model,
    sequences: Sequence[Sequence[int]],
    score_from: Sequence[int],
    *,
    pad_token_id: int = 0,
    padding_side: str = "left",
    batch_size: int = 8,
) -> list[list[float]]:
    """Self-certainty of the model at every position that predicts one of `sequences[i][score_from[i]:]`: the KL
    divergence from the uniform distribution U over the vocabulary to the model's next-token distribution p_t,

        KL(U || p_t) = -log V - (1/V) sum_j log p_t(j)      (nats; 0 for a uniform p_t, large for a peaked one)

    (Kang et al. 2025, "Scalable Best-of-N Selection for Large Language Models via Self-Certainty", arXiv
    2502.18581: a completion's self-certainty is the mean of these over its tokens). V is the model's output
    vocabulary (the logits' last dimension); p_t is the raw distribution (temperature 1), from the same
    teacher-forced, padding-invariant forward as `sequence_logps` (same arguments, same batching). A vocabulary
    entry with logit -inf makes the value +inf: the caller decides what that means.

    Returns:
        For each example, a list of `T_i - score_from[i]` values (nats, >= 0 up to float error).

    Raises:
        ValueError: as `sequence_logps`.
    """
    spans = _span_logits(model, sequences, score_from, pad_token_id, padding_side, batch_size)
    return [
        (-math.log(logits.shape[-1]) - torch.log_softmax(logits, dim=-1).mean(dim=-1)).tolist() for logits, _ in spans
    ]


def _span_logits(
    model,
    sequences: Sequence[Sequence[int]],
    score_from: Sequence[int],
    pad_token_id: int,
    padding_side: str,
    batch_size: int,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """For each example in order, `(logits, targets)` of its scored span: the float32 logits `(n_i, V)` at the
    positions that predict `sequences[i][score_from[i]:]` and those tokens `(n_i,)` (n_i may be 0), from batched,
    padded forwards (`sequence_logps`'s arguments). The arguments are checked before any forward pass; the caller
    holds `torch.no_grad`."""
    if len(sequences) != len(score_from):
        raise ValueError(f"got {len(sequences)} sequences but {len(score_from)} score_from indices")
    for seq, start in zip(sequences, score_from, strict=True):
        if not 1 <= start <= len(seq):
            raise ValueError(f"score_from={start} is out of range for a sequence of {len(seq)} tokens (need >= 1)")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    return _span_logits_unchecked(model, sequences, score_from, pad_token_id, padding_side, batch_size)


def _span_logits_unchecked(model, sequences, score_from, pad_token_id, padding_side, batch_size):
    device = next(model.parameters()).device
    for lo in range(0, len(sequences), batch_size):
        chunk = [list(s) for s in sequences[lo : lo + batch_size]]
        starts = list(score_from[lo : lo + batch_size])
        width = max(len(s) for s in chunk)
        input_ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
        offsets = []
        for row, seq in enumerate(chunk):
            offset = width - len(seq) if padding_side == "left" else 0
            input_ids[row, offset : offset + len(seq)] = torch.tensor(seq, dtype=torch.long)
            attention_mask[row, offset : offset + len(seq)] = 1
            offsets.append(offset)
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        inputs = {
            "input_ids": input_ids.to(device),
            "attention_mask": attention_mask.to(device),
            "position_ids": position_ids.to(device),
        }
        if _accepts(model, "use_cache"):
            inputs["use_cache"] = False  # the KV cache would be built and thrown away
        # Positions dropped from the front of the sequence dimension by `logits_to_keep` (0 = all kept).
        dropped = 0
        if padding_side == "left" and _accepts(model, "logits_to_keep"):
            keep = max(len(seq) - start for seq, start in zip(chunk, starts, strict=True)) + 1
            if keep < width:
                inputs["logits_to_keep"], dropped = keep, width - keep
        logits = model(**inputs).logits  # (B, T - dropped, V)
        for row, (seq, start, offset) in enumerate(zip(chunk, starts, offsets, strict=True)):
            # logits at position p score token p + 1 (an empty span when start == len(seq))
            first, last = offset + start - 1 - dropped, offset + len(seq) - 1 - dropped
            targets = input_ids[row, offset + start : offset + len(seq)]  # (n,)
            yield logits[row, first:last].float(), targets.to(logits.device)


def _accepts(model, argument: str) -> bool:
    """Whether `model.forward` names `argument` explicitly (HF causal LMs do; toy test models may not)."""
    try:
        return argument in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
