"""One entry point for commands (core layer): `open_judge(spec)` turns a command-line judge spec into a judge.

"http(s)://host:port/v1[#model]" is an `OpenAICompatibleJudge`, "local[:<model>]" a `JudgeServer` with an
`OpenAICompatibleJudge` in front of it, "transformers:<model>" a `TransformersJudge` in this process.
`judge_options(spec, max_tokens=..., timeout_s=...)` names a command's judge settings (reply budget, request timeout,
model id, local server settings) as that spec's judge takes them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from procrl.judges.base import Judge
from procrl.judges.client import DEFAULT_API_KEY_ENV, OpenAICompatibleJudge, list_server_models
from procrl.judges.local import TransformersJudge
from procrl.judges.server import JudgeServer

__all__ = ["judge_options", "open_judge"]


_SERVER_KWARGS = (
    "host",
    "port",
    "device",
    "startup_timeout_s",
    "log_path",
    "continuous_batching",
    "num_threads",
    "extra_args",
    "cb_num_blocks",
    "cb_block_size",
)


def judge_options(
    spec: str,
    *,
    max_tokens: int,
    timeout_s: float,
    model: str | None = None,
    continuous_batching: bool | None = None,
    num_threads: int | None = None,
) -> dict[str, Any]:
    """`open_judge` keywords for a reply budget and a request timeout, named as the spec's client names them.

    The in-process judge ("transformers:...") takes `max_new_tokens` and has no timeout (its model is named in the
    spec, so `model` and the server settings are not passed); the server clients take `max_tokens` and `timeout_s`.
    The timeout must cover queueing: `transformers serve` without continuous batching generates one request at a
    time, so with 8 requests in flight the last one waits for seven others (measured here: ~10-15 s per FRS request
    on a loaded 2-core CPU, so the client's 60 s default timed out and its retries piled up in the server's queue).

    Args:
        spec: the judge spec of `open_judge`.
        max_tokens: token budget of one judge reply.
        timeout_s: seconds one request may take (server judges).
        model: the model id of a judge URL (`--judge-model`); passed when given (not for "transformers:...").
        continuous_batching, num_threads: `JudgeServer` settings, passed for "local" / "local:<model>" specs when
            not None.

    >>> judge_options("local", max_tokens=96, timeout_s=600)
    {'max_tokens': 96, 'timeout_s': 600}
    >>> judge_options("transformers:default", max_tokens=96, timeout_s=600)
    {'max_new_tokens': 96}
    >>> judge_options("local:m", max_tokens=160, timeout_s=600.0, continuous_batching=True, num_threads=1)
    {'max_tokens': 160, 'timeout_s': 600.0, 'continuous_batching': True, 'num_threads': 1}
    >>> judge_options("http://127.0.0.1:8000/v1", max_tokens=160, timeout_s=60, model="qwen", num_threads=1)
    {'max_tokens': 160, 'timeout_s': 60, 'model': 'qwen'}
    """
    if spec.startswith("transformers:"):
        return {"max_new_tokens": max_tokens}
    options: dict[str, Any] = {"max_tokens": max_tokens, "timeout_s": timeout_s}
    if spec == "local" or spec.startswith("local:"):
        if continuous_batching is not None:
            options["continuous_batching"] = continuous_batching
        if num_threads is not None:
            options["num_threads"] = num_threads
    if model:
        options["model"] = model
    return options


@contextlib.contextmanager
def open_judge(
    spec: str, *, cache_dir: str | os.PathLike | None = None, max_concurrency: int = 8, **kwargs: Any
) -> Iterator[Judge]:
    """A judge from a command-line spec; a server it starts is stopped on exit.

    Specs:
        "http(s)://host:port/v1[#model]": `OpenAICompatibleJudge`. The model id is `kwargs["model"]` (a
            `--judge-model` flag), else the URL fragment, else the first model the server lists at `/v1/models`.
        "local" / "local:<name_or_path>": `JudgeServer` on the default model (or that one) + `OpenAICompatibleJudge`.
        "transformers:<name_or_path>": `TransformersJudge` in this process.

    Args:
        cache_dir: the judge's on-disk cache (None: no cache).
        max_concurrency: concurrent requests (OpenAI-compatible judges).
        **kwargs: more judge arguments (`OpenAICompatibleJudge` / `TransformersJudge`); for "local", the
            `JudgeServer` arguments host, port, device, startup_timeout_s, log_path, continuous_batching, num_threads,
            extra_args.

    Raises:
        ValueError: an unknown spec, or a server that lists no model.
        RuntimeError: the local server did not start.
    """
    spec = spec.strip()
    if spec.startswith(("http://", "https://")):
        url, _, fragment = spec.partition("#")
        model = kwargs.pop("model", None) or fragment or None
        if model is None:
            models = list_server_models(url, api_key_env=kwargs.get("api_key_env", DEFAULT_API_KEY_ENV))
            if not models:
                raise ValueError(f"the judge server {url} lists no model; name one with {url}#<model> or --judge-model")
            model = models[0]
        yield OpenAICompatibleJudge(url, model, cache_dir=cache_dir, max_concurrency=max_concurrency, **kwargs)
    elif spec == "local" or spec.startswith("local:"):
        model = spec.partition(":")[2] or "default"
        server_kwargs = {k: kwargs.pop(k) for k in _SERVER_KWARGS if k in kwargs}
        kwargs.pop("model", None)
        with JudgeServer(model, **server_kwargs) as server:
            yield OpenAICompatibleJudge(
                server.base_url, server.model_id, cache_dir=cache_dir, max_concurrency=max_concurrency, **kwargs
            )
    elif spec.startswith("transformers:"):
        name = spec.partition(":")[2] or "default"
        yield TransformersJudge(name, cache_dir=cache_dir, **kwargs)
    else:
        raise ValueError(
            f"unknown judge spec {spec!r}; use 'http(s)://host:port/v1[#model]', 'local', 'local:<model>' or "
            "'transformers:<model>'"
        )
