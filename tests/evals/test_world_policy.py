"""The world policy's calibration row: EM, format violations, searches and oracle label shares of episodes, on a
gold episode, a malformed one and one without any tag, against values counted by hand."""

from __future__ import annotations

import json

import pytest

from procrl.data_builders.synthetic_world import WORLD_RELATIONS, SyntheticWorldConfig, build_world
from procrl.data_builders.world_episodes import WorldEpisodeConfig, world_episodes
from procrl.evals.stepgap.evaluate import load_annotated
from procrl.evals.world_policy import WORLD_LABELS, annotated_record, episode_record, policy_row
from procrl.rewards.stepgap.oracle import StepGapOracle
from procrl.rewards.stepgap.trace import parse_trace


@pytest.fixture(scope="module")
def setup():
    w = build_world(SyntheticWorldConfig(n_train=12), "train")
    oracle = StepGapOracle.from_rows(w.corpus, w.questions, WORLD_RELATIONS)
    episodes, _ = world_episodes(w.questions, w.corpus, WorldEpisodeConfig(gap_rate=1.0), oracle=oracle)
    return oracle, episodes


def test_records_and_row(setup):
    oracle, episodes = setup
    gold = next(e for e in episodes if e.kind == "gold")
    cc = next(e for e in episodes if e.kind == "CC")
    q = gold.question
    records = [
        episode_record(gold.trace(), [q["answer"]], oracle),
        episode_record(cc.trace(), [cc.question["answer"]], oracle),
        episode_record(parse_trace(q["question"], "I do not know"), [q["answer"]], oracle),  # no tag at all
        episode_record(parse_trace(q["question"], "<search> </search>"), [q["answer"]], oracle),  # empty query
    ]
    assert [r["em"] for r in records] == [1, 1, 0, 0]
    assert records[0]["labels"] == ["NONE"] * (q["hops"] + 1) and records[2]["labels"] == []
    assert records[3]["labels"] == ["FORMAT"] and "no_answer" in records[2]["format_violations"]
    row = policy_row(records)
    steps = sum(len(r["labels"]) for r in records)
    assert row["n"] == 4 and row["em"] == 0.5 and row["format_violation_rate"] == 0.5
    assert row["steps"] == steps and row["label/CC"] == pytest.approx(1 / steps)
    assert row["label/FORMAT"] == pytest.approx(1 / steps) and row["repair/CC"] == 1.0 and row["repair/IE"] is None
    assert row["searches_per_episode"] == pytest.approx((len(gold.retrieved) + len(cc.retrieved)) / 4)
    assert 0.0 <= row["em_low"] < 0.5 < row["em_high"] <= 1.0


def test_no_records_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        policy_row([])


def test_label_shares_are_undefined_without_steps():
    # episodes that never wrote a step: the shares have no denominator (None), not 0.0
    row = policy_row([{"em": 0, "format_violations": ["no_answer"], "searches": 0, "labels": [], "repaired": []}])
    assert row["steps"] == 0 and all(row[f"label/{lab}"] is None for lab in WORLD_LABELS)
    assert row["repair/CC"] is None and row["format_violation_rate"] == 1.0


def test_annotated_records_read_back_with_the_oracle_labels(setup, tmp_path):
    oracle, episodes = setup
    chosen = [e for e in episodes if e.kind != "gold"][:3] + [next(e for e in episodes if e.kind == "gold")]
    rows, expected = [], []
    for ep in chosen:
        record = episode_record(ep.trace(), [ep.question["answer"]], oracle)
        rows.append(annotated_record(ep.trace(), record, ep.question))
        expected.append(record["labels"])
    assert any(set(labels) - {"NONE"} for labels in expected)  # gaps among them
    q = chosen[0].question
    for text in ("<search> </search>", "I do not know"):  # a malformed step; no step at all
        trace = parse_trace(q["question"], text)
        assert annotated_record(trace, episode_record(trace, [q["answer"]], oracle), q) is None
    path = tmp_path / "annotated.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load_annotated(path)
    assert [gold for _, gold in loaded] == expected
    for (trace, _), ep in zip(loaded, chosen, strict=True):  # the verifier sees the same steps and evidence
        source = ep.trace()
        assert [s.query for s in trace.steps] == [s.query for s in source.steps]
        assert [[p.title for p in s.evidence] for s in trace.steps] == [[p.title for p in s.evidence] for s in
                                                                        source.steps]
        assert trace.answer == source.answer == ep.question["answer"]
