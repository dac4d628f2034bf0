"""`procrl sweep` (procrl.scripts.sweep): the offline runner's resume, failures, interruption and dry run with a
fake program (tests/scripts/fake_sweep_program.py), the wandb/offline choice, and the shipped sweep files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from procrl.experiment.sweeps import load_sweep
from procrl.scripts import sweep as sweep_command
from procrl.scripts._common import parse_or_exit
from procrl.scripts.train_grpo import make_parser as make_grpo_parser

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parent / "fake_sweep_program.py"
NAMES = ["step=1", "step=2", "step=3"]
DEADLINE_S = 180  # generous: the machine is shared with long measurements


def _write_sweep(tmp_path: Path) -> Path:
    spec = {
        "program": str(FAKE),
        "method": "grid",
        "metric": {"name": "task/accuracy", "goal": "maximize"},
        "parameters": {"step": {"values": [1, 2, 3]}, "counter": {"value": str(tmp_path / "counter.txt")}},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _runner(path: Path, out: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "procrl.scripts.sweep", str(path), "--output-dir", str(out), "--wandb", "off", *flags]


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    return {**env, "WANDB_MODE": "disabled", **extra}


def _counts(tmp_path: Path) -> dict[int, int]:
    lines = (tmp_path / "counter.txt").read_text().split("\n")
    steps = [int(line.split()[0]) for line in lines if line]
    return {step: steps.count(step) for step in (1, 2, 3)}


def _wait_running(run_json: Path, proc: subprocess.Popen) -> dict:
    """Poll until the variant's run.json says running (the runner must still be alive)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the runner exited before the variant started"
        try:
            record = json.loads(run_json.read_text())
        except (OSError, ValueError):
            record = {}
        if record.get("status") == "running":
            return record
        time.sleep(0.05)  # polling a file, not waiting for a guessed duration
    raise AssertionError(f"{run_json} never said running")


def _states(out: Path) -> dict[str, str]:
    return {row["name"]: row["state"] for row in json.loads((out / "sweep.json").read_text())["variants"]}


