"""`procrl nli pairs|train|eval`: files written, the table printed, one error line for bad input."""

from __future__ import annotations

import json

import pytest
from tiny_models import save_tiny_bert

from procrl.data_builders.synthetic_world import SyntheticWorldConfig, build_worlds, write_worlds
from procrl.retrieval import read_jsonl
from procrl.scripts import nli

SMALL = SyntheticWorldConfig(seed=0, n_train=40, n_dev=20, n_test=20)
SIZES = ["--n_train", "60", "--n_dev", "30", "--n_test", "30"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("world")
    write_worlds(build_worlds(SMALL), SMALL, folder)
    return folder


def test_pairs_then_baseline_eval(world, tmp_path, capsys):
    assert nli.main(["pairs", "--world", str(world), "--out", str(tmp_path / "nli"), *SIZES]) == 0
    rows = read_jsonl(tmp_path / "nli" / "test" / "nli.jsonl")
    assert len(rows) == 30 and {r["split"] for r in rows} == {"test"}
    argv = ["eval", "--pairs", str(tmp_path / "nli"), "--out", str(tmp_path / "ev"), "--cosine_model", "",
            "--resamples", "20"]  # fmt: skip
    assert nli.main(argv) == 0
    out = capsys.readouterr().out
    assert "| majority | all | 30 |" in out and "negation" in out
    result = json.loads((tmp_path / "ev" / "nli_eval.json").read_text())
    majority = result["reports"]["majority"]["all"]
    train = read_jsonl(tmp_path / "nli" / "train" / "nli.jsonl")
    label = max(("entailment", "neutral", "contradiction"), key=[r["label"] for r in train].count)
    assert majority["accuracy"] == pytest.approx(sum(r["label"] == label for r in rows) / 30)


def test_bad_arguments(tmp_path, capsys):
    assert nli.main(["eval"]) == 2
    assert nli.main(["pairs", "--world", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "procrl world build" in capsys.readouterr().err


@pytest.mark.slow
def test_train_then_eval_with_the_model(world, tmp_path, capsys):
    pairs = tmp_path / "nli"
    assert nli.main(["pairs", "--world", str(world), "--out", str(pairs), *SIZES]) == 0
    texts = [t for r in read_jsonl(pairs / "train" / "nli.jsonl") for t in (r["premise"], r["hypothesis"])]
    base = save_tiny_bert(tmp_path / "base", texts)
    argv = ["train", "--pairs", str(pairs), "--out", str(tmp_path / "model"), "--base_model", base, "--max_steps",
            "2", "--batch_size", "4"]  # fmt: skip
    assert nli.main(argv) == 0
    argv = ["eval", "--pairs", str(pairs), "--out", str(tmp_path / "ev"), "--model", str(tmp_path / "model"),
            "--cosine_model", base, "--resamples", "20"]  # fmt: skip
    assert nli.main(argv) == 0
    out = capsys.readouterr().out
    assert "trained cross-encoder" in out and "cosine (dev thresholds)" in out
