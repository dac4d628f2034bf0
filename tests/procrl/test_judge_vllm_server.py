"""Tests of the vLLM judge server (`procrl.judges.server.JudgeServer(engine="vllm")`) and of `open_judge("local")`.

Fast: the command line and environment the server gets, the plain chat template of a model without one (against
`TransformersJudge`'s plain prompt, tokenised by hand), and the spec -> judge mapping, with the server replaced by a
recorder. Slow: a REAL vLLM server on the embedded SmolLM2-135M-Instruct (started once for the module through
`open_judge("local")`), and one on Gemma 3 270M (no chat template).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import urllib.request
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field
from subprocesses import GROUP_EXIT_S, group_gone

from procrl.judges import JudgeServer, OpenAICompatibleJudge, TransformersJudge, open_judge
from procrl.judges import spec as spec_module
from procrl.judges.choices import argmax_value, closed_choices, value_key
from procrl.judges.server import plain_chat_template

# An FRS-style judgement: four strict integers 1-5 (no bool, numeric string or float), no extra keys.
Score = Annotated[int, Field(strict=True, ge=1, le=5)]


class Rubric(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    faithfulness: Score
    utility: Score
    coherence: Score
    factuality: Score


class NLI(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    label: Literal["entailment", "neutral", "contradiction"]


def rubric_request(i: int) -> list[dict]:
    a, b = 3 + i, 4 + 2 * i
    wrong = i % 2 == 1
    answer = a * b + (1 if wrong else 0)
    trace = f"Each box holds {b} pens.\n\nThere are {a} boxes, so {a} * {b} = {answer}.\n\nThe answer is {answer}."
    return [
        {"role": "system", "content": "You grade reasoning. Give four integer scores from 1 to 5 as JSON."},
        {
            "role": "user",
            "content": f"Problem: {a} boxes of {b} pens. How many pens?\nReference final answer: {a * b}\n"
            f'Correctness check: {{"final_correct": {json.dumps(not wrong)}}}\n'
            f"Student's reasoning:\n<<<\n{trace}\n>>>\n"
            'Reply with only {"faithfulness": _, "utility": _, "coherence": _, "factuality": _}',
        },
    ]


def nli_request(i: int) -> list[dict]:
    premise = f"Tom has {i + 2} apples and buys {i + 1} more."
    hypothesis = f"Tom has {2 * i + 3 + (i % 3)} apples."
    return [
        {"role": "system", "content": "Decide whether the premise entails the hypothesis. Reply as JSON."},
        {"role": "user", "content": f'Premise: {premise}\nHypothesis: {hypothesis}\nReply {{"label": _}}'},
    ]




@pytest.fixture(scope="session")
def gemma_path() -> str:
    from procrl.models import resolve_model

    try:
        return resolve_model("gemma3-270m")
    except FileNotFoundError as exc:  # the optional part packages (`procrl model prepare --all`) are not installed
        pytest.skip(f"Gemma 3 270M is not installed: {exc}")


# --------------------------------------------------------------------------------------------------------------------
# Fast: command line, environment, chat template, specs
# --------------------------------------------------------------------------------------------------------------------


def test_vllm_command_on_cpu(default_model_path):
    server = JudgeServer("default", engine="vllm", device="cpu", port=4321)
    cmd = server.command()
    assert cmd[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", default_model_path]

    def flag(name):
        return cmd[cmd.index(name) + 1]

    assert flag("--served-model-name") == default_model_path == server.model_id
    assert (flag("--host"), flag("--port")) == ("127.0.0.1", "4321")
    assert flag("--dtype") == "float32" and "--enforce-eager" in cmd
    assert flag("--kv-cache-memory-bytes") == str(2**29)  # 0.5 GiB
    assert (flag("--max-model-len"), flag("--max-logprobs"), flag("--generation-config")) == ("4096", "20", "vllm")
    assert "--chat-template" not in cmd  # SmolLM2 has its own template
    # llguidance without free whitespace (a small model padded replies with it), and no GPU share on CPU
    assert json.loads(flag("--structured-outputs-config")) == {"backend": "guidance", "disable_any_whitespace": True}
    assert "--gpu-memory-utilization" not in cmd
    gpu = JudgeServer("default", engine="vllm", device="cuda", kv_cache_gib=None, extra_args=["--seed", "1"]).command()
    assert "--enforce-eager" not in gpu and "--dtype" not in gpu and "--kv-cache-memory-bytes" not in gpu
    assert gpu[gpu.index("--gpu-memory-utilization") + 1] == "0.15"  # vLLM checks that much is free at start
    assert gpu[-2:] == ["--seed", "1"]


def test_vllm_environment(default_model_path, monkeypatch):
    # A trainer's import_vllm sets multiprocessing off, which vLLM's API server cannot run with; a legacy
    # VLLM_CPU_KVCACHE_SPACE would override the explicit KV-cache size.
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "8")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "auto")
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "ERROR")  # what `import trl` sets (trl/_compat.py:87)
    env = JudgeServer("default", device="cpu", num_threads=2).environment()
    assert (
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] == env["PYTHONUNBUFFERED"] == "1" and "VLLM_CPU_KVCACHE_SPACE" not in env
    )
    assert env["VLLM_LOGGING_LEVEL"] == "INFO"  # the request log the slow schema test reads
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" and env["OMP_NUM_THREADS"] == "2"
    default = JudgeServer("default", device="cpu").environment()
    assert default["VLLM_CPU_OMP_THREADS_BIND"] == "auto"  # None keeps vLLM's binding
    hf = JudgeServer("default", engine="transformers", num_threads=1).environment()
    assert hf["OMP_NUM_THREADS"] == "1" and hf["VLLM_CPU_KVCACHE_SPACE"] == "8"  # vLLM settings untouched


def test_transformers_command_is_unchanged(default_model_path):
    server = JudgeServer("default", engine="transformers", port=7, continuous_batching=True)
    assert server.device == "cpu"
    assert server.command() == [
        sys.executable,
        "-m",
        "transformers.cli.transformers",
        "serve",
        default_model_path,
        *("--host", "127.0.0.1", "--port", "7", "--device", "cpu"),
        *("--continuous-batching", "--cb-num-blocks", "256", "--cb-block-size", "32"),
    ]


@pytest.mark.parametrize("kwargs", [{"engine": "sglang"}, {"kv_cache_gib": 0}, {"num_threads": 0}])
def test_bad_server_arguments_raise(kwargs):
    with pytest.raises(ValueError, match="JudgeServer"):
        JudgeServer("some/dir", **kwargs)


def test_plain_chat_template_is_the_in_process_prompt(gemma_path, smollm2_tokenizer):
    from transformers import AutoTokenizer

    assert plain_chat_template(smollm2_tokenizer) is None
    tokenizer = AutoTokenizer.from_pretrained(gemma_path)
    template = plain_chat_template(tokenizer)
    messages = [{"role": "system", "content": "Grade it.\nStrictly."}, {"role": "user", "content": "2+2=4 {ok}"}]
    # TransformersJudge's plain prompt, written out by hand, tokenised as it tokenises it (special tokens on).
    expected = tokenizer("system: Grade it.\nStrictly.\nuser: 2+2=4 {ok}\nassistant:")["input_ids"]
    assert expected[0] == tokenizer.bos_token_id and expected.count(tokenizer.bos_token_id) == 1
    # vLLM renders the template to text and tokenises it without special tokens (add_special_tokens=False).
    text = tokenizer.apply_chat_template(messages, chat_template=template, add_generation_prompt=True, tokenize=False)
    assert text == "<bos>system: Grade it.\nStrictly.\nuser: 2+2=4 {ok}\nassistant:"
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == expected


def test_vllm_server_writes_and_removes_its_chat_template(gemma_path):
    server = JudgeServer(gemma_path, engine="vllm", device="cpu")
    cmd = server.command()
    path = cmd[cmd.index("--chat-template") + 1]
    assert cmd[cmd.index("--chat-template-content-format") + 1] == "string"
    assert os.path.exists(path) and server.command() == cmd  # written once
    server.stop()  # never started: the file still goes
    assert not os.path.exists(path)


class RecordingServer:
    """Stands in for JudgeServer in open_judge: records its arguments, starts nothing."""

    made: list[RecordingServer] = []

    def __init__(self, model, **kwargs):
        self.model, self.kwargs, self.entered, self.exited = model, kwargs, False, False
        self.model_id, self.base_url = f"dir/{model}", "http://127.0.0.1:9/v1"
        RecordingServer.made.append(self)

    def __enter__(self):
        self.entered = True
        return self

    def __exit__(self, *exc):
        self.exited = True


@pytest.fixture()
def recording_server(monkeypatch):
    RecordingServer.made = []
    monkeypatch.setattr(spec_module, "JudgeServer", RecordingServer)
    monkeypatch.setattr(spec_module, "vllm_import_error", lambda: None)
    return RecordingServer.made


def test_open_judge_local_is_a_vllm_server_with_a_schema_client(recording_server):
    options = spec_module.judge_options(
        "local", max_tokens=64, timeout_s=30.0, model="m", continuous_batching=True, num_threads=1
    )
    assert options == {"max_tokens": 64, "timeout_s": 30.0, "num_threads": 1, "model": "m"}
    with open_judge("local", cache_dir=None, max_concurrency=3, kv_cache_gib=0.75, **options) as judge:
        (server,) = recording_server
        assert server.model == "default" and server.entered and not server.exited
        assert server.kwargs == {"engine": "vllm", "num_threads": 1, "kv_cache_gib": 0.75}
        assert isinstance(judge, OpenAICompatibleJudge) and judge.model == "dir/default"
        assert (judge.max_tokens, judge.timeout_s, judge.max_concurrency) == (64, 30.0, 3)
        payload = judge._request_payload(rubric_request(0), Rubric)
        assert payload["response_format"]["type"] == "json_schema" and payload["logprobs"]
    assert server.exited
    with open_judge("local:some/dir") as judge:
        assert recording_server[-1].model == "some/dir"


def test_open_judge_serve_transformers(recording_server):
    options = spec_module.judge_options("serve:transformers:x/y", max_tokens=8, timeout_s=5, continuous_batching=True)
    assert options == {"max_tokens": 8, "timeout_s": 5, "continuous_batching": True}
    with open_judge("serve:transformers:x/y", **options) as judge:
        assert isinstance(judge, OpenAICompatibleJudge) and judge.max_tokens == 8
    assert recording_server[-1].model == "x/y"
    assert recording_server[-1].kwargs == {"engine": "transformers", "continuous_batching": True}
    with open_judge("serve:transformers"):
        assert recording_server[-1].model == "default"


def test_open_judge_local_without_vllm_runs_in_process(monkeypatch, caplog):
    def broken():
        raise ImportError("vLLM cannot be imported (RuntimeError: bad wheel); install it with `make install`")

    monkeypatch.setattr(spec_module, "import_vllm", broken)
    monkeypatch.setattr(spec_module, "JudgeServer", None)  # must not be reached
    options = spec_module.judge_options("local:some/model", max_tokens=7, timeout_s=3.0, model="m", num_threads=1)
    with caplog.at_level(logging.WARNING, logger="procrl"):
        with open_judge("local:some/model", max_concurrency=4, **options) as judge:
            assert isinstance(judge, TransformersJudge) and judge.constrained
            assert judge.model_name_or_path == "some/model" and judge.max_new_tokens == 7
            assert judge._model is None  # `model="m"` (a server's model id) is not taken as the LM object
    assert any("make install" in r.getMessage() and "in this process" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------------------------------------------------
# Slow: a real vLLM server on the embedded model
# --------------------------------------------------------------------------------------------------------------------


def _require_vllm():
    why = spec_module.vllm_import_error()
    if why is not None:
        pytest.skip(f"vLLM cannot be imported here: {why}")


@pytest.fixture(scope="module")
def vllm_judge(tmp_path_factory):
    """(judge, server, log path) from `open_judge("local")` on the default model; after the module, checks that the
    server's process group is gone."""
    _require_vllm()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    made = []

    class Recorded(JudgeServer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spec_module, "JudgeServer", Recorded)
        # --enable-log-requests: vLLM logs each request's SamplingParams, structured outputs included.
        with open_judge(
            "local", max_tokens=64, timeout_s=300, max_retries=1, num_threads=1, startup_timeout_s=400,
            log_path=str(log), extra_args=["--enable-log-requests"],
        ) as judge:  # fmt: skip
            (server,) = made
            process = server._process
            yield judge, server, log
    assert group_gone(process), f"the vLLM server's process group outlived open_judge by {GROUP_EXIT_S} s"


