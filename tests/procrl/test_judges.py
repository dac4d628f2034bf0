"""Tests of procrl.judges: parsing, cache, retries and faults against a scripted local HTTP server,
the in-process judge, and one integration test against `transformers serve` on the embedded default model."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import logging
import math
import pickle
import socket
import threading
import time
from pathlib import Path
from typing import Literal

import pytest
import torch
from pydantic import BaseModel, Field
from subprocesses import group_gone
from trl import TrlParser

from procrl.judges import (
    DuplicateKeyError,
    JudgeArguments,
    JudgeResult,
    JudgeServer,
    JudgeStats,
    OpenAICompatibleJudge,
    TransformersJudge,
    extract_json_object,
    judge_options,
    open_judge,
    open_judge_from,
    parse_judgement,
    request_cache_key,
)
from procrl.judges import spec as spec_module


class Score(BaseModel):
    score: int = Field(ge=1, le=5)


class Verdict(BaseModel):
    correct: bool


def req(text: str) -> list[dict]:
    return [{"role": "system", "content": "Grade."}, {"role": "user", "content": text}]


# --------------------------------------------------------------------------------------------------------------------
# A scripted OpenAI-compatible server: the user message picks what each successive attempt gets.
# --------------------------------------------------------------------------------------------------------------------


# The longest any request is held by the server (a bounded wait: a test whose client misbehaves fails, never hangs).
HOLD_S = 30.0


class FaultServer:
    """`/v1/chat/completions` on 127.0.0.1 whose answers follow `script[user_text]`, a list of actions, one per
    attempt (the last one repeats). Unknown texts get 200 with '{"score": 1}'. Actions:
    ("ok", content) | ("status", code[, error message[, error param]]) | ("body", raw bytes, content type) |
    ("hold", content): the request is held until `release` is set (by `close`, or the test) or HOLD_S passes, then
    answered with content.
    With `gate=n`, every request is held until n requests are in flight at once (or HOLD_S passes); from then on
    the gate stays open. It records every POST body and Authorization header, the maximum number of requests in
    flight (a request stops counting before its response is written, so a client that waits for the response
    never sees an overlap that is not there) and whether the gate opened."""

    def __init__(self, gate: int | None = None):
        self.script: dict[str, list[tuple]] = {}
        self.gate = gate
        self.gate_opened = False
        self.release = threading.Event()
        self.posts: list[dict] = []
        self.auth: list[str] = []
        self.seen: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # notified on every arrival
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def _send(self, code: int, body: bytes, content_type: str = "application/json"):
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                    pass

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, json.dumps({"object": "list", "data": [{"id": "fault-model"}]}).encode())
                else:
                    self._send(404, b"{}")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = body["messages"][-1]["content"]
                with server.changed:
                    server.posts.append(body)
                    server.auth.append(self.headers.get("Authorization", ""))
                    attempt = server.seen.get(text, 0)
                    server.seen[text] = attempt + 1
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    if server.gate is not None and server.in_flight >= server.gate:
                        server.gate_opened = True
                    server.changed.notify_all()
                    if server.gate is not None:
                        server.changed.wait_for(lambda: server.gate_opened, timeout=HOLD_S)
                actions = server.script.get(text, [("ok", '{"score": 1}')])
                action = actions[min(attempt, len(actions) - 1)]
                if action[0] == "hold":
                    server.release.wait(timeout=HOLD_S)
                with server.lock:
                    server.in_flight -= 1
                if action[0] == "status":  # ("status", code[, message[, param]])
                    error = {"message": action[2] if len(action) > 2 else "scripted"}
                    if len(action) > 3:
                        error["param"] = action[3]
                    self._send(action[1], json.dumps({"error": error}).encode())
                elif action[0] == "body":
                    self._send(200, action[1], action[2])
                else:
                    self._send(200, json.dumps(completion(body["model"], action[-1])).encode())

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        # a short poll interval: `close` (shutdown) returns within 0.05 s instead of serve_forever's default 0.5 s
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def attempts(self, text: str) -> int:
        return self.seen.get(text, 0)

    def wait_for_attempts(self, text: str, n: int) -> int:
        """The number of requests for `text` once it reaches `n` (or after HOLD_S): a request the client gave up on
        may still be on its way to the server when the client returns."""
        with self.changed:
            self.changed.wait_for(lambda: self.seen.get(text, 0) >= n, timeout=HOLD_S)
            return self.seen.get(text, 0)

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(model: str, content: str) -> dict:
    return {
        "id": "cmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


@pytest.fixture()
def server():
    srv = FaultServer()
    yield srv
    srv.close()


def make_judge(server: FaultServer, **kwargs) -> OpenAICompatibleJudge:
    defaults = dict(max_retries=2, backoff_s=0.01, timeout_s=5.0, max_concurrency=4)
    return OpenAICompatibleJudge(server.base_url, "fault-model", **{**defaults, **kwargs})


# --------------------------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"score": 4}', {"score": 4}),  # bare object
        ('```json\n{"score": 2}\n```', {"score": 2}),  # fenced
        ('Sure! Here is my grade: {"score": 5}. Hope it helps {x}', {"score": 5}),  # prose on both sides
        ('{"a": {"b": 1}, "c": [1, {"d": 2}]}', {"a": {"b": 1}, "c": [1, {"d": 2}]}),  # nesting kept whole
        ('{score: 3} then {"score": 3}', {"score": 3}),  # first VALID object: the unquoted one is skipped
        ('{"score": 4', None),  # cut off by the token limit
        ('{"score": NaN}', None),  # non-finite numbers are rejected (never a NaN score)
        ('[{"score": 1}]', {"score": 1}),  # an array is not an object; its first object element is
        ('{"score": 3, "note": {"score": 1}}', {"score": 3, "note": {"score": 1}}),  # one key in two objects: no repeat
        # cut before its end, the outer object is none: the first complete one is {"k": 1}, before the repeat
        ('{"w": {"k": 1}, "x": {"a": 1, "a": 2}, "y": ', {"k": 1}),
        ("no json here", None),
        ("", None),
    ],
)
def test_extract_json_object(text, expected):
    assert extract_json_object(text) == expected


@pytest.mark.parametrize(
    "text, key",
    [
        ('{"score": 1, "score": 5}', "score"),  # json.loads keeps the last: 5 ...
        ('{"score": 5, "score": 1}', "score"),  # ... and 1 once swapped, so neither order is taken
        ('{"a": {"score": 1, "score": 5}}', "score"),  # nested: the inner object repeats, the outer does not
        ('{"a": [1, {"b": 2, "b": 2}]}', "b"),  # in an array, and even with the same value twice
        # the first complete object is the reply: not skipped for a later "{" (the repeated key's inner objects)
        ('{"score": {"v": 1}, "score": {"v": 5}}', "score"),
        ('Hmm {"score": NaN} so {"score": 1, "score": 5} or {"score": 4}', "score"),  # the NaN one is invalid
    ],
)
def test_extract_json_object_rejects_a_repeated_key(text, key):
    with pytest.raises(DuplicateKeyError, match=f"repeats the key '{key}'"):
        extract_json_object(text)


@pytest.mark.parametrize(
    "text, value, reason",
    [
        ('```json\n{"score": 3}\n```', Score(score=3), None),
        ('The grade is {"score": "4"} overall.', Score(score=4), None),  # pydantic lax mode: "4" -> 4
        ('{"score": 3, "reason": "fine"}', Score(score=3), None),  # extra keys are ignored
        ('{"score": 3, "note": {"score": 1}}', Score(score=3), None),  # one key in two objects is no repeat
        ('{"score": 1, "score": 5}', None, "duplicate_key"),  # would have scored 5 (the last value) ...
        ('{"score": 5, "score": 1}', None, "duplicate_key"),  # ... and 1 once swapped: unscored either way
        ('{"score": 3, "note": {"a": 1, "a": 2}}', None, "duplicate_key"),  # nested, even in a key the schema ignores
        ('Say {"score": 2, "score": 2}, i.e. {"score": 2}', None, "duplicate_key"),  # first object is the reply
        ("I think it is a 3.", None, "invalid_json"),
        ('{"score": 3', None, "invalid_json"),
        ('{"grade": 3}', None, "schema_mismatch"),  # wrong key
        ('{"score": 9}', None, "schema_mismatch"),  # out of the 1..5 range
        ('{"score": "high"}', None, "schema_mismatch"),  # wrong type
        ("   \n", None, "empty"),
        (None, None, "empty"),
    ],
)
def test_parse_judgement(text, value, reason):
    assert parse_judgement(text, Score) == (value, reason)


def test_stats_as_dict_counts_every_result():
    stats = JudgeStats()
    for result in [
        JudgeResult(Score(score=1), None, attempts=1, followed_schema=False),
        JudgeResult(Score(score=2), None, cached=True, probs={"score": {"2": 1.0}}),
        JudgeResult(None, "timeout", attempts=3),
        JudgeResult(None, "timeout", attempts=3),
        JudgeResult(None, "http_400", attempts=1),
    ]:
        stats.record(result)
    # 5 requests = 2 scored + 3 unscored; attempts 1 + 0 + 3 + 3 + 1 = 8.
    assert stats.as_dict() == {
        "requests": 5,
        "cache_hits": 1,
        "scored": 2,
        "unscored": 3,
        "attempts": 8,
        "schema_ignored": 1,
        "with_probs": 1,
        "unscored/http_400": 1,
        "unscored/timeout": 2,
    }


# --------------------------------------------------------------------------------------------------------------------
# Cache key and on-disk cache
# --------------------------------------------------------------------------------------------------------------------


def test_cache_key_covers_every_request_field_and_not_the_url():
    base = OpenAICompatibleJudge("http://a:1/v1", "m", max_tokens=64)
    key = request_cache_key(base._request_payload(req("x"), Score))
    assert len(key) == 64 and key == request_cache_key(base._request_payload(req("x"), Score))  # stable

    class Score2(BaseModel):  # same fields, other name
        score: int = Field(ge=1, le=5)

    class ScoreWide(BaseModel):  # same name, other JSON schema
        score: int = Field(ge=0, le=10)

    ScoreWide.__name__ = "Score"
    variants = {
        "model": OpenAICompatibleJudge("http://a:1/v1", "m2", max_tokens=64)._request_payload(req("x"), Score),
        "message": base._request_payload(req("y"), Score),
        "role": base._request_payload([{"role": "user", "content": "x"}], Score),
        "max_tokens": OpenAICompatibleJudge("http://a:1/v1", "m", max_tokens=65)._request_payload(req("x"), Score),
        "json_object": OpenAICompatibleJudge(
            "http://a:1/v1", "m", max_tokens=64, response_format="json_object"
        )._request_payload(req("x"), Score),
        "no_format": OpenAICompatibleJudge(
            "http://a:1/v1", "m", max_tokens=64, response_format="none"
        )._request_payload(req("x"), Score),
        "no_logprobs": OpenAICompatibleJudge("http://a:1/v1", "m", max_tokens=64, logprobs=None)._request_payload(
            req("x"), Score
        ),
        "top_3": OpenAICompatibleJudge("http://a:1/v1", "m", max_tokens=64, logprobs=3)._request_payload(
            req("x"), Score
        ),
        "extra_body": OpenAICompatibleJudge(
            "http://a:1/v1", "m", max_tokens=64, extra_body={"seed": 1}
        )._request_payload(req("x"), Score),
        "schema_name": base._request_payload(req("x"), Score2),
        "schema_json": base._request_payload(req("x"), ScoreWide),
        "temperature": {**base._request_payload(req("x"), Score), "temperature": 0.5},
    }
    keys = {name: request_cache_key(payload) for name, payload in variants.items()}
    assert all(k != key for k in keys.values()), keys
    assert len(set(keys.values())) == len(keys)
    # The server URL does not decide the reply: another host serving the same model shares the cache.
    other_host = OpenAICompatibleJudge("http://b:2/v1", "m", max_tokens=64)
    assert request_cache_key(other_host._request_payload(req("x"), Score)) == key
    with pytest.raises(ValueError, match="JSON"):
        request_cache_key({"messages": [object()]})


def test_second_identical_call_is_served_from_disk(server, tmp_path):
    judge = make_judge(server, cache_dir=tmp_path)
    server.script["a"] = [("ok", '{"score": 2}')]
    server.script["b"] = [("ok", "not json")]  # failures are never cached
    first = judge.judge([req("a"), req("b")], Score, progress=False)
    assert [r.cached for r in first] == [False, False] and first[0].value == Score(score=2)
    assert len(server.posts) == 2
    files = list(tmp_path.rglob("*.json"))
    assert len(files) == 1 and files[0].parent.name == files[0].stem[:2]  # sharded by the key's first 2 chars

    second = make_judge(server, cache_dir=tmp_path).judge([req("a"), req("b")], Score, progress=False)
    assert second[0] == JudgeResult(Score(score=2), None, raw='{"score": 2}', cached=True, attempts=0)
    assert second[1].unscored == "invalid_json" and not second[1].cached
    assert len(server.posts) == 3  # only "b" went to the server again
    # A different schema is a different request: no hit.
    third = judge.judge([req("a")], Verdict, progress=False)
    assert not third[0].cached and third[0].unscored == "schema_mismatch"
    assert judge.stats.cache_hits == 0 and judge.stats.requests == 3


def test_corrupt_cache_file_is_a_miss(server, tmp_path):
    judge = make_judge(server, cache_dir=tmp_path)
    server.script["a"] = [("ok", '{"score": 2}')]
    judge.judge([req("a")], Score, progress=False)
    (path,) = tmp_path.rglob("*.json")
    path.write_text('{"key": "trunc')  # as if a writer died mid-file without the atomic rename
    result = judge.judge([req("a")], Score, progress=False)[0]
    assert result.value == Score(score=2) and not result.cached
    assert json.loads(path.read_text())["value"] == {"score": 2}  # rewritten whole
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary files left behind


def test_a_cached_reply_with_a_repeated_key_is_a_miss(server, tmp_path):
    # a cache written before repeated keys were refused: value 5 from '{"score": 1, "score": 5}' (the last key won)
    judge = make_judge(server, cache_dir=tmp_path)
    server.script["a"] = [("ok", '{"score": 2}'), ("ok", '{"score": 1, "score": 5}')]
    judge.judge([req("a")], Score, progress=False)
    (path,) = tmp_path.rglob("*.json")
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "value": {"score": 5}, "raw": '{"score": 1, "score": 5}'}))
    (result,) = judge.judge([req("a")], Score, progress=False)
    assert not result.cached and result.unscored == "duplicate_key"  # asked again: the reply repeats the key
    assert judge.stats.cache_hits == 0


def test_api_key_is_sent_but_never_logged_cached_or_shown(server, tmp_path, monkeypatch, caplog, capsys):
    secret = "sk-procrl-test-SECRET-0123456789"
    monkeypatch.setenv("PROCRL_JUDGE_API_KEY", secret)
    caplog.set_level(logging.DEBUG)  # includes openai's and httpx's debug logs
    judge = make_judge(server, cache_dir=tmp_path, max_retries=1)
    server.script["a"] = [("status", 500), ("ok", '{"score": 2}')]  # a retry also logs
    server.script["b"] = [("ok", "nope")]
    results = judge.judge([req("a"), req("b")], Score, progress=True)
    assert results[0].ok and results[1].unscored == "invalid_json"
    assert server.auth == [f"Bearer {secret}"] * 3  # the key from the environment is what the server gets
    assert secret not in repr(judge) and secret not in str(judge.stats.as_dict())
    assert secret not in caplog.text and caplog.text  # something was logged, without the key
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text()


def test_judge_pickles_without_the_key(server, monkeypatch):
    secret = "sk-procrl-test-PICKLE-42"
    monkeypatch.setenv("PROCRL_JUDGE_API_KEY", secret)
    judge = make_judge(server)
    judge.judge([req("a")], Score, progress=False)
    blob = pickle.dumps(judge)
    assert secret.encode() not in blob
    clone = pickle.loads(blob)
    assert clone.stats.requests == 1 and clone.judge([req("a")], Score, progress=False)[0].ok
    assert server.auth[-1] == f"Bearer {secret}"  # read from the environment again after unpickling


def test_missing_api_key_sends_dummy(server, monkeypatch):
    monkeypatch.delenv("PROCRL_JUDGE_API_KEY", raising=False)
    make_judge(server).judge([req("a")], Score, progress=False)
    assert server.auth == ["Bearer EMPTY"]


# --------------------------------------------------------------------------------------------------------------------
# Faults: retries, typed failures, ordering, concurrency
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "actions, reason, attempts",
    [
        ([("status", 500), ("ok", '{"score": 4}')], None, 2),  # retry succeeds
        ([("status", 503), ("status", 502), ("ok", '{"score": 4}')], None, 3),  # two 5xx then OK
        ([("status", 500)], "http_500", 3),  # max_retries=2 -> 3 attempts, then unscored
        ([("status", 429), ("ok", '{"score": 4}')], None, 2),  # rate limit retried
        ([("status", 429)], "http_429", 3),
        ([("status", 400)], "http_400", 1),  # a bad request is not retried
        ([("status", 404)], "http_404", 1),
        ([("body", b"{not json", "application/json")], "invalid_json", 3),  # malformed body: a server glitch, retried
        ([("body", b"<html>oops</html>", "text/html")], "invalid_json", 3),
        ([("body", b"{not json", "application/json"), ("ok", '{"score": 4}')], None, 2),
        ([("ok", "I would say four.")], "invalid_json", 1),  # model output: deterministic, not retried
        ([("ok", '{"grade": 4}')], "schema_mismatch", 1),
        ([("ok", '{"score": 1, "score": 4}')], "duplicate_key", 1),  # model output too: not retried
        ([("ok", "")], "empty", 1),
    ],
)
def test_fault_gives_typed_result(server, actions, reason, attempts):
    server.script["q"] = actions
    judge = make_judge(server)
    (result,) = judge.judge([req("q")], Score, progress=False)
    assert result.unscored == reason
    assert result.value == (Score(score=4) if reason is None else None)
    assert result.attempts == attempts == server.attempts("q")
    assert judge.stats.attempts == attempts
    # the one judgement is counted under its reason's metric, or under none when scored
    counted = {name: n for name, n in judge.stats.as_dict().items() if name.startswith("unscored/")}
    assert counted == ({} if reason is None else {f"unscored/{reason}": 1})


def test_timeout_is_retried_then_unscored(server):
    # The server holds the request until the test releases it (HOLD_S at most): only the client's timeout can end
    # an attempt, so a "timeout" result is the proof that it did.
    server.script["slow"] = [("hold", '{"score": 4}')]
    judge = make_judge(server, timeout_s=1.0, max_retries=1)
    start = time.monotonic()
    (result,) = judge.judge([req("slow")], Score, progress=False)
    elapsed = time.monotonic() - start
    assert result == JudgeResult(None, "timeout", raw=None, cached=False, attempts=2)
    assert server.wait_for_attempts("slow", 2) == 2
    # The promise: each attempt gives up after timeout_s (2 x 1 s + backoff here). The margin is generous (a
    # loaded CPU); a client that waited for the server would take HOLD_S per attempt.
    assert elapsed < HOLD_S / 2
    server.release.set()


def test_timeout_then_success(server):
    server.script["slow-once"] = [("hold", '{"score": 4}'), ("ok", '{"score": 5}')]
    # timeout_s is also the time the second (immediate) answer may take: generous for a loaded CPU
    (result,) = make_judge(server, timeout_s=5.0, max_retries=1).judge([req("slow-once")], Score, progress=False)
    assert result.value == Score(score=5) and result.attempts == 2
    server.release.set()


def test_connection_refused_is_typed():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    judge = OpenAICompatibleJudge(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_s=0.01)
    (result,) = judge.judge([req("a")], Score, progress=False)
    assert result.unscored == "connection" and result.attempts == 2


def test_mixed_batch_keeps_order_and_counts_failures(server):
    # 10 requests: i % 3 == 0 fail for good (500), i % 3 == 1 fail once then succeed, i % 3 == 2 succeed at once;
    # each success echoes its own index in "score" (1 + i % 5), so a reordering is visible.
    kinds = {0: [("status", 500)], 1: [("status", 500), ("ok", None)], 2: [("ok", None)]}
    for i in range(10):
        server.script[f"item {i}"] = [
            (a[0], a[1]) if a[0] == "status" else ("ok", json.dumps({"score": 1 + i % 5})) for a in kinds[i % 3]
        ]
    judge = make_judge(server, max_retries=1)
    results = judge.judge([req(f"item {i}") for i in range(10)], Score, progress=False)
    assert len(results) == 10
    for i, result in enumerate(results):
        if i % 3 == 0:
            assert result.unscored == "http_500" and result.attempts == 2
        else:
            assert result.value == Score(score=1 + i % 5) and result.attempts == 1 + (i % 3 == 1)
    # 4 failures (i = 0, 3, 6, 9), 6 scored; attempts 4*2 + 3*2 + 3*1 = 17 = the server's count.
    assert judge.stats.as_dict() == {
        "requests": 10,
        "cache_hits": 0,
        "scored": 6,
        "unscored": 4,
        "attempts": 17,
        "schema_ignored": 0,
        "with_probs": 0,
        "unscored/http_500": 4,
    }
    assert len(server.posts) == 17


@pytest.mark.parametrize("limit", [1, 3])
def test_concurrency_limit_is_respected_and_used(limit):
    # The server holds the first requests until `limit` of them are in flight at once (HOLD_S at most, less than
    # the client's timeout): the gate opens only if the client really runs `limit` requests concurrently.
    srv = FaultServer(gate=limit)
    try:
        judge = OpenAICompatibleJudge(srv.base_url, "fault-model", max_concurrency=limit, max_retries=0)
        assert judge.timeout_s > HOLD_S
        results = judge.judge([req(f"c{i}") for i in range(9)], Score, progress=False)
        assert all(r.ok for r in results)
        assert srv.gate_opened  # the limit was reached ...
        assert srv.max_in_flight == limit  # ... and never exceeded
        assert len(srv.posts) == 9
    finally:
        srv.close()


def test_request_body_is_what_the_docs_say(server):
    judge = make_judge(server, max_tokens=33, extra_body={"top_k": 1})
    judge.judge([req("a")], Score, progress=False)
    body = server.posts[0]
    assert body["model"] == "fault-model" and body["messages"] == req("a")
    assert body["temperature"] == 0 and body["max_tokens"] == 33 and body["top_k"] == 1
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Score", "schema": Score.model_json_schema(), "strict": True},
    }
    assert body["logprobs"] is True and body["top_logprobs"] == 5
    make_judge(server, response_format="none", logprobs=None).judge([req("b")], Score, progress=False)
    assert not {"response_format", "logprobs", "top_logprobs"} & set(server.posts[1])
    make_judge(server, response_format="json_object", logprobs=2).judge([req("c")], Score, progress=False)
    assert server.posts[2]["response_format"] == {"type": "json_object"} and server.posts[2]["top_logprobs"] == 2


@pytest.mark.parametrize(
    "requests",
    [
        "just a string",
        [{"role": "user", "content": "x"}],  # one message list, not wrapped in a list of requests
        [[]],  # an empty request
        [["user: x"]],  # messages must be dicts
        [[{"content": "x"}]],  # no role
    ],
)
def test_bad_arguments_raise_value_error(server, requests):
    with pytest.raises(ValueError):
        make_judge(server).judge(requests, Score, progress=False)
    assert server.posts == []


def test_bad_schema_and_limits_raise(server):
    with pytest.raises(ValueError, match="pydantic"):
        make_judge(server).judge([req("a")], dict, progress=False)
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAICompatibleJudge(server.base_url, "m", max_concurrency=0)


def test_empty_batch(server):
    judge = make_judge(server)
    assert judge.judge([], Score, progress=False) == [] and judge.stats.requests == 0


def test_judge_works_inside_a_running_event_loop(server):
    server.script["a"] = [("ok", '{"score": 3}')]
    judge = make_judge(server)

    async def caller():
        sync = judge.judge([req("a")], Score, progress=False)  # sync API from async code: runs in a worker thread
        concurrent = await judge.ajudge([req("a"), req("b")], Score, progress=False)
        return sync, concurrent

    sync, concurrent = asyncio.run(caller())
    assert sync[0].value == Score(score=3) and [r.value for r in concurrent] == [Score(score=3), Score(score=1)]


def test_open_judge_specs(server, tmp_path):
    with open_judge(f"{server.base_url}#named-model", cache_dir=tmp_path, max_concurrency=2) as judge:
        assert isinstance(judge, OpenAICompatibleJudge) and judge.model == "named-model"
        assert judge.max_concurrency == 2 and judge.cache is not None
    with open_judge(server.base_url, model="flag-model") as judge:  # --judge-model wins
        assert judge.model == "flag-model"
    with open_judge(server.base_url) as judge:  # asks GET /v1/models
        assert judge.model == "fault-model"
    with open_judge("transformers:some/model", max_new_tokens=7) as judge:
        assert isinstance(judge, TransformersJudge) and judge.max_new_tokens == 7
    with pytest.raises(ValueError, match="unknown judge spec"):
        with open_judge("ftp://x"):
            pass


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # the local servers get their settings (continuous batching: transformers serve only); a URL gets the
        # --judge-model id
        ("local", {"max_tokens": 160, "timeout_s": 600.0, "num_threads": 2, "model": "m"}),
        ("local:some/dir", {"max_tokens": 160, "timeout_s": 600.0, "num_threads": 2, "model": "m"}),
        (
            "serve:transformers",
            {"max_tokens": 160, "timeout_s": 600.0, "continuous_batching": False, "num_threads": 2, "model": "m"},
        ),
        ("http://127.0.0.1:1/v1", {"max_tokens": 160, "timeout_s": 600.0, "model": "m"}),
        # the in-process judge names its budget max_new_tokens and has no timeout, model id or server
        ("transformers:some/model", {"max_new_tokens": 160}),
    ],
)
def test_judge_options_per_spec(spec, expected):
    options = judge_options(spec, max_tokens=160, timeout_s=600.0, model="m", continuous_batching=False, num_threads=2)
    assert options == expected and list(options) == list(expected)
    # without the optional settings (the FRS callers): budget and timeout only
    short = judge_options(spec, max_tokens=96, timeout_s=30)
    assert short == (
        {"max_new_tokens": 96} if spec.startswith("transformers:") else {"max_tokens": 96, "timeout_s": 30}
    )


def test_judge_options_are_what_open_judge_takes(server):
    options = judge_options(server.base_url, max_tokens=7, timeout_s=3.0, model="flag-model")
    with open_judge(server.base_url, **options) as judge:
        assert judge.model == "flag-model" and judge.max_tokens == 7 and judge.timeout_s == 3.0
    options = judge_options("transformers:some/model", max_tokens=7, timeout_s=3.0, model="ignored")
    with open_judge("transformers:some/model", **options) as judge:
        assert judge.max_new_tokens == 7 and judge.model_name_or_path == "some/model"


def test_judge_arguments_open_the_judge_they_name(server, tmp_path):
    args = JudgeArguments(judge=server.base_url, judge_model="flag-model", judge_timeout_s=3.0, judge_concurrency=2)
    with open_judge_from(args, output_dir=tmp_path, default_max_tokens=96) as judge:  # the use's budget: none set
        assert isinstance(judge, OpenAICompatibleJudge) and judge.model == "flag-model"
        assert (judge.max_tokens, judge.timeout_s, judge.max_concurrency) == (96, 3.0, 2)
        assert judge.cache.root == tmp_path / "judge_cache"
    args = JudgeArguments(judge=server.base_url, judge_max_tokens=7, judge_cache_dir=str(tmp_path / "elsewhere"))
    with open_judge_from(args, output_dir=tmp_path, default_max_tokens=96) as judge:  # a set budget wins
        assert judge.max_tokens == 7 and judge.cache.root == tmp_path / "elsewhere"
        assert judge.model == "fault-model" and judge.max_concurrency == 8  # the server's model; the default


def test_judge_arguments_pass_every_setting_to_open_judge(tmp_path, monkeypatch):
    opened = []

    @contextlib.contextmanager
    def recording_open_judge(spec, **kwargs):
        opened.append((spec, kwargs))
        yield "judge"

    monkeypatch.setattr(spec_module, "open_judge", recording_open_judge)
    # as a command line sets them (one polarity for the switch: --judge-continuous-batching false)
    (args,) = TrlParser((JudgeArguments,)).parse_args_and_config(
        ["--judge", "serve:transformers:x/y", "--judge-continuous-batching", "false", "--judge_num_threads", "2"]
    )
    with open_judge_from(args, output_dir=tmp_path, default_max_tokens=512) as judge:
        assert judge == "judge"
    assert opened == [("serve:transformers:x/y", {
        "cache_dir": str(tmp_path / "judge_cache"), "max_concurrency": 8, "max_tokens": 512, "timeout_s": 600.0,
        "continuous_batching": False, "num_threads": 2,
    })]  # fmt: skip
    with open_judge_from(JudgeArguments(judge="None"), output_dir=tmp_path, default_max_tokens=96) as judge:
        assert judge is None  # no judge: nothing opened
    assert len(opened) == 1 and not JudgeArguments(judge=" none ").enabled and JudgeArguments().judge == "local"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"judge": "ftp://x"}, "not a judge spec"),
        ({"judge_concurrency": 0}, r"judge_concurrency must be >= 1, got 0 \(e.g. judge_concurrency: 8\)"),
        ({"judge_num_threads": 0}, "judge_num_threads must be >= 1"),
        ({"judge_max_tokens": 0}, "judge_max_tokens must be >= 1"),
        ({"judge_timeout_s": 0}, "judge_timeout_s must be > 0"),
    ],
)
def test_bad_judge_arguments_say_how_to_fix_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        JudgeArguments(**kwargs)


# --------------------------------------------------------------------------------------------------------------------
# In-process judge
# --------------------------------------------------------------------------------------------------------------------


def test_transformers_judge_tiny_random_model_gives_typed_unscored(tiny_llama, smollm2_tokenizer):
    judge = TransformersJudge(
        "tiny-random", model=tiny_llama, tokenizer=smollm2_tokenizer, max_new_tokens=6, batch_size=2, constrained=False
    )
    results = judge.judge([req("a"), req("bb"), [{"role": "user", "content": "ccc"}]], Score, progress=False)
    assert len(results) == 3
    # Free generation (constrained=False) from random weights emits random tokens: no valid JSON object, so every
    # result is a typed failure (the constrained path is tested in test_judge_local.py).
    assert all(not r.ok and r.unscored in {"invalid_json", "empty"} for r in results)
    assert all(r.attempts == 1 and r.raw is not None for r in results)
    assert judge.stats.as_dict()["unscored"] == 3


class ScriptedLM(torch.nn.Module):
    """A stand-in causal LM whose `generate` appends fixed reply ids (+ EOS) to every row: the judge's
    template, batching, decoding and parsing run for real around it."""

    def __init__(self, tokenizer, reply: str, fail: bool = False):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        self.fail = fail
        self.prompts: list[list[int]] = []

    def generate(self, input_ids, attention_mask, generation_config, **kwargs):
        if self.fail:
            raise RuntimeError("out of memory (scripted)")
        assert generation_config.do_sample is False
        for row, mask in zip(input_ids, attention_mask, strict=True):
            self.prompts.append(row[mask.bool()].tolist())
        reply = torch.tensor(self.reply_ids).expand(input_ids.shape[0], -1)
        return type("Out", (), {"sequences": torch.cat([input_ids, reply], dim=1)})()


def test_transformers_judge_parses_and_caches(smollm2_tokenizer, tmp_path):
    lm = ScriptedLM(smollm2_tokenizer, 'Here: ```json\n{"score": 4}\n```')
    judge = TransformersJudge("scripted", model=lm, tokenizer=smollm2_tokenizer, batch_size=2, cache_dir=tmp_path)
    results = judge.judge([req("a"), req("b"), req("c")], Score, progress=False)
    assert [r.value for r in results] == [Score(score=4)] * 3
    assert len(lm.prompts) == 3  # batches of 2 + 1
    # The prompt is the chat template with the generation prompt: it ends with the assistant header.
    assert smollm2_tokenizer.decode(lm.prompts[0]).endswith("<|im_start|>assistant\n")
    again = judge.judge([req("b")], Score, progress=False)[0]
    assert again.cached and again.value == Score(score=4) and len(lm.prompts) == 3


def test_transformers_judge_failure_is_typed(smollm2_tokenizer):
    judge = TransformersJudge(
        "scripted", model=ScriptedLM(smollm2_tokenizer, "", fail=True), tokenizer=smollm2_tokenizer
    )
    results = judge.judge([req("a"), req("b")], Score, progress=False)
    assert [r.unscored for r in results] == ["error:RuntimeError"] * 2


# --------------------------------------------------------------------------------------------------------------------
# Integration: `transformers serve` on the embedded default model
# --------------------------------------------------------------------------------------------------------------------


class Answer(BaseModel):
    answer: int


@pytest.mark.slow
def test_integration_judge_server_default_model(default_model_path, tmp_path):
    # The server is pinned to one CPU thread: the test CPU is shared, and two threads thrash under load.
    server = JudgeServer("default", engine="transformers", num_threads=1, startup_timeout_s=240)
    # `transformers serve` is a declared dependency (transformers[serving]): a server that does not start is a
    # failure, with the server's own error (start raises with its log tail), never a skip.
    server.start()
    try:
        assert server.model_id == default_model_path and server.base_url.startswith("http://127.0.0.1:")
        judge = OpenAICompatibleJudge(
            server.base_url, server.model_id, max_tokens=16, timeout_s=180, max_retries=1, cache_dir=tmp_path
        )
        # Observed greedy reply of SmolLM2-135M-Instruct: '{"answer": 2}' (a weak judge: the protocol is what counts).
        request = [{"role": "user", "content": 'What is 2+2? Reply as JSON: {"answer": <number>}'}]
        (first,) = judge.judge([request], Answer, progress=False)
        assert first.ok or first.unscored in {"invalid_json", "schema_mismatch", "empty"}, first
        assert first.raw  # the server answered with text
        (second,) = judge.judge([request], Answer, progress=False)
        if first.ok:
            assert second.cached and second.value == first.value and judge.stats.attempts == first.attempts
        else:  # failures are not cached: asked again, same greedy reply
            assert not second.cached and second.unscored == first.unscored
        # A model id the server does not serve: a 400, typed and not retried.
        wrong = OpenAICompatibleJudge(server.base_url, "not-this-model", max_tokens=4, max_retries=2)
        (bad,) = wrong.judge([request], Answer, progress=False)
        assert bad.unscored == "http_400" and bad.attempts == 1
        process = server._process
    finally:
        server.stop()
    assert group_gone(process)  # the whole process group is gone (stop()'s own wait for it is bounded, 5 s)


@pytest.mark.slow
def test_judge_server_start_failure_raises_with_log_tail(tmp_path):
    missing = tmp_path / "no-such-model"
    server = JudgeServer(
        str(missing), engine="transformers", startup_timeout_s=120, log_path=str(tmp_path / "server.log")
    )
    with pytest.raises(RuntimeError, match="did not start: the server exited with code 1") as info:
        server.start()
    last_line = Path(tmp_path / "server.log").read_text().strip().splitlines()[-1]
    assert "no-such-model" in last_line and last_line in str(info.value)  # the log tail says what went wrong
    assert server._process is None


# --------------------------------------------------------------------------------------------------------------------
# The client sends the schema and asks for log-probs; servers that ignore or refuse them
# --------------------------------------------------------------------------------------------------------------------


class Label(BaseModel):
    label: Literal["entailment", "neutral", "contradiction"]


def completion_with_logprobs(content: str, tokens: list[tuple[str, float, list[tuple[str, float]]]]) -> bytes:
    """A chat completion whose `logprobs.content` holds (token, logprob, top_logprobs) per generated token."""
    body = completion("fault-model", content)
    body["choices"][0]["logprobs"] = {
        "content": [
            {"token": t, "logprob": lp, "bytes": None, "top_logprobs": [{"token": a, "logprob": b} for a, b in top]}
            for t, lp, top in tokens
        ]
    }
    return json.dumps(body).encode()


def test_each_request_carries_its_own_schema(server):
    server.script["a"] = [("ok", '{"score": 2}')]
    server.script["b"] = [("ok", '{"label": "neutral"}')]
    results = make_judge(server).judge([req("a"), req("b")], [Score, Label], progress=False)
    assert [r.value for r in results] == [Score(score=2), Label(label="neutral")]
    assert all(r.followed_schema is True for r in results)
    formats = {post["messages"][-1]["content"]: post["response_format"] for post in server.posts}
    assert formats["a"]["json_schema"]["schema"] == Score.model_json_schema()
    assert formats["b"]["json_schema"] == {"name": "Label", "schema": Label.model_json_schema(), "strict": True}
    assert formats["b"]["json_schema"]["schema"]["properties"]["label"]["enum"] == [
        "entailment",
        "neutral",
        "contradiction",
    ]


def test_server_that_ignores_the_schema_is_parsed_and_counted(server):
    # transformers serve ignores response_format and logprobs: prose around the JSON, no logprobs in the response.
    server.script["a"] = [("ok", 'Sure! My grade: {"score": 3}. Hope it helps.')]
    server.script["b"] = [("ok", '{"score": 4}')]
    judge = make_judge(server)
    first, second = judge.judge([req("a"), req("b")], Score, progress=False)
    assert first.value == Score(score=3) and first.followed_schema is False and first.probs is None
    assert second.followed_schema is True and second.probs is None
    stats = judge.stats.as_dict()
    assert stats["scored"] == 2 and stats["schema_ignored"] == 1 and stats["with_probs"] == 0


def test_logprobs_become_choice_probabilities(server, tmp_path):
    # ' 4' chosen with p = 0.6 but left out of its top_logprobs (added back); ' 3' 0.2, ' 5' 0.1, ' ' (every
    # option: not counted) 0.05; the EOS token the server decodes but leaves out of the content is ignored.
    tokens = [
        ('{"', math.log(0.99), [('{"', math.log(0.99))]),
        ("score", math.log(0.9), [("score", math.log(0.9))]),
        ('":', math.log(0.9), [('":', math.log(0.9))]),
        (" 4", math.log(0.6), [(" 3", math.log(0.2)), (" 5", math.log(0.1)), (" ", math.log(0.05))]),
        ("}", math.log(0.9), [("}", math.log(0.9))]),
        ("<|im_end|>", math.log(0.9), []),
    ]
    server.script["a"] = [("body", completion_with_logprobs('{"score": 4}', tokens), "application/json")]
    judge = make_judge(server, cache_dir=tmp_path)
    (result,) = judge.judge([req("a")], Score, progress=False)
    expected = {"1": 0.0, "2": 0.0, "3": 0.2 / 0.9, "4": 0.6 / 0.9, "5": 0.1 / 0.9}
    assert result.value == Score(score=4) and list(result.probs) == ["score"]
    assert result.probs["score"] == pytest.approx(expected, abs=1e-9)
    assert judge.stats.with_probs == 1
    (again,) = make_judge(server, cache_dir=tmp_path).judge([req("a")], Score, progress=False)
    assert again.cached and again.probs["score"] == pytest.approx(expected, abs=1e-9)  # the cache keeps them


def test_malformed_logprobs_are_no_probs_not_a_failure(server):
    body = json.loads(completion_with_logprobs('{"score": 4}', [('{"score": 4}', 0.0, [])]))
    body["choices"][0]["logprobs"] = {"content": "not a list"}
    server.script["a"] = [("body", json.dumps(body).encode(), "application/json")]
    (result,) = make_judge(server).judge([req("a")], Score, progress=False)
    assert result.value == Score(score=4) and result.probs is None and result.attempts == 1


def test_refused_json_schema_falls_back_to_json_object(server, tmp_path):
    refusal = ("status", 400, "response_format json_schema is not supported", "response_format")
    server.script["a"] = [refusal, ("ok", '{"score": 2}')]
    judge = make_judge(server, cache_dir=tmp_path)
    (result,) = judge.judge([req("a")], Score, progress=False)
    assert result.value == Score(score=2) and result.attempts == 2
    assert server.posts[0]["response_format"]["type"] == "json_schema"
    assert server.posts[1]["response_format"] == {"type": "json_object"} and server.posts[1]["logprobs"] is True
    # Remembered for this schema only (one schema a grammar backend cannot compile is not a server without
    # json_schema): the next request with it goes out as json_object at once.
    assert judge.refused == set() and len(judge.refused_schemas) == 1 and judge.degraded == {"json_schema": 1}
    (other,) = judge.judge([req("b")], Score, progress=False)
    assert other.ok and other.attempts == 1 and server.posts[2]["response_format"] == {"type": "json_object"}
    assert judge.degraded == {"json_schema": 2}
    # The reply got without the schema is filed under json_object: a judge that sends the schema misses it ...
    fresh = make_judge(server, cache_dir=tmp_path)
    (again,) = fresh.judge([req("a")], Score, progress=False)
    assert not again.cached and server.posts[3]["response_format"]["type"] == "json_schema"
    # ... and the refusing judge finds it.
    (hit,) = judge.judge([req("a")], Score, progress=False)
    assert hit.cached and hit.value == Score(score=2) and len(server.posts) == 4


def test_json_schema_refused_for_two_schemas_is_refused_for_all(server):
    refusal = ("status", 400, "response_format json_schema is not supported", "response_format")
    for text in ("a", "b"):
        server.script[text] = [refusal, ("ok", '{"score": 2}' if text == "a" else '{"correct": true}')]
    server.script["c"] = [("ok", '{"score": 3}')]
    judge = make_judge(server)
    (a,) = judge.judge([req("a")], Score, progress=False)
    assert a.ok and judge.refused == set()
    # another schema still goes out with json_schema first; its refusal makes the refusal judge-wide
    (b,) = judge.judge([req("b")], Verdict, progress=False)
    assert b.ok and b.attempts == 2 and server.posts[2]["response_format"]["type"] == "json_schema"
    assert judge.refused == {"json_schema"} and len(judge.refused_schemas) == 2

    class Third(BaseModel):
        score: int

    (c,) = judge.judge([req("c")], Third, progress=False)  # a third schema: json_object at once
    assert c.attempts == 1 and server.posts[4]["response_format"] == {"type": "json_object"}


def test_refused_logprobs_then_format_each_dropped_once(server):
    server.script["a"] = [
        ("status", 400, "top_logprobs: logprobs are not supported by this server"),
        ("status", 422, "Unexpected fields in the request: {'response_format'}"),
        ("status", 400, "json_object mode is not available"),
        ("ok", 'Here: {"score": 5}'),
    ]
    judge = make_judge(server, max_retries=0)
    (result,) = judge.judge([req("a")], Score, progress=False)
    assert result.value == Score(score=5) and result.attempts == 4 and result.followed_schema is False
    sent = [(p.get("logprobs"), (p.get("response_format") or {}).get("type")) for p in server.posts]
    assert sent == [(True, "json_schema"), (None, "json_schema"), (None, "json_object"), (None, None)]
    assert judge.refused == {"logprobs", "json_object"} and len(judge.refused_schemas) == 1
    assert judge.degraded == {"logprobs": 1, "json_schema": 1}


def test_a_400_that_names_no_feature_is_not_a_refusal(server):
    server.script["a"] = [
        ("status", 400, "This model's maximum context length is 2048 tokens."),
        ("ok", '{"score": 1}'),
    ]
    judge = make_judge(server)
    (result,) = judge.judge([req("a")], Score, progress=False)
    assert result.unscored == "http_400" and result.attempts == 1
    assert judge.refused == set() and not judge.degraded


def test_bad_response_format_or_logprobs_raise():
    with pytest.raises(ValueError, match="response_format"):
        OpenAICompatibleJudge("http://a:1/v1", "m", response_format="json")
    for bad in (0, 21, True):
        with pytest.raises(ValueError, match="logprobs"):
            OpenAICompatibleJudge("http://a:1/v1", "m", logprobs=bad)
