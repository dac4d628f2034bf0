"""SFT on world episodes: the token ids are what the search environment's rollout of the same episode holds (a
scripted policy through `run_episodes`), the information blocks are out of the loss, TRL keeps that mask, and
`procrl sft` takes an episodes file (plan, key, the shipped world configs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_models import make_tiny_llama
from transformers import AutoTokenizer
from trl import ModelConfig

from procrl.data_builders.synthetic_world import WORLD_RELATIONS, SyntheticWorldConfig, build_world
from procrl.data_builders.world_episodes import WorldEpisodeConfig, episode_rows, world_episodes
from procrl.models import resolve_model
from procrl.retrieval import BM25Index
from procrl.rewards.stepgap.oracle import StepGapOracle
from procrl.scripts import sft as sft_command
from procrl.trainers import sft
from procrl.trainers.search_env import SearchEnvironment
from procrl.trainers.search_turns import Turn, run_episodes
from procrl.trainers.sft_episodes import episode_examples, is_episode_file, tokenize_episode, tokenize_episodes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model("default"))


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    w = build_world(SyntheticWorldConfig(n_train=24), "train")
    index = BM25Index.build(w.corpus)
    oracle = StepGapOracle.from_rows(w.corpus, w.questions, WORLD_RELATIONS)
    config = WorldEpisodeConfig(gap_rate=1.0)
    eps, _ = world_episodes(w.questions, w.corpus, config, retriever=index, oracle=oracle)
    rows = episode_rows(eps, oracle, config)
    path = tmp_path_factory.mktemp("episodes") / "episodes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return index, eps, rows, path


def test_the_tokens_are_the_rollouts_of_a_policy_that_writes_the_episode(tokenizer, episodes):
    index, eps, rows, _ = episodes
    picked = [rows[i] for i in range(0, len(rows), 3)]
    turns = [[tokenizer(s["text"], add_special_tokens=False)["input_ids"] for s in r["segments"] if not s["env"]]
             for r in picked]  # fmt: skip

    def scripted(active, inputs, budgets, turn):  # the policy writes the episode's model turns, nothing else
        return [Turn(turns[i][turn], [0.0] * len(turns[i][turn])) for i in active]

    env = SearchEnvironment(index, topk=3, max_turns=4)
    prompts = [r["prompt"] for r in picked]
    prompt_ids = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)
                  ["input_ids"] for p in prompts]  # fmt: skip
    rollout = run_episodes(env, tokenizer, prompts, prompt_ids, scripted, max_completion_length=4096,
                           eos_ids=[tokenizer.eos_token_id])  # fmt: skip
    for row, p_ids, ids, env_mask in zip(picked, prompt_ids, rollout.completion_ids, rollout.env_mask, strict=True):
        sft_row = tokenize_episode(tokenizer, row["prompt"], row["segments"])
        assert sft_row["input_ids"][: len(p_ids)] == list(p_ids)
        assert set(sft_row["assistant_masks"][: len(p_ids)]) == {0}
        completion, mask = sft_row["input_ids"][len(p_ids) :], sft_row["assistant_masks"][len(p_ids) :]
        assert completion == ids  # the same tokens, the information blocks included
        # the same mask, except the final EOS: appended by the environment there, trained here
        assert mask[:-1] == env_mask[:-1] and (mask[-1], env_mask[-1]) == (1, 0)


def test_information_and_masked_gap_tokens_are_out_of_the_loss(tokenizer, episodes):
    _, _, rows, _ = episodes
    row = next(r for r in rows if r["episode"] == "CC")
    segments = [dict(s, loss=s["loss"] and "I was wrong" in s["text"] or s["env"]) for s in row["segments"]]
    out = tokenize_episode(tokenizer, row["prompt"], segments)
    trained = tokenizer.decode([t for t, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m])
    assert "<information>" not in trained and "Doc 1 (Title:" not in trained
    assert trained.startswith("<think>I was wrong about") and trained.endswith(tokenizer.eos_token)


def test_trl_builds_labels_from_the_mask(tokenizer, episodes):
    _, _, _, path = episodes
    data = tokenize_episodes(episode_examples(str(path), 0, 2), tokenizer)
    args = sft.SFTTrainingConfig(output_dir="unused", max_length=4096, report_to="none", max_steps=1)
    trainer = sft.SFTTrainer(
        model=make_tiny_llama(len(tokenizer)), args=args, train_dataset=data, processing_class=tokenizer
    )
    for prepared, mask in zip(trainer.train_dataset, data["assistant_masks"], strict=True):
        assert [label != -100 for label in prepared["labels"]] == [bool(m) for m in mask]


def test_procrl_sft_takes_an_episodes_file(episodes, tmp_path):
    _, _, rows, path = episodes
    assert is_episode_file(str(path)) and not is_episode_file("gsm8k")
    script = sft.SFTScriptArguments(dataset_name=str(path), dataset_end=5, cache_dir=str(tmp_path))
    model = ModelConfig(model_name_or_path="scratch:llama,hidden=32,layers=1,heads=2,intermediate=32")
    plan = sft.prepare_sft(script, sft.SFTTrainingConfig(output_dir=str(tmp_path), report_to="none"), model)
    assert plan.episodes and len(plan.examples) == 5 and plan.examples[0]["completion"] == rows[0]["segments"]
    with pytest.raises(ValueError, match="outside its"):
        episode_examples(str(path), 0, len(rows) + 1)


def test_the_world_configs_parse():
    # the longest episodes: ~1,130 world-tokenizer tokens (organism), ~1,400 SmolLM2 tokens (fine-tune)
    expected = {"world_organism.yaml": ("tokenizer=data/world0/tokenizer", 1152), "world_smollm2.yaml": ("default", 1536)}
    for name, (model_marker, min_length) in expected.items():
        script, training, model_args = sft_command.make_parser().parse_args_and_config(
            ["--config", str(ROOT / "configs" / "sft" / name)]
        )
        assert script.dataset_name == "data/world0/train/episodes.jsonl" and training.max_length >= min_length
        sft.check_model_args(model_args)
        assert model_marker in model_args.model_name_or_path
