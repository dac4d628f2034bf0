"""Fine-tuning the NLI cross-encoder: a tiny BERT trained a few steps loads through `make_nli` / `CrossEncoderNLI`
with the label mapping by name; bad rows and settings are refused."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import save_tiny_bert
from transformers import AutoModelForSequenceClassification

from procrl.rewards.stepgap.nli import CrossEncoderNLI, make_nli
from procrl.trainers.nli_training import ID2LABEL, NLITrainConfig, encode_pairs, train_nli

ROWS = [
    {"premise": "Varel Omundsk was born in Kelvik.", "hypothesis": "Varel Omundsk was born in Kelvik.",
     "label": "entailment"},
    {"premise": "Varel Omundsk was born in Kelvik.", "hypothesis": "Varel Omundsk was born in Drumora.",
     "label": "contradiction"},
    {"premise": "Varel Omundsk worked for the Vornel Guild.", "hypothesis": "Varel Omundsk was born in Kelvik.",
     "label": "neutral"},
    {"premise": "Varel Omundsk was born in Kelvik.", "hypothesis": "Varel Omundsk was not born in Kelvik.",
     "label": "contradiction"},
]  # fmt: skip


@pytest.mark.slow
def test_trained_model_loads_through_make_nli(tmp_path):
    base = save_tiny_bert(tmp_path / "base", [t for r in ROWS for t in (r["premise"], r["hypothesis"])])
    config = NLITrainConfig(base_model=base, max_steps=3, batch_size=2, logging_steps=1, learning_rate=1e-3)
    out = train_nli(ROWS, config, tmp_path / "nli")
    info = json.loads((out / "nli_train.json").read_text())
    assert info["pairs"] == 4 and len(info["loss"]) == 3
    backend = make_nli(str(out))  # no judge: a load failure would raise
    assert isinstance(backend, CrossEncoderNLI)
    assert backend.labels == {0: "entailment", 1: "neutral", 2: "contradiction"}
    probs = backend.predict_proba([(r["premise"], r["hypothesis"]) for r in ROWS])
    assert all(abs(sum(p.values()) - 1.0) < 1e-5 for p in probs)
    # the saved probabilities are the softmax of the model's logits, class i named ID2LABEL[i]
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    enc = backend._tokenizer(ROWS[1]["premise"], ROWS[1]["hypothesis"], return_tensors="pt")
    with torch.no_grad():
        expected = torch.softmax(model(**enc).logits[0], -1).tolist()
    assert probs[1] == pytest.approx({ID2LABEL[i]: p for i, p in enumerate(expected)}, abs=1e-5)
    # the frozen word embeddings did not move
    start = AutoModelForSequenceClassification.from_pretrained(base).get_input_embeddings().weight
    assert torch.equal(model.get_input_embeddings().weight, start)


def test_encode_pairs_and_bad_rows(tmp_path):
    base = save_tiny_bert(tmp_path / "base", ["a b c"])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    features = encode_pairs(tokenizer, [{"premise": "a b", "hypothesis": "c", "label": "neutral"}], 32)
    assert features[0]["labels"] == 1
    assert features[0]["token_type_ids"] == [0, 0, 0, 0, 1, 1]  # [CLS] a b [SEP] c [SEP]
    with pytest.raises(ValueError, match="label"):
        encode_pairs(tokenizer, [{"premise": "a", "hypothesis": "b", "label": "entails"}], 32)
    with pytest.raises(ValueError, match="no training pairs"):
        train_nli([], NLITrainConfig(base_model=base), tmp_path / "x")
    for bad in ({"max_steps": 0}, {"learning_rate": 0.0}, {"warmup_ratio": 1.0}, {"max_length": 4}):
        with pytest.raises(ValueError):
            NLITrainConfig(**bad)
