"""`procrl world build`: writes the three splits and world.json, prints the counts; the same flags write the same
files; the action word before or after the flags (also for a folder named "build"); bad values are one error line."""

from __future__ import annotations

import json

import pytest

from procrl import cli
from procrl.scripts import world

SMALL = ["--seed", "3", "--n-train", "12", "--n-dev", "6", "--n-test", "6", "--hops", "2"]


def _files(folder) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_build_writes_the_splits_and_the_same_flags_write_the_same_files(tmp_path, capsys):
    assert world.main(["build", "--out", str(tmp_path / "a"), *SMALL]) == 0
    out = capsys.readouterr().out
    assert "| train | 12 | 2-hop 12 |" in out and f"world: {tmp_path / 'a' / 'world.json'}" in out
    files = _files(tmp_path / "a")
    assert sorted(files) == sorted(
        ["world.json"] + [f"{s}/{f}" for s in ("train", "dev", "test") for f in ("questions.jsonl", "corpus.jsonl")]
    )
    meta = json.loads(files["world.json"])
    assert meta["config"] == {"seed": 3, "n_train": 12, "n_dev": 6, "n_test": 6, "hops": [2],
                              "namesake_rate": 0.5, "mention_rate": 0.5}  # fmt: skip
    assert [json.loads(line)["hops"] for line in files["dev/questions.jsonl"].splitlines()] == [2] * 6
    assert cli.main(["world", *SMALL, "--out", str(tmp_path / "b"), "build"]) == 0  # the action word last
    assert _files(tmp_path / "b") == files


def test_a_folder_named_build(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert world.main(["--out", "build", "build", *SMALL]) == 0
    assert (tmp_path / "build" / "world.json").is_file()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["build"], "give the folder to write: procrl world build --out"),
        (["build", "--out", "x", "--hops", "4"], "hops must be a non-empty subset of [2, 3]"),
        (["build", "--out", "x", "--namesake-rate", "2"], "namesake_rate must be in [0, 1]"),
        (["episodes", "--out", "x", "--tokenizer_vocab_size", "10"], "tokenizer_vocab_size=10 is below 259"),
    ],
)
def test_bad_values_are_one_error_line(argv, message, capsys):
    assert world.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("procrl world: error: ") and message in err[0]


def test_an_unwritable_folder_is_one_error_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert world.main(["build", "--out", str(blocker / "w"), *SMALL]) == 2
    assert capsys.readouterr().err.startswith("procrl world: error: ")


def test_episodes_write_the_tokenizer_unless_its_size_is_zero(tmp_path, capsys):
    assert world.main(["episodes", "--out", str(tmp_path / "a"), *SMALL, "--tokenizer_vocab_size", "300"]) == 0
    assert f"tokenizer: {tmp_path / 'a' / 'tokenizer'} (byte-level BPE, 300 tokens" in capsys.readouterr().out
    tok = json.loads((tmp_path / "a" / "tokenizer" / "tokenizer.json").read_text())
    assert tok["model"]["type"] == "BPE" and len(tok["model"]["vocab"]) + len(tok["added_tokens"]) >= 259
    assert world.main(["episodes", "--out", str(tmp_path / "b"), *SMALL, "--tokenizer-vocab-size", "0"]) == 0
    assert (tmp_path / "b" / "train" / "episodes.jsonl").is_file() and not (tmp_path / "b" / "tokenizer").exists()
    assert world.main(["build", "--out", str(tmp_path / "c"), *SMALL]) == 0
    assert not (tmp_path / "c" / "tokenizer").exists()  # build writes no episodes, so no tokenizer
