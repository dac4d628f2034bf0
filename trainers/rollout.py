"""procrl's generation hook for TRL's `GRPOTrainer(rollout_func=...)` (DESIGN §3 "Generation hook").

TRL 1.16's own transformers generation path throws the sampler's log-probabilities away, and reward functions
only see dataset columns plus the extra fields a `rollout_func` returns. So procrl generates here: one
`generate(output_logits=True, return_dict_in_generate=True)` call yields, for every sampled token,

- `logprobs`: log p_T(token) at the sampling temperature T, i.e. `log_softmax(logits / T)`, the quantity TRL
  computes for the policy in its loss (trl/trainer/grpo_trainer.py `_get_per_token_logps_and_entropies`);
- `completion_logps`: log p(token) under the RAW model distribution (temperature 1, no top-p/top-k/penalties),
  an extra field that TRL forwards to every reward function as the keyword `completion_logps` (PiCSAR, FRS).

Both come from the generation's own logits: no second forward pass of the policy.

TRL contract (trl/trainer/grpo_trainer.py, `GRPOTrainer._generate`, TRL 1.16): the function receives the
per-process prompt slice (already repeated `num_generations` times by TRL's sampler) and the trainer, and returns
a dict with `prompt_ids`, `completion_ids`, `logprobs` (lists of lists, one row per received prompt); any other
key is merged into the inputs of the reward functions; `env_mask` (1 = model token, 0 = environment token) is
applied to the loss.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch

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


def completion_lengths(sequences: torch.Tensor, eos_ids: Sequence[int]) -> list[int]:
    """Length of each row of `(B, T)` generated ids up to and including the first EOS (T when none)."""
    is_eos = torch.isin(sequences, torch.tensor(list(eos_ids), dtype=sequences.dtype))
    has_eos = is_eos.any(dim=1)
    first = is_eos.int().argmax(dim=1)
    return torch.where(has_eos, first + 1, torch.full_like(first, sequences.shape[1])).tolist()


class ProcessRollout:
    """The `rollout_func` procrl passes to TRL: generation with log-probs kept for the rewards.

    Call signature (TRL's): `rollout(prompts, trainer) -> dict` with `prompt_ids`, `completion_ids`,
    `logprobs` (at the sampling temperature) and the extra field `completion_logps` (raw distribution, T = 1).

    It reuses `trainer.generation_config` (built by TRL from `temperature`, `top_p`, `top_k`, `min_p`,
    `repetition_penalty`, `max_completion_length` and `generation_kwargs`), so the sampling settings are
    exactly those of `GRPOConfig`. `output_logits` is added here, never through `generation_kwargs` (TRL would
    pass it to its own path too).

    With `env` (a `procrl.trainers.search_env.SearchEnvironment`) the same function runs multi-turn search
    episodes instead of single-turn generation: it additionally returns `env_mask` (1 = model token, 0 =
    environment token; TRL masks the loss with it) and `search_trace` (one parsed `Trace` per completion), and the
    log-probs of environment tokens are 0.0. `max_completion_length` then bounds model + environment tokens.

    Args:
        env: None (default) = single-turn generation, exactly as before; else the search environment.
    """

    __name__ = "process_rollout"

    def __init__(self, env=None):
        self.env = env

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        if getattr(trainer, "use_vllm", False):  # ProcessGRPOTrainer refuses this at construction already
            raise NotImplementedError(
                "procrl's rollout_func does not drive vLLM yet; set use_vllm: false (transformers generation)."
            )
        tokenizer = trainer.processing_class
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wraps its tokenizer
        prompt_ids = render_prompts(tokenizer, prompts, getattr(trainer, "chat_template_kwargs", None))
        from trl.models import unwrap_model_for_generation

        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            generation_kwargs=trainer.generation_kwargs,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as unwrapped_model:
            if self.env is not None:
                episodes = self.env.run(
                    unwrapped_model,
                    tokenizer,
                    prompts,
                    prompt_ids,
                    trainer.generation_config,
                    max_completion_length=trainer.generation_config.max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_ids=trainer.eos_token_ids,
                    logprobs_temperature=trainer.temperature,
                    device=trainer.accelerator.device,
                )
                return {
                    "prompt_ids": prompt_ids,
                    "completion_ids": episodes.completion_ids,
                    "logprobs": episodes.logprobs,
                    "completion_logps": episodes.completion_logps,
                    "env_mask": episodes.env_mask,
                    "search_trace": episodes.search_trace,
                }
            out = generate_completions(
                unwrapped_model,
                prompt_ids,
                trainer.generation_config,
                pad_token_id=tokenizer.pad_token_id,
                eos_ids=trainer.eos_token_ids,
                logprobs_temperature=trainer.temperature,
                device=trainer.accelerator.device,
            )
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": out.completion_ids,
            "logprobs": out.logprobs,
            "completion_logps": out.completion_logps,
        }
