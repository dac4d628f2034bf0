"""The `procrl` command dispatches every subcommand to its `procrl.scripts` module: `procrl <sub> --help` works for
each, in-process (`procrl.cli.main`), `procrl --help` lists them by group, and an unknown subcommand is a usage
error."""

from __future__ import annotations

import pytest

from procrl import cli

SUBCOMMANDS = {
    "demo": "procrl.scripts.demo",
    "train-grpo": "procrl.scripts.train_grpo",
    "model": "procrl.scripts.model",
    "build-pum-data": "procrl.scripts.build_pum_data",
    "frs": "procrl.scripts.frs",
    "serve-retriever": "procrl.scripts.serve_retriever",
    "train-pum": "procrl.scripts.train_pum",
    "sft": "procrl.scripts.sft",
    "select": "procrl.scripts.select",
    "beam": "procrl.scripts.beam",
    "pum-gain-check": "procrl.scripts.pum_gain_check",
    "pum-oracle": "procrl.scripts.pum_oracle",
    "calibrate": "procrl.scripts.calibrate",
    "stepgap-eval": "procrl.scripts.stepgap_eval",
    "report": "procrl.scripts.report",
    "sweep": "procrl.scripts.sweep",
    "world": "procrl.scripts.world",
    "world-eval": "procrl.scripts.world_eval",
    "nli": "procrl.scripts.nli",
}


def test_every_subcommand_goes_to_its_script_module():
    assert {name: module for name, (module, _) in cli.COMMANDS.items()} == SUBCOMMANDS


@pytest.mark.parametrize("subcommand", sorted(SUBCOMMANDS))
def test_subcommand_help(subcommand, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([subcommand, "--help"])
    assert info.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_procrl_help_lists_the_subcommands_by_group(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(any(line.split()[:1] == [name] for line in lines) for name in SUBCOMMANDS)
    # each group's heading, then its commands, one line each with their help, before the next heading
    starts = [lines.index(f"{group}:") for group in ("train", "evaluate", "experiments", "setup")]
    assert starts == sorted(starts)
    evaluate = lines[starts[1] + 1 : starts[2]]
    assert [line.split()[0] for line in evaluate if line.strip()] == list(cli.GROUPS["evaluate"])
    assert any(line.split()[0] == "select" and "--ks" in line for line in evaluate)


def test_every_subcommand_is_in_exactly_one_group():
    grouped = [name for names in cli.GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(cli.COMMANDS)


@pytest.mark.parametrize("argv", [[], ["chess"]])
def test_a_missing_or_unknown_subcommand_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage: procrl" in capsys.readouterr().err
