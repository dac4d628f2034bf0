"""Every command refuses a bad command line with ONE line `<prog>: error: <message>` on stderr and exit status 2,
never a traceback (`procrl.scripts._common.parse_or_exit`); in-process and fast: nothing runs after the parse."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from procrl import cli
from procrl.scripts import _common, frs, select

SCRIPTS = Path(__file__).resolve().parents[2] / "procrl" / "scripts"
# module -> (the name in its error line, the arguments it needs to get past argparse's required flags)
COMMANDS = {
    "procrl.scripts.train_grpo": ("train_grpo.py", []),
    "procrl.scripts.model": ("procrl model", ["prepare"]),
    "procrl.scripts.build_pum_data": ("procrl build-pum-data", []),
    "procrl.scripts.train_pum": ("train_pum.py", []),
    "procrl.scripts.frs": ("procrl frs", []),
    "procrl.scripts.select": ("procrl select", ["--scorer", "majority"]),
    "procrl.scripts.beam": ("procrl beam", ["--pum", "some/pum"]),
    "procrl.scripts.stepgap_eval": ("procrl stepgap-eval", []),
    "procrl.scripts.serve_retriever": ("procrl serve-retriever", ["--index", "2wiki_corpus_sample"]),
    "procrl.scripts.report": ("procrl report", ["runs/some_sweep"]),
    "procrl.scripts.sweep": ("procrl sweep", ["s.yaml"]),
    "procrl.scripts.sft": ("procrl sft", []),
    "procrl.scripts.calibrate": ("procrl calibrate", []),
    "procrl.scripts.pum_gain_check": ("procrl pum-gain-check", ["outputs/pum_math/x"]),
    "procrl.scripts.pum_oracle": ("procrl pum-oracle", ["outputs/select_x", "--pum", "outputs/pum_x"]),
    "procrl.scripts.world": ("procrl world", ["build", "--out", "data/world"]),
    "procrl.scripts.world_eval": ("procrl world-eval", ["--model", "some/ckpt"]),
    "procrl.scripts.nli": ("procrl nli", ["pairs", "--out", "data/nli"]),
    "procrl.scripts.demo": ("train_grpo.py", []),  # the demo's flags go to its GRPO stage, checked before stage 1
}
# one value each command's dataclass refuses in __post_init__, and a word of the message (`procrl model`'s one
# setting is a choice, which argparse refuses itself: tests/scripts/test_model_command.py)
REFUSED = {
    "procrl.scripts.train_grpo": (["--task", "chess"], "task='chess' must be one of"),
    "procrl.scripts.build_pum_data": (["--start", "5", "--end", "5"], "end"),
    "procrl.scripts.train_pum": (["--eval_fraction", "2"], "eval_fraction"),
    "procrl.scripts.frs": (["--frs-traces", "0"], "frs_traces must be >= 1"),
    "procrl.scripts.select": (["--scorer", "oracle"], "oracle"),
    "procrl.scripts.select --ks": (["--n", "4", "--ks", "1,8"], "k = 8 > --n 4 samples (e.g. --ks 1)"),
    "procrl.scripts.beam": (["--beams", "0"], "beams"),
    "procrl.scripts.stepgap_eval": (["--limit", "0"], "--limit 0 must be >= 1"),
    "procrl.scripts.serve_retriever": (["--port", "0"], "--port 0 is not a TCP port"),
    "procrl.scripts.report": (["--title", " "], "must be one non-empty line"),
    "procrl.scripts.sweep": (["--wandb", "maybe"], "wandb='maybe' must be one of"),
    "procrl.scripts.sft": (["--solution_column", ""], "solution_column must name the column"),
    "procrl.scripts.calibrate": (["--num-samples", "4"], "pass@8 needs at least 8 samples"),
    "procrl.scripts.demo": (["--task", "chess"], "task='chess' must be one of"),
    "procrl.scripts.pum_gain_check": (["--resamples", "-1"], "--resamples must be >= 0, got -1"),
    "procrl.scripts.pum_oracle": (["--folds", "1"], "--folds must be >= 2, got 1"),
    "procrl.scripts.world": (["--n-train", "0"], "n_train must be >= 1"),
    "procrl.scripts.world_eval": (["--n", "0"], "n, batch_size and max_completion_length must be >= 1"),
    "procrl.scripts.world_eval --model": (["--model", "/no/such/procrl_checkpoint"], "no such checkpoint directory"),
    "procrl.scripts.nli": (["--resamples", "0"], "resamples and eval_batch_size must be >= 1"),
}


def _one_error_line(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


def test_every_command_is_covered():
    modules = {f"procrl.scripts.{p.stem}" for p in SCRIPTS.glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(COMMANDS) == {module for module, _ in cli.COMMANDS.values()}
    assert {case.split()[0] for case in REFUSED} == modules - {"procrl.scripts.model"}


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_an_unknown_flag_is_one_error_line_and_status_2(module, capsys):
    prog, needed = COMMANDS[module]
    assert importlib.import_module(module).main([*needed, "--bogus", "1"]) == 2
    line = _one_error_line(capsys, prog)
    assert "unrecognized arguments: ['--bogus', '1'] (--help lists the flags)" in line


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_value_is_one_error_line_and_status_2(case, capsys):
    module = case.split()[0]  # "<module> <what>": a second refusal of the same command
    prog, needed = COMMANDS[module]
    argv, message = REFUSED[case]
    assert importlib.import_module(module).main([*needed, *argv]) == 2
    assert message in _one_error_line(capsys, prog)


@pytest.mark.parametrize("subcommand", sorted(cli.COMMANDS))
def test_the_procrl_command_passes_the_status_on(subcommand, capsys):
    module = cli.COMMANDS[subcommand][0]
    prog, needed = COMMANDS[module]
    assert cli.main([subcommand, *needed, "--bogus", "1"]) == 2
    _one_error_line(capsys, prog)


def test_config_file_errors_are_one_line(tmp_path, capsys):
    assert select.main(["--config", str(tmp_path / "missing.yaml")]) == 2  # OSError
    assert "missing.yaml" in _one_error_line(capsys, "procrl select")
    assert select.main(["--config"]) == 2
    assert "--config needs the path of a YAML file" in _one_error_line(capsys, "procrl select")
    bad = tmp_path / "bad.yaml"
    bad.write_text("n: [1\n")
    assert select.main(["--config", str(bad)]) == 2  # yaml.YAMLError
    _one_error_line(capsys, "procrl select")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("scorer: majority\nbeams: 4\n")  # a beam key, not a select one
    assert select.main(["--config", str(unknown)]) == 2
    assert "Unknown arguments from config file" in _one_error_line(capsys, "procrl select")


def test_usage_error_keeps_a_multi_line_message_on_one_line(capsys):
    assert _common.usage_error("procrl x", "first\n  second\n") == _common.EXIT_USAGE == 2
    assert capsys.readouterr().err == "procrl x: error: first second\n"


def test_argparse_refusals_keep_argparse_behaviour(capsys):
    with pytest.raises(SystemExit) as info:  # an unknown choice: argparse's usage line + its error line, status 2
        frs.main(["--frs-estimator", "exact"])
    assert info.value.code == 2
    assert "procrl frs: error: argument --frs_estimator" in capsys.readouterr().err
