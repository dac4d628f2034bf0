"""World episodes: gold episodes pass the StepGap oracle (every step NONE, EM 1), each injected gap type gets its label
at its step and its repair, the information blocks are the real BM25 top-k as the environment writes them (and are
out of the loss), and the writer is deterministic."""

from __future__ import annotations

import pytest

from procrl.data_builders.synthetic_world import WORLD_RELATIONS, SyntheticWorldConfig, build_world
from procrl.data_builders.world_episodes import (
    EpisodeSegment,
    WorldEpisodeConfig,
    episode_rows,
    gap_plan,
    gold_plan,
    world_episodes,
)
from procrl.retrieval import BM25Index, information_block
from procrl.rewards.qa import normalize_answer
from procrl.rewards.stepgap.oracle import StepGapOracle

CONFIG = WorldEpisodeConfig(gap_rate=1.0)


@pytest.fixture(scope="module")
def world():
    w = build_world(SyntheticWorldConfig(n_train=80), "train")
    oracle = StepGapOracle.from_rows(w.corpus, w.questions, WORLD_RELATIONS)
    index = BM25Index.build(w.corpus)
    episodes, counts = world_episodes(w.questions, w.corpus, CONFIG, retriever=index, oracle=oracle)
    return w, oracle, index, episodes, counts


def _answer_right(episode) -> bool:
    trace = episode.trace()
    return trace.answer is not None and normalize_answer(trace.answer) == normalize_answer(episode.question["answer"])


def test_gold_episodes_are_all_none_and_answer_right(world):
    w, oracle, index, episodes, counts = world
    gold = [e for e in episodes if e.kind == "gold"]
    assert counts["gold"] == len(gold) == len(w.questions) and counts["gold_dropped"] == 0
    for episode in gold:
        verdicts = oracle.label_trace(episode.trace())
        assert [v.label for v in verdicts] == ["NONE"] * (episode.question["hops"] + 1)
        assert _answer_right(episode) and not episode.trace().format_violations
        assert len(episode.retrieved) == episode.question["hops"]


def test_information_blocks_are_the_real_top_k_and_out_of_the_loss(world):
    _, _, index, episodes, _ = world
    for episode in episodes[:40]:
        queries = episode.trace().queries
        env = [s for s in episode.segments if s.env]
        assert len(env) == len(queries) == len(episode.retrieved)
        for query, segment in zip(queries, env, strict=True):
            assert segment.text == information_block(index.search([query], topk=CONFIG.topk)[0])
            assert segment.loss is False
        # model and environment segments alternate, starting and ending with the model's
        assert [s.env for s in episode.segments] == [i % 2 == 1 for i in range(len(episode.segments))]
        assert episode.segments[-1].text.endswith("</answer>")


@pytest.mark.parametrize("kind", ["IE", "CC", "MB"])
def test_each_gap_gets_its_label_at_its_step_and_its_repair(world, kind):
    w, oracle, _, episodes, counts = world
    chosen = [e for e in episodes if e.kind == kind]
    assert len(chosen) == counts[kind] >= 3
    for episode in chosen:
        trace = episode.trace()
        verdicts = oracle.label_trace(trace)
        k = episode.gap_step
        assert verdicts[k].label == kind and verdicts[k].repaired is True, verdicts[k].reason
        assert [v.label for i, v in enumerate(verdicts) if i != k] == ["NONE"] * (len(verdicts) - 1)
        assert _answer_right(episode) and len(episode.retrieved) <= CONFIG.max_turns
        chain = episode.question["evidences"]
        decisive = verdicts[k].decisive
        if kind == "IE":  # the near-namesake's passage stated the value; the repair searches e0 itself
            twin = next(p for p in w.corpus if p["title"] == decisive.other_entity)
            assert twin["namesake_of"] == chain[0][0] and decisive.subject == chain[0][0]
            assert trace.steps[k + 1].query == f"{chain[0][1]} of {chain[0][0]}"
        elif kind == "CC":  # a wrong value of the hop against the evidence's true one, then retracted
            hop = next(h for h in chain if h[1] == decisive.relation)
            assert decisive.evidence_value == hop[2] and decisive.value != hop[2]
            assert "I was wrong about" in trace.steps[k + 1].text
        else:  # MB: the bridge's fact before its passage; the next query names the bridge
            assert verdicts[k].repair.bridge == decisive.subject
            assert decisive.subject in trace.steps[k + 1].query


