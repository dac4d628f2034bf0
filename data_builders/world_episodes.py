"""Warm-start episodes of the synthetic multi-hop world (docs/architecture.md "World episodes"; issue 29): the
Search-R1 episode a perfect policy writes for a world question, and episodes with one injected StepGap gap (IE, CC
or MB, by the oracle's definitions, `procrl.rewards.stepgap.oracle`) followed by its repair, for `procrl sft`.

The `<information>` blocks are the REAL retriever's top-k for each query, written as the search environment writes
them (`procrl.retrieval.information_block`, what `procrl.trainers.search_env.SearchEnvironment` appends), so the SFT
text is what a rollout sees. An episode is a list of segments: model text (a turn, up to and including
`</search>` or `</answer>`) and environment text (the information block after each search). The SFT data keeps
them apart (`segments`), so the environment's tokens are tokenized alone, as `run_episodes` does, and left out of
the loss (`procrl.trainers.sft_episodes`).

Gold episode of a chain e0 -r1-> e1 -> ... -> en (n = 2 or 3 hops), turn by turn:

    <think>I need the r1 of e0.</think>\\n<search> r1 of e0 </search>
    <think>F(e0, r1, e1). I need the r2 of e1.</think>\\n<search> r2 of e1 </search>
    ...
    <think>F(e_{n-1}, rn, en).</think>\\n<answer> en </answer>

F states a fact in one sentence (`FACT_SENTENCES`). Gap episodes (k: the hop of the gap, s = e_{k-1}):

| gap | where | the gap step | the repair (next step) |
|---|---|---|---|
| IE | 2-hop, e0 has a near-namesake s' | step 1 searched "r1 of s'"; step 2 states (s', r1, v') and searches "r2 of v'" (read as (e0, r1, v'): the evidence states it for s' only) | "s' is not e0", search "r1 of e0" (another ask) |
| CC | a hop k < n | states (s, rk, w), w another name of ek's kind, and searches "r_{k+1} of w" | "I was wrong about w", F(s, rk, ek), search "r_{k+1} of ek" |
| MB | a hop k >= 2 | states F(s, rk, ek) before searching s (the evidence names s, states no rk of it) and searches the next hop (k < n) or "ek" | "the passages do not state the rk of s", search "rk of s" (names the bridge) |

The rest of a gap episode is gold. An episode is kept only when the oracle labels it as intended (`check_episode`):
gold: every step NONE and the answer right; a gap episode: the gap step has its label and its repair is made, every
other step is NONE, the answer is right. A candidate the real retriever breaks (the fact's passage not in the top-k,
a near-namesake query that also retrieves the original) is dropped and counted, never relabelled. At most
`max_turns` searches per episode (the environment's limit), so IE (4 searches) fits 2-hop questions only.

Rows of `episodes.jsonl` (`episode_rows`): `id` (question id / kind), `question_id`, `question`, `golden_answers`,
`prompt` (chat messages, `procrl.data_builders.search_qa.search_messages`), `segments` ([{text, env, loss}]),
`episode` (gold | IE | CC | MB), `gap_step` (0-based step index of the gap, null for gold), `labels` (the oracle's
label per step), `searches`. All of it is a pure function of the world and `WorldEpisodeConfig`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from procrl.data_builders.search_qa import SEARCH_PROMPT, search_messages
from procrl.data_builders.synthetic_world import WORLD_RELATIONS
from procrl.retrieval import BM25Index, Passage, Retriever, information_block
from procrl.rewards.qa import normalize_answer
from procrl.rewards.stepgap.oracle import StepGapOracle
from procrl.rewards.stepgap.trace import Trace, parse_trace
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "EPISODE_KINDS",
    "FACT_SENTENCES",
    "EpisodeSegment",
    "WorldEpisode",
    "WorldEpisodeConfig",
    "build_episode",
    "check_episode",
    "episode_rows",
    "gap_plan",
    "gold_plan",
    "world_episodes",
]

EPISODE_KINDS = ("gold", "IE", "CC", "MB")
GAP_KINDS = ("IE", "CC", "MB")

# one sentence per relation that the oracle reads as exactly that claim (two names of related kinds)
FACT_SENTENCES = {
    "author": "{s} was written by {o}.",
    "place of birth": "{s} was born in {o}.",
    "year of birth": "{s} was born in the year {o}.",
    "employer": "{s} worked for the {o}.",
    "headquarters location": "The {s} is based in {o}.",
    "country": "{s} is a city in {o}.",
}


@dataclass
class WorldEpisodeConfig:
    """How `world_episodes` writes episodes (module docstring); `procrl world episodes` takes these as flags."""

    topk: int = field(default=3, metadata={"help": "passages per search: the search environment's search_topk"})
    max_turns: int = field(
        default=4, metadata={"help": "searches per episode at most: the search environment's search_max_turns"}
    )
    gap_rate: float = field(
        default=0.5,
        metadata={"help": "share of questions that get a gap-and-repair episode besides the gold one, in [0, 1]"},
    )
    gap_kinds: list[str] = field(
        default_factory=lambda: list(GAP_KINDS), metadata={"help": "gap types to inject, from IE, CC, MB"}
    )
    gap_loss: bool = field(
        default=True,
        metadata={"help": "train on the gap step's tokens too (false: only the repair and the rest are in the loss)"},
    )
    prompt_template: str = field(
        default=SEARCH_PROMPT,
        metadata={"help": "the prompt with {question}; the one GRPO and the evaluation will prompt with"},
    )
    example: bool = field(
        default=False, metadata={"help": "put the worked 2Wiki search episode first (prompt_template: search_one_shot)"}
    )
    episode_seed: int = field(
        default=0, metadata={"help": "seed of which questions get a gap, of which type, and of the CC values"}
    )

    def __post_init__(self) -> None:
        if self.topk < 1 or self.max_turns < 2:
            raise ValueError(
                f"topk must be >= 1 and max_turns >= 2 (a 2-hop question), got {self.topk}, {self.max_turns}"
            )
        if not 0.0 <= self.gap_rate <= 1.0:
            raise ValueError(f"gap_rate must be in [0, 1], got {self.gap_rate}")
        bad = [k for k in self.gap_kinds if k not in GAP_KINDS]
        if bad:
            raise ValueError(f"gap_kinds must be a subset of {list(GAP_KINDS)}, got {bad}")
        if "{question}" not in self.prompt_template:
            raise ValueError("prompt_template must contain {question}")


@dataclass(frozen=True)
class EpisodeSegment:
    """One piece of an episode: `env` = environment text (an information block, never in the loss), else one model
    turn; `loss` = its tokens are trained on (model text only)."""

    text: str
    env: bool = False
    loss: bool = True


@dataclass(frozen=True)
class Step:
    """One planned model turn: `<think>think</think>` then `<search> query </search>` or `<answer> answer </answer>`;
    `gap`: the turn holding the injected gap."""

    think: str
    query: str | None = None
    answer: str | None = None
    gap: bool = False

    def text(self) -> str:
        action = f"<search> {self.query} </search>" if self.query is not None else f"<answer> {self.answer} </answer>"
        return f"<think>{self.think}</think>\n{action}"


@dataclass
class WorldEpisode:
    """A written episode: its question, kind, segments, the passages each search retrieved and the gap's step."""

    question: dict
    kind: str
    segments: list[EpisodeSegment]
    retrieved: list[list[Passage]]
    gap_step: int | None = None

    @property
    def text(self) -> str:
        """The completion text (model and environment text), as a rollout's completion decodes."""
        return "".join(s.text for s in self.segments)

    def trace(self) -> Trace:
        """The parsed trace with the retrieved passages (`procrl.rewards.stepgap.trace.parse_trace`)."""
        return parse_trace(self.question["question"], self.text, self.retrieved)