@pytest.mark.slow
def test_a_killed_sweep_resumes_without_rerunning_finished_variants(tmp_path):
    path, out = _write_sweep(tmp_path), tmp_path / "sweep"
    runner = subprocess.Popen(
        _runner(path, out), env=_env(FAKE_BLOCK_AT="2"), cwd=tmp_path, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    child = _wait_running(out / "step=2" / "run.json", runner)
    first = out / "step=1"
    before = {name: (first / name).read_bytes() for name in ("run.json", "log.txt")}
    mtime = (first / "run.json").stat().st_mtime_ns
    os.killpg(runner.pid, signal.SIGKILL)  # a hard crash of the runner ...
    os.killpg(child["pid"], signal.SIGKILL)  # ... and of the variant (it runs in its own process group)
    runner.wait()
    assert _counts(tmp_path) == {1: 1, 2: 1, 3: 0}

    rerun = subprocess.run(_runner(path, out), env=_env(), cwd=tmp_path, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _counts(tmp_path) == {1: 1, 2: 2, 3: 1}  # variant 1 not rerun; 2 again; 3 ran
    assert {name: (first / name).read_bytes() for name in ("run.json", "log.txt")} == before
    assert (first / "run.json").stat().st_mtime_ns == mtime
    assert _states(out) == dict.fromkeys(NAMES, "finished")
    rows = json.loads((out / "sweep.json").read_text())["variants"]
    assert [row["skipped"] for row in rows] == [True, False, False]
    # each variant ran in its folder with its variant record; the log keeps both attempts of variant 2
    record = json.loads((out / "step=3" / "run.json").read_text())
    fingerprint = record["variant"].pop("fingerprint")
    assert record["variant"] == {"sweep": "tiny", "name": "step=3", "parameters": rows[2]["parameters"], "seed": None}
    assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0  # a SHA-256 in hex (its value: test_sweeps.py)
    assert record["argv"][-2:] == ["--output_dir", str(out / "step=3")]
    assert (out / "step=2" / "log.txt").read_text().count("fake program step 2 running") == 2


@pytest.mark.slow
def test_ctrl_c_stops_the_variant_process_group_and_the_sweep(tmp_path):
    path, out = _write_sweep(tmp_path), tmp_path / "sweep"
    runner = subprocess.Popen(
        _runner(path, out, "--stop-timeout", "60"), env=_env(FAKE_BLOCK_AT="2"), cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    child = _wait_running(out / "step=2" / "run.json", runner)
    runner.send_signal(signal.SIGINT)  # what Ctrl-C sends the runner (the variant is in its own group)
    _, stderr = runner.communicate(timeout=DEADLINE_S)
    assert runner.returncode == 130, stderr[-3000:]
    with pytest.raises(ProcessLookupError):  # the variant was stopped and reaped, not orphaned
        os.kill(child["pid"], 0)
    assert _states(out) == {"step=1": "finished", "step=2": "interrupted", "step=3": "pending"}
    assert _counts(tmp_path) == {1: 1, 2: 1, 3: 0}
    assert "run the same command again to resume" in stderr


@pytest.mark.slow
def test_a_failed_variant_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    path, out = _write_sweep(tmp_path), tmp_path / "sweep"
    monkeypatch.setenv("FAKE_FAIL_AT", "2")
    assert sweep_command.main([str(path), "--output-dir", str(out), "--wandb", "off"]) == 1
    rows = {row["name"]: row for row in json.loads((out / "sweep.json").read_text())["variants"]}
    assert {name: row["state"] for name, row in rows.items()} == {"step=1": "finished", "step=2": "failed", "step=3": "finished"}  # fmt: skip
    assert rows["step=2"]["returncode"] == 3
    assert rows["step=2"]["error"] == "RuntimeError: step failed on purpose"  # run.json's error
    monkeypatch.delenv("FAKE_FAIL_AT")
    assert sweep_command.main([str(path), "--output-dir", str(out), "--wandb", "off"]) == 0  # only step 2 reruns
    assert _counts(tmp_path) == {1: 1, 2: 2, 3: 1}


def test_a_program_that_cannot_start_is_a_failed_variant(tmp_path):
    path = tmp_path / "missing.yaml"
    path.write_text(yaml.safe_dump({"program": "p.py", "method": "grid", "command": [str(tmp_path / "nope")], "parameters": {"x": {"values": [1]}}}))  # fmt: skip
    assert sweep_command.main([str(path), "--output-dir", str(tmp_path / "out"), "--wandb", "off"]) == 1
    (row,) = json.loads((tmp_path / "out" / "sweep.json").read_text())["variants"]
    assert row["state"] == "failed" and row["error"].startswith(("FileNotFoundError", "PermissionError"))


def test_dry_run_prints_the_commands_and_runs_nothing(tmp_path, capsys):
    path, out = _write_sweep(tmp_path), tmp_path / "sweep"
    assert sweep_command.main(["--dry-run", str(path), "--output-dir", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"# step=1 [not run] -> {out / 'step=1'}"
    assert lines[1].endswith(f"{FAKE} --step=1 --counter={tmp_path / 'counter.txt'} --output_dir {out / 'step=1'}")
    assert len(lines) == 6 and not out.exists() and not (tmp_path / "counter.txt").exists()


def test_bad_sweep_files_are_one_usage_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("program: x.py\nmethod: bayes\nparameters: {a: {values: [1]}}\n")
    assert sweep_command.main([str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "procrl sweep: error: method: bayes needs the wandb sweep server; offline use method: grid or method: random"
    )
    assert sweep_command.main([str(tmp_path / "absent.yaml")]) == 2
    shared = tmp_path / "shared.yaml"  # every variant would write into one folder
    shared.write_text("program: x.py\nmethod: grid\nparameters: {a: {values: [1, 2]}, output_dir: {value: o}}\n")
    assert sweep_command.main([str(shared), "--dry-run"]) == 2
    assert "several variants share an output folder" in capsys.readouterr().err


def test_the_sweep_file_may_come_anywhere_on_the_command_line():
    assert sweep_command.sweep_file_as_flag(["--count", "3", "s.yaml"]) == ["--sweep", "s.yaml", "--count", "3"]
    assert sweep_command.sweep_file_as_flag(["--dry-run", "s.yaml"]) == ["--sweep", "s.yaml", "--dry-run"]
    assert sweep_command.sweep_file_as_flag(["--dry-run", "no", "s.yaml"]) == ["--sweep", "s.yaml", "--dry-run", "no"]


# --------------------------------------------------------------------------------------------------------------------
# wandb sweep + agent only with --wandb on, the offline runner otherwise
# --------------------------------------------------------------------------------------------------------------------


def _no_probe(timeout):
    raise AssertionError("the wandb server must not be probed here")


@pytest.mark.parametrize(
    ("mode", "environ", "probe", "backend"),
    [
        ("off", {"WANDB_API_KEY": "k"}, _no_probe, "offline"),  # off never probes
        ("auto", {"WANDB_API_KEY": "k", "WANDB_MODE": "online"}, _no_probe, "offline"),  # a server, but not asked
        ("auto", {"WANDB_API_KEY": "k", "WANDB_MODE": "offline"}, _no_probe, "offline"),
        ("on", {"WANDB_API_KEY": "k", "WANDB_MODE": "online"}, lambda timeout: None, "wandb"),  # asked, reachable
        ("on", {"WANDB_API_KEY": "k"}, lambda timeout: None, "wandb"),
    ],
)
def test_wandb_is_used_only_with_wandb_on(monkeypatch, mode, environ, probe, backend):
    monkeypatch.setattr(sweep_command, "probe_wandb", probe)
    assert sweep_command.choose_backend(mode, environ, 10.0)[0] == backend


def test_wandb_on_refuses_an_unreachable_server(monkeypatch):
    monkeypatch.setattr(sweep_command, "probe_wandb", lambda timeout: "wandb.Api() failed (401)")
    with pytest.raises(RuntimeError, match=r"--wandb on, but wandb.Api\(\) failed \(401\)"):
        sweep_command.choose_backend("on", {"WANDB_API_KEY": "k"}, 10.0)
    monkeypatch.setattr(sweep_command, "probe_wandb", _no_probe)
    for environ, reason in [
        ({"WANDB_API_KEY": "k", "WANDB_MODE": "disabled"}, "WANDB_MODE=disabled"),
        ({"NETRC": "/nonexistent/netrc"}, "no wandb API key"),
    ]:
        with pytest.raises(RuntimeError, match=f"--wandb on, but {reason}"):
            sweep_command.choose_backend("on", environ, 10.0)


def test_a_netrc_entry_is_an_api_key(tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password abc\n")
    netrc.chmod(0o600)
    assert sweep_command.has_wandb_api_key({"NETRC": str(netrc)})
    assert not sweep_command.has_wandb_api_key({"NETRC": str(netrc), "WANDB_BASE_URL": "https://wandb.example"})


def test_main_hands_a_reachable_server_to_wandb_sweep_and_agent(tmp_path, monkeypatch):
    path = _write_sweep(tmp_path)
    calls = []
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "k")
    monkeypatch.setattr(sweep_command, "probe_wandb", lambda timeout: None)
    monkeypatch.setattr(sweep_command, "run_offline", lambda *a: pytest.fail("the offline runner must not run"))
    monkeypatch.setattr(sweep_command, "run_wandb", lambda p, count: calls.append((p, count)) or 0)
    argv = [str(path), "--count", "2", "--output-dir", str(tmp_path / "o")]
    assert sweep_command.main([*argv, "--wandb", "on"]) == 0
    assert calls == [(path, 2)] and not (tmp_path / "o").exists()


def test_a_reachable_server_is_not_used_by_default(tmp_path, monkeypatch):
    """Under wandb agent every seed of a config would write into one output_dir: the default stays offline."""
    path, offline = _write_sweep(tmp_path), []
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "k")
    monkeypatch.setattr(sweep_command, "probe_wandb", _no_probe)
    monkeypatch.setattr(sweep_command, "run_wandb", lambda p, count: pytest.fail("wandb agent must not run"))
    monkeypatch.setattr(sweep_command, "run_offline", lambda sweep, plan, *a: offline.append(len(plan)) or 0)
    assert sweep_command.main([str(path), "--output-dir", str(tmp_path / "o")]) == 0
    assert offline == [3]


def test_help_shows_each_default_once():
    text = " ".join(sweep_command.make_parser().format_help().split())  # argparse wraps lines
    assert "(default: None)" not in text
    assert "(variants in <dir>/<name>; default: outputs/sweeps/<name>) --count" in text
    assert "(default: run_cap); grid: run only the first N --seed" in text
    assert "(default: auto)" in text and "(default: 10.0)" in text  # the others keep argparse's


# --------------------------------------------------------------------------------------------------------------------
# The shipped sweep files
# --------------------------------------------------------------------------------------------------------------------

SHIPPED = sorted((ROOT / "configs" / "sweeps").glob("*.yaml"))


def test_the_shipped_sweeps_are_found():
    assert {p.name for p in SHIPPED} >= {"reward_ablation_svamp.yaml", "stepgap_ablation_2wiki.yaml"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_parameter_is_a_config_field_of_the_program(path, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the variants run from the repository root
    sweep = load_sweep(path)
    assert sweep.program == "train_grpo.py"
    parser = make_grpo_parser()
    known = {f.name for dataclass in parser.dataclass_types for f in fields(dataclass)} | {"config"}
    assert {p.name for p in sweep.parameters} <= known
    (config,) = [p for p in sweep.parameters if p.name == "config"]
    for value in config.values:  # every alternative config exists and parses with the sweep's constants
        constants = [f"--{p.name}={p.values[0]}" for p in sweep.parameters if not p.varies]
        argv = [f"--config={value}", *constants, "--output_dir", str(tmp_path)]
        assert parse_or_exit(make_grpo_parser(), argv) is not None, value


def test_the_reward_ablation_is_five_rewards_by_two_seeds():
    from procrl.experiment.sweeps import expand

    variants = expand(load_sweep(ROOT / "configs" / "sweeps" / "reward_ablation_svamp.yaml"))
    stems = ["svamp_smollm2_outcome", "svamp_smollm2_picsar", "svamp_smollm2_pum", "svamp_smollm2_pum_process", "svamp_smollm2_pum_steps"]  # fmt: skip
    assert [v.name for v in variants] == [f"config={s},seed={seed}" for s in stems for seed in (0, 1)]
    assert [v.seed for v in variants] == [0, 1] * 5


@pytest.mark.slow
def test_launch_script_runs_the_sweep_from_the_repository_root(tmp_path):
    path, out = _write_sweep(tmp_path), tmp_path / "sweep"
    env = {**_env(), "PYTHON": sys.executable}
    env.pop("WANDB_MODE")  # the script defaults it to offline
    done = subprocess.run(
        ["bash", str(ROOT / "launch" / "sweep.sh"), str(path), "--output-dir", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert _states(out) == dict.fromkeys(NAMES, "finished")
    assert f"-m procrl.scripts.sweep {path} --output-dir {out}" in done.stderr
    assert "3 variants, offline (--wandb auto; wandb sweep + agent only with --wandb on)" in done.stderr


# --------------------------------------------------------------------------------------------------------------------
# Resume only what did not change (variant fingerprints), and never judge a run by an earlier attempt's run.json
# --------------------------------------------------------------------------------------------------------------------


def _fingerprint_sweep(tmp_path: Path, max_steps: int) -> Path:
    """One variant (step=1) whose name leaves out its constant max_steps and its thin config (base: base.yaml)."""
    (tmp_path / "thin.yaml").write_text("base: base.yaml\nlearning_rate: 0.1\n")
    if not (tmp_path / "base.yaml").exists():
        (tmp_path / "base.yaml").write_text("max_completion_length: 64\nlearning_rate: 0.5\n")
    spec = {
        "program": str(FAKE),
        "method": "grid",
        "parameters": {
            "step": {"values": [1]},
            "counter": {"value": str(tmp_path / "counter.txt")},
            "max_steps": {"value": max_steps},
            "config": {"value": str(tmp_path / "thin.yaml")},
        },
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.slow
def test_changed_settings_of_a_finished_variant_refuse_the_sweep_unless_rerun(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out, run_json = tmp_path / "sweep", tmp_path / "sweep" / "step=1" / "run.json"
    refused = f"procrl sweep: error: variant step=1: {sweep_command.CHANGED}"
    assert refused.endswith("settings changed since this variant finished: use another --output-dir or --rerun")

    def sweep(max_steps: int, *flags: str) -> int:
        path = _fingerprint_sweep(tmp_path, max_steps)
        capsys.readouterr()
        return sweep_command.main([str(path), "--output-dir", str(out), "--wandb", "off", *flags])

    def ran() -> int:
        return _counts(tmp_path)[1]

    assert sweep(2) == 0 and ran() == 1
    first = json.loads(run_json.read_text())
    assert sweep(2) == 0 and ran() == 1  # unchanged: skipped
    assert json.loads((out / "sweep.json").read_text())["variants"][0]["skipped"] is True

    # a constant (not in the variant's name) changed: one line, nothing runs, the old record stays
    assert sweep(3) == 2 and ran() == 1
    assert capsys.readouterr().err.strip() == refused
    assert json.loads(run_json.read_text()) == first
    assert sweep(3, "--rerun") == 0 and ran() == 2
    second = json.loads(run_json.read_text())
    assert json.loads((out / "step=1" / "run.json.prev").read_text()) == first  # the earlier attempt, kept
    assert "--max_steps=3" in second["argv"] and second["variant"]["fingerprint"] != first["variant"]["fingerprint"]
    assert sweep(3) == 0 and ran() == 2  # the rerun's record matches now

    # an edit of the thin config's base changes the resolved config: refused, then rerun
    (tmp_path / "base.yaml").write_text("max_completion_length: 128\nlearning_rate: 0.5\n")
    assert sweep(3) == 2 and ran() == 2
    assert capsys.readouterr().err.strip() == refused
    assert sweep(3, "--rerun") == 0 and ran() == 3
    # a comment or a key the override replaces anyway leaves the resolved config as it was: skipped
    (tmp_path / "base.yaml").write_text("# edited\nmax_completion_length: 128\nlearning_rate: 0.9\n")
    assert sweep(3) == 0 and ran() == 3
    # --rerun does not rerun what did not change
    assert sweep(3, "--rerun") == 0 and ran() == 3


@pytest.mark.slow
def test_a_finished_run_json_without_fingerprint_is_refused_and_the_dry_run_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path, out = _fingerprint_sweep(tmp_path, 2), tmp_path / "sweep"
    (out / "step=1").mkdir(parents=True)
    (out / "step=1" / "run.json").write_text(json.dumps({"status": "finished", "variant": None}))  # an older record
    assert sweep_command.main([str(path), "--output-dir", str(out), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(f"# step=1 [finished, settings changed] -> {out / 'step=1'}\n")
    assert sweep_command.main([str(path), "--output-dir", str(out), "--wandb", "off"]) == 2
    assert capsys.readouterr().err.strip().endswith(sweep_command.CHANGED)
    assert not (tmp_path / "counter.txt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("stale", ["failed", "running"])
def test_a_rerun_that_dies_before_its_record_is_not_judged_by_the_stale_one(tmp_path, monkeypatch, stale):
    path, out = _write_sweep(tmp_path), tmp_path / "sweep"
    folder = out / "step=1"
    folder.mkdir(parents=True)
    old = {"schema_version": 1, "status": stale, "error": "OldError: the previous attempt's"}
    (folder / "run.json").write_text(json.dumps(old))
    monkeypatch.setenv("FAKE_DIE_EARLY_AT", "1")
    assert sweep_command.main([str(path), "--output-dir", str(out), "--wandb", "off", "--count", "1"]) == 1
    (row,) = json.loads((out / "sweep.json").read_text())["variants"]
    assert (row["state"], row["returncode"]) == ("failed", 4)
    assert row["error"] == f"exit status 4; see {folder / 'log.txt'}"  # not the stale record's error
    assert not (folder / "run.json").exists()
    assert json.loads((folder / "run.json.prev").read_text()) == old


def test_the_run_record_keeps_the_variant_fingerprint(tmp_path, monkeypatch):
    from procrl.experiment.tracking import track_run

    variant = {"sweep": "s", "name": "seed=1", "parameters": {"seed": 1}, "seed": 1, "fingerprint": "ab" * 32}
    monkeypatch.setenv("PROCRL_VARIANT", json.dumps(variant))
    with track_run(tmp_path, command="frs", argv=[]):
        pass
    assert json.loads((tmp_path / "run.json").read_text())["variant"] == variant
