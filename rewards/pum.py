"""Prefix Utility Model (PUM): the input renderer shared by training and scoring, and the scorer.

PUM ("From Correctness to Utility: Gain-Based Prefix Evaluation", arXiv 2606.07190; DESIGN §4 "PUM") is a
sequence-classification model with one output, U_θ(x, p), trained with Bradley-Terry on pairs of prefixes p of
solutions to a problem x, preferring the prefix with the larger estimated gain in solve rate.

Input rendering (`render_prefix`, used by `procrl.trainers.pum_training` AND by `PrefixUtilityModel`):

* the chat template with one user message (the problem) and the generation prompt (`add_generation_prompt=True`),
  then the prefix's ids with NO end-of-turn token: the state a policy is in while it is still writing;
* the prefix is tokenized piece by piece (`procrl.rewards.steps.tokenize_steps`): a string is first split into
  steps with `split_steps(prefix, separator)`, so the ids of "steps 1..k" are the same whether they are rendered
  alone or as the start of a longer trajectory, and step boundaries are exact token indices;
* a trailing EOS (and pad) token text is stripped from the prefix first: transformers' sequence-classification
  head pools at the rightmost token that is not the pad token, and pad == eos for SmolLM2 (DESIGN §3);
* truncation (`max_length`): the rendered input keeps at most `max_length - 1` tokens (one token of slack under
  TRL's `RewardTrainer` filter `len(ids) <= max_length`, which drops longer pairs silently). The problem is
  always kept whole and the PREFIX IS CUT FROM THE RIGHT. Why right and not left: the score of a right-cut
  prefix is exactly the score of an earlier prefix of the same trajectory (the model sees a state that really
  occurred, in full), and one forward pass over a cut trajectory gives, at every boundary, the same ids and hence
  the same value as rendering that prefix alone (left-cutting would make every prefix need its own window and
  show the model a solution without its beginning). The cost: a cut prefix is scored as its first
  `max_length - 1 - len(prompt)` tokens (by `score` and in training), and two long prefixes that share those tokens
  become identical; the training data preparation drops such pairs and counts them. Step scoring (`score_steps`)
  instead reports every step whose end was cut as unscored (NaN), see below. A problem whose rendered prompt alone
  exceeds the budget raises `ValueError` (raise `max_length`).

Scoring (`PrefixUtilityModel`): `score_prefixes(problem, steps)` gives U after every step of one trajectory from
ONE forward pass (the score head applied to the final hidden states at the boundary positions, i.e. at position
`boundary - 1`). Each distinct boundary is scored once: an empty step has the boundary of the step before it and
gets a copy of that step's value (the same float, not a second evaluation). A step whose end lies beyond the
budget (cut whole or in part: `RenderedPrefix.complete` is False) is UNSCORED, NaN: the model never saw the state
after it, and a partly kept step is not the step. `score(problems, prefixes)` scores independent prefixes in padded batches, pooling at the last
position with attention_mask == 1 (never "first pad/eos", DESIGN §3) and with position ids from the mask, so
left- and right-padded batches give the same values. Scores are raw head outputs (real numbers, no sigmoid):
only differences are meaningful, P(a preferred to b) = σ(U_a - U_b).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from procrl.rewards.steps import DEFAULT_SEPARATOR, Step, split_steps, tokenize_steps
from procrl.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "PUM_CONFIG_NAME",
    "PrefixUtilityModel",
    "RenderedPrefix",
    "pooled_scores",
    "prefix_pieces",
    "render_prefix",
    "render_prompt_ids",
    "score_token_sequences",
    "strip_trailing_eos",
]

# Written next to a trained PUM by `procrl.trainers.pum_training`: the rendering settings used in training,
# read back by `PrefixUtilityModel.from_pretrained` so scoring renders inputs the same way.
PUM_CONFIG_NAME = "pum_config.json"


# ----------------------------------------------------------------------------------------------------------
# Rendering (one function for training and scoring)
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderedPrefix:
    """A rendered (problem, prefix) input.

    Attributes:
        input_ids: token ids, `prompt ids + prefix ids`, at most `max_length - 1` long.
        boundaries: one per prefix piece: the exclusive token index in `input_ids` where the piece ends
            (`input_ids[:boundaries[k]]` is the input for "pieces 0..k"), non-decreasing, clipped to
            `len(input_ids)` when the prefix was cut; an empty piece repeats the previous boundary (or
            `prompt_length` for a first empty piece).
        prompt_length: tokens of the rendered prompt (chat template through the assistant header); the input for
            the empty prefix is `input_ids[:prompt_length]`.
        truncated_tokens: prefix tokens cut from the right to fit `max_length - 1` (0 when nothing was cut).
        complete: one per prefix piece: True when the piece's end lies within `input_ids` (every token of pieces
            0..k was kept), False when truncation cut the piece whole or in part. An empty piece is complete exactly
            when the piece before it is (a first empty piece always is: the prompt is never cut).
    """

    input_ids: list[int]
    boundaries: list[int]
    prompt_length: int
    truncated_tokens: int
    complete: list[bool]


def strip_trailing_eos(text: str, tokenizer: Any) -> str:
    """`text` without trailing EOS / pad token strings (and the whitespace around them), else unchanged.

    A full completion decoded with its end-of-turn token would otherwise be scored at a different position than
    in training: transformers pools at the rightmost non-pad token, and pad == eos for SmolLM2.

    >>> class Tok: eos_token = "<|im_end|>"; pad_token = "<|im_end|>"
    >>> strip_trailing_eos("x = 4.<|im_end|>\\n", Tok())
    'x = 4.'
    >>> strip_trailing_eos("x = 4.\\n\\n", Tok())
    'x = 4.\\n\\n'
    """
    markers = [m for m in (getattr(tokenizer, "eos_token", None), getattr(tokenizer, "pad_token", None)) if m]
    while True:
        stripped = text.rstrip()
        marker = next((m for m in markers if stripped.endswith(m)), None)
        if marker is None:
            return text
        text = stripped[: -len(marker)]


def prefix_pieces(prefix: str | Sequence[str | Step], separator: str = DEFAULT_SEPARATOR) -> list[str]:
    """The pieces a prefix is tokenized in: a string is split into steps (`split_steps`), a sequence is kept.

    Each piece keeps its own separator, so `"".join(pieces)` is the prefix text. A whitespace-only string gives
    [] (the empty prefix).

    >>> prefix_pieces("a = 1.\\n\\nb = 2.")
    ['a = 1.\\n\\n', 'b = 2.']
    >>> prefix_pieces(["a = 1.\\n\\n", "b = 2."])
    ['a = 1.\\n\\n', 'b = 2.']
    """
    if isinstance(prefix, str):
        return [step.text for step in split_steps(prefix, separator)]
    return [piece.text if isinstance(piece, Step) else str(piece) for piece in prefix]


def render_prompt_ids(tokenizer: Any, problem: str) -> list[int]:
    """Ids of the chat template with one user message (`problem`) and the assistant generation prompt.

    Raises:
        ValueError: the tokenizer has no chat template, or `problem` is not a non-empty string.
    """
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"render_prompt_ids: the problem must be a non-empty string, got {problem!r}")
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "render_prompt_ids: the tokenizer has no chat template; PUM renders (problem, prefix) as a chat. Use an "
            "instruct model's tokenizer or set `tokenizer.chat_template`."
        )
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": problem}], add_generation_prompt=True, tokenize=False
    )
    return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]


def render_prefix(
    tokenizer: Any,
    problem: str,
    prefix: str | Sequence[str | Step],
    max_length: int | None,
    *,
    separator: str = DEFAULT_SEPARATOR,
    prompt_ids: Sequence[int] | None = None,
) -> RenderedPrefix:
    """Render (problem, prefix) for the PUM: chat prompt + prefix ids, no end-of-turn, cut to `max_length - 1`.

    See the module docstring for the rules (piecewise tokenization, trailing EOS stripped, the problem kept and the
    prefix cut from the right).

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        problem: the problem text (the user message).
        prefix: the assistant's partial solution: a string (split into steps at `separator`) or its pieces (kept as
            given; an empty piece gets the previous boundary). "" or [] is the empty prefix.
        max_length: total token budget as in TRL's `RewardConfig.max_length`; the input keeps at most
            `max_length - 1` tokens. None: no truncation.
        separator: step separator used to split a string prefix (default "\\n\\n").
        prompt_ids: the ids of `render_prompt_ids(tokenizer, problem)` when already computed (a cache).

    Returns:
        A `RenderedPrefix` (token ids, per-piece boundaries, prompt length, tokens cut).

    Raises:
        ValueError: no chat template, an empty problem, `max_length < 2`, or a prompt longer than `max_length - 1`.

    >>> from transformers import AutoTokenizer
    >>> from procrl.models import resolve_model
    >>> tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    >>> r = render_prefix(tok, "What is 2+2?", "2+2 = 4.\\n\\nThe answer is 4.", max_length=1024)
    >>> r.prompt_length, r.boundaries, r.truncated_tokens, tok.decode(r.input_ids[r.prompt_length - 4:])
    (37, [45, 51], 0, '<|im_start|>assistant\\n2+2 = 4.\\n\\nThe answer is 4.')
    """
    if max_length is not None and max_length < 2:
        raise ValueError(
            f"render_prefix: max_length must be >= 2 (the input keeps max_length - 1 tokens), got {max_length}"
        )
    prompt = [int(t) for t in prompt_ids] if prompt_ids is not None else render_prompt_ids(tokenizer, problem)
    pieces = prefix_pieces(prefix, separator)
    if pieces:
        pieces[-1] = strip_trailing_eos(pieces[-1], tokenizer)
    # tokenize_steps needs non-empty pieces; an empty piece (e.g. a trailing EOS only) repeats the previous boundary.
    nonempty = [piece for piece in pieces if piece]
    ids, nonempty_bounds = tokenize_steps(tokenizer, nonempty, prefix_ids=prompt) if nonempty else (list(prompt), [])
    bounds_iter = iter(nonempty_bounds)
    boundaries: list[int] = []
    for piece in pieces:
        boundaries.append(next(bounds_iter) if piece else (boundaries[-1] if boundaries else len(prompt)))

    budget = None if max_length is None else max_length - 1
    truncated = 0
    complete = [True] * len(boundaries)
    if budget is not None:
        if len(prompt) > budget:
            raise ValueError(
                f"render_prefix: the rendered problem alone has {len(prompt)} tokens, more than max_length - 1 = "
                f"{budget}; the problem is never cut. Raise max_length."
            )
        if len(ids) > budget:
            truncated = len(ids) - budget
            ids = ids[:budget]
            complete = [b <= budget for b in boundaries]  # unclipped ends: a piece ending at the budget is whole
            boundaries = [min(b, budget) for b in boundaries]
    return RenderedPrefix(
        input_ids=ids, boundaries=boundaries, prompt_length=len(prompt), truncated_tokens=truncated, complete=complete
    )


# ----------------------------------------------------------------------------------------------------------
# Pooling: the score head on hidden states at chosen positions
# ----------------------------------------------------------------------------------------------------------


def _backbone_and_head(model: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The transformer body and the `score` head of a (PEFT-wrapped) `*ForSequenceClassification` model."""
    try:
        from peft import PeftModel

        if isinstance(model, PeftModel):
            model = model.get_base_model()  # LoRA layers stay injected and active; `score` is PEFT's trained copy
    except ImportError:  # peft is a dependency, but scoring a plain model must not need it
        pass
    head = getattr(model, "score", None)
    backbone = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    if head is None or backbone is None:
        raise TypeError(
            f"{type(model).__name__} is not a causal-LM sequence-classification model with a `score` head "
            "(e.g. LlamaForSequenceClassification); PUM scoring applies that head to chosen hidden states."
        )
    return backbone, head