def test_a_gap_kind_is_never_relabelled_and_counts_add_up(world):
    _, _, _, episodes, counts = world
    gaps = [e for e in episodes if e.kind != "gold"]
    assert counts["gap_wanted"] == len(gaps) + counts["gap_dropped"]
    assert all(e.gap_step is not None for e in gaps)


def test_determinism_and_the_episode_seed(world):
    w, oracle, index, episodes, _ = world
    again, _ = world_episodes(w.questions, w.corpus, CONFIG, retriever=index, oracle=oracle)
    assert [e.text for e in again] == [e.text for e in episodes]
    other = WorldEpisodeConfig(gap_rate=1.0, episode_seed=1)
    reseeded, _ = world_episodes(w.questions, w.corpus, other, retriever=index, oracle=oracle)
    assert [e.text for e in reseeded] != [e.text for e in episodes]
    assert [e.text for e in reseeded if e.kind == "gold"] == [e.text for e in episodes if e.kind == "gold"]


def test_gap_rate_zero_writes_gold_only_and_gap_loss_masks_the_gap_turn(world):
    w, oracle, index, _, _ = world
    gold_only, counts = world_episodes(w.questions[:10], w.corpus, WorldEpisodeConfig(gap_rate=0.0), retriever=index,
                                       oracle=oracle)  # fmt: skip
    assert {e.kind for e in gold_only} == {"gold"} and counts["gap_wanted"] == 0
    masked, _ = world_episodes(w.questions[:20], w.corpus, WorldEpisodeConfig(gap_rate=1.0, gap_loss=False),
                               retriever=index, oracle=oracle)  # fmt: skip
    for episode in (e for e in masked if e.kind != "gold"):
        model = [s for s in episode.segments if not s.env]
        assert [s.loss for s in model] == [i != episode.gap_step for i in range(len(model))]


def test_rows_carry_prompt_segments_and_labels(world):
    _, oracle, _, episodes, _ = world
    rows = episode_rows(episodes[:6], oracle, CONFIG)
    for row, episode in zip(rows, episodes[:6], strict=True):
        assert row["prompt"][-1]["content"].endswith(f"Question: {episode.question['question']}")
        assert "".join(s["text"] for s in row["segments"]) == episode.text
        assert row["episode"] == episode.kind and len(row["labels"]) == len(episode.trace().steps)
        assert row["golden_answers"] == [episode.question["answer"]]


def test_plans_refuse_hops_they_cannot_take():
    chain = [["W", "author", "P"], ["P", "place of birth", "K"]]
    assert [s.query for s in gold_plan(chain)] == ["author of W", "place of birth of P", None]
    with pytest.raises(ValueError, match="CC episodes take"):
        gap_plan("CC", chain, 2, "Q")
    with pytest.raises(ValueError, match="MB episodes take"):
        gap_plan("MB", chain, 1)
    with pytest.raises(ValueError, match="IE episodes take"):
        gap_plan("IE", [*chain, ["K", "country", "C"]], 1, "W2", "B")
    with pytest.raises(ValueError, match="kind must be"):
        gap_plan("XX", chain, 1)
    assert EpisodeSegment("x").loss is True


@pytest.mark.parametrize(
    "overrides, message",
    [({"gap_rate": 1.5}, "gap_rate"), ({"gap_kinds": ["NONE"]}, "gap_kinds"), ({"max_turns": 1}, "max_turns"),
     ({"prompt_template": "no placeholder"}, "question")],
)  # fmt: skip
def test_config_refuses_bad_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        WorldEpisodeConfig(**overrides)
