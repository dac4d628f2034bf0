"""`procrl sweep --set NAME=VALUE`: fixed parameters given at run time (procrl.experiment.sweeps.fix_parameters), e.g.
the SFT checkpoint a GRPO sweep starts from: a file's parameter replaced or a new one added, the value read as YAML,
in every variant's command and fingerprint (a finished variant run with another value counts as changed), recorded
in the sweep's config; bad words and `--wandb on` refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from procrl.experiment.sweeps import expand, fix_parameters, load_sweep
from procrl.scripts import sweep as sweep_command


def _sweep(tmp_path: Path) -> Path:
    spec = {
        "program": "prog.py",
        "method": "grid",
        "parameters": {"arm": {"values": ["a", "b"]}, "seed": {"values": [0, 1]}, "max_steps": {"value": 150}},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_fix_parameters_replaces_and_adds_constants(tmp_path):
    sweep = fix_parameters(load_sweep(_sweep(tmp_path)), {"max_steps": 3, "seed": 0, "model_name_or_path": "/ckpt"})
    variants = expand(sweep)
    assert [v.name for v in variants] == ["arm=a", "arm=b"]  # seed is now a constant: out of the names
    assert [v.seed for v in variants] == [0, 0]
    assert variants[0].argv == ("/usr/bin/env", "python", "prog.py", "--arm=a", "--seed=0", "--max_steps=3",
                                "--model_name_or_path=/ckpt")  # fmt: skip
    assert sweep.config["parameters"]["model_name_or_path"] == {"value": "/ckpt"}  # what sweep.json records
    assert sweep.config["parameters"]["arm"] == {"values": ["a", "b"]}
    with pytest.raises(ValueError, match="needs a name"):
        fix_parameters(sweep, {"": 1})


def test_set_values_are_yaml_and_bad_words_are_one_line(tmp_path, capsys):
    args = sweep_command.SweepArguments(sweep="s.yaml", set=["max_steps=3", "model_name_or_path=/a/b", "x=true"])
    assert args.fixed() == {"max_steps": 3, "model_name_or_path": "/a/b", "x": True}
    path = _sweep(tmp_path)
    for word in ("max_steps", "=3", "max_steps="):
        assert sweep_command.main([str(path), "--dry-run", "--set", word]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"procrl sweep: error: --set {word!r}: write NAME=VALUE, e.g. --set model_name_or_path=/path/to/checkpoint"  # fmt: skip
    assert sweep_command.main([str(path), "--set", "a=1", "--wandb", "on"]) == 2
    assert "--set needs the offline runner" in capsys.readouterr().err


def test_set_words_are_not_the_sweep_file():
    flag = sweep_command.sweep_file_as_flag
    assert flag(["s.yaml", "--set", "a=1", "b=2"]) == ["--sweep", "s.yaml", "--set", "a=1", "b=2"]
    assert flag(["--set", "a=1", "b=2", "--dry-run", "s.yaml"]) == ["--sweep", "s.yaml", "--set", "a=1", "b=2",
                                                                     "--dry-run"]  # fmt: skip


def test_a_finished_variant_with_another_fixed_value_counts_as_changed(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, out = _sweep(tmp_path), tmp_path / "out"
    sweep = fix_parameters(load_sweep(path), {"model_name_or_path": "/ckpt/one"})
    variant = expand(sweep)[0]
    (out / variant.name).mkdir(parents=True)
    record = {"status": "finished", "variant": variant.record("s", sweep_command.settings_of(sweep, variant))}
    (out / variant.name / "run.json").write_text(json.dumps(record))
    argv = [str(path), "--dry-run", "--output-dir", str(out), "--set"]
    assert sweep_command.main([*argv, "model_name_or_path=/ckpt/one"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# arm=a,seed=0 [finished] ") and "--model_name_or_path=/ckpt/one " in lines[1]
    assert sweep_command.main([*argv, "model_name_or_path=/ckpt/two"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("# arm=a,seed=0 [finished, settings changed] ")
    assert sweep_command.main(argv[:1] + ["--output-dir", str(out), "--set", "model_name_or_path=/ckpt/two"]) == 2
    assert "settings changed since this variant finished" in capsys.readouterr().err