def _fact(s: str, r: str, o: str) -> str:
    return FACT_SENTENCES[r].format(s=s, o=o)


def _need(hop: Sequence[str]) -> str:
    return f"I need the {hop[1]} of {hop[0]}."


def _query(hop: Sequence[str]) -> str:
    return f"{hop[1]} of {hop[0]}"


def gold_plan(chain: Sequence[Sequence[str]]) -> list[Step]:
    """The gold turns of a chain [[e0, r1, e1], ...] (module docstring).

    >>> [s.text() for s in gold_plan([["W", "author", "P"], ["P", "place of birth", "K"]])][1:]
    ['<think>W was written by P. I need the place of birth of P.</think>\\n<search> place of birth of P </search>', \
'<think>P was born in K.</think>\\n<answer> K </answer>']
    """
    steps = [Step(_need(chain[0]), query=_query(chain[0]))]
    for prev, hop in zip(chain[:-1], chain[1:], strict=True):
        steps.append(Step(f"{_fact(*prev)} {_need(hop)}", query=_query(hop)))
    steps.append(Step(_fact(*chain[-1]), answer=chain[-1][2]))
    return steps


def gap_plan(
    kind: str, chain: Sequence[Sequence[str]], k: int, other: str = "", other_value: str | None = None
) -> tuple[list[Step], int]:
    """The turns of a gap-and-repair episode and the index of its gap step (module docstring's table).

    Args:
        kind: IE, CC or MB.
        chain: the gold chain [[e0, r1, e1], ...].
        k: the hop of the gap (1-based): IE takes k = 1 of a 2-hop chain, CC 1 <= k < n, MB 2 <= k <= n.
        other: IE: e0's near-namesake s'; CC: the wrong value w (a name of ek's kind); MB: unused.
        other_value: IE: the near-namesake's value v' of r1.

    Raises:
        ValueError: a hop the kind cannot take, or IE without `other` and `other_value`.

    >>> steps, gap = gap_plan("CC", [["W", "author", "P"], ["P", "place of birth", "K"]], 1, "Q")
    >>> gap, [s.think for s in steps[1:3]]
    (1, ['W was written by Q. I need the place of birth of Q.', \
'I was wrong about Q. W was written by P. I need the place of birth of P.'])
    """
    n = len(chain)
    gold = gold_plan(chain)
    s, r, v = chain[k - 1]
    if kind == "IE":
        if k != 1 or n != 2 or not other or other_value is None:
            raise ValueError("IE episodes take hop 1 of a 2-hop chain (4 searches), e0's near-namesake and its value")
        hop2 = chain[1]
        first = Step(_need(chain[0]), query=_query((other, r)))
        wrong = Step(f"{_fact(other, r, other_value)} {_need((other_value, hop2[1]))}",
                     query=_query((other_value, hop2[1])), gap=True)  # fmt: skip
        repair = Step(f"{other} is not {s}. {_need(chain[0])}", query=_query(chain[0]))
        return [first, wrong, repair, *gold[1:]], 1
    if kind == "CC":
        if not 1 <= k < n or not other:
            raise ValueError(f"CC episodes take a hop 1 <= k < {n} and a wrong value, got {k}, {other!r}")
        nxt = chain[k]
        wrong_step = Step(f"{_fact(s, r, other)} {_need((other, nxt[1]))}", query=_query((other, nxt[1])), gap=True)
        repair = Step(f"I was wrong about {other}. {_fact(s, r, v)} {_need(nxt)}", query=_query(nxt))
        return [*gold[:k], wrong_step, repair, *gold[k + 1 :]], k
    if kind == "MB":
        if not 2 <= k <= n:
            raise ValueError(f"MB episodes take a hop 2 <= k <= {n}, got {k}")
        prev = chain[k - 2]
        jump = Step(f"{_fact(*prev)} {_fact(s, r, v)}", query=_query(chain[k]) if k < n else v, gap=True)
        repair = Step(f"The passages do not state the {r} of {s}.", query=_query(chain[k - 1]))
        if k < n:  # the gap step searched the next hop already: state both and answer (n = 3, k = 2)
            final = Step(f"{_fact(s, r, v)} {_fact(*chain[k])}", answer=chain[-1][2])
            return [*gold[: k - 1], jump, repair, final], k - 1
        return [*gold[: k - 1], jump, repair, gold[-1]], k - 1
    raise ValueError(f"kind must be one of {GAP_KINDS}, got {kind!r}")