@pytest.mark.slow
def test_vllm_server_is_loopback_and_pinned(vllm_judge, default_model_path):
    judge, server, _ = vllm_judge
    assert server.engine == "vllm" and server.base_url.startswith("http://127.0.0.1:")
    assert judge.model == server.model_id == default_model_path
    with urllib.request.urlopen(f"{server.base_url}/models", timeout=30) as response:
        assert [m["id"] for m in json.load(response)["data"]] == [default_model_path]
    wrong = OpenAICompatibleJudge(server.base_url, "not-this-model", max_tokens=4, max_retries=2)
    (bad,) = wrong.judge([nli_request(0)], NLI, progress=False)
    assert bad.unscored == "http_404" and bad.attempts == 1  # typed, not retried


@pytest.mark.slow
def test_vllm_replies_follow_the_schema_with_probabilities(vllm_judge):
    judge, _, log = vllm_judge
    requests = [rubric_request(i) for i in range(8)] + [nli_request(i) for i in range(8)]
    schemas = [Rubric] * 8 + [NLI] * 8
    for messages, schema in zip(requests[7:9], schemas[7:9], strict=True):
        sent = judge._request_payload(messages, schema)["response_format"]
        assert sent["type"] == "json_schema" and sent["json_schema"]["schema"] == schema.model_json_schema()
    results = judge.judge(requests, schemas, progress=False)
    assert [r.unscored for r in results] == [None] * 16, [r.raw for r in results]
    assert all(r.followed_schema for r in results)
    # vLLM received the schema as structured outputs, per request (its request log prints the SamplingParams).
    logged = re.findall(r"structured_outputs=StructuredOutputsParams\(json=(\{.*?\}), regex=", log.read_text())
    assert sum("'faithfulness'" in s for s in logged) == 8 and sum("'entailment'" in s for s in logged) == 8
    for result, schema in zip(results, schemas, strict=True):
        allowed = {name: {value_key(v) for v in values} for name, values in closed_choices(schema).items()}
        assert result.probs is not None and set(result.probs) == set(allowed)
        for name, dist in result.probs.items():
            assert set(dist) <= allowed[name] and math.isclose(sum(dist.values()), 1.0, abs_tol=1e-6)
            assert all(0.0 <= p <= 1.0 for p in dist.values())
        if schema is Rubric:  # one digit token decides a score: greedy wrote the argmax
            for name, dist in result.probs.items():
                assert argmax_value(dist) == str(getattr(result.value, name))


