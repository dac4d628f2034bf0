"""Constrained decoding for the in-process judge (core layer): a `transformers.LogitsProcessor` that keeps every
row of a batch inside the JSON grammar of that row's pydantic schema (llguidance), and records the top
log-probabilities of the processed (masked) distribution at each generated position.

Library choice (issue 15), measured with `benchmarks/bench_constrained.py --rounds 2 --kinds frs,nli` and
`... --rounds 2 --kinds check,check_quotes` (defaults: the embedded SmolLM2-135M-Instruct, greedy, 8 requests of
each of procrl's own prompts, batch 8, at most 256 new tokens, CPU: 2 cores shared with other jobs): valid =
schema-valid replies / 8; s/j = wall seconds per judgement (prefill included), the faster of 2 interleaved rounds;
tok = mean reply tokens. FRS = `ReasoningJudgement`, NLI = `NLIVerdict`, A-C = `StepCheck`, A-C quotes = each
step's `step_check_schema` (quote = a choice among its evidence spans):

    backend                FRS              NLI              A-C                A-C quotes
                           valid s/j  tok   valid s/j  tok   valid s/j   tok    valid s/j   tok
    unconstrained          5/8  9.53  59    0/8  6.78  55    0/8  11.61  77     0/8  13.10  77
    llguidance 1.7.6       8/8  2.39  27    8/8  0.70  8     8/8   6.38  94     8/8   9.50  119
    lm-format-enforcer     8/8  2.84  27    8/8  1.02  13    8/8   9.31  115    6/8  11.30  124
    0.11.3

llguidance is chosen: every reply valid on all four (LMFE missed 2 of 8 choice-of-span quotes: schema_mismatch),
fewer tokens (no free whitespace: LMFE lets the model indent), as fast or faster, and less integration code:
`llguidance.hf.from_tokenizer` wraps a fast tokenizer, one `LLMatcher` per row takes the JSON schema as is, the
mask costs a few ms per step in Rust (a cProfile of one FRS batch: > 90% of the time in the model's forward), and
vLLM 0.30's structured outputs use the same library (pinned `llguidance>=1.7.0,<1.8.0`), so both embedded judges
enforce the same grammar. LMFE 0.11.3 imports `transformers.tokenization_utils`, which transformers 5 no longer
has (a module alias is needed). Unconstrained replies are slow because most run to the token limit.

Probabilities: the processor's `top_logprobs` holds, per generated position, the top-k of `log_softmax` (natural
log, temperature 1) of the scores that decide the token, i.e. the raw model distribution renormalised over the
tokens the grammar allows (masked tokens have probability 0 and are left out). Greedy decoding picks the argmax, so
the chosen token is always among them.
"""

from __future__ import annotations

import functools
import json
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel
from transformers import LogitsProcessor

from procrl.judges.choices import TokenAlternatives
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = ["JSONSchemaLogitsProcessor", "json_grammar", "llg_tokenizer", "token_alternatives"]

# The reply layout every grammar enforces: compact separators, no free whitespace (what `json.dumps` writes).
JSON_OPTIONS = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}

_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TOKENIZERS_LOCK = threading.Lock()


def llg_tokenizer(tokenizer: Any, eos_ids: Sequence[int]) -> Any:
    """The llguidance tokenizer of a transformers fast tokenizer with `eos_ids` as its end tokens, built once per
    (tokenizer, eos_ids) and kept while the tokenizer lives (building one takes about a second).

    Raises:
        ValueError: `tokenizer` is not a fast (Rust-backed) tokenizer (llguidance/hf.py:28-47 supports only those).
    """
    import llguidance.hf  # optional heavy dep (Rust extension): only the in-process judge needs it

    key = tuple(int(i) for i in eos_ids)
    with _TOKENIZERS_LOCK:
        per_tokenizer = _TOKENIZERS.setdefault(tokenizer, {})
        if key not in per_tokenizer:
            per_tokenizer[key] = llguidance.hf.from_tokenizer(tokenizer, eos_token=list(key) or None)
        return per_tokenizer[key]


@functools.lru_cache(maxsize=256)
def _grammar_from_text(schema_text: str) -> str:
    import llguidance  # optional heavy dep (Rust extension): only the in-process judge needs it

    # Options last ("overrides"): a schema's own "x-guidance" cannot turn free whitespace back on
    # (llguidance/_lib.pyi, LLMatcher.grammar_from_json_schema: defaults -> x-guidance -> overrides).
    return llguidance.LLMatcher.grammar_from_json_schema(schema_text, overrides=JSON_OPTIONS)