def build_episode(
    question: Mapping, steps: Sequence[Step], retriever: Retriever, *, kind: str, gap_step: int | None, topk: int,
    gap_loss: bool = True,
) -> WorldEpisode:  # fmt: skip
    """Write the planned turns with the retriever's top-`topk` after each search (one `search` call per query)."""
    segments: list[EpisodeSegment] = []
    retrieved: list[list[Passage]] = []
    for step in steps:
        segments.append(EpisodeSegment(step.text(), env=False, loss=gap_loss or not step.gap))
        if step.query is not None:
            passages = list(retriever.search([step.query], topk=topk)[0])
            retrieved.append(passages)
            segments.append(EpisodeSegment(information_block(passages), env=True, loss=False))
    return WorldEpisode(dict(question), kind, segments, retrieved, gap_step)


def check_episode(episode: WorldEpisode, oracle: StepGapOracle) -> tuple[bool, list[str]]:
    """(kept, labels): whether the oracle labels the episode as intended (module docstring) and its label per step.

    Gold: every step NONE and the answer right. A gap episode: the gap step has the kind's label and `repaired` is
    True, every other step NONE, the answer right. Always: a well-formed trace (no format violation).
    """
    trace = episode.trace()
    verdicts = oracle.label_trace(trace)
    labels = [v.label for v in verdicts]
    golds = [normalize_answer(a) for a in [episode.question["answer"]]]
    right = trace.answer is not None and normalize_answer(trace.answer) in golds
    ok = right and not trace.format_violations and not any(s.malformed for s in trace.steps)
    for i, verdict in enumerate(verdicts):
        if i == episode.gap_step:
            ok = ok and verdict.label == episode.kind and verdict.repaired is True
        else:
            ok = ok and verdict.label == "NONE"
    return ok, labels


