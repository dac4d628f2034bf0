"""One entry point for commands (core layer): `open_judge(spec)` turns a command-line judge spec into a judge.

"http(s)://host:port/v1[#model]" is an `OpenAICompatibleJudge`, "local[:<model>]" a `JudgeServer` with an
`OpenAICompatibleJudge` in front of it, "transformers:<model>" a `TransformersJudge` in this process.
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

__all__ = ["open_judge"]


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