def _model_device(model: Any) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def pooled_scores(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """Score-head outputs at chosen positions from one forward pass of a sequence-classification model.

    The body runs once on the padded batch with position ids `cumsum(attention_mask) - 1` (so left padding does not
    shift positions); the head is applied to the final hidden states at `positions` only. The value at position t is
    U of the input `input_ids[b, :t+1]` (causal attention), i.e. exactly what `model(input_ids[b, :t+1]).logits`
    gives for an unpadded row.

    Args:
        model: a `*ForSequenceClassification` model with one label (or a PEFT model wrapping one).
        input_ids: `(B, T)` token ids (any padding side).
        attention_mask: `(B, T)` 1 for real tokens, 0 for padding.
        positions: `(B, K)` 0-based token positions to score (real tokens only; a padded entry may point anywhere).

    Returns:
        `(B, K)` float32 scores (raw head outputs).
    """
    backbone, head = _backbone_and_head(model)
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    hidden = backbone(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).last_hidden_state  # (B, T, H)
    index = positions.to(hidden.device).unsqueeze(-1).expand(-1, -1, hidden.shape[-1])  # (B, K, H)
    picked = hidden.gather(1, index)  # (B, K, H)
    return head(picked).squeeze(-1).float()  # (B, K)


def _pad_batch(
    sequences: Sequence[Sequence[int]], pad_token_id: int, padding_side: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(input_ids, attention_mask, offsets)`, all `(B, T)`/`(B,)`: offsets shift a row's token index to its
    padded column (the number of left pads)."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    offsets = torch.zeros(len(sequences), dtype=torch.long)
    for row, seq in enumerate(sequences):
        start = width - len(seq) if padding_side == "left" else 0
        ids[row, start : start + len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, start : start + len(seq)] = 1
        offsets[row] = start
    return ids, mask, offsets


def _scores_at(
    model: Any,
    sequences: Sequence[Sequence[int]],
    positions: Sequence[Sequence[int]],
    *,
    pad_token_id: int,
    batch_size: int,
    padding_side: str = "right",
) -> list[list[float]]:
    """U at `positions[i]` (0-based token indices into `sequences[i]`) for every sequence, in padded batches.

    Sequences are batched in order of length (less padding) and the results returned in input order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for i, (seq, pos) in enumerate(zip(sequences, positions, strict=True)):
        if not seq:
            raise ValueError(f"sequence {i} is empty")
        if any(p < 0 or p >= len(seq) for p in pos):
            raise ValueError(f"sequence {i}: positions {list(pos)} fall outside its {len(seq)} tokens")
    device = _model_device(model)
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    out: list[list[float]] = [[] for _ in sequences]
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            ids, mask, offsets = _pad_batch([sequences[i] for i in rows], pad_token_id, padding_side)
            width = max(max(len(positions[i]), 1) for i in rows)
            pos = torch.zeros((len(rows), width), dtype=torch.long)
            for r, i in enumerate(rows):
                if positions[i]:
                    pos[r, : len(positions[i])] = torch.tensor(list(positions[i]), dtype=torch.long) + offsets[r]
            values = pooled_scores(model, ids.to(device), mask.to(device), pos.to(device)).cpu()
            if not torch.isfinite(values).all():
                raise FloatingPointError("PUM produced a non-finite score; check the checkpoint and its dtype")
            for r, i in enumerate(rows):
                out[i] = values[r, : len(positions[i])].tolist()
    return out


def score_token_sequences(
    model: Any, sequences: Sequence[Sequence[int]], *, pad_token_id: int, batch_size: int = 16
) -> list[float]:
    """U of each rendered input (pooled at its last token = the last position with attention_mask == 1).

    Used by the trainer's pairwise-accuracy evaluation on already-tokenized `chosen_ids`/`rejected_ids`.
    """
    return [
        row[0]
        for row in _scores_at(
            model, sequences, [[len(s) - 1] for s in sequences], pad_token_id=pad_token_id, batch_size=batch_size
        )
    ]


# ----------------------------------------------------------------------------------------------------------
# The scorer
# ----------------------------------------------------------------------------------------------------------


class PrefixUtilityModel:
    """A trained PUM ready to score prefixes: U_θ(x, p) for a problem x and a (partial) solution p.

    Args:
        model: a `*ForSequenceClassification` model with `num_labels == 1` (or a PEFT model wrapping one), used as
            given (device, dtype, train/eval mode untouched; scoring runs under `torch.no_grad`).
        tokenizer: its tokenizer (chat template required; a pad token is set to EOS when missing).
        max_length: token budget of one rendered input, as in training (`max_length - 1` tokens kept; None = no cut).
        separator: step separator used to split string prefixes, as in training.
        batch_size: inputs per forward pass in `score` / `score_steps`.

    Raises:
        ValueError: the model does not have exactly one output label.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_length: int | None = 1024,
        separator: str = DEFAULT_SEPARATOR,
        batch_size: int = 16,
    ):
        num_labels = getattr(getattr(model, "config", None), "num_labels", None)
        if num_labels != 1:
            raise ValueError(f"A PUM has one output (num_labels=1); this model has num_labels={num_labels}.")
        _backbone_and_head(model)  # fail early on a model without a `score` head
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.separator = separator
        self.batch_size = batch_size
        self._prompt_cache: dict[str, list[int]] = {}

    # -- loading ---------------------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        max_length: int | None = None,
        separator: str | None = None,
        batch_size: int = 16,
    ) -> PrefixUtilityModel:
        """Load a PUM from a full checkpoint directory or a LoRA adapter directory (as `train_pum.py` saves them).

        The score head must come from the checkpoint: a full checkpoint must contain `score.weight` (checked with
        `from_pretrained(..., output_loading_info=True)`'s `missing_keys`), and an adapter must contain the head
        (PEFT `modules_to_save`, automatic with `task_type=SEQ_CLS`) unless its base checkpoint already has one.
        The adapter is merged into the base for scoring. Rendering settings default to the `pum_config.json` saved
        by training (then to `max_length=1024`, `separator="\\n\\n"`).

        Args:
            path: directory with `config.json` + weights, or with `adapter_config.json` + adapter weights.
            device: where to put the model (default: CUDA when available, else CPU).
            dtype: parameter dtype (default float32).
            max_length, separator: override the saved rendering settings.
            batch_size: inputs per forward pass.

        Raises:
            ValueError: the score head is missing (it would be randomly initialised), or the body does not match
                the checkpoint (other missing keys).
        """
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        path = Path(path)
        saved = json.loads((path / PUM_CONFIG_NAME).read_text()) if (path / PUM_CONFIG_NAME).is_file() else {}
        adapter = (path / "adapter_config.json").is_file()
        if adapter:
            from peft import PeftModel
            from peft.utils import load_peft_weights

            base_path = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
            if not base_path:
                raise ValueError(f"{path}/adapter_config.json names no base_model_name_or_path")
            base, info = AutoModelForSequenceClassification.from_pretrained(
                base_path, num_labels=1, dtype=dtype, output_loading_info=True
            )
            _check_body_loaded(info, base_path)
            adapter_keys = load_peft_weights(str(path), device="cpu").keys()
            head_in_adapter = any(re.search(r"(^|\.)score\.", key) for key in adapter_keys)
            if not head_in_adapter and "score.weight" in info["missing_keys"]:
                raise ValueError(
                    f"The LoRA adapter at {path} has no score-head weights and its base {base_path} has none either: "
                    "the head would be random. Train with lora_task_type SEQ_CLS (PEFT then saves `score` as a "
                    "module to save) or add `score` to lora_modules_to_save."
                )
            model = PeftModel.from_pretrained(base, str(path)).merge_and_unload()
            tokenizer_path = path if (path / "tokenizer_config.json").is_file() else Path(base_path)
        else:
            model, info = AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=1, dtype=dtype, output_loading_info=True
            )
            if "score.weight" in info["missing_keys"]:
                raise ValueError(
                    f"{path} has no trained score head (`score.weight` is missing, so it would be randomly "
                    "initialised): it is not a PUM checkpoint. Train one with train_pum.py, or pass the directory "
                    "train_pum.py saved."
                )
            _check_body_loaded(info, str(path))
            tokenizer_path = path
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id
        device = device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
        model.to(device).eval()
        return cls(
            model,
            tokenizer,
            max_length=max_length if max_length is not None else saved.get("max_length", 1024),
            separator=separator if separator is not None else saved.get("step_separator", DEFAULT_SEPARATOR),
            batch_size=batch_size,
        )

    # -- rendering ---------------------------------------------------------------------------------------------

    def render(self, problem: str, prefix: str | Sequence[str | Step]) -> RenderedPrefix:
        """`render_prefix` with this scorer's tokenizer, max_length and separator (prompt ids cached per problem)."""
        if problem not in self._prompt_cache:
            if len(self._prompt_cache) > 4096:
                self._prompt_cache.clear()
            self._prompt_cache[problem] = render_prompt_ids(self.tokenizer, problem)
        return render_prefix(
            self.tokenizer,
            problem,
            prefix,
            self.max_length,
            separator=self.separator,
            prompt_ids=self._prompt_cache[problem],
        )

    # -- scoring -----------------------------------------------------------------------------------------------

    def score_prefixes(
        self, problem: str, steps: str | Sequence[str | Step], *, include_empty: bool = False
    ) -> list[float]:
        """U after every step of ONE trajectory, from one forward pass over the whole trajectory.

        Value k is U(x, steps[0..k]) (0-based k), read from the hidden state at token position `boundary_k - 1`;
        it equals scoring `steps[:k+1]` alone (within float tolerance; tested to 1e-4) for every step that fits the
        budget. An empty step repeats the previous value exactly (a copy; a first empty step gets U(x, ∅)). A step
        whose end was cut by truncation (`max_length`), wholly or partly, is unscored: NaN, and so is every step
        after it (NaN is "no reward" for process advantages, `procrl.trainers.advantages`).

        Args:
            problem: the problem text.
            steps: the trajectory as its steps (one value each), or a string split at the separator.
            include_empty: also return U(x, ∅) (the empty prefix, at the end of the prompt) as the first value,
                the baseline for per-step increments U(x, p_k) - U(x, p_{k-1}).

        Returns:
            `len(steps)` floats (`+ 1` with `include_empty`; U(x, ∅) is always scored: the prompt is never cut),
            NaN for unscored steps; [] for no steps without `include_empty`.
        """
        return self.score_steps([problem], [steps], include_empty=include_empty)[0]

    def score_steps(
        self,
        problems: Sequence[str],
        steps: Sequence[str | Sequence[str | Step]],
        *,
        include_empty: bool = False,
    ) -> list[list[float]]:
        """`score_prefixes` for several trajectories, batched (one forward pass per batch of trajectories).

        The step-scorer interface of DESIGN §3: one list of per-step values per trajectory; NaN marks a step whose
        end lies beyond the budget (see `score_prefixes`). Each trajectory's distinct boundaries are scored once and
        steps sharing a boundary (empty steps) share the value, so equal boundaries give identical floats.

        Raises:
            ValueError: `problems` and `steps` differ in length, or a rendering error (see `render_prefix`).
            FloatingPointError: the model produced NaN/inf (a broken checkpoint or an overflowing dtype).
        """
        if len(problems) != len(steps):
            raise ValueError(f"score_steps: {len(problems)} problems but {len(steps)} step lists")
        rendered = [self.render(problem, trajectory) for problem, trajectory in zip(problems, steps, strict=True)]
        positions: list[list[int]] = []  # distinct positions scored per trajectory
        layouts: list[list[int | None]] = []  # per output value: its index in `positions[i]`, None = unscored
        for r in rendered:
            ends = ([r.prompt_length] if include_empty else []) + list(r.boundaries)
            seen = ([True] if include_empty else []) + list(r.complete)
            index: dict[int, int] = {}
            layout: list[int | None] = []
            for end, whole in zip(ends, seen, strict=True):
                if not whole:
                    layout.append(None)
                    continue
                if end not in index:
                    index[end] = len(index)
                layout.append(index[end])
            positions.append([end - 1 for end in index])  # dicts keep insertion order
            layouts.append(layout)
        values = _scores_at(
            self.model,
            [r.input_ids for r in rendered],
            positions,
            pad_token_id=self.tokenizer.pad_token_id,
            batch_size=self.batch_size,
        )
        return [
            [math.nan if k is None else row[k] for k in layout] for row, layout in zip(values, layouts, strict=True)
        ]

    def score(
        self,
        problems: Sequence[str],
        prefixes: Sequence[str | Sequence[str | Step]],
        *,
        padding_side: str = "right",
    ) -> list[float]:
        """U(x_i, p_i) for independent (problem, prefix) pairs, in padded batches.

        Each input is pooled at its last real token (the last position with attention_mask == 1), so the value does
        not depend on the batch it is in or the padding side. A full completion's trailing EOS is stripped first. A
        prefix longer than the budget is scored as its kept tokens, the training convention (`render(...)
        .truncated_tokens` says whether it was cut; `score_steps` reports cut steps as NaN instead).

        Args:
            problems: problem texts.
            prefixes: one prefix per problem (string or pieces; "" is the empty prefix).
            padding_side: "right" (default) or "left"; the values are the same either way.

        Returns:
            One float per pair.

        Raises:
            ValueError: `problems` and `prefixes` differ in length, or a rendering error (see `render_prefix`).
            FloatingPointError: the model produced NaN/inf.
        """
        if len(problems) != len(prefixes):
            raise ValueError(f"score: {len(problems)} problems but {len(prefixes)} prefixes")
        rendered = [self.render(problem, prefix) for problem, prefix in zip(problems, prefixes, strict=True)]
        values = _scores_at(
            self.model,
            [r.input_ids for r in rendered],
            [[len(r.input_ids) - 1] for r in rendered],
            pad_token_id=self.tokenizer.pad_token_id,
            batch_size=self.batch_size,
            padding_side=padding_side,
        )
        return [row[0] for row in values]


def _check_body_loaded(info: dict, where: str) -> None:
    """Raise when weights other than the score head are missing (a different architecture, a broken checkpoint)."""
    missing = sorted(set(info.get("missing_keys", ())) - {"score.weight"})
    if missing:
        raise ValueError(
            f"{where}: weights missing from the checkpoint: {missing[:8]}{' ...' if len(missing) > 8 else ''}"
        )
