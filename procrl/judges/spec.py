"""One entry point for commands (core layer): `open_judge_from(JudgeArguments)`, the judge of a command's settings
(`procrl.judges.arguments`), and `open_judge(spec)`, which turns a command-line judge spec into a judge.

    with open_judge_from(JudgeArguments(judge="local"), output_dir="out", default_max_tokens=96) as judge:  # None: none
        results = judge.judge(requests, Schema)

"http(s)://host:port/v1[#model]" is an `OpenAICompatibleJudge`; "local[:<model>]" a vLLM `JudgeServer` with an
`OpenAICompatibleJudge` in front of it (json_schema + top log-probs), or, where vLLM cannot be imported, a
constrained `TransformersJudge` in this process; "serve:transformers[:<model>]" the `transformers serve` server with
a client (it ignores the schema); "transformers:<model>" a `TransformersJudge` in this process.
`judge_options(spec, max_tokens=..., timeout_s=...)` names a command's judge settings (reply budget, request timeout,
model id, local server settings) as that spec's judge takes them; `open_judge_from` is the one way a command
opens its judge (both calls in one).
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from procrl.generation.vllm_engine import import_vllm
from procrl.judges.arguments import NO_JUDGE, SERVE_TRANSFORMERS, JudgeArguments, spec_kind
from procrl.judges.base import Judge
from procrl.judges.client import DEFAULT_API_KEY_ENV, OpenAICompatibleJudge, list_server_models
from procrl.judges.local import TransformersJudge
from procrl.judges.server import JudgeServer
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["NO_JUDGE", "JudgeArguments", "judge_options", "open_judge", "open_judge_from"]

# JudgeServer keywords open_judge takes out of **kwargs (the engine comes from the spec).
_SERVER_KWARGS = tuple(p for p in inspect.signature(JudgeServer).parameters if p not in ("model", "engine"))
_TRANSFORMERS_KWARGS = frozenset(inspect.signature(TransformersJudge).parameters) - {"model_name_or_path"}


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
    spec, so `model` and the server settings are not passed); the server clients take `max_tokens` and `timeout_s`
    ("local" falling back to the in-process judge translates them itself). The timeout must cover queueing (with 8
    requests in flight, the last waits for the others; `transformers serve` without continuous batching generates
    one at a time).

    Args:
        spec: the judge spec of `open_judge`.
        max_tokens: token budget of one judge reply.
        timeout_s: seconds one request may take (server judges).
        model: the model id of a judge URL (`--judge-model`); passed when given (not for "transformers:...").
        continuous_batching: `JudgeServer(continuous_batching=...)`, passed when not None for
            "serve:transformers[:<model>]" only (vLLM, behind "local", always batches).
        num_threads: `JudgeServer(num_threads=...)`, passed when not None for "local[:<model>]" and
            "serve:transformers[:<model>]".

    >>> judge_options("local", max_tokens=96, timeout_s=600)
    {'max_tokens': 96, 'timeout_s': 600}
    >>> judge_options("transformers:default", max_tokens=96, timeout_s=600)
    {'max_new_tokens': 96}
    >>> judge_options("local:m", max_tokens=160, timeout_s=600.0, continuous_batching=True, num_threads=1)
    {'max_tokens': 160, 'timeout_s': 600.0, 'num_threads': 1}
    >>> judge_options("serve:transformers", max_tokens=160, timeout_s=600.0, continuous_batching=True, num_threads=1)
    {'max_tokens': 160, 'timeout_s': 600.0, 'continuous_batching': True, 'num_threads': 1}
    >>> judge_options("http://127.0.0.1:8000/v1", max_tokens=160, timeout_s=60, model="qwen", num_threads=1)
    {'max_tokens': 160, 'timeout_s': 60, 'model': 'qwen'}
    """
    kind = spec_kind(spec)
    if kind == "transformers":
        return {"max_new_tokens": max_tokens}
    options: dict[str, Any] = {"max_tokens": max_tokens, "timeout_s": timeout_s}
    if kind == "serve-transformers" and continuous_batching is not None:
        options["continuous_batching"] = continuous_batching
    if kind in ("local", "serve-transformers") and num_threads is not None:
        options["num_threads"] = num_threads
    if model:
        options["model"] = model
    return options


