"""Every shipped PUM config parses with its own parser (a typo or a removed field fails here, not in a long run)."""

from pathlib import Path

import pytest

from procrl.scripts._common import load_config, resolved_config_args
from procrl.scripts.build_pum_data import make_parser as make_build_parser
from procrl.scripts.train_pum import make_parser as make_train_parser

ROOT = Path(__file__).resolve().parents[1]
BUILD_CONFIGS = sorted((ROOT / "configs" / "pum").glob("build_*.yaml"))
TRAIN_CONFIGS = sorted((ROOT / "configs" / "pum").glob("train_*.yaml"))


def test_the_configs_are_found():
    assert {p.name for p in BUILD_CONFIGS} >= {
        "build_gsm8k.yaml", "build_gsm8k_cpu.yaml", "build_svamp_cpu.yaml", "build_arith_organism.yaml",
    }  # fmt: skip
    assert {p.name for p in TRAIN_CONFIGS} >= {
        "train_gsm8k_smollm2.yaml", "train_gsm8k_smollm2_cpu.yaml", "train_arith_organism.yaml",
    }  # fmt: skip


def test_the_arith_organism_configs_prompt_and_render_as_the_organism_was_trained(tmp_path):
    # the organism's SFT prompt is the bare question; its PUM backbone is the checkpoint the builder's policy is
    path = ROOT / "configs" / "pum" / "build_arith_organism.yaml"
    with resolved_config_args(["--config", str(path)]) as args:
        config, _ = make_build_parser().parse_args_and_config(args)
    assert config.prompt_template == "{question}" and config.generation_backend == "transformers"
    assert len(config.students) == 3 and config.policy_model == config.students[1]
    assert config.dataset.startswith("arith-ops4-d1-train") and config.start >= 3000  # past the SFT problems
    train = ROOT / "configs" / "pum" / "train_arith_organism.yaml"
    with resolved_config_args(["--config", str(train), "--output_dir", str(tmp_path / "out")]) as args:
        script_args, training_args, model_args = make_train_parser().parse_args_and_config(args)
    assert model_args.model_name_or_path == config.policy_model
    assert script_args.dataset_name == config.output_dir + "/dataset"
    assert training_args.bf16 is False and training_args.max_length == 256


@pytest.mark.parametrize("path", BUILD_CONFIGS, ids=lambda p: p.name)
def test_build_config_parses(path):
    # parsing raises on a field the dataclass lacks, and __post_init__ on invalid values
    with resolved_config_args(["--config", str(path)]) as args:  # a thin override's `base:` resolved
        config, _ = make_build_parser().parse_args_and_config(args)
    assert config.output_dir == load_config(path)["output_dir"]  # the file (its `base:` resolved), not the defaults


@pytest.mark.parametrize("path", TRAIN_CONFIGS, ids=lambda p: p.name)
def test_train_config_parses(path, tmp_path):
    # output_dir is redirected so parsing creates nothing in the repository
    with resolved_config_args(["--config", str(path), "--output_dir", str(tmp_path / "out")]) as args:
        script_args, training_args, model_args = make_train_parser().parse_args_and_config(args)
    assert script_args.dataset_name == load_config(path)["dataset_name"]  # the file, not the defaults
