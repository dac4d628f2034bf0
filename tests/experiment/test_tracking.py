"""The run record (`procrl.experiment.tracking`, `procrl.experiment.provenance`): run.json's life cycle (running -> finished / failed),
atomic writes, the git state of a checkout, the sweep variant, ranks, the settings' JSON form, metric flattening,
and the wandb copy (offline, read back from the run's .wandb file)."""

from __future__ import annotations

import enum
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from wandb_service import owned_wandb_service, wandb_records, wandb_summary  # tests/helpers

from procrl.experiment import provenance, tracking
from procrl.experiment.tracking import (
    RUN_FILE,
    TrackingArguments,
    config_record,
    git_info,
    history_from_log,
    numeric_metrics,
    read_variant,
    track_run,
)


def read(directory: Path) -> dict:
    return json.loads((directory / RUN_FILE).read_text())


@pytest.fixture(autouse=True)
def _main_process(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "PROCRL_VARIANT"):
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------------------------------------------------
# The life cycle
# --------------------------------------------------------------------------------------------------------------------


def test_running_at_entry_then_finished_with_metrics_and_history(tmp_path):
    out = tmp_path / "a" / "b"  # created
    with track_run(out, command="frs", argv=["--n", "4"]) as run:
        during = read(out)
        run.metrics = {"frs/score": 51.5, "frs/judged": 7}
        run.history = [{"step": 1, "reward": 0.5}]
    assert during["status"] == "running" and during["finished_at"] is None and during["wall_time_s"] is None
    assert during["started_at"].endswith("Z") and during["metrics"] == {} and during["error"] is None
    record = read(out)
    assert record["schema_version"] == 1 and record["command"] == "frs" and record["argv"] == ["--n", "4"]
    assert record["status"] == "finished" and record["error"] is None
    assert record["finished_at"] >= record["started_at"] and record["wall_time_s"] >= 0
    assert record["metrics"] == {"frs/score": 51.5, "frs/judged": 7}
    assert record["history"] == [{"step": 1, "reward": 0.5}]
    assert set(record) == {"schema_version", "command", "argv", "status", "error", "started_at", "finished_at",
                           "wall_time_s", "config", "git", "packages", "machine", "variant", "metrics", "history",
                           "result", "files"}  # fmt: skip
    assert record["result"] is None and record["files"] == {}


def test_save_writes_an_intermediate_record(tmp_path):
    with track_run(tmp_path, command="select", argv=[]) as run:
        run.metrics = {"select/majority/accuracy": 0.25}
        run.save()
        assert read(tmp_path)["metrics"] == {"select/majority/accuracy": 0.25}
        assert read(tmp_path)["status"] == "running"


def test_write_rows_writes_json_lines_and_names_the_file(tmp_path):
    with track_run(tmp_path, command="select", argv=[]) as run:
        path = run.write_rows("problems", ({"id": i, "score": v} for i, v in enumerate([0.5, float("nan")])))
    assert path == tmp_path / "problems.jsonl" and read(tmp_path)["files"] == {"problems": str(path)}
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [{"id": 0, "score": 0.5}, {"id": 1, "score": None}]  # NaN is not JSON
    assert sorted(p.name for p in tmp_path.iterdir()) == ["problems.jsonl", RUN_FILE]  # no temporary file left


def test_the_result_and_the_files_it_names_are_in_run_json(tmp_path):
    with track_run(tmp_path, command="select", argv=[]) as run:
        run.result = {"accuracy": {"majority": 0.25, "picsar": float("nan")}, "ks": (1, 2)}
        run.files = {"table": tmp_path / "table.md"}
    record = read(tmp_path)
    assert record["result"] == {"accuracy": {"majority": 0.25, "picsar": None}, "ks": [1, 2]}  # NaN is not JSON
    assert record["files"] == {"table": str(tmp_path / "table.md")}