def vllm_import_error() -> str | None:
    """Why `import vllm` fails here (the message names the install fix), or None when it works. Imports vLLM into
    this process when it can (~9 s and ~110 MB here, once): a broken install fails here, not minutes into a run."""
    try:
        import_vllm()
    except ImportError as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def open_judge(
    spec: str, *, cache_dir: str | os.PathLike | None = None, max_concurrency: int = 8, **kwargs: Any
) -> Iterator[Judge]:
    """A judge from a command-line spec; a server it starts is stopped on exit.

    Specs:
        "http(s)://host:port/v1[#model]": `OpenAICompatibleJudge`. The model id is `kwargs["model"]` (a
            `--judge-model` flag), else the URL fragment, else the first model the server lists at `/v1/models`.
        "local" / "local:<name_or_path>": where `import vllm` works, a vLLM `JudgeServer` on the default model (or
            that one) + `OpenAICompatibleJudge` (schema sent as json_schema, top log-probs read into probabilities).
            Where it does not: a constrained `TransformersJudge` in this process (a warning names the install fix;
            `max_tokens` becomes `max_new_tokens`, server and HTTP settings are dropped).
        "serve:transformers" / "serve:transformers:<name_or_path>": `JudgeServer(engine="transformers")` (the
            old `transformers serve` path; it ignores the schema) + `OpenAICompatibleJudge`.
        "transformers:<name_or_path>": `TransformersJudge` in this process.

    Args:
        cache_dir: the judge's on-disk cache (None: no cache).
        max_concurrency: concurrent requests (OpenAI-compatible judges).
        **kwargs: more judge arguments (`OpenAICompatibleJudge` / `TransformersJudge`); for the server specs also
            the `JudgeServer` arguments (host, port, device, startup_timeout_s, log_path, num_threads, kv_cache_gib,
            max_model_len, ..., continuous_batching and cb_* for transformers, extra_args).

    Raises:
        ValueError: an unknown spec, a server that lists no model, or "oracle" (FRS's programmatic judge, which the
            evals layer opens: `procrl.evals.frs.oracle_judge.OracleJudge`).
        RuntimeError: the local server did not start.
    """
    spec = spec.strip()
    kind = spec_kind(spec)
    if kind == "url":
        url, _, fragment = spec.partition("#")
        model = kwargs.pop("model", None) or fragment or None
        if model is None:
            models = list_server_models(url, api_key_env=kwargs.get("api_key_env", DEFAULT_API_KEY_ENV))
            if not models:
                raise ValueError(f"the judge server {url} lists no model; name one with {url}#<model> or --judge-model")
            model = models[0]
        yield OpenAICompatibleJudge(url, model, cache_dir=cache_dir, max_concurrency=max_concurrency, **kwargs)
    elif kind in ("local", "serve-transformers"):
        rest = spec.removeprefix(SERVE_TRANSFORMERS) if kind == "serve-transformers" else spec.removeprefix("local")
        model = rest.removeprefix(":") or "default"
        engine = "transformers" if kind == "serve-transformers" else "vllm"
        if engine == "vllm" and (why := vllm_import_error()) is not None:
            logger.warning(
                "judge spec %r: vLLM cannot be imported, so the judge runs in this process with transformers and "
                "schema-constrained decoding (TransformersJudge(constrained=True)); %s",
                spec,
                why,
            )
            yield _in_process_fallback(model, cache_dir, kwargs)
            return
        server_kwargs = {k: kwargs.pop(k) for k in _SERVER_KWARGS if k in kwargs}
        kwargs.pop("model", None)
        with JudgeServer(model, engine=engine, **server_kwargs) as server:
            yield OpenAICompatibleJudge(
                server.base_url, server.model_id, cache_dir=cache_dir, max_concurrency=max_concurrency, **kwargs
            )
    elif kind == "transformers":
        name = spec.partition(":")[2] or "default"
        yield TransformersJudge(name, cache_dir=cache_dir, **kwargs)
    elif kind == "oracle":
        raise ValueError(
            "judge 'oracle' is FRS's programmatic judge (the step oracle's labels, not an LLM): procrl frs and the "
            "FRS callback open it (procrl.evals.frs.oracle_judge.OracleJudge); this use needs an LLM judge, e.g. "
            "judge: local or a URL"
        )
    else:
        raise ValueError(
            f"unknown judge spec {spec!r}; use 'http(s)://host:port/v1[#model]', 'local[:<model>]', "
            "'serve:transformers[:<model>]' or 'transformers:<model>'"
        )


def _in_process_fallback(model: str, cache_dir, kwargs: dict[str, Any]) -> TransformersJudge:
    """The constrained in-process judge for a "local" spec: the server clients' keywords translated or dropped."""
    options = dict(kwargs)
    options.pop("model", None)  # a --judge-model id names a server's model, not TransformersJudge's `model` object
    if "max_tokens" in options:
        options.setdefault("max_new_tokens", options.pop("max_tokens"))
    dropped = sorted(k for k in options if k not in _TRANSFORMERS_KWARGS)
    if dropped:
        logger.info("in-process judge: ignoring the server/HTTP settings %s", ", ".join(dropped))
    kept = {k: v for k, v in options.items() if k in _TRANSFORMERS_KWARGS}
    kept.setdefault("constrained", True)
    return TransformersJudge(model, cache_dir=cache_dir, **kept)


@contextlib.contextmanager
def open_judge_from(
    args: JudgeArguments, *, output_dir: str | os.PathLike, default_max_tokens: int
) -> Iterator[Judge | None]:
    """The judge `args` names (`open_judge` with the keywords of `judge_options`); a server it starts is
    stopped on exit. Yields None for `judge: none`.

    Args:
        output_dir: the run's output directory; the cache goes to `judge_cache_dir`, else
            `<output_dir>/judge_cache`.
        default_max_tokens: the reply budget when `judge_max_tokens` is null (the use's; class docstring).

    Raises:
        ValueError: a URL whose server lists no model, or `judge: oracle` (`open_judge`; FRS opens the oracle itself).
        RuntimeError: a local judge server that did not start.
    """
    if not args.enabled:
        yield None
        return
    options = judge_options(
        args.judge,
        max_tokens=args.judge_max_tokens or default_max_tokens,
        timeout_s=args.judge_timeout_s,
        model=args.judge_model,
        continuous_batching=args.judge_continuous_batching,
        num_threads=args.judge_num_threads,
    )
    cache_dir = args.judge_cache_dir or str(Path(output_dir) / "judge_cache")
    with open_judge(args.judge, cache_dir=cache_dir, max_concurrency=args.judge_concurrency, **options) as judge:
        yield judge
