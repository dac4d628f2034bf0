"""NLI pairs labelled by the synthetic world: determinism, labels checked against the world's facts independently of
the builder, negation pairs, held-out names, and bad input."""

from __future__ import annotations

import collections

import pytest

from procrl.data_builders.synthetic_world import SyntheticWorldConfig, build_worlds, write_worlds
from procrl.data_builders.world_nli import (
    PAIR_KINDS,
    WorldNLIConfig,
    build_nli_pairs,
    load_corpus_rows,
    nli_pair_splits,
    write_nli_pairs,
)
from procrl.rewards.stepgap.oracle_world import oracle_key
from procrl.rewards.stepgap.quotes import quote_candidates
from procrl.rewards.stepgap.trace import Passage

SMALL = SyntheticWorldConfig(seed=0, n_train=60, n_dev=20, n_test=20)
PAIRS = WorldNLIConfig(n_train=600, n_dev=150, n_test=150)


@pytest.fixture(scope="module")
def worlds():
    return build_worlds(SMALL)


@pytest.fixture(scope="module")
def train_pairs(worlds):
    return build_nli_pairs(worlds["train"].corpus, "train", PAIRS)


def _names(text: str, names) -> set[str]:
    padded = f" {oracle_key(text)} "
    return {n for n in names if f" {oracle_key(n)} " in padded}


def test_deterministic_and_unique(worlds, train_pairs):
    again = build_nli_pairs(worlds["train"].corpus, "train", PAIRS)
    assert again == train_pairs
    assert len(train_pairs) == 600
    assert len({(r["premise"], r["hypothesis"]) for r in train_pairs}) == 600
    other = build_nli_pairs(worlds["train"].corpus, "train", WorldNLIConfig(n_train=600, pair_seed=1))
    assert other != train_pairs


def test_every_kind_and_label_present_and_consistent(train_pairs):
    kinds = collections.Counter(r["kind"] for r in train_pairs)
    assert set(kinds) == set(PAIR_KINDS)
    for row in train_pairs:
        assert row["label"] == PAIR_KINDS[row["kind"]]
        assert row["negation"] == row["kind"].startswith("neg_")
    labels = collections.Counter(r["label"] for r in train_pairs)
    assert min(labels.values()) / len(train_pairs) > 0.2  # no class is rare
    assert 0.2 < sum(r["negation"] for r in train_pairs) / len(train_pairs) < 0.5


def test_labels_agree_with_the_world_facts(worlds, train_pairs):
    """Recompute each label from the corpus facts: the quote is a verbatim quote candidate of a passage, the premise
    names the claimed value (or another one), and negated texts carry "not"/"never"."""
    corpus = worlds["train"].corpus
    truth = {(s, r): o for row in corpus for s, r, o in row["facts"]}
    names = [row["title"] for row in corpus if row["kind"] != "event"]
    quotes = {q for row in corpus for q in quote_candidates([Passage(row["title"], row["text"])])}
    negators = (" not ", " never ")
    for row in train_pairs:
        s, r = row["subject"], row["relation"]
        true = truth[s, r]
        premise, hypothesis = row["premise"], row["hypothesis"]
        hyp_negated = any(w in f" {hypothesis} " for w in negators)
        assert hyp_negated == (row["kind"] in ("neg_claim_true", "neg_claim_other", "neg_both"))
        assert s in hypothesis or oracle_key(s) in oracle_key(hypothesis)
        if row["kind"] in ("entail", "contradict", "neg_claim_true", "neg_claim_other"):
            if row["stage"] == "D":
                assert premise in quotes
            else:
                assert premise.startswith(f"{s}: ")
            assert true in premise or true.split()[-1] in premise  # the true value (a person by surname too)
            claimed_true = f" {oracle_key(true)} " in f" {oracle_key(hypothesis)} "
            assert claimed_true == (row["kind"] in ("entail", "neg_claim_true"))
        elif row["kind"] == "namesake":
            twin_names = [n for n in names if n != s and n in premise]
            twins = [n for n in twin_names if any(c["title"] == n and c["namesake_of"] == s for c in corpus)]
            assert twins, row  # the premise names a near-namesake of the subject in full
        elif row["kind"] == "other_relation":
            assert premise in quotes
            stated_here = {
                (fs, fr) for c in corpus for fs, fr, fo in c["facts"] if c["text"].find(premise) >= 0 and fo in premise
            }
            assert (s, r) not in stated_here or true not in premise
        else:  # negated premise
            assert any(w in f" {premise} " for w in negators)


def test_splits_share_no_subject(worlds):
    pairs = {split: build_nli_pairs(worlds[split].corpus, split, PAIRS) for split in ("train", "test")}
    train_names = {oracle_key(n) for n in worlds["train"].kinds}
    assert not {oracle_key(r["subject"]) for r in pairs["test"]} & train_names
    assert {r["split"] for r in pairs["test"]} == {"test"}


def test_write_and_read_a_world_folder(tmp_path, worlds):
    write_worlds(worlds, SMALL, tmp_path / "world")
    config = WorldNLIConfig(n_train=50, n_dev=20, n_test=20)
    pairs = nli_pair_splits(config, world=tmp_path / "world")
    assert pairs["train"] == build_nli_pairs(load_corpus_rows(tmp_path / "world", "train"), "train", config)
    paths = write_nli_pairs(pairs, tmp_path / "nli")
    assert sum(1 for _ in paths["dev"].open()) == 20


def test_bad_input(worlds, tmp_path):
    with pytest.raises(ValueError, match="facts"):
        build_nli_pairs([{"title": "x", "text": "y"}], "train", PAIRS)
    with pytest.raises(ValueError, match="split"):
        build_nli_pairs(worlds["dev"].corpus, "val", PAIRS)
    with pytest.raises(ValueError, match="unique pairs"):
        build_nli_pairs(worlds["dev"].corpus[:3], "dev", WorldNLIConfig(n_dev=5000))
    with pytest.raises(FileNotFoundError, match="procrl world build"):
        load_corpus_rows(tmp_path, "train")
    for bad in ({"n_train": 0}, {"stage_e_share": 1.5}, {"kind_weights": {"nope": 1}}, {"kind_weights": {"entail": 0}}):
        with pytest.raises(ValueError):
            WorldNLIConfig(**bad)