@pytest.mark.parametrize(
    "exc, error",
    [
        (ValueError("no problem with a parseable gold"), "ValueError: no problem with a parseable gold"),
        (KeyboardInterrupt(), "KeyboardInterrupt: interrupted"),  # Ctrl-C: failed, not finished
        (SystemExit("no annotated traces in x.jsonl"), "SystemExit: no annotated traces in x.jsonl"),
    ],
)
def test_an_exception_fails_the_record_and_is_reraised(tmp_path, exc, error):
    with pytest.raises(type(exc)):
        with track_run(tmp_path, command="stepgap-eval", argv=[]) as run:
            run.metrics = {"stepgap/sF1": 0.5}  # set before the failure: kept
            raise exc
    record = read(tmp_path)
    assert record["status"] == "failed" and record["error"] == error
    assert record["finished_at"] is not None and record["metrics"] == {"stepgap/sF1": 0.5}


def test_system_exit_zero_is_a_finished_run(tmp_path):
    with pytest.raises(SystemExit):
        with track_run(tmp_path, command="frs", argv=[]):
            raise SystemExit(0)
    assert read(tmp_path)["status"] == "finished"


def test_metrics_keep_numbers_only(tmp_path):
    with track_run(tmp_path, command="frs", argv=[]) as run:
        run.metrics = {"a": 1, "b": 0.5, "nan": math.nan, "inf": math.inf, "flag": True, "text": "x", "list": [1]}
    assert read(tmp_path)["metrics"] == {"a": 1, "b": 0.5, "nan": None, "inf": None, "flag": 1}  # valid JSON


def test_non_number_metrics_are_named_in_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="procrl"):
        with track_run(tmp_path, command="frs", argv=[]) as run:
            run.metrics = {"ok": 1.0, "text": "x"}
    assert "['text']" in caplog.text


# --------------------------------------------------------------------------------------------------------------------
# Atomic writes
# --------------------------------------------------------------------------------------------------------------------


def test_writes_leave_no_temporary_file(tmp_path):
    with track_run(tmp_path, command="frs", argv=[]) as run:
        run.save()
    assert sorted(p.name for p in tmp_path.iterdir()) == [RUN_FILE]


def test_a_failed_write_keeps_the_previous_record_and_removes_its_temporary_file(tmp_path, monkeypatch):
    with track_run(tmp_path, command="frs", argv=[]) as run:
        before = (tmp_path / RUN_FILE).read_text()

        def refuse(src, dst):
            raise OSError("disk full")

        monkeypatch.setattr(tracking.os, "replace", refuse)
        run.metrics = {"x": 1.0}
        with pytest.raises(OSError, match="disk full"):
            run.save()
        assert (tmp_path / RUN_FILE).read_text() == before  # a reader never sees half a record
        assert sorted(p.name for p in tmp_path.iterdir()) == [RUN_FILE]
        monkeypatch.undo()


# --------------------------------------------------------------------------------------------------------------------
# Ranks, variant, settings
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, writes",
    [
        ({"RANK": "1", "LOCAL_RANK": "1"}, False),
        ({"LOCAL_RANK": "1"}, False),  # one node, no RANK
        ({"RANK": "3", "LOCAL_RANK": "0"}, False),  # first process of the second node
        ({"RANK": "0", "LOCAL_RANK": "0"}, True),
        ({}, True),  # a plain single process
    ],
)
def test_only_the_main_process_writes(tmp_path, monkeypatch, env, writes):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "run"
    with track_run(out, command="train-grpo", argv=[]) as run:
        run.metrics = {"reward": 1.0}
        run.save()
    assert (out / RUN_FILE).is_file() is writes
    if not writes:
        assert not out.exists()


def test_the_variant_comes_from_procrl_variant(tmp_path, monkeypatch):
    variant = {
        "sweep": "reward_ablation",
        "name": "outcome-seed1",
        "parameters": {"reward_funcs": ["outcome"]},
        "seed": 1,
    }
    monkeypatch.setenv("PROCRL_VARIANT", json.dumps(variant))
    monkeypatch.setenv("WORLD_SIZE", "2")
    with track_run(tmp_path, command="train-grpo", argv=[]):
        pass
    record = read(tmp_path)
    assert record["variant"] == variant and record["machine"]["world_size"] == 2


