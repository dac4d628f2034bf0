"""The synthetic multi-hop world: determinism, disjoint splits, every question answerable from the corpus,
near-namesakes and mention passages, BM25 retrieval of each hop, the round trip through the search-QA loaders, and
the StepGap oracle on episodes of a generated world."""

from __future__ import annotations

import json

import pytest

from procrl.data_builders.search_qa import load_corpus, load_qa_questions, open_index
from procrl.data_builders.synthetic_world import (
    SPLITS,
    SyntheticWorldConfig,
    build_world,
    build_worlds,
    load_world_oracle,
    split_of_name,
    world_paths,
    write_worlds,
)
from procrl.data_builders.synthetic_world_wording import QUESTION_TEMPLATES, WORLD_RELATIONS
from procrl.retrieval import BM25Index, Passage, format_passages
from procrl.rewards.stepgap.oracle import StepGapOracle
from procrl.rewards.stepgap.trace import parse_trace

SMALL = SyntheticWorldConfig(seed=0, n_train=60, n_dev=20, n_test=20)


@pytest.fixture(scope="module")
def worlds():
    return build_worlds(SMALL)


def _names(world) -> set[str]:
    return {n.lower() for n in [*world.kinds, *(p["title"] for p in world.corpus)]}


def test_deterministic_given_the_seed(worlds):
    again = build_world(SMALL, "train")
    assert again.questions == worlds["train"].questions and again.corpus == worlds["train"].corpus
    other = build_world(SyntheticWorldConfig(seed=1, n_train=60), "train")
    assert {q["question"] for q in other.questions}.isdisjoint({q["question"] for q in again.questions})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_splits_are_disjoint(seed):
    worlds = build_worlds(SyntheticWorldConfig(seed=seed, n_train=30, n_dev=10, n_test=10))
    for i, a in enumerate(SPLITS):
        assert all(split_of_name(n) == a for n in worlds[a].kinds)
        for b in SPLITS[i + 1 :]:
            assert _names(worlds[a]).isdisjoint(_names(worlds[b]))
            assert {q["question"] for q in worlds[a].questions}.isdisjoint(q["question"] for q in worlds[b].questions)
            assert {p["id"] for p in worlds[a].corpus}.isdisjoint(p["id"] for p in worlds[b].corpus)
    assert [len(worlds[s].questions) for s in SPLITS] == [30, 10, 10]


def test_every_question_is_answerable_from_the_corpus(worlds):
    for world in worlds.values():
        by_title = {p["title"]: p for p in world.corpus}
        by_id = {p["id"]: p for p in world.corpus}
        truth = {(s, r): o for p in world.corpus for s, r, o in p["facts"]}
        for q in world.questions:
            chain = q["evidences"]
            relations, _ = QUESTION_TEMPLATES[q["template"]]
            assert [r for _, r, _ in chain] == list(relations) and q["hops"] == len(chain) in SMALL.hops
            assert all(chain[k][2] == chain[k + 1][0] for k in range(len(chain) - 1))  # a chain through bridges
            assert q["answer"] == chain[-1][2] and chain[0][0] in q["question"]
            for s, r, o in chain:  # each hop is stated by the passage titled with its subject
                assert [s, r, o] in by_title[s]["facts"]
                assert truth[s, r] == o
            assert [by_id[i]["title"] for i in q["supporting_paragraph_ids"]] == q["supporting_titles"]
            assert q["supporting_titles"] == [s for s, _, _ in chain]


def test_facts_are_consistent_and_each_pair_of_kinds_has_one_relation(worlds):
    for world in worlds.values():
        seen: dict[tuple[str, str], str] = {}
        for p in world.corpus:
            for s, r, o in p["facts"]:
                assert seen.setdefault((s, r), o) == o  # one object per (subject, relation), in every passage
                assert world.kinds[s] == WORLD_RELATIONS[r]["subject"]
                assert world.kinds.get(o, "year") == WORLD_RELATIONS[r]["object"]
        assert len({(v["subject"], v["object"]) for v in WORLD_RELATIONS.values()}) == len(WORLD_RELATIONS)


def _one_letter_apart(a: str, b: str) -> bool:
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = sorted((a, b), key=len)
    return len(long) == len(short) + 1 and any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def test_near_namesakes(worlds):
    world = worlds["train"]
    truth = {(s, r): o for p in world.corpus for s, r, o in p["facts"]}
    on_chains = {name for q in world.questions for s, _, o in q["evidences"] for name in (s, o)}
    twins = [p for p in world.corpus if p["namesake_of"]]
    assert {world.kinds[p["title"]] for p in twins} == {"person", "work", "organisation", "city"}
    middle = 0
    for p in twins:
        name, original = p["title"], p["namesake_of"]
        words, orig = name.split(), original.split()
        by_middle = len(words) == 3 and [words[0], words[2]] == orig
        middle += by_middle
        assert by_middle or _one_letter_apart(name, original), (name, original)
        own = [(r, o) for s, r, o in p["facts"] if s == name]
        assert own and all(truth[original, r] != o for r, o in own)  # every fact differs from the original's
        assert name not in on_chains  # never on a question's chain
    assert 0 < middle < len([p for p in twins if world.kinds[p["title"]] == "person"])  # both kinds of persons