@pytest.mark.slow
def test_vllm_top_logprobs_are_after_the_grammar_mask(vllm_judge):
    _, server, _ = vllm_judge
    # A choice among "1".."5": at the first position the grammar allows these digits and nothing else. (Inside a
    # JSON schema the grammar also allows free whitespace before a value, so there the allowed set is larger.)
    body = {
        "model": server.model_id, "messages": rubric_request(0)[1:], "temperature": 0, "max_tokens": 4,
        "logprobs": True, "top_logprobs": 10, "structured_outputs": {"choice": ["1", "2", "3", "4", "5"]},
    }  # fmt: skip
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        choice = json.load(response)["choices"][0]
    first = choice["logprobs"]["content"][0]
    assert first["token"] == choice["message"]["content"] and first["token"] in {"1", "2", "3", "4", "5"}
    # Computed after the mask: the allowed tokens carry all the probability mass and every other alternative of
    # the top 10 is -inf (sent as -9999). Unmasked log-probs of finite logits are never near -9999.
    alternatives = {a["token"]: a["logprob"] for a in first["top_logprobs"]}
    live = {token: lp for token, lp in alternatives.items() if lp > -9000}
    assert len(alternatives) == 10 and set(live) <= {"1", "2", "3", "4", "5"} and first["token"] in live
    assert all(lp == -9999.0 for token, lp in alternatives.items() if token not in live)
    assert math.isclose(sum(math.exp(lp) for lp in live.values()), 1.0, abs_tol=1e-4)


