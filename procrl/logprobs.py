"""Teacher-forced token log-probabilities of a causal LM, batched and padding-invariant.

Convention (docs/architecture.md "Log-probabilities"): raw model distribution (temperature 1), natural log; the logits at
position t score token t+1; `log_softmax` always; position ids are passed explicitly so left or right padding
never changes a score (tested to 1e-4 in fp32; the GPT-2 case, with absolute position embeddings, is the one
that fails when position ids are wrong, since rotary embeddings are invariant to a shift of every position).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch


@torch.no_grad()
def sequence_logps(
    model,
    sequences: Sequence[Sequence[int]],
    score_from: Sequence[int],
    *,
    pad_token_id: int = 0,
    padding_side: str = "left",
    batch_size: int = 8,
) -> list[list[float]]:
    """Log-probabilities of the tokens `sequences[i][score_from[i]:]` given everything before them.

    Args:
        model: a causal LM returning `.logits` of shape `(B, T, V)`; called with `input_ids`, `attention_mask`
            and `position_ids`.
        sequences: token ids, one list per example (lengths T_i).
        score_from: index of the first token to score in each sequence (>= 1: the first token has no context).
        pad_token_id: id used to fill padding (masked out, so its value does not matter).
        padding_side: "left" (default) or "right"; results are identical up to float error. With left padding
            every scored span ends at the last position, so only the last `max(T_i - score_from[i]) + 1`
            positions go through the LM head (`logits_to_keep`, when the model accepts it): scoring a short
            answer after a long context then skips almost all of the `(B, T, V)` logits.
        batch_size: sequences per forward pass.

    Returns:
        For each example, a list of `T_i - score_from[i]` log-probabilities (natural log, raw distribution).

    Raises:
        ValueError: `score_from` is out of range or the lengths of `sequences` and `score_from` differ.
    """
    if len(sequences) != len(score_from):
        raise ValueError(f"got {len(sequences)} sequences but {len(score_from)} score_from indices")
    for seq, start in zip(sequences, score_from, strict=True):
        if not 1 <= start <= len(seq):
            raise ValueError(f"score_from={start} is out of range for a sequence of {len(seq)} tokens (need >= 1)")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    device = next(model.parameters()).device
    results: list[list[float]] = []
    for lo in range(0, len(sequences), batch_size):
        chunk = [list(s) for s in sequences[lo : lo + batch_size]]
        starts = list(score_from[lo : lo + batch_size])
        width = max(len(s) for s in chunk)
        input_ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
        offsets = []
        for row, seq in enumerate(chunk):
            offset = width - len(seq) if padding_side == "left" else 0
            input_ids[row, offset : offset + len(seq)] = torch.tensor(seq, dtype=torch.long)
            attention_mask[row, offset : offset + len(seq)] = 1
            offsets.append(offset)
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        inputs = {
            "input_ids": input_ids.to(device),
            "attention_mask": attention_mask.to(device),
            "position_ids": position_ids.to(device),
        }
        if _accepts(model, "use_cache"):
            inputs["use_cache"] = False  # the KV cache would be built and thrown away
        # Positions dropped from the front of the sequence dimension by `logits_to_keep` (0 = all kept).
        dropped = 0
        if padding_side == "left" and _accepts(model, "logits_to_keep"):
            keep = max(len(seq) - start for seq, start in zip(chunk, starts, strict=True)) + 1
            if keep < width:
                inputs["logits_to_keep"], dropped = keep, width - keep
        logits = model(**inputs).logits  # (B, T - dropped, V)
        for row, (seq, start, offset) in enumerate(zip(chunk, starts, offsets, strict=True)):
            if start == len(seq):
                results.append([])
                continue
            # logits at position p score token p + 1
            lo, hi = offset + start - 1 - dropped, offset + len(seq) - 1 - dropped
            scoring = logits[row, lo:hi].float()  # (n, V)
            targets = input_ids[row, offset + start : offset + len(seq)].to(scoring.device)  # (n,)
            logps = torch.log_softmax(scoring, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            results.append(logps.cpu().tolist())
    return results


def _accepts(model, argument: str) -> bool:
    """Whether `model.forward` names `argument` explicitly (HF causal LMs do; toy test models may not)."""
    try:
        return argument in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