@pytest.mark.parametrize("value", ["{not json", "[1, 2]", '"a string"'])
def test_a_malformed_variant_is_null_with_a_warning(monkeypatch, caplog, value):
    monkeypatch.setenv("PROCRL_VARIANT", value)
    with caplog.at_level(logging.WARNING, logger="procrl"):
        assert read_variant() is None
    assert "PROCRL_VARIANT" in caplog.text


def test_no_variant_without_the_variable(monkeypatch):
    assert read_variant() is None
    monkeypatch.setenv("PROCRL_VARIANT", "  ")
    assert read_variant() is None


class Mode(enum.Enum):
    FAST = "fast"


@dataclass
class Inner:
    depth: int = 2


@dataclass
class Settings:
    path: Path = Path("/tmp/x")
    mode: Mode = Mode.FAST
    inner: Inner = field(default_factory=Inner)
    pair: tuple = (1, 2.5)
    weight: float = math.nan
    api_key: str = "sk-secret"  # masked
    hub_token: str | None = None  # None stays None: nothing to hide
    max_new_tokens: int = 64  # a number named ...tokens: not a secret
    names: list[str] = field(default_factory=lambda: ["outcome", "pum"])


def test_config_record_is_json_with_secrets_masked():
    record = config_record([Settings(), Settings(max_new_tokens=8)])
    assert json.loads(json.dumps(record, allow_nan=False)) == record  # round-trips through strict JSON
    assert record["Settings"] == {
        "path": "/tmp/x",
        "mode": "fast",
        "inner": {"depth": 2},
        "pair": [1, 2.5],
        "weight": None,
        "api_key": "<masked>",
        "hub_token": None,
        "max_new_tokens": 64,
        "names": ["outcome", "pum"],
    }
    assert record["Settings#2"]["max_new_tokens"] == 8  # a second config of one class keeps both


def test_config_record_of_training_arguments_uses_to_dict(tmp_path):
    from transformers import TrainingArguments  # the base of TRL's and procrl's trainer configs

    config = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, hub_token="hf_abc", seed=7)
    record = config_record([config])["TrainingArguments"]
    assert json.loads(json.dumps(record, allow_nan=False)) == record
    assert record["hub_token"] == "<masked>" and "hf_abc" not in json.dumps(record)
    assert record["seed"] == 7 and record["output_dir"] == str(tmp_path)
    assert set(record) == set(config.to_dict())


def test_config_record_refuses_what_is_not_a_config():
    with pytest.raises(TypeError, match="neither a dataclass"):
        config_record([{"a": 1}])


# --------------------------------------------------------------------------------------------------------------------
# git, packages, machine
# --------------------------------------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def test_git_state_of_a_checkout(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", "a.py")
    _git(repo, "commit", "-q", "-m", "first")
    head = _git(repo, "rev-parse", "HEAD")
    assert git_info(repo) == {"commit": head, "dirty": False}
    (repo / "a.py").write_text("x = 2\n")  # a modified file
    assert git_info(repo) == {"commit": head, "dirty": True}
    _git(repo, "checkout", "-q", "a.py")
    (repo / "new.py").write_text("")  # an untracked file counts too
    assert git_info(repo) == {"commit": head, "dirty": True}
    # track_run asks the procrl checkout (provenance.SOURCE_DIR)
    monkeypatch.setattr(provenance, "SOURCE_DIR", repo)
    with track_run(tmp_path / "out", command="frs", argv=[]):
        pass
    assert read(tmp_path / "out")["git"] == {"commit": head, "dirty": True}


