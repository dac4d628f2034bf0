"""NLI metrics against world labels: accuracy / per-class F1 / macro-F1 by hand, intervals, subsets, the majority
baseline, and the cosine baseline's embeddings and fitted bands."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import save_tiny_bert

from procrl.evals.stepgap.nli_eval import CosineNLI, majority_label, nli_report, per_kind_accuracy, subset_indices

E, N, C = "entailment", "neutral", "contradiction"


def test_report_matches_hand_counts():
    gold = [E, E, E, N, N, C]
    pred = [E, E, N, N, C, None]  # None: unscored, counts as wrong
    report = nli_report(gold, pred, resamples=200)
    assert report["n"] == 6
    assert report["accuracy"] == pytest.approx(3 / 6)
    # E: tp 2, fp 0, fn 1 -> 4/5; N: tp 1, fp 1, fn 1 -> 2/4; C: tp 0, fp 1, fn 1 -> 0
    assert report["f1"] == pytest.approx({E: 0.8, N: 0.5, C: 0.0})
    assert report["macro_f1"] == pytest.approx((0.8 + 0.5) / 3)
    for name, value in (("accuracy", report["accuracy"]), ("macro_f1", report["macro_f1"]), (E, 0.8)):
        low, high = report["intervals"][name]
        assert low <= value + 1e-9 and value - 1e-9 <= high
    # rows: gold; columns: predicted (the None is C's unscored pair)
    assert report["confusion"] == {E: {E: 2, N: 1, C: 0, "unscored": 0}, N: {E: 0, N: 1, C: 1, "unscored": 0},
                                   C: {E: 0, N: 0, C: 0, "unscored": 1}}  # fmt: skip
    assert nli_report([], [])["accuracy"] is None
    assert all(v == 0 for row in nli_report([], [])["confusion"].values() for v in row.values())
    with pytest.raises(ValueError):
        nli_report([E], [E, E])
    with pytest.raises(ValueError):
        nli_report(["entails"], [E])


def test_subsets_kinds_and_majority():
    rows = [{"negation": True, "stage": "D", "kind": "neg_both", "label": E},
            {"negation": False, "stage": "E", "kind": "entail", "label": E},
            {"negation": False, "stage": "D", "kind": "contradict", "label": C}]  # fmt: skip
    assert subset_indices(rows, "negation") == [0]
    assert subset_indices(rows, "no negation") == [1, 2]
    assert subset_indices(rows, "stage E (passage)") == [1]
    with pytest.raises(ValueError):
        subset_indices(rows, "nope")
    assert per_kind_accuracy(rows, [C, E, C]) == {"contradict": (1, 1.0), "entail": (1, 1.0), "neg_both": (1, 0.0)}
    assert majority_label([N, C, C, N]) == N  # a tie goes to the earlier label
    assert majority_label([C, C, E]) == C
    with pytest.raises(ValueError):
        majority_label([])


@pytest.fixture(scope="module")
def cosine(tmp_path_factory):
    folder = save_tiny_bert(tmp_path_factory.mktemp("enc"), ["x was born in lyon paris not ."])
    return CosineNLI(folder, batch_size=2, quantiles=10)


def test_cosine_embeddings_are_unit_and_padding_free(cosine):
    vectors = cosine.embed(["x was born in lyon .", "x", "x was not born in paris ."])
    assert vectors.shape == (3, 16)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    alone = cosine.embed(["x"])[0]
    assert np.allclose(alone, vectors[1], atol=1e-5)  # batched with longer sentences: same vector
    assert cosine.similarities([("x", "x")])[0] == pytest.approx(1.0, abs=1e-5)


def test_cosine_fit_finds_separable_bands(cosine, monkeypatch):
    sims = np.array([0.1, 0.2, 0.5, 0.55, 0.9, 0.95])
    gold = [N, N, C, C, E, E]
    monkeypatch.setattr(cosine, "similarities", lambda pairs: sims[: len(pairs)])
    pairs = [("p", "h")] * 6
    cosine.fit(pairs, gold)
    assert cosine.predict(pairs) == gold
    assert cosine.bands == (N, C, E)
    with pytest.raises(ValueError):
        cosine.fit([], [])
    with pytest.raises(RuntimeError):
        CosineNLI(model=cosine.model, tokenizer=cosine.tokenizer).predict(pairs)
