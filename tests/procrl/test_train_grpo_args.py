"""`answer_extraction` in train_grpo.py: one mode per run, visible in the reward's name, refused when unknown."""

from pathlib import Path

import pytest

from procrl.rewards.outcome import outcome_reward
from procrl.train_grpo import GRPOScriptArguments, build_reward_funcs, make_parser

DEMO = Path(__file__).resolve().parents[2] / "configs" / "grpo" / "svamp_smollm2_picsar.yaml"


def _reward_names(tmp_path, *flags):
    script_args, training_args, _ = make_parser().parse_args_and_config(
        args=["--config", str(DEMO), "--output_dir", str(tmp_path), *flags]
    )
    funcs, _, _ = build_reward_funcs(script_args, training_args)
    return script_args.answer_extraction, funcs


def test_the_demo_is_strict_and_uses_the_plain_outcome_reward(tmp_path):
    mode, funcs = _reward_names(tmp_path)
    assert mode == "strict" and funcs[0] is outcome_reward  # the name users know: outcome_reward


def test_flexible_mode_renames_the_reward(tmp_path):
    mode, funcs = _reward_names(tmp_path, "--answer_extraction", "flexible")
    assert mode == "flexible" and funcs[0].__name__ == "outcome_reward_flexible"
    # the mode changes what is paid: no marker, a number at the end of the last sentence
    assert funcs[0](completions=["The total is $9{,}500$."], answer=["9500"]) == [1.0]
    assert outcome_reward(completions=["The total is $9{,}500$."], answer=["9500"]) == [0.0]


def test_unknown_mode_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="answer_extraction: strict"):
        GRPOScriptArguments(answer_extraction="lenient")


def test_flexible_mode_is_refused_with_task_search():
    # task=search pays EM on normalised answer strings: answer_extraction would be ignored yet recorded in summary.json
    search = {"task": "search", "dataset_name": "2wiki_dev_sample", "reward_funcs": ["em"]}
    with pytest.raises(ValueError, match="answer_extraction='flexible' has no effect with task=search") as info:
        GRPOScriptArguments(**search, answer_extraction="flexible")
    assert "answer_extraction: strict" in str(info.value)  # the message says how to fix it
    assert GRPOScriptArguments(**search).answer_extraction == "strict"  # the default is accepted
