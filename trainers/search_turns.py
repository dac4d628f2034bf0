"""The turn bookkeeping of a multi-turn search episode, shared by every generation backend (trainers layer).

`run_episodes` is the one loop behind `SearchEnvironment.run` (transformers `generate`) and
`SearchEnvironment.run_vllm` (a `procrl.generation.VLLMEngine`): a backend only supplies a `TurnGenerator`, which
generates one turn for each live episode; everything else (the token budget, which search runs, the batched
retrieval, the information blocks, the appended EOS, env_mask, the traces) happens here, once. The protocol is
described in `procrl.trainers.search_env`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from procrl.retrieval import Passage
from procrl.rewards.stepgap import trace as stepgap_trace
from procrl.rewards.stepgap.trace import Trace, parse_trace, with_token_spans
from procrl.rewards.steps import token_char_offsets
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["SearchEpisodes", "Turn", "TurnGenerator", "run_episodes"]


@dataclass
class SearchEpisodes:
    """Per-episode results (B entries each); ids, masks and log-probs are aligned token by token.

    Attributes:
        completion_ids: model and environment tokens of each episode, in order `(L_i,)`.
        env_mask: 1 = token written by the policy, 0 = environment token (information block, appended EOS).
        logprobs: the sampler's natural-log probabilities of the model tokens (0.0 at environment tokens).
        completion_logps: raw (T = 1) natural-log probabilities of the model tokens (0.0 at environment tokens), or
            None when the backend had none (`run_vllm` with processed log-probs of a non-raw sampler: the caller
            rescores the completions once).
        search_trace: one parsed `Trace` per episode, with token spans into `completion_ids`.
    """

    completion_ids: list[list[int]]
    env_mask: list[list[int]]
    logprobs: list[list[float]]
    completion_logps: list[list[float]] | None
    search_trace: list[Trace]


@dataclass
class Turn:
    """One generated turn of one episode: its token ids `(L,)`, cut after the token that completes a stop string or
    after EOS (both kept), the sampler's log-probs `(L,)` and the raw (T = 1) log-probs `(L,)` or None."""

    ids: list[int]
    logprobs: list[float]
    raw: list[float] | None = None


TurnGenerator = Callable[[list[int], list[list[int]], list[int], int], list[Turn]]
"""`generate(rows, inputs, budgets, turn) -> one Turn per row`: `rows` are the live episodes' indices in the batch,
`inputs[k]` the token ids of row k's prompt followed by all of its completion ids so far (never re-tokenized),
`budgets[k] >= 1` the tokens row k may still add, `turn` the generation round (0 first; the same for every live
row, since a row is live from round 0 until it ends)."""


def run_episodes(
    env,
    tokenizer,
    prompts: Sequence,
    prompt_ids: Sequence[Sequence[int]],
    generate: TurnGenerator,
    *,
    max_completion_length: int,
    eos_ids: Sequence[int],
    keep_raw: bool = True,
) -> SearchEpisodes:
    """Run one search episode per prompt, turn by turn, with `generate` writing the model's turns.

    Args:
        env: the `SearchEnvironment` (retriever, topk, max_turns, information blocks).
        tokenizer: decodes turns for the tag parser, encodes information blocks.
        prompts: the prompts as TRL passed them (the questions of the traces).
        prompt_ids: token ids of each rendered prompt (B lists).
        generate: the backend (see `TurnGenerator`).
        max_completion_length: token budget of a completion, model + environment tokens (>= 1).
        eos_ids: ids that end an episode when the model writes them; the environment appends `eos_ids[0]`.
        keep_raw: False = the backend has no raw log-probs; `completion_logps` is then None.

    Raises:
        ValueError: `max_completion_length < 1`, no EOS id, or `generate` returned a wrong number of turns.
    """
    if max_completion_length < 1 or not eos_ids:
        raise ValueError(
            f"run_episodes needs max_completion_length >= 1 and an EOS id, got {max_completion_length} and "
            f"{list(eos_ids)!r}; pass the trainer's max_completion_length and eos ids."
        )
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

    turn_index = 0
    while True:
        active = [i for i in range(n) if not done[i]]
        if not active:
            break
        inputs = [[int(t) for t in prompt_ids[i]] + ids[i] for i in active]
        budgets = [max_completion_length - len(ids[i]) for i in active]
        turns = generate(active, inputs, budgets, turn_index)
        if len(turns) != len(active):
            raise ValueError(f"the turn generator returned {len(turns)} turns for {len(active)} live episodes.")
        turn_index += 1
        queries: dict[int, str] = {}
        for i, turn in zip(active, turns, strict=True):
            new = [int(t) for t in turn.ids]
            new_raw = turn.raw if turn.raw is not None else turn.logprobs  # dropped at the end when not keep_raw
            spent = append(i, new, [1] * len(new), turn.logprobs[: len(new)], new_raw[: len(new)])
            if spent or not new or new[-1] in eos_ids:
                done[i] = True
                continue
            query = _executed_query(env, questions[i], tokenizer.decode(ids[i], skip_special_tokens=True), retrieved[i])
            if query is not None:
                queries[i] = query
            else:  # an answer, or a search that does not run: the episode ends with an environment EOS
                append(i, [eos], [0], [0.0], [0.0])
                done[i] = True
        if queries:
            order = list(queries)
            results = env.retriever.search([queries[i] for i in order], topk=env.topk)
            for i, passages in zip(order, results, strict=True):
                retrieved[i].append(list(passages))
                info = tokenizer(env.information(passages), add_special_tokens=False)["input_ids"]
                if append(i, info, [0] * len(info), [0.0] * len(info), [0.0] * len(info)):
                    done[i] = True  # the information block used up the budget: truncated

    traces = [_trace(i, questions[i], ids[i], retrieved[i], tokenizer) for i in range(n)]
    return SearchEpisodes(ids, mask, lps, raw if keep_raw else None, traces)


def _executed_query(env, question: str, text: str, retrieved: list[list[Passage]]) -> str | None:
    """The query the environment runs after this turn, or None when the episode ends here: the last step of the
    completion `text` must be a closed, non-empty search outside an answer, before `env.max_turns` searches ran."""
    trace = parse_trace(question, text, retrieved)
    last = trace.steps[-1] if trace.steps else None
    runs = (
        last is not None
        and last.kind == "inference"
        and not last.malformed
        and last.query is not None
        and not last.retrieved
        and trace.answer is None
        and not any(s.kind == "conclusion" for s in trace.steps)
        and len(retrieved) < env.max_turns
    )
    return last.query if runs else None


def _trace(i: int, question: str, ids: list[int], retrieved: list[list[Passage]], tokenizer) -> Trace:
    """The episode's parsed trace with token spans (`with_token_spans`); warns when it disagrees with the
    searches the environment ran."""
    text, spans = token_char_offsets(ids, tokenizer)
    trace = with_token_spans(parse_trace(question, text, retrieved), spans)
    executed = sum(1 for s in trace.steps if s.kind == "inference" and s.retrieved)
    if executed != sum(1 for r in retrieved if r):
        logger.warning(
            "episode %d: the parsed trace has %d executed searches, the environment ran %d", i, executed, len(retrieved)
        )
    return trace
