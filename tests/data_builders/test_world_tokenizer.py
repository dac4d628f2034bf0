"""The world tokenizer: byte-level BPE trained on the train split writes every held-out text back exactly (no unknown
token), is the same for the same texts, has the chat markup and special ids a scratch policy needs, and refuses a
vocabulary too small for the byte alphabet."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from procrl.data_builders.synthetic_world import WORLD_RELATIONS, SyntheticWorldConfig, build_world
from procrl.data_builders.world_episodes import WorldEpisodeConfig, episode_rows, world_episodes
from procrl.data_builders.world_tokenizer import episode_texts, world_tokenizer
from procrl.rewards.stepgap.oracle import StepGapOracle
from procrl.scratch_models import build_scratch_model

CONFIG = SyntheticWorldConfig(seed=5, n_train=20, n_dev=8, n_test=8, hops=[2])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    train = build_world(CONFIG, "train")
    episodes, _ = world_episodes(train.questions, train.corpus, WorldEpisodeConfig(gap_rate=0.5))
    texts = episode_texts(train.corpus, episode_rows(episodes, *_oracle_and_config(train)))
    folder = tmp_path_factory.mktemp("tok")
    world_tokenizer(texts, vocab_size=400).save_pretrained(str(folder))
    return texts, folder


def _oracle_and_config(world):
    return StepGapOracle.from_rows(world.corpus, world.questions, WORLD_RELATIONS), WorldEpisodeConfig()


def test_held_out_texts_round_trip_without_unknown_tokens(trained):
    texts, folder = trained
    tok = AutoTokenizer.from_pretrained(str(folder))
    test = build_world(CONFIG, "test")
    train_names = {p["title"] for p in build_world(CONFIG, "train").corpus}
    held_out = [q["question"] for q in test.questions] + [p["text"] for p in test.corpus] + ["Zürich — 1838 ✓"]
    assert not train_names & {p["title"] for p in test.corpus}  # the names are new to the tokenizer
    for text in held_out:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
    assert len(tok) <= 400 and tok.unk_token_id is None
    # the merges learned the world's words: a train text takes far fewer tokens than its UTF-8 bytes
    sample = " ".join(texts[:50])
    assert len(tok(sample, add_special_tokens=False)["input_ids"]) < 0.7 * len(sample.encode())


def test_the_same_texts_give_the_same_tokenizer(trained, tmp_path):
    texts, folder = trained
    world_tokenizer(texts, vocab_size=400).save_pretrained(str(tmp_path))
    assert (tmp_path / "tokenizer.json").read_text() == (folder / "tokenizer.json").read_text()


def test_chat_markup_and_a_scratch_policy_over_it(trained):
    _, folder = trained
    model, tok = build_scratch_model(f"scratch:llama,hidden=32,layers=1,heads=2,intermediate=64,tokenizer={folder}")
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=True, add_generation_prompt=False)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>") and tok.eos_token_id in ids
    assert tok.pad_token == "<|endoftext|>" and tok.bos_token is None
    assert model.config.vocab_size == len(tok) and model.config.eos_token_id == tok.eos_token_id


def test_too_small_a_vocabulary_is_refused():
    with pytest.raises(ValueError, match="below 259"):
        world_tokenizer(["a b c"], vocab_size=100)
