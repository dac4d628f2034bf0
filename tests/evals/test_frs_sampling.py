"""`procrl frs --traces-from`: a `procrl select` report's samples become the FRS traces (no model is loaded): the
log-probs are read back from the shard files the report lists in its sample store."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from procrl.data_builders.datasets import load_math_dataset, resolve_template
from procrl.data_builders.rollouts import RolloutRequest, RolloutStats, run_rollouts
from procrl.evals.frs import FRSArguments
from procrl.evals.frs.offline import OfflineFRSConfig, run_frs
from procrl.evals.frs.sampling import select_traces
from procrl.evals.frs.traces import read_traces
from procrl.generation import Rollout, RolloutEngine, SamplingParams
from procrl.judges import JudgeArguments

SETTINGS = {"model": "some-policy", "dataset": "svamp", "split": None, "start": 0, "end": 2,
            "prompt_template": "one_shot", "n": 2, "temperature": 0.9, "top_p": 1.0, "max_new_tokens": 12,
            "batch_size": 4, "seed": 3, "generation_backend": "vllm", "scorer": "random"}  # fmt: skip
# 20-token samples: n_low = floor(0.1 * 20) = 2, so the confidence is the mean of the 2 smallest probabilities
LOGPS = [
    [math.log(0.9)] * 18 + [math.log(0.5), math.log(0.3)],  # -> (0.5 + 0.3) / 2 = 0.4
    [math.log(0.8)] * 20,  # -> 0.8
    [math.log(0.2)] + [math.log(0.99)] * 19,  # -> (0.2 + 0.99) / 2 = 0.595
    [0.0] * 20,  # -> 1.0
]
CONFIDENCE = [0.4, 0.8, 0.595, 1.0]


class ScriptedSampler(RolloutEngine):
    """Row k (prompt [k]) gets 20 tokens with log-probs LOGPS[k]."""

    model_id = "vllm:test-engine"
    tokenizer = None

    def generate(self, prompt_ids, params, *, seed):
        return [Rollout([1] * 20, "", LOGPS[row[0]], "length") for row in prompt_ids]


def _rows():
    return [dict(r) for r in load_math_dataset("svamp", start=0, end=2, prompt_template=resolve_template("one_shot"))]


def _write_report(tmp_path, *, problem_ids=None, n_samples=4):
    rows = _rows()
    ids = problem_ids or [r.get("problem_id") for r in rows]
    texts = [
        [f"The answer is {rows[0]['answer']}.", "The answer is -1."],
        ["I give up.", f"Thus the answer is {rows[1]['answer']}."],
    ]
    problems = [
        {"problem_id": pid, "answer": row["answer"], "candidates": [{"text": t, "num_tokens": 20} for t in group]}
        for pid, row, group in zip(ids, rows, texts, strict=True)
    ]
    path = tmp_path / "sel"  # a select run's directory: run.json, problems.jsonl, cache/
    path.mkdir()
    stats = RolloutStats()  # the samples in the run's sample store, one row per shard
    requests = [RolloutRequest(str(k), [k], 1) for k in range(n_samples)]
    params = SamplingParams(max_new_tokens=20)
    run_rollouts(ScriptedSampler(), requests, params, seed=3, cache_dir=path / "cache", shard_size=1, stats=stats)
    samples = {"engine": "vllm:test-engine", "files": [Path(f).name for f in stats.files]}
    record = {
        "command": "select",
        "status": "finished",
        "result": {"command": "select", "settings": SETTINGS, "samples": samples},
    }
    (path / "run.json").write_text(json.dumps(record))
    (path / "problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    return path, rows


def test_select_traces_take_text_confidence_and_correctness_from_the_report(tmp_path):
    path, rows = _write_report(tmp_path)
    traces = select_traces(path, rows)
    assert [t.problem_id for t in traces] == [str(rows[0]["problem_id"])] * 2 + [str(rows[1]["problem_id"])] * 2
    assert [t.correct for t in traces] == [True, False, False, True]
    assert [t.num_tokens for t in traces] == [20] * 4
    assert [t.problem for t in traces[::2]] == [rows[0]["question"], rows[1]["question"]]
    for trace, expected in zip(traces, CONFIDENCE, strict=True):
        assert trace.confidence == pytest.approx(expected, abs=1e-12)


def test_frs_traces_from_uses_the_reports_settings_and_loads_no_model(tmp_path, monkeypatch):
    from procrl.evals.frs import offline as frs_offline

    monkeypatch.setattr(frs_offline, "load_setup", lambda *a, **k: pytest.fail("--traces-from must not sample"))
    path, _ = _write_report(tmp_path)
    args = OfflineFRSConfig(traces_from=str(path), output_dir=str(tmp_path / "frs"), no_progress=True,
                            bootstrap_resamples=0)  # fmt: skip
    result, files = run_frs(args, FRSArguments(frs_traces=16), JudgeArguments(judge="none"))
    assert result["model"] == "some-policy" and result["dataset"] == "svamp[0:2]"
    settings = result["settings"]
    assert (settings["n_traces"], settings["temperature"], settings["max_new_tokens"], settings["seed"]) == (
        2,
        0.9,
        12,
        3,
    )
    assert settings["engine"] == "vllm:test-engine" and settings["traces_from"] == str(path)
    traces = read_traces(tmp_path / "frs" / files["judged_traces"])
    assert [t.confidence for t in traces] == pytest.approx(CONFIDENCE, abs=1e-12)
    assert result["report"]["accuracy"] == pytest.approx(0.5) and result["report"]["n_traces"] == 4
    assert not (tmp_path / "frs" / "cache").exists() and "traces" not in files  # nothing sampled


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"n_samples": 3}, "hold 3 samples"), ({"problem_ids": ["x", "y"]}, "problem 0 is 'x'")],
)
def test_select_traces_refuse_a_report_that_does_not_match(tmp_path, kwargs, message):
    path, rows = _write_report(tmp_path, **kwargs)
    with pytest.raises(ValueError, match=message):
        select_traces(path, rows)


def test_select_traces_refuse_a_missing_shard_file_and_another_slice(tmp_path):
    path, rows = _write_report(tmp_path)
    with pytest.raises(ValueError, match="data slice has 1"):
        select_traces(path, rows[:1])
    next((path / "cache").glob("rollouts-*.jsonl")).unlink()
    with pytest.raises(ValueError, match="samples in .*cache are missing or unreadable"):
        select_traces(path, rows)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "run.json").write_text('{"command": "frs", "status": "finished"}')
    with pytest.raises(ValueError, match="not a readable `procrl select` run .*not a finished select run"):
        select_traces(tmp_path / "bad", rows)
