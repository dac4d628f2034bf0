"""Multi-turn search episodes for GRPO (Search-R1 tags; DESIGN §4 "StepGap"), run by procrl's own `rollout_func`.

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
from dataclasses import dataclass, field

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from procrl.deprecation import moved_names
from procrl.generation import generate_completions
from procrl.retrieval import Passage, Retriever, format_passages
from procrl.rewards.stepgap import trace as stepgap_trace
from procrl.rewards.stepgap.trace import Trace, parse_trace, with_token_spans
from procrl.rewards.steps import token_char_offsets
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["STOP_STRINGS", "SearchEnvironment", "SearchEpisodes", "StopOnStrings"]

# `question_from_prompt` moved to procrl.rewards.stepgap.trace (the reward parses prompts too); the old path works for
# one release
__getattr__ = moved_names(__name__, {"question_from_prompt": "procrl.rewards.stepgap.trace"})

STOP_STRINGS = ("</search>", "</answer>")


class StopOnStrings(StoppingCriteria):
    """Stop a row once the text it generated (after `prompt_width` input columns) contains a stop string.

    transformers' `StopStringCriteria` only fires when the stop string ends exactly at a token end; a byte-level
    BPE token such as ">\\n" would let generation run past `</search>`. This check decodes the last `window`
    generated tokens of each row instead, so a stop string ending inside a token is caught too.
    """

    def __init__(self, tokenizer, stop_strings: Sequence[str], prompt_width: int, window: int = 12):
        self.tokenizer = tokenizer
        self.stop_strings = tuple(stop_strings)
        self.prompt_width = prompt_width
        self.window = window

    def __call__(self, input_ids: torch.LongTensor, scores=None, **kwargs) -> torch.BoolTensor:
        new = input_ids[:, self.prompt_width :]  # (B, T_new)
        tails = self.tokenizer.batch_decode(new[:, -self.window :], skip_special_tokens=True)
        done = [any(s in tail for s in self.stop_strings) for tail in tails]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


@dataclass
class SearchEpisodes:
    """Per-episode results (B entries each); ids, masks and log-probs are aligned token by token."""

    completion_ids: list[list[int]]
    env_mask: list[list[int]]
    logprobs: list[list[float]]
    completion_logps: list[list[float]]
    search_trace: list[Trace]


@dataclass
class SearchEnvironment:
    """The search environment of a rollout: a retriever, top-k and the search limit.

    Attributes:
        retriever: anything with `search(queries, topk) -> list[list[Passage]]` (`BM25Index`, `RetrieverClient`).
        topk: passages per search (DESIGN default 3).
        max_turns: executed searches per episode (DESIGN default 4); a further search ends the episode unexecuted.
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
        """The environment text appended after a search."""
        return "\n<information>" + format_passages(passages) + "</information>\n"

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
        n = len(prompt_ids)
        ids: list[list[int]] = [[] for _ in range(n)]
        mask: list[list[int]] = [[] for _ in range(n)]
        lps: list[list[float]] = [[] for _ in range(n)]
        raw: list[list[float]] = [[] for _ in range(n)]
        retrieved: list[list[list[Passage]]] = [[] for _ in range(n)]
        questions = [stepgap_trace.question_from_prompt(p) for p in prompts]
        done = [False] * n
        eos = int(eos_ids[0])

        def append(i: int, new_ids, new_mask, new_lp, new_raw) -> bool:
            """Append within the budget; True when the budget is now spent."""
            room = max_completion_length - len(ids[i])
            ids[i] += list(new_ids)[:room]
            mask[i] += list(new_mask)[:room]
            lps[i] += list(new_lp)[:room]
            raw[i] += list(new_raw)[:room]
            return len(ids[i]) >= max_completion_length

        while True:
            active = [i for i in range(n) if not done[i]]
            if not active:
                break
            inputs = [list(prompt_ids[i]) + ids[i] for i in active]
            width = max(len(x) for x in inputs)
            config = copy.deepcopy(generation_config)
            config.max_new_tokens = max(max_completion_length - len(ids[i]) for i in active)
            stop = StoppingCriteriaList([StopOnStrings(tokenizer, self.stop_strings, prompt_width=width)])
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
            queries: dict[int, str] = {}
            for row, i in enumerate(active):
                turn = self._cut_at_stop(tokenizer, out.completion_ids[row])
                spent = append(
                    i, turn, [1] * len(turn), out.logprobs[row][: len(turn)], out.completion_logps[row][: len(turn)]
                )
                ended_by_eos = bool(turn) and turn[-1] in eos_ids
                if spent or ended_by_eos or not turn:
                    done[i] = True
                    continue
                trace = parse_trace(questions[i], tokenizer.decode(ids[i], skip_special_tokens=True), retrieved[i])
                last = trace.steps[-1] if trace.steps else None
                runs = (
                    last is not None
                    and last.kind == "inference"
                    and not last.malformed
                    and last.query is not None
                    and not last.retrieved
                    and trace.answer is None
                    and not any(s.kind == "conclusion" for s in trace.steps)
                    and len(retrieved[i]) < self.max_turns
                )
                if runs:
                    queries[i] = last.query
                else:  # an answer, or a search that does not run: the episode ends with an environment EOS
                    append(i, [eos], [0], [0.0], [0.0])
                    done[i] = True
            if queries:
                order = list(queries)
                results = self.retriever.search([queries[i] for i in order], topk=self.topk)
                for i, passages in zip(order, results, strict=True):
                    retrieved[i].append(list(passages))
                    info = tokenizer(self.information(passages), add_special_tokens=False)["input_ids"]
                    if append(i, info, [0] * len(info), [0.0] * len(info), [0.0] * len(info)):
                        done[i] = True  # the information block used up the budget: truncated

        traces = []
        for i in range(n):
            text, spans = token_char_offsets(ids[i], tokenizer)
            trace = with_token_spans(parse_trace(questions[i], text, retrieved[i]), spans)
            executed = sum(1 for s in trace.steps if s.kind == "inference" and s.retrieved)
            if executed != sum(1 for r in retrieved[i] if r):
                logger.warning("episode %d: the parsed trace has %d executed searches, the environment ran %d", i,
                               executed, len(retrieved[i]))  # fmt: skip
            traces.append(trace)
        return SearchEpisodes(ids, mask, lps, raw, traces)

    def _cut_at_stop(self, tokenizer, turn_ids: list[int]) -> list[int]:
        """Cut a generated turn after the token that completes the first stop string (sampled ids, never
        re-encoded); rows that stopped are padded by `generate` after that token, and those pads go."""
        text, spans = token_char_offsets(turn_ids, tokenizer)
        hits = [text.find(s) + len(s) for s in self.stop_strings if s in text]
        if not hits:
            return list(turn_ids)
        end = min(hits)
        cut = next(t + 1 for t, (_, e) in enumerate(spans) if e >= end)
        return list(turn_ids[:cut])
