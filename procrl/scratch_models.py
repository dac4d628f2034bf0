"""Model organisms: randomly initialised Llama-shaped policies named by a spec string, trained from scratch.

A spec is `scratch:<arch>[,key=value]...` (spaces ignored, keys in any order, each at most once):

    scratch:llama,hidden=128,layers=4,heads=4,intermediate=512,tokenizer=default

| key | LlamaConfig field | default |
|---|---|---|
| `hidden` | `hidden_size` | 128 |
| `layers` | `num_hidden_layers` | 4 |
| `heads` | `num_attention_heads` | 4 |
| `kv_heads` | `num_key_value_heads` (grouped-query attention; must divide `heads`) | = heads |
| `intermediate` | `intermediate_size` (the MLP's width) | 4 x hidden |
| `positions` | `max_position_embeddings` | 2048 |
| `tie` | `tie_word_embeddings` (true / false) | true |
| `seed` | the torch seed of the initialisation | 0 |
| `tokenizer` | the tokenizer: a local directory, a hub id, or `default` / `smollm2` (the embedded SmolLM2-135M-Instruct's, `procrl.models.resolve_model`) | default |

`llama` is the only architecture. `hidden` must be a multiple of `heads` with an even head size (rotary embeddings
rotate pairs). The vocabulary is the tokenizer's (`len(tokenizer)`, added tokens included), and its BOS, EOS and
pad ids (pad = EOS when it has none) go into the config, so the model is an ordinary `LlamaForCausalLM` that
`save_pretrained` writes with its tokenizer (chat template included: the tokenizer must have one) and that
transformers and vLLM load like any checkpoint. vLLM's CPU attention supports head sizes 32, 64, 80, 96, 112,
128, 160, 192, 224, 256 and 512 (vllm/v1/attention/backends/cpu_attn.py:64-65, vLLM 0.30); another head size
is logged as a warning. A value may not contain a comma (the separator), so a tokenizer path with a comma cannot
be named here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from procrl.models import resolve_model
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "SCRATCH_PREFIX",
    "ScratchSpec",
    "build_scratch_model",
    "is_scratch_spec",
    "load_scratch_tokenizer",
    "parse_scratch_spec",
]

SCRATCH_PREFIX = "scratch:"
ARCHITECTURES = ("llama",)
DEFAULT_TOKENIZER_ALIASES = ("default", "smollm2")  # the embedded SmolLM2-135M-Instruct's tokenizer
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # cpu_attn.py:64-65 (vLLM 0.30)
_INT_KEYS = ("hidden", "layers", "heads", "kv_heads", "intermediate", "positions", "seed")
_KEYS = ("hidden", "layers", "heads", "kv_heads", "intermediate", "positions", "tie", "seed", "tokenizer")
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True)
class ScratchSpec:
    """A parsed `scratch:` spec (module docstring); `kv_heads` and `intermediate` are filled in (never None)."""

    arch: str = "llama"
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int | None = None
    intermediate: int | None = None
    positions: int = 2048
    tie: bool = True
    seed: int = 0
    tokenizer: str = "default"

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.intermediate is None:
            object.__setattr__(self, "intermediate", 4 * self.hidden)
        if self.tokenizer.lower() in DEFAULT_TOKENIZER_ALIASES:
            object.__setattr__(self, "tokenizer", "default")
        problems = []
        if self.arch not in ARCHITECTURES:
            problems.append(f"architecture {self.arch!r} is not one of {ARCHITECTURES}")
        for key in ("hidden", "layers", "heads", "kv_heads", "intermediate", "positions"):
            if getattr(self, key) < 1:
                problems.append(f"{key}={getattr(self, key)} must be >= 1")
        if self.seed < 0:
            problems.append(f"seed={self.seed} must be >= 0")
        if not problems and self.hidden % self.heads:
            problems.append(f"hidden={self.hidden} must be a multiple of heads={self.heads}")
        elif not problems and (self.hidden // self.heads) % 2:
            problems.append(
                f"the head size hidden/heads = {self.hidden // self.heads} must be even (rotary embeddings)"
            )
        if not problems and self.heads % self.kv_heads:
            problems.append(f"kv_heads={self.kv_heads} must divide heads={self.heads}")
        if not self.tokenizer:
            problems.append("tokenizer= needs a value (a directory, a hub id, or default)")
        if problems:
            raise ValueError(f"scratch model spec: {'; '.join(problems)}. {_GRAMMAR_HINT}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def canonical(self) -> str:
        """The spec with every key spelled out, in the table's order (the same model gives the same string).

        >>> parse_scratch_spec("scratch:llama,layers=2,hidden=64").canonical
        'scratch:llama,hidden=64,layers=2,heads=4,kv_heads=4,intermediate=256,positions=2048,tie=true,seed=0,tokenizer=default'
        """
        values = [f"{key}={str(getattr(self, key)).lower() if key == 'tie' else getattr(self, key)}" for key in _KEYS]
        return f"{SCRATCH_PREFIX}{self.arch}," + ",".join(values)

    def architecture(self) -> dict[str, Any]:
        """The spec's fields but the tokenizer (whose identity is its files', not its name): {key: value}."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "tokenizer"}

    def llama_config(self, tokenizer: Any) -> LlamaConfig:
        """The `LlamaConfig` of this spec over `tokenizer`'s vocabulary and special tokens."""
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=self.positions,
            tie_word_embeddings=self.tie,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=pad,
        )