@pytest.mark.slow
def test_vllm_start_failure_raises_with_log_tail(tmp_path):
    _require_vllm()
    missing = tmp_path / "no-such-model"
    server = JudgeServer(str(missing), startup_timeout_s=300, log_path=str(tmp_path / "server.log"))
    with pytest.raises(RuntimeError, match="api_server did not start: the server exited with code 1") as info:
        server.start()
    last_line = (tmp_path / "server.log").read_text().strip().splitlines()[-1]
    assert "no-such-model" in last_line and last_line in str(info.value)  # vLLM's own error, in the message
    assert server._process is None


@pytest.mark.slow
def test_vllm_server_on_a_model_without_chat_template(gemma_path, tmp_path):
    _require_vllm()
    from transformers import AutoTokenizer

    messages = nli_request(1)
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
    expected = AutoTokenizer.from_pretrained(gemma_path)(text)["input_ids"]
    with JudgeServer(gemma_path, num_threads=1, startup_timeout_s=400, log_path=str(tmp_path / "log")) as server:
        process, template = server._process, server._template
        response_format = {"type": "json_schema", "json_schema": {"name": "NLI", "schema": NLI.model_json_schema()}}
        body = {"model": server.model_id, "messages": messages, "temperature": 0, "max_tokens": 16,
                "return_token_ids": True, "response_format": response_format}  # fmt: skip
        request = urllib.request.Request(
            f"{server.base_url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            reply = json.load(response)
    assert reply["prompt_token_ids"] == expected  # the TransformersJudge prompt, token for token
    NLI.model_validate_json(reply["choices"][0]["message"]["content"])
    assert group_gone(process) and not os.path.exists(template)