def test_mention_passages_name_entities_and_state_nothing(worlds):
    world = worlds["train"]
    events = [p for p in world.corpus if p["kind"] == "event"]
    assert len(events) == round(SMALL.mention_rate * 30)  # 30 persons besides near-namesakes for 60 questions
    people = [n for n, k in world.kinds.items() if k == "person"]
    for p in events:
        assert p["facts"] == [] and sum(name in p["text"] for name in people) >= 1


def test_bm25_finds_each_hop(worlds):
    world = worlds["dev"]
    index = BM25Index.build(world.corpus)
    facts = {p["title"]: {tuple(f) for f in p["facts"]} for p in world.corpus}
    for q in world.questions:
        for s, r, o in q["evidences"]:
            found = index.search([f"{r} of {s}"], topk=3)[0]
            assert any((s, r, o) in facts[p.title] for p in found), (s, r, [p.title for p in found])


def test_round_trip_through_the_search_qa_loaders(worlds, tmp_path):
    meta = json.loads(write_worlds(worlds, SMALL, tmp_path).read_text())
    assert meta["config"]["seed"] == 0 and meta["relations"] == WORLD_RELATIONS
    assert meta["splits"]["dev"]["questions"] == 20
    questions_path, corpus_path = world_paths(tmp_path, "train")
    dataset = load_qa_questions(questions_path, template="Q: {question}")
    assert dataset["question"] == [q["question"] for q in worlds["train"].questions]
    assert dataset["golden_answers"] == [[q["answer"]] for q in worlds["train"].questions]
    assert dataset["id"][0] == "w0-train-q00000" and set(dataset["type"]) == {"compositional"}
    corpus = load_corpus(corpus_path)  # the extra fields (facts, kind, namesake_of) are ignored
    assert [(p.title, p.text) for p in corpus] == [(p["title"], p["text"]) for p in worlds["train"].corpus]
    first = worlds["train"].questions[0]["evidences"][0]
    found = open_index(corpus_path).search([f"{first[1]} of {first[0]}"], topk=3)[0]
    assert first[0] in [p.title for p in found]
    oracle = load_world_oracle(questions_path, corpus_path)
    assert len(oracle.chains) == 60
    with pytest.raises(ValueError, match="need a 'facts' field"):
        bare = tmp_path / "bare.jsonl"
        bare.write_text(json.dumps({"title": "x", "text": "y"}) + "\n")
        load_world_oracle(questions_path, bare)


def _episode(q, passage_of, swap=None) -> str:
    """The gold episode of a question: search each hop's subject, read its passage, state the hop, answer; `swap`
    replaces the passage read for one subject (a near-namesake's)."""
    parts, said = [], ""
    for s, r, _ in q["evidences"]:
        parts.append(f"<think>{said}</think>\n<search>{r} of {s}</search>\n")
        shown = passage_of[(swap or {}).get(s, s)]
        parts.append(f"<information>{format_passages([Passage(shown['title'], shown['text'])])}</information>\n")
        said = ""
        if shown["title"] == s:
            s_, r_, o_ = next(f for f in shown["facts"] if f[:2] == [s, r])
            said = f"{s_} {'has ' + r_ + ' ' if r_ != 'place of birth' else 'was born in '}{o_}."
    value = next((o for t, rel, o in passage_of[(swap or {}).get(s, s)]["facts"] if rel == r), "unknown")
    parts.append(f"<think>{said}</think>\n<answer>{value}</answer>")
    return "".join(parts)


def test_the_oracle_on_gold_and_near_namesake_episodes(worlds):
    world = worlds["train"]
    oracle = StepGapOracle.from_rows(world.corpus, world.questions, WORLD_RELATIONS)
    passage_of = {p["title"]: p for p in world.corpus}
    twin_of = {p["namesake_of"]: p["title"] for p in world.corpus if p["namesake_of"]}
    swapped = 0
    for q in world.questions:
        trace = parse_trace(q["question"], _episode(q, passage_of))
        labels = [v.label for v in oracle.label_trace(trace)]
        assert labels == ["NONE"] * (q["hops"] + 1), (q["question"], labels)
        last = q["evidences"][-1][0]  # the last bridge: read its near-namesake's passage instead
        if last in twin_of and any(f[0] == twin_of[last] and f[1] == q["evidences"][-1][1]
                                   for f in passage_of[twin_of[last]]["facts"]):  # fmt: skip
            trace = parse_trace(q["question"], _episode(q, passage_of, swap={last: twin_of[last]}))
            verdict = oracle.label_trace(trace)[-1]
            assert verdict.label == "IE" and verdict.decisive.other_entity == twin_of[last], verdict.reason
            swapped += 1
    assert swapped >= 5


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"n_dev": 0}, "n_dev must be >= 1"),
        ({"hops": [4]}, "hops must be a non-empty subset"),
        ({"hops": []}, "hops must be a non-empty subset"),
        ({"namesake_rate": 1.5}, "namesake_rate must be in"),
        ({"mention_rate": -1.0}, "mention_rate must be"),
    ],
)
def test_config_refuses_bad_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        SyntheticWorldConfig(**overrides)


def test_hops_and_rates_are_followed():
    config = SyntheticWorldConfig(n_train=20, hops=[3], namesake_rate=0.0, mention_rate=0.0)
    world = build_world(config, "train")
    assert {q["hops"] for q in world.questions} == {3}
    assert not any(p["namesake_of"] for p in world.corpus) and not any(p["kind"] == "event" for p in world.corpus)
    with pytest.raises(ValueError, match="split must be one of"):
        build_world(config, "validation")