@dataclass
class _World:
    """What the writer reads from a split: its questions, passages by title, near-namesakes, names per kind."""

    questions: list[dict]
    passages: dict[str, dict]
    twins: dict[str, list[str]]
    names: dict[str, list[str]]

    @classmethod
    def from_rows(cls, question_rows: Sequence[Mapping], corpus_rows: Sequence[Mapping]) -> _World:
        passages = {str(p["title"]): dict(p) for p in corpus_rows}
        twins: dict[str, list[str]] = {}
        names: dict[str, list[str]] = {}
        for p in corpus_rows:
            if p.get("namesake_of"):
                twins.setdefault(str(p["namesake_of"]), []).append(str(p["title"]))
            elif p.get("kind") not in (None, "event"):
                names.setdefault(str(p["kind"]), []).append(str(p["title"]))
        return cls([dict(q) for q in question_rows], passages, twins, names)

    def fact(self, title: str, relation: str) -> str | None:
        row = self.passages.get(title) or {}
        return next((str(o) for s, r, o in row.get("facts") or [] if s == title and r == relation), None)


def _candidates(kind: str, q: Mapping, world: _World, rng: random.Random, max_turns: int) -> list[tuple]:
    """(steps, gap_step) candidates of one gap kind for a question, in the order to try them."""
    chain = [list(h) for h in q["evidences"]]
    n = len(chain)
    out = []
    if kind == "IE" and n == 2 and max_turns >= 4:
        for twin in world.twins.get(chain[0][0], []):
            value = world.fact(twin, chain[0][1])
            if value is not None:
                out.append(gap_plan("IE", chain, 1, twin, value))
    elif kind == "CC" and n + 1 <= max_turns:
        for k in rng.sample(range(1, n), n - 1):
            obj_kind = WORLD_RELATIONS[chain[k - 1][1]]["object"]
            pool = [x for x in world.names.get(obj_kind, []) if x != chain[k - 1][2]]
            if pool:
                out.append(gap_plan("CC", chain, k, rng.choice(pool)))
    elif kind == "MB" and n + 1 <= max_turns:
        for k in rng.sample(range(2, n + 1), n - 1):
            out.append(gap_plan("MB", chain, k, ""))
    return out


