"""Generation with transformers `generate`, keeping the sampler's log-probabilities (core layer).

One `generate(output_logits=True, return_dict_in_generate=True)` call yields, for every sampled token,

- `logprobs`: log p_T(token) at the sampling temperature T, i.e. `log_softmax(logits / T)`, the quantity TRL
  computes for the policy in its loss (trl/trainer/grpo_trainer.py `_get_per_token_logps_and_entropies`);
- `completion_logps`: log p(token) under the RAW model distribution (temperature 1, no top-p/top-k/penalties),
  the extra field procrl's rollout hands to every reward function as the keyword `completion_logps` (PiCSAR, FRS).

Both come from the generation's own logits: no second forward pass of the policy. Used by the GRPO rollout
(`procrl.trainers.rollout.ProcessRollout`), the evaluation, the judges' in-process model and the data builders.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
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
    strings through the tokenizer as TRL does (`processing_class(text=prompts)`)."""
    if prompts and not isinstance(prompts[0], str):
        rendered = tokenizer.apply_chat_template(
            list(prompts),
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            **(chat_template_kwargs or {}),
        )
        return [list(ids) for ids in rendered["input_ids"]]
    return [list(ids) for ids in tokenizer(text=list(prompts))["input_ids"]]


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