_GRAMMAR_HINT = (
    "Write scratch:llama[,hidden=H][,layers=L][,heads=A][,kv_heads=K][,intermediate=I][,positions=P][,tie=true|false]"
    "[,seed=S][,tokenizer=PATH|default], e.g. scratch:llama,hidden=128,layers=4,heads=4,intermediate=512."
)


def is_scratch_spec(name: str | None) -> bool:
    """Whether a model name is a `scratch:` spec (case-insensitive prefix).

    >>> is_scratch_spec("scratch:llama"), is_scratch_spec("default"), is_scratch_spec(None)
    (True, False, False)
    """
    return bool(name) and name.strip().lower().startswith(SCRATCH_PREFIX)


def parse_scratch_spec(text: str) -> ScratchSpec:
    """`scratch:llama,hidden=128,...` -> `ScratchSpec` (grammar: module docstring).

    Raises:
        ValueError: not a `scratch:` spec, an unknown, repeated or valueless key, a value that is not an integer
            (a boolean for `tie`), or a shape `ScratchSpec` refuses; the message gives the grammar.

    >>> spec = parse_scratch_spec("scratch:llama, hidden=256, layers=4, tokenizer=smollm2")
    >>> spec.hidden, spec.heads, spec.intermediate, spec.tokenizer, spec.head_dim
    (256, 4, 1024, 'default', 64)
    """
    if not is_scratch_spec(text):
        raise ValueError(f"{text!r} is not a scratch model spec. {_GRAMMAR_HINT}")
    arch, *pairs = [part.strip() for part in text.strip()[len(SCRATCH_PREFIX) :].split(",")]
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = (s.strip() for s in pair.partition("="))
        if not sep or not key or not value:
            raise ValueError(f"scratch model spec {text!r}: {pair!r} is not key=value. {_GRAMMAR_HINT}")
        if key not in _KEYS:
            raise ValueError(f"scratch model spec {text!r}: unknown key {key!r} (keys: {', '.join(_KEYS)}).")
        if key in values:
            raise ValueError(f"scratch model spec {text!r}: {key} is given twice.")
        if key in _INT_KEYS:
            try:
                values[key] = int(value)
            except ValueError:
                raise ValueError(f"scratch model spec {text!r}: {key}={value!r} is not an integer.") from None
        elif key == "tie":
            if value.lower() not in (*_TRUE, *_FALSE):
                raise ValueError(f"scratch model spec {text!r}: tie={value!r} must be true or false.")
            values[key] = value.lower() in _TRUE
        else:
            values[key] = value
    return ScratchSpec(arch=arch.lower(), **values)


def load_scratch_tokenizer(spec: ScratchSpec) -> Any:
    """The spec's tokenizer (`default`: the embedded SmolLM2's), with pad = EOS when it has no pad token.

    Raises:
        ValueError: the tokenizer has no chat template or no EOS token (prompts are chat messages, and a policy
            must learn to stop).
    """
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(spec.tokenizer))
    if not tokenizer.chat_template:
        raise ValueError(
            f"scratch model: the tokenizer {spec.tokenizer!r} has no chat template; prompts are chat messages, so use "
            "a tokenizer with one (tokenizer=default: the embedded SmolLM2's)."
        )
    if tokenizer.eos_token_id is None:
        raise ValueError(f"scratch model: the tokenizer {spec.tokenizer!r} has no EOS token; use one that has.")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def build_scratch_model(spec: ScratchSpec | str, *, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """A randomly initialised `LlamaForCausalLM` of the spec and its tokenizer (`load_scratch_tokenizer`).

    The initialisation draws from a forked torch RNG seeded with `spec.seed`, so the same spec gives the same
    weights and the caller's RNG state is left as it was.

    Args:
        spec: a `ScratchSpec` or its string.
        dtype: the parameters' dtype (float32: train it with bf16 autocast where wanted).

    Returns:
        (model in train mode on the CPU, tokenizer).

    Raises:
        ValueError: a bad spec (`parse_scratch_spec`) or tokenizer (`load_scratch_tokenizer`).
    """
    spec = parse_scratch_spec(spec) if isinstance(spec, str) else spec
    tokenizer = load_scratch_tokenizer(spec)
    config = spec.llama_config(tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = LlamaForCausalLM(config).to(dtype)
    if spec.head_dim not in VLLM_CPU_HEAD_SIZES:
        logger.warning(
            "scratch model: head size %d is not one vLLM's CPU attention supports %s; transformers loads it, the vLLM "
            "CPU engine will not (choose hidden/heads among them).",
            spec.head_dim,
            VLLM_CPU_HEAD_SIZES,
        )
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("scratch model %s: %.2fM parameters, vocabulary %d", spec.canonical, n_params / 1e6, config.vocab_size)
    return model, tokenizer
