"""`procrl model`: the action word before or after its flags (`procrl model --all prepare` = `procrl model prepare
--all`), `--action` alike; nothing is converted here (the prepare functions are replaced by recorders)."""

from __future__ import annotations

import pytest

from procrl import cli
from procrl.scripts import model


@pytest.fixture
def prepared(monkeypatch):
    calls = []
    monkeypatch.setattr(model, "prepare_default_model", lambda force: calls.append(("default", force)) or "/m/default")
    monkeypatch.setattr(model, "prepare_gemma_model", lambda force: calls.append(("gemma", force)) or "/m/gemma")
    monkeypatch.setattr(model, "default_model_dir", lambda: "/m/default")
    return calls


@pytest.mark.parametrize(
    "argv, calls",
    [
        (["prepare"], [("default", False)]),
        (["prepare", "--all"], [("default", False), ("gemma", False)]),
        (["--all", "prepare"], [("default", False), ("gemma", False)]),
        (["--force", "prepare"], [("default", True)]),
        (["--all", "--force", "prepare"], [("default", True), ("gemma", True)]),
        (["--force", "prepare", "--all"], [("default", True), ("gemma", True)]),
        (["--all", "true", "prepare"], [("default", False), ("gemma", False)]),  # an explicit boolean value
        (["--action", "prepare", "--all"], [("default", False), ("gemma", False)]),
        (["--all", "--action", "prepare"], [("default", False), ("gemma", False)]),
    ],
)
def test_flags_before_or_after_the_action(argv, calls, prepared, capsys):
    assert model.main(argv) == 0
    assert prepared == calls
    assert capsys.readouterr().out.split() == [f"/m/{name}" for name, _ in calls]


@pytest.mark.parametrize("argv", [["path"], ["--force", "path"], ["--action", "path"]])
def test_path_prints_the_directory(argv, prepared, capsys):
    assert model.main(argv) == 0
    assert prepared == [] and capsys.readouterr().out == "/m/default\n"


def test_the_procrl_command_accepts_both_orders(prepared):
    assert cli.main(["model", "--all", "prepare"]) == 0
    assert cli.main(["model", "--force", "prepare"]) == 0
    assert prepared == [("default", False), ("gemma", False), ("default", True)]


def test_action_as_flag_leaves_flag_values_alone():
    assert model.action_as_flag(["--all", "prepare"]) == ["--action", "prepare", "--all"]
    assert model.action_as_flag(["--config", "path"]) == ["--config", "path"]  # a file named path
    assert model.action_as_flag(["--action", "path", "--all"]) == ["--action", "path", "--all"]
    assert model.action_as_flag([]) == []


def test_bad_actions_exit_2(tmp_path, prepared, capsys):
    with pytest.raises(SystemExit) as info:  # argparse refuses a choice itself: usage + error line, status 2
        model.main(["--action", "convert"])
    assert info.value.code == 2 and "invalid choice: 'convert'" in capsys.readouterr().err
    config = tmp_path / "model.yaml"
    config.write_text("action: convert\n")  # a --config value skips argparse's choices: __post_init__ refuses it
    assert model.main(["--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("procrl model: error: action='convert' must be one of") and err.count("\n") == 1
    assert prepared == []


def test_two_actions_are_refused(prepared, capsys):
    assert model.main(["--action", "path", "prepare"]) == 2
    assert (
        capsys.readouterr().err
        == "procrl model: error: give the action once (procrl model prepare | procrl model path)\n"
    )
    assert prepared == []