def test_no_git_state_outside_a_checkout(tmp_path, monkeypatch):
    plain = tmp_path / "site-packages"
    plain.mkdir()
    assert git_info(plain) == {"commit": None, "dirty": None}
    repo = tmp_path / "repo"
    (repo / ".venv" / "site-packages").mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "first")
    # an installed package inside some other repository's venv is not that repository's code
    assert git_info(repo / ".venv" / "site-packages") == {"commit": None, "dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # git missing
    assert git_info(repo) == {"commit": None, "dirty": None}


def test_packages_and_machine(tmp_path):
    import importlib.metadata

    with track_run(tmp_path, command="frs", argv=[]):
        pass
    record = read(tmp_path)
    packages = record["packages"]
    assert set(packages) == set(provenance.PACKAGES)
    assert packages["torch"] == importlib.metadata.version("torch")
    assert packages["trl"] == importlib.metadata.version("trl")
    machine = record["machine"]
    assert machine["world_size"] == 1 and machine["cpu_count"] >= 1 and machine["cpu"]
    assert isinstance(machine["gpus"], list) and machine["python"].count(".") == 2


# --------------------------------------------------------------------------------------------------------------------
# Metrics helpers and arguments
# --------------------------------------------------------------------------------------------------------------------


def test_numeric_metrics_flattens_and_keeps_numbers():
    values = {
        "results": {"majority": {"accuracy": 0.5, "ci_low": 0.1, "correct": 1}, "empty": {}},
        "score": None,  # not measured: left out
        "nan": math.nan,
        "name": "svamp",
        "ok": False,  # a flag becomes 0
    }
    assert numeric_metrics(values, "select/") == {
        "select/results/majority/accuracy": 0.5,
        "select/results/majority/ci_low": 0.1,
        "select/results/majority/correct": 1,
        "select/ok": 0,
    }


def test_history_from_log_keeps_steps_and_numbers():
    log = [
        {"loss": 0.5, "reward": 1.0, "step": 1, "epoch": 0.1, "note": "x"},
        {"eval_loss": 0.2},  # no step: left out
        {"reward": math.nan, "step": 2, "completions/mean_length": 12},
        {"train_runtime": 3.0, "step": 2},
    ]
    assert history_from_log(log) == [
        {"step": 1, "loss": 0.5, "reward": 1.0, "epoch": 0.1},
        {"step": 2, "completions/mean_length": 12},
        {"step": 2, "train_runtime": 3.0},
    ]


def test_tracking_arguments():
    assert TrackingArguments().report_to == ["none"]
    assert TrackingArguments(report_to="wandb").report_to == ["wandb"]
    with pytest.raises(ValueError, match="--report-to wandb"):
        TrackingArguments(report_to=["tensorboard"])


# --------------------------------------------------------------------------------------------------------------------
# wandb
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow  # starts wandb's service process (seconds; a minute on a loaded machine)
def test_wandb_offline_run_holds_the_record(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("PROCRL_VARIANT", json.dumps({"sweep": "s", "name": "outcome-seed0", "parameters": {}}))
    # wandb's service writes the .wandb file and closes it after run.finish() returned: it is read once that process
    # has exited (as at process exit; tests/helpers/wandb_service.py says why, with wandb's sources)
    with owned_wandb_service(monkeypatch):
        with track_run(tmp_path, command="frs", argv=["--n", "2"], report_to=["wandb"]) as run:
            run.metrics = {"frs/score": 42.5, "frs/judged": 3}
        assert read(tmp_path)["status"] == "finished"
    records = wandb_records(tmp_path)
    summary = wandb_summary(records)
    kinds = [r.WhichOneof("record_type") for r in records]
    assert summary.get("frs/score") == 42.5 and summary.get("frs/judged") == 3, kinds
    (start,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert start.project == "procrl" and start.display_name == "outcome-seed0" and start.job_type == "frs"
    config = {}
    for r in records:
        kind = r.WhichOneof("record_type")
        updates = r.run.config.update if kind == "run" else r.config.update if kind == "config" else []
        config.update({item.key: json.loads(item.value_json) for item in updates})
    assert config["procrl"]["git"] == read(tmp_path)["git"]
    assert config["procrl"]["variant"]["name"] == "outcome-seed0" and config["procrl"]["status"] == "finished"


def test_a_wandb_failure_is_a_warning_not_a_failed_run(tmp_path, monkeypatch, caplog):
    wandb = pytest.importorskip("wandb")

    def broken(**kwargs):
        raise RuntimeError("no wandb today")

    monkeypatch.setattr(wandb, "init", broken)
    with caplog.at_level(logging.WARNING, logger="procrl"):
        with track_run(tmp_path, command="select", argv=[], report_to="wandb") as run:
            run.metrics = {"select/random/accuracy": 0.5}
    assert read(tmp_path)["status"] == "finished" and "no wandb today" in caplog.text


# --------------------------------------------------------------------------------------------------------------------
# Secrets in argv, SIGTERM
# --------------------------------------------------------------------------------------------------------------------


def test_secret_flag_values_in_argv_are_masked(tmp_path):
    argv = ["--hub_token", "hf_SECRET", "--openai-api-key=sk-SECRET", "--max_new_tokens", "64", "--hub-token=",
            "--judge_password", "--next", "--API_KEY", "k2"]  # fmt: skip
    with track_run(tmp_path, command="frs", argv=argv):
        pass
    assert read(tmp_path)["argv"] == [
        "--hub_token", "<masked>", "--openai-api-key=<masked>", "--max_new_tokens", "64", "--hub-token=",
        "--judge_password", "--next", "--API_KEY", "<masked>",
    ]  # fmt: skip
    assert "SECRET" not in (tmp_path / RUN_FILE).read_text()


def test_sigterm_handler_only_inside_the_block_and_the_previous_one_restored(tmp_path):
    def own_handler(signum, frame):  # pragma: no cover - never called
        pass

    before = signal.signal(signal.SIGTERM, own_handler)
    try:
        with track_run(tmp_path, command="frs", argv=[]):
            assert signal.getsignal(signal.SIGTERM) is tracking._raise_terminated
        assert signal.getsignal(signal.SIGTERM) is own_handler
        with pytest.raises(ValueError), track_run(tmp_path, command="frs", argv=[]):
            raise ValueError("boom")
        assert signal.getsignal(signal.SIGTERM) is own_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_no_sigterm_handler_off_the_main_thread(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    seen, errors = [], []

    def run_in_thread():
        try:
            with track_run(tmp_path, command="frs", argv=[]):
                seen.append(signal.getsignal(signal.SIGTERM))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    thread = threading.Thread(target=run_in_thread)
    thread.start()
    thread.join()
    assert not errors and seen == [before] and read(tmp_path)["status"] == "finished"


SIGTERM_CHILD_DEADLINE_S = 300  # generous: the child imports procrl on a shared, loaded machine
_SIGTERM_CHILD = """
import sys, threading
from procrl.experiment.tracking import track_run
with track_run(sys.argv[1], command="frs", argv=["--x", "1"]):
    threading.Event().wait()  # blocks until SIGTERM's handler raises in this (the main) thread
"""


@pytest.mark.slow
def test_sigterm_marks_the_record_failed(tmp_path):
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "PROCRL_VARIANT")}
    child = subprocess.Popen([sys.executable, "-c", _SIGTERM_CHILD, str(out)], env=env, stderr=subprocess.PIPE)
    try:
        # track_run sets the handler before it writes "running" (atomically: write_json_atomic). The deadline only
        # guards against a hang; what orders the test is the record.
        deadline, status = time.monotonic() + SIGTERM_CHILD_DEADLINE_S, None
        while status != "running":
            if child.poll() is not None:
                pytest.fail(f"the child exited {child.returncode}: {child.stderr.read().decode()}")
            if time.monotonic() > deadline:
                pytest.fail(f"the child's run record did not say running within {SIGTERM_CHILD_DEADLINE_S} s")
            try:
                status = read(out)["status"]
            except (FileNotFoundError, json.JSONDecodeError):
                status = None
            if status != "running":
                time.sleep(0.05)  # polling interval, not synchronisation: the loop waits for the record
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    record = read(out)
    assert child.returncode == 143, stderr.decode()
    assert record["status"] == "failed" and "SIGTERM" in record["error"], record
    assert record["error"].startswith("Terminated: ") and record["finished_at"] is not None
    assert "Traceback" not in stderr.decode()  # a SystemExit: no traceback
