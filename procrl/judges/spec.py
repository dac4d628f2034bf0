"""One entry point for commands (core layer): `JudgeArguments`, the judge settings of every command, and
`open_judge(spec)`, which turns a command-line judge spec into a judge.

    with JudgeArguments(judge="local").open(output_dir="out", default_max_tokens=96) as judge:   # None for "none"
        results = judge.judge(requests, Schema)

"http(s)://host:port/v1[#model]" is an `OpenAICompatibleJudge`; "local[:<model>]" a vLLM `JudgeServer` with an
`OpenAICompatibleJudge` in front of it (json_schema + top log-probs), or, where vLLM cannot be imported, a
constrained `TransformersJudge` in this process; "serve:transformers[:<model>]" the `transformers serve` server with
a client (it ignores the schema); "transformers:<model>" a `TransformersJudge` in this process.
`judge_options(spec, max_tokens=..., timeout_s=...)` names a command's judge settings (reply budget, request timeout,
model id, local server settings) as that spec's judge takes them; `JudgeArguments.open` is the one way a command
opens its judge (both calls in one).
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procrl.generation.vllm_engine import import_vllm
from procrl.judges.base import Judge
from procrl.judges.client import DEFAULT_API_KEY_ENV, OpenAICompatibleJudge, list_server_models
from procrl.judges.local import TransformersJudge
from procrl.judges.server import JudgeServer
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["NO_JUDGE", "JudgeArguments", "judge_options", "open_judge"]

NO_JUDGE = "none"  # the judge spec of "no judge" (JudgeArguments; FRS then reports what needs no judge)

# JudgeServer keywords open_judge takes out of **kwargs (the engine comes from the spec).
_SERVER_KWARGS = tuple(p for p in inspect.signature(JudgeServer).parameters if p not in ("model", "engine"))
_TRANSFORMERS_KWARGS = frozenset(inspect.signature(TransformersJudge).parameters) - {"model_name_or_path"}
_SERVE_TRANSFORMERS = "serve:transformers"


def _spec_kind(spec: str) -> str:
    if spec.startswith(("http://", "https://")):
        return "url"
    if spec == "local" or spec.startswith("local:"):
        return "local"
    if spec == _SERVE_TRANSFORMERS or spec.startswith(_SERVE_TRANSFORMERS + ":"):
        return "serve-transformers"
    if spec.startswith("transformers:"):
        return "transformers"
    return "unknown"


@dataclass
class JudgeArguments:
    """The settings of a run's one LLM judge, spelled alike wherever a judge is used (YAML keys and flags of
    `train_grpo.py`, where `procrl.trainers.tasks.arguments.SearchTaskArguments` holds them for the StepGap reward
    and the FRS callback alike, of `procrl frs` and of `procrl stepgap-eval`). `open` opens the judge.

    The reply budget has a per-use default (`judge_max_tokens: null`): the user passes it to `open`
    (`procrl.evals.frs.judging.JUDGE_MAX_TOKENS` = 96 for FRS's four scores, `procrl.rewards.stepgap.check.
    JUDGE_MAX_TOKENS` = 512 for StepGap's A-C replies).

    Raises:
        ValueError: (on construction) an unknown judge spec, a count or budget < 1, or a timeout <= 0; each
            message names the setting and a valid value.
    """

    judge: str = field(
        default="local",
        metadata={
            "help": "The LLM judge: 'local' / 'local:<model>' (vLLM's OpenAI server on the default model / that one, "
            "started on 127.0.0.1 for the run and stopped after it: each reply's schema enforced, closed choices "
            "also read as probabilities; where vLLM cannot be imported, a schema-constrained transformers judge in "
            "this process), 'serve:transformers[:<model>]' (`transformers serve`, which ignores the schema), "
            "'transformers:<model>' (in this process), an OpenAI-compatible URL 'http(s)://host:port/v1[#model]', "
            "or 'none' (no judge: FRS then reports accuracies and confidences only; StepGap needs a judge)."
        },
    )
    judge_model: str | None = field(
        default=None,
        metadata={
            "help": "Model id of a judge URL; null = the URL's #model, else the first model the server lists."
        },
    )
    judge_max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Token budget of one judge reply; null = the use's: 96 for FRS (the JSON of four scores is ~30 "
            "tokens), 512 for StepGap (an A-C reply whose free-text field loops to its bound takes up to ~520)."
        },
    )
    judge_timeout_s: float = field(
        default=600.0,
        metadata={
            "help": "Seconds one judge request may take, queueing in the server included (a loaded CPU server can "
            "take minutes for a queue of 8); server judges only."
        },
    )
    judge_concurrency: int = field(default=8, metadata={"help": "Judge requests in flight at once."})
    judge_num_threads: int = field(
        default=1,
        metadata={
            "help": "CPU threads of a local / serve:transformers judge server (vLLM: OMP threads, unpinned; 1 avoids "
            "thrashing a shared CPU)."
        },
    )
    judge_continuous_batching: bool = field(
        default=True,
        metadata={
            "help": "serve:transformers judge only: `transformers serve --continuous-batching` with JudgeServer's "
            "bounded KV cache; false = one request at a time. Ignored by 'local' (vLLM always batches) and the "
            "other judges."
        },
    )
    judge_cache_dir: str | None = field(
        default=None,
        metadata={"help": "On-disk judge cache (one file per valid judgement); null = <output_dir>/judge_cache."},
    )

    def __post_init__(self) -> None:
        if not self.enabled:
            self.judge = NO_JUDGE
        elif _spec_kind(self.judge.strip()) == "unknown":
            raise ValueError(
                f"judge {self.judge!r} is not a judge spec; use 'local', 'local:<model>', 'serve:transformers', "
                "'transformers:<model>', 'http://host:port/v1[#model]' or 'none'"
            )
        for name in ("judge_concurrency", "judge_num_threads", "judge_max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value} (e.g. {name}: {_EXAMPLES[name]})")
        if not self.judge_timeout_s > 0:
            raise ValueError(f"judge_timeout_s must be > 0 seconds, got {self.judge_timeout_s} (e.g. 600)")

    @property
    def enabled(self) -> bool:
        """Whether there is a judge (the spec is not "none")."""
        return self.judge.strip().lower() != NO_JUDGE

    @contextlib.contextmanager
    def open(self, *, output_dir: str | os.PathLike, default_max_tokens: int) -> Iterator[Judge | None]:
        """The judge these settings name (`open_judge` with the keywords of `judge_options`); a server it starts is
        stopped on exit. Yields None for `judge: none`.

        Args:
            output_dir: the run's output directory; the cache goes to `judge_cache_dir`, else
                `<output_dir>/judge_cache`.
            default_max_tokens: the reply budget when `judge_max_tokens` is null (the use's; class docstring).

        Raises:
            ValueError: a URL whose server lists no model (`open_judge`).
            RuntimeError: a local judge server that did not start.
        """
        if not self.enabled:
            yield None
            return
        options = judge_options(
            self.judge,
            max_tokens=self.judge_max_tokens or default_max_tokens,
            timeout_s=self.judge_timeout_s,
            model=self.judge_model,
            continuous_batching=self.judge_continuous_batching,
            num_threads=self.judge_num_threads,
        )
        cache_dir = self.judge_cache_dir or str(Path(output_dir) / "judge_cache")
        with open_judge(self.judge, cache_dir=cache_dir, max_concurrency=self.judge_concurrency, **options) as judge:
            yield judge


_EXAMPLES = {"judge_concurrency": 8, "judge_num_threads": 1, "judge_max_tokens": 512}


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
    kind = _spec_kind(spec)
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
        ValueError: an unknown spec, or a server that lists no model.
        RuntimeError: the local server did not start.
    """
    spec = spec.strip()
    kind = _spec_kind(spec)
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
        rest = spec.removeprefix(_SERVE_TRANSFORMERS) if kind == "serve-transformers" else spec.removeprefix("local")
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
