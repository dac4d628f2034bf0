"""PUM pooling (part of `procrl.rewards.pum`): the score head on hidden states at chosen positions.

One forward pass of the body on a padded batch (position ids from the attention mask, so the padding side does not
matter), then the `score` head at the chosen token positions only: the value at position t is U of the input up to
and including token t. Scores are raw head outputs (real numbers, no sigmoid).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from peft import PeftModel

__all__ = ["pooled_scores", "score_token_sequences"]


def _backbone_and_head(model: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The transformer body and the `score` head of a (PEFT-wrapped) `*ForSequenceClassification` model."""
    if isinstance(model, PeftModel):
        model = model.get_base_model()  # LoRA layers stay injected and active; `score` is PEFT's trained copy
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