def world_episodes(
    question_rows: Sequence[Mapping],
    corpus_rows: Sequence[Mapping],
    config: WorldEpisodeConfig | None = None,
    *,
    retriever: Retriever | None = None,
    oracle: StepGapOracle | None = None,
) -> tuple[list[WorldEpisode], dict]:
    """The gold episode of every question and, for a `gap_rate` share of them, one gap-and-repair episode, each kept
    only when the oracle labels it as intended (`check_episode`).

    Args:
        question_rows, corpus_rows: one split of a generated world (`procrl.data_builders.synthetic_world`).
        config: the writer's settings (default `WorldEpisodeConfig()`).
        retriever: default a `BM25Index` over `corpus_rows` (what `task: search` opens for the corpus file).
        oracle: default the world's `StepGapOracle` (`WORLD_RELATIONS`).

    Returns:
        (episodes in question order, gold first; counts: per kind written, and dropped, with reasons).

    Raises:
        ValueError: rows without `evidences` / `facts` (not a generated world).
    """
    config = config or WorldEpisodeConfig()
    retriever = retriever or BM25Index.build(corpus_rows)
    oracle = oracle or StepGapOracle.from_rows(corpus_rows, question_rows, WORLD_RELATIONS)
    world = _World.from_rows(question_rows, corpus_rows)
    counts = {"questions": len(world.questions), **{k: 0 for k in EPISODE_KINDS}, "gold_dropped": 0,
              "gap_wanted": 0, "gap_dropped": 0}  # fmt: skip
    out: list[WorldEpisode] = []
    for q in world.questions:
        rng = random.Random(f"world-episodes:{config.episode_seed}:{q['id']}")
        if "evidences" not in q:
            raise ValueError(f"question {q.get('id')!r} has no evidences: build the world with procrl world build")
        build = dict(retriever=retriever, topk=config.topk, gap_loss=config.gap_loss)  # noqa: C408
        gold = build_episode(q, gold_plan(q["evidences"]), kind="gold", gap_step=None, **build)
        if len(q["evidences"]) > config.max_turns or not check_episode(gold, oracle)[0]:
            counts["gold_dropped"] += 1
            continue
        out.append(gold)
        counts["gold"] += 1
        if not config.gap_kinds or rng.random() >= config.gap_rate:
            continue
        counts["gap_wanted"] += 1
        kinds = list(config.gap_kinds)
        rng.shuffle(kinds)
        kinds.sort(key=lambda kind: counts[kind])  # the rarest kind so far first (IE fits fewer questions)
        episode = None
        for kind in kinds:
            for steps, gap_step in _candidates(kind, q, world, rng, config.max_turns):
                candidate = build_episode(q, steps, kind=kind, gap_step=gap_step, **build)
                if check_episode(candidate, oracle)[0]:
                    episode = candidate
                    break
            if episode is not None:
                break
        if episode is None:
            counts["gap_dropped"] += 1
            continue
        out.append(episode)
        counts[episode.kind] += 1
    logger.info("world episodes: %s", counts)
    return out, counts


def episode_rows(episodes: Sequence[WorldEpisode], oracle: StepGapOracle, config: WorldEpisodeConfig) -> list[dict]:
    """The JSONL rows of `episodes` (module docstring), with the oracle's labels per step."""
    rows = []
    for ep in episodes:
        q = ep.question
        rows.append(
            {
                "id": f"{q['id']}/{ep.kind}",
                "question_id": q["id"],
                "question": q["question"],
                "golden_answers": [q["answer"]],
                "prompt": search_messages(q["question"], template=config.prompt_template, example=config.example),
                "segments": [{"text": s.text, "env": s.env, "loss": s.loss} for s in ep.segments],
                "episode": ep.kind,
                "gap_step": ep.gap_step,
                "labels": check_episode(ep, oracle)[1],
                "searches": len(ep.retrieved),
            }
        )
    return rows