def json_grammar(schema: type[BaseModel] | dict) -> str:
    """The llguidance grammar (a JSON string) of a pydantic model's JSON schema (`model_json_schema()`) or of a
    JSON-schema dict, with `JSON_OPTIONS`. Cached per schema text. Does not validate the schema: a schema
    llguidance cannot compile leaves the matcher built from it in an error state.

    Objects that do not say `additionalProperties` get `false`: JSON Schema would allow any extra key there (and a
    small model fills them until its token budget ends), while pydantic ignores extra keys by default, so every
    reply the tighter grammar allows still validates.
    """
    as_dict = schema if isinstance(schema, dict) else schema.model_json_schema()
    return _grammar_from_text(json.dumps(_closed_objects(as_dict)))  # key order = property order


_VALUE_KEYWORDS = {"default", "const", "enum", "examples"}  # JSON values, not schemas: left as they are


def _closed_objects(node: Any) -> Any:
    if isinstance(node, list):
        return [_closed_objects(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: value if key in _VALUE_KEYWORDS else _closed_objects(value) for key, value in node.items()}
    if out.get("type") == "object" and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _unpack_bitmask(bitmask: np.ndarray, width: int) -> np.ndarray:
    """(B, ceil(V/32)) int32 llguidance bitmask -> (B, width) bool: bit i of word w allows token 32 w + i
    (llguidance/numpy.py:20-26 unpacks it the same way); little-endian words, as llguidance writes them."""
    as_bytes = np.ascontiguousarray(bitmask.astype("<i4", copy=False)).view(np.uint8)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :width].astype(bool)


