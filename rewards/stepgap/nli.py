"""NLI backends for StepGap stages D and E (docs/architecture.md "StepGap"; arXiv 2605.24733).

Every backend answers `predict_proba(pairs) -> list[dict[str, float] | None]`: per `(premise, hypothesis)` pair, in
order, the probabilities {"entailment": P(e), "neutral": P(n), "contradiction": P(c)} (summing to 1), None meaning
"unscored" (the verifier turns it into ERROR); and `predict(pairs, thresholds=None) -> list[str | None]`, the label
that `NLIThresholds.decide` reads from those probabilities (by default the argmax).

- `CrossEncoderNLI`: a sequence-classification cross-encoder (`cross-encoder/nli-deberta-v3-large` by default in
  the paper), batched; probabilities = softmax of its logits; its labels are read from `config.id2label` by name,
  never by position (models disagree on the order: the cross-encoder's is contradiction/entailment/neutral, MNLI
  checkpoints often entailment/neutral/contradiction).
- `JudgeNLI`: the shared LLM judge client (`procrl.judges.Judge`) with an NLI prompt and a strict pydantic schema;
  the offline default where no cross-encoder can be downloaded. Probabilities: the judge's distribution over the
  three labels at the position where its reply chose one (`JudgeResult.probs["label"]`, from
  `procrl.judges.choices`) where the backend gave log-probs, else a one-hot of the validated label.
- `CachedNLI`: memoises another backend's probabilities in memory (the evaluation's ablations ask the same pairs
  again).
- `make_nli(spec, judge)`: "judge" -> `JudgeNLI`; anything else is a cross-encoder path or hub id, loaded eagerly,
  falling back to `JudgeNLI` with a warning when it cannot be loaded (docs/architecture.md "StepGap": "when given and loadable").
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from procrl.rewards.stepgap.nli_rule import (
    ARGMAX,
    NLI_LABELS,
    NLIThresholds,
    nli_probabilities,
    normalize_probs,
    one_hot,
)
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "NLI_LABELS",
    "NLIThresholds",
    "NLIBackend",
    "CrossEncoderNLI",
    "JudgeNLI",
    "CachedNLI",
    "NLIVerdict",
    "make_nli",
    "nli_probabilities",
    "normalize_probs",
]


class NLIBackend(abc.ABC):
    """Per (premise, hypothesis): `predict_proba` the three label probabilities, `predict` the decided label."""

    @abc.abstractmethod
    def predict_proba(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, float] | None]:
        """{"entailment": P(e), "neutral": P(n), "contradiction": P(c)} per pair, in order (probabilities, summing
        to 1); None for an unscored pair. Never raises for a single bad pair.

        Raises:
            ValueError: `pairs` is not a sequence of (premise: str, hypothesis: str).
        """

    def predict(self, pairs: Sequence[tuple[str, str]], thresholds: NLIThresholds | None = None) -> list[str | None]:
        """One of "entailment" | "neutral" | "contradiction" per pair, decided by `thresholds` (default: argmax)
        from `predict_proba`; None = unscored."""
        rule = thresholds or ARGMAX
        return [rule.decide(d) for d in self.predict_proba(pairs)]


def _check_pairs(pairs: Any) -> list[tuple[str, str]]:
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise ValueError(f"NLI pairs must be a sequence of (premise, hypothesis) tuples, got {type(pairs).__name__}")
    checked = []
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ValueError(f"NLI pair {i} must be a (premise: str, hypothesis: str) tuple, got {pair!r}")
        checked.append((pair[0], pair[1]))
    return checked


# --------------------------------------------------------------------------------------------------------------------
# Cross-encoder
# --------------------------------------------------------------------------------------------------------------------


def map_nli_labels(id2label: dict) -> dict[int, str]:
    """Class index -> "entailment" | "neutral" | "contradiction", read from a config's `id2label` by name.

    A name maps case-insensitively by substring: "contradict" -> contradiction, "neutral" -> neutral, "entail" ->
    entailment (but "not_entailment" / "non-entailment", the two-class RTE style, is rejected).

    Raises:
        ValueError: a class name maps to none or several labels, two classes map to one label, or a label is
            missing (e.g. "LABEL_0"/"LABEL_1"/"LABEL_2": set `config.id2label` to the model's real names).

    >>> map_nli_labels({0: "CONTRADICTION", 1: "Entailment", 2: "neutral"})
    {0: 'contradiction', 1: 'entailment', 2: 'neutral'}
    """
    mapping: dict[int, str] = {}
    for index, name in id2label.items():
        low = str(name).lower()
        hits = [label for key, label in (("contradict", "contradiction"), ("neutral", "neutral")) if key in low]
        if "entail" in low and not any(neg in low for neg in ("not", "non")):
            hits.append("entailment")
        if len(hits) != 1:
            raise ValueError(
                f"cannot map NLI class {index}={name!r} of id2label {dict(id2label)} to one of {NLI_LABELS}; the model "
                "needs three classes named like entailment/neutral/contradiction (fix config.id2label or pass label_map)"
            )
        mapping[int(index)] = hits[0]
    if sorted(mapping.values()) != sorted(NLI_LABELS):
        raise ValueError(
            f"id2label {dict(id2label)} does not name each of {NLI_LABELS} exactly once; fix config.id2label or pass "
            "label_map"
        )
    return mapping


class CrossEncoderNLI(NLIBackend):
    """An NLI cross-encoder (`AutoModelForSequenceClassification`): probabilities = softmax of the logits of
    `tokenizer(premise, hypothesis)`, each class named through the model's `config.id2label` (`map_nli_labels`);
    `predict` with the default rule is the argmax of the logits.

    Args:
        model_name_or_path: a hub id (e.g. "cross-encoder/nli-deberta-v3-large") or a local directory.
        batch_size: pairs per forward pass (padded to the longest pair of the batch; the attention mask keeps
            padding from changing a prediction).
        max_length: token limit of one pair; longer pairs are truncated, premise first ("only_first"), so the
            hypothesis (the claim) is kept whole when possible.
        device: "cpu", "cuda", ...; default CUDA when available.
        label_map: class index -> label, overriding `id2label` (for models with uninformative names).
        model, tokenizer: already-loaded objects (tests); then nothing is loaded.
        progress: show a tqdm bar over batches.

    Raises:
        ValueError (at load): unmappable labels (see `map_nli_labels`) or batch_size < 1.
        OSError (at load): the model cannot be found or downloaded.

    A batch whose forward pass fails gives None for its pairs (logged), never an exception mid-training.
    """

    def __init__(
        self,
        model_name_or_path: str = "cross-encoder/nli-deberta-v3-large",
        batch_size: int = 16,
        *,
        max_length: int = 512,
        device: str | None = None,
        label_map: dict[int, str] | None = None,
        model: Any = None,
        tokenizer: Any = None,
        progress: bool = False,
    ):
        if batch_size < 1 or max_length < 8:
            raise ValueError(
                f"CrossEncoderNLI: need batch_size >= 1 and max_length >= 8, got {batch_size}, {max_length}"
            )
        if (model is None) != (tokenizer is None):
            raise ValueError("CrossEncoderNLI: pass both model and tokenizer, or neither")
        self.model_name_or_path = model_name_or_path
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.progress = progress
        self._label_map_override = dict(label_map) if label_map else None
        self._model = model
        self._tokenizer = tokenizer
        self.labels: dict[int, str] | None = None
        if model is not None:
            self._finish_load()

    def load(self) -> CrossEncoderNLI:
        """Load the model and tokenizer now (otherwise on first `predict`); raises OSError/ValueError on failure."""
        if self._model is None:
            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            logger.info("loading NLI cross-encoder %s on %s", self.model_name_or_path, device)
            self._tokenizer = AutoTokenizer.from_pretrained(self.model_name_or_path)
            self._model = AutoModelForSequenceClassification.from_pretrained(self.model_name_or_path).to(device)
            self._finish_load()
        return self

    def _finish_load(self) -> None:
        self._model.eval()
        if self._label_map_override is not None:
            self.labels = map_nli_labels(self._label_map_override)
        else:
            self.labels = map_nli_labels(self._model.config.id2label)
        if self._tokenizer.pad_token_id is None:
            raise ValueError(f"CrossEncoderNLI: the tokenizer of {self.model_name_or_path} has no pad token")

    def predict_proba(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, float] | None]:
        """Softmax probabilities per (premise, hypothesis) pair; None for the pairs of a batch that failed."""
        pairs = _check_pairs(pairs)
        if not pairs:
            return []
        self.load()
        model, tokenizer = self._model, self._tokenizer
        device = next(model.parameters()).device
        out: list[dict[str, float] | None] = []
        starts = range(0, len(pairs), self.batch_size)
        for start in tqdm(starts, desc="NLI", disable=not self.progress, unit="batch"):
            batch = pairs[start : start + self.batch_size]
            try:
                enc = tokenizer(
                    [p for p, _ in batch],
                    [h for _, h in batch],
                    padding=True,
                    truncation="only_first",
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(device)
                with torch.no_grad():
                    logits = model(**enc).logits  # (B, num_labels)
                probs = torch.softmax(logits.float(), dim=-1).tolist()
                out.extend({self.labels[i]: p for i, p in enumerate(row)} for row in probs)
            except Exception as exc:  # one bad batch is unscored, not a crash
                logger.warning("NLI batch %d failed (%s: %s)", start // self.batch_size, type(exc).__name__, exc)
                out.extend([None] * len(batch))
        return out

    def __repr__(self) -> str:
        return f"CrossEncoderNLI({self.model_name_or_path!r}, batch_size={self.batch_size})"


# --------------------------------------------------------------------------------------------------------------------
# The judge as an NLI model
# --------------------------------------------------------------------------------------------------------------------


class NLIVerdict(BaseModel):
    """The judge's NLI reply: exactly {"label": "entailment" | "neutral" | "contradiction"}.

    Strict and never coerced: "Entailment", " neutral" or any other spelling is a schema mismatch (unscored), not a
    label. A backend that enforces the schema can only produce the three exact strings; a reply that needs fixing up
    came from a backend that ignored it, and a guess is not a judgement (issue 15, "never coerced").
    """

    model_config = ConfigDict(strict=True, extra="forbid")
    label: Literal["entailment", "neutral", "contradiction"]


NLI_SYSTEM_PROMPT = (
    "You decide textual entailment. You get a PREMISE and a HYPOTHESIS. Answer:\n"
    '- "entailment" if a careful reader who believes the premise must also believe the hypothesis;\n'
    '- "contradiction" if the premise shows the hypothesis is false;\n'
    '- "neutral" if the premise neither proves nor disproves the hypothesis.\n'
    "Use only the premise, not your own knowledge. Reply with one JSON object and nothing else: "
    '{"label": "entailment"} or {"label": "neutral"} or {"label": "contradiction"}.'
)


def nli_messages(premise: str, hypothesis: str) -> list[dict]:
    """The chat request `JudgeNLI` sends for one pair."""
    return [
        {"role": "system", "content": NLI_SYSTEM_PROMPT},
        {"role": "user", "content": f"PREMISE:\n{premise}\n\nHYPOTHESIS:\n{hypothesis}"},
    ]


class JudgeNLI(NLIBackend):
    """NLI by the LLM judge: one request per pair (`nli_messages`), validated against `NLIVerdict`; all pairs of a
    `predict_proba` call go to the judge in ONE `judge.judge` call (concurrent for OpenAI-compatible judges).

    Probabilities: `JudgeResult.probs["label"]`, the judge's distribution over the three labels where the backend
    returned log-probs (`procrl.judges.choices.choice_probabilities`, renormalised over the labels its top
    log-probs covered); otherwise (or when that distribution is unusable) a one-hot of the validated label.

    Args:
        judge: a `procrl.judges.Judge`.
        progress: show the judge's tqdm bar.

    An unscored judgement (timeout, invalid JSON, a label outside the three) gives None.
    """

    def __init__(self, judge: Any, *, progress: bool = False):
        self.judge = judge
        self.progress = progress

    def predict_proba(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, float] | None]:
        pairs = _check_pairs(pairs)
        if not pairs:
            return []
        results = self.judge.judge(
            [nli_messages(p, h) for p, h in pairs], NLIVerdict, desc="NLI (judge)", progress=self.progress
        )
        return [self._probs(r) for r in results]

    @staticmethod
    def _probs(result: Any) -> dict[str, float] | None:
        if not result.ok:
            return None
        dist = normalize_probs((result.probs or {}).get("label"))
        return dist if dist is not None else one_hot(result.value.label)

    def __repr__(self) -> str:
        return f"JudgeNLI({self.judge!r})"


class CachedNLI(NLIBackend):
    """Memoise `inner`'s probabilities in memory (`nli_probabilities`: `predict_proba`, or one-hots of `predict`):
    each distinct pair is asked once; None results are not kept, so they are asked again next time."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.memo: dict[tuple[str, str], dict[str, float]] = {}

    def predict_proba(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, float] | None]:
        pairs = _check_pairs(pairs)
        todo = list(dict.fromkeys(p for p in pairs if p not in self.memo))
        fresh = dict(zip(todo, nli_probabilities(self.inner, todo), strict=True)) if todo else {}
        self.memo.update({p: dist for p, dist in fresh.items() if dist is not None})
        return [dict(self.memo[p]) if p in self.memo else fresh.get(p) for p in pairs]

    def __repr__(self) -> str:
        return f"CachedNLI({self.inner!r})"


def make_nli(spec: str, judge: Any = None, *, batch_size: int = 16, progress: bool = False) -> NLIBackend:
    """The NLI backend for a command-line spec.

    Args:
        spec: "judge" (the judge client with an NLI prompt, the offline default) or a cross-encoder hub id / local
            directory (e.g. "cross-encoder/nli-deberta-v3-large").
        judge: the judge client; needed for "judge" and for the fallback.
        batch_size: cross-encoder batch size.

    A cross-encoder that cannot be loaded (no network, bad labels) falls back to `JudgeNLI` with a warning when a
    judge is given; without a judge the load error is raised.
    """
    if spec == "judge":
        if judge is None:
            raise ValueError("make_nli('judge') needs a judge client")
        return JudgeNLI(judge, progress=progress)
    try:
        return CrossEncoderNLI(spec, batch_size, progress=progress).load()
    except (OSError, ValueError) as exc:
        if judge is None:
            raise
        logger.warning(
            "NLI cross-encoder %r not loadable (%s); falling back to the judge with an NLI prompt", spec, exc
        )
        return JudgeNLI(judge, progress=progress)