class JSONSchemaLogitsProcessor(LogitsProcessor):
    """Masks the scores of a `generate` batch so that row b can only produce JSON valid against `schemas[b]`, and
    records the top log-probabilities of the processed scores in `top_logprobs`: one `(values, ids)` pair of
    (B, top_k) CPU tensors per generated position (natural log, `log_softmax` of the masked scores).

    Pass it last in `logits_processor=[...]` (HF appends custom processors after its own,
    transformers/generation/utils.py:1735-1737), greedy or sampling, batch rows in prompt order; use one instance
    per `generate` call (it holds the matchers' state).

    Args:
        tokenizer: the model's fast tokenizer.
        schemas: one per batch row: a pydantic model class, a JSON-schema dict, or None for a free row (recorded,
            not masked). `schemas=None`: no row is masked (free generation with recorded log-probs).
        eos_ids: the ids that end a reply; a row whose grammar is complete, or whose matcher is in an error state,
            gets its scores set to -inf except `eos_ids[0]` (score 0), so it ends there.
        top_k: log-probabilities recorded per position (0: none).
        batch_size: the rows when `schemas` is None.

    A matcher that errors (a schema llguidance refuses, a token it did not allow) is logged and its row ends: the
    reply is parsed as it stands, so the judge reports a typed failure, never a crash. `errors[b]` keeps the reason.
    Tokens after a row's first EOS (HF pads finished rows) are not consumed.
    """

    def __init__(
        self,
        tokenizer: Any,
        schemas: Sequence[type[BaseModel] | dict | None] | None,
        eos_ids: Sequence[int],
        *,
        top_k: int = 0,
        batch_size: int | None = None,
    ):
        import llguidance  # optional heavy dep (Rust extension): only the in-process judge needs it

        if not eos_ids:
            raise ValueError("JSONSchemaLogitsProcessor: eos_ids is empty")
        if top_k < 0:
            raise ValueError(f"JSONSchemaLogitsProcessor: top_k must be >= 0, got {top_k}")
        if schemas is None and batch_size is None:
            raise ValueError("JSONSchemaLogitsProcessor: pass schemas or batch_size")
        rows = len(schemas) if schemas is not None else int(batch_size)
        self.eos_ids = [int(i) for i in eos_ids]
        self.top_k = top_k
        self.errors: list[str | None] = [None] * rows
        self.top_logprobs: list[tuple[torch.Tensor, torch.Tensor]] = []  # per step: (B, k) values, (B, k) ids
        self._done = [False] * rows
        self._prompt_width: int | None = None
        self._matchers: list[Any] = [None] * rows
        self._vocab = 0
        if schemas is not None and any(s is not None for s in schemas):
            self._lltok = llg_tokenizer(tokenizer, self.eos_ids)
            self._vocab = self._lltok.vocab_size
            for row, schema in enumerate(schemas):
                if schema is None:
                    continue
                matcher = llguidance.LLMatcher(self._lltok, json_grammar(schema), log_level=0)
                self._matchers[row] = matcher
                if matcher.is_error():
                    self._fail(row, f"grammar: {matcher.get_error()}")
            self._executor = llguidance.LLExecutor()

    @property
    def constrained(self) -> bool:
        """Whether any row is masked."""
        return any(m is not None for m in self._matchers)

    def _fail(self, row: int, reason: str) -> None:
        if self.errors[row] is None:
            self.errors[row] = reason
            logger.warning("constrained decoding: row %d ends early (%s)", row, reason[:500])

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Mask `scores` (B, V) in place for the next token of each row and record its top-k log-probs."""
        if input_ids.shape[0] != len(self._done):
            raise ValueError(
                f"JSONSchemaLogitsProcessor: built for {len(self._done)} rows, called with {input_ids.shape[0]}"
            )
        if self._prompt_width is None:
            self._prompt_width = input_ids.shape[1]
        else:
            self._consume(input_ids[:, -1].tolist())
        if self.constrained:
            self._mask(scores)
        if self.top_k:
            k = min(self.top_k, scores.shape[-1])
            values, ids = torch.log_softmax(scores.float(), dim=-1).topk(k, dim=-1)
            self.top_logprobs.append((values.cpu(), ids.cpu()))
        return scores

    def _consume(self, last: list[int]) -> None:
        for row, token in enumerate(last):
            if self._done[row]:
                continue
            if token in self.eos_ids:
                self._done[row] = True
                continue
            matcher = self._matchers[row]
            if matcher is not None and self.errors[row] is None and not matcher.consume_token(token):
                self._fail(row, f"token {token}: {matcher.get_error()}")

    def _mask(self, scores: torch.Tensor) -> None:
        import llguidance.numpy  # optional heavy dep (Rust extension); not llguidance.torch, which imports dynamo

        active, ending = [], []
        for row, matcher in enumerate(self._matchers):
            if matcher is None or self._done[row]:
                continue
            if self.errors[row] is None and matcher.is_error():
                self._fail(row, matcher.get_error())
            if self.errors[row] is not None or matcher.is_stopped():
                ending.append(row)
            else:
                active.append(row)
        if active:
            bitmask = llguidance.numpy.allocate_token_bitmask(len(active), self._vocab)
            llguidance.numpy.fill_next_token_bitmask_par(
                self._executor, [(self._matchers[row], i) for i, row in enumerate(active)], bitmask
            )
            width = scores.shape[-1]
            allowed = np.zeros((len(active), width), dtype=bool)
            n = min(width, self._vocab)  # ids past the tokenizer's vocabulary (padded embeddings) stay masked
            allowed[:, :n] = _unpack_bitmask(bitmask, n)
            some = allowed.any(axis=1)
            for i in np.flatnonzero(~some):  # nothing allowed: a dead end, end the row instead of NaN scores
                self._fail(active[i], "the grammar allows no token")
                ending.append(active[i])
            blocked = np.zeros(scores.shape, dtype=bool)  # (B, V): True = masked; free and finished rows untouched
            blocked[[active[i] for i in np.flatnonzero(some)]] = ~allowed[some]
            scores.masked_fill_(torch.from_numpy(blocked).to(scores.device), float("-inf"))
        for row in ending:
            scores[row] = float("-inf")
            scores[row, self.eos_ids[0]] = 0.0


def token_alternatives(
    completion_ids: Sequence[int],
    top_logprobs: Sequence[tuple[torch.Tensor, torch.Tensor]],
    row: int,
    lltok: Any,
) -> TokenAlternatives | None:
    """The `TokenAlternatives` of one generated row: for each generated non-special token, its text and the
    recorded top alternatives `(text, logprob)` at that position (natural log; -inf ones left out; special tokens
    such as EOS left out of both).

    Token texts come from the token bytes (`lltok.decode_bytes`): a UTF-8 character split over several tokens
    belongs to the token that completes it (the others get ""), so the texts concatenate to the decoded reply;
    an alternative's text is its own bytes decoded with replacement characters.

    Returns None when fewer positions were recorded than tokens generated (a model whose `generate` skipped the
    processor).
    """
    if len(top_logprobs) < len(completion_ids):
        return None
    out: TokenAlternatives = []
    pending = b""
    for pos, token in enumerate(completion_ids):
        if lltok.is_special_token(token):
            continue
        pending += lltok.decode_bytes([token])
        text, pending = _complete_utf8(pending)
        values, ids = top_logprobs[pos]
        alternatives = [
            (lltok.decode_bytes([alt]).decode("utf-8", errors="replace"), value)
            for value, alt in zip(values[row].tolist(), ids[row].tolist(), strict=True)
            if value != float("-inf") and alt < lltok.vocab_size and not lltok.is_special_token(alt)
        ]
        out.append((text, alternatives))
    return out


def _complete_utf8(data: bytes) -> tuple[str, bytes]:
    """The longest prefix of `data` that decodes as UTF-8 (as text) and the incomplete rest (at most 3 bytes)."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8"), data[cut:]
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace"), b""
