"""procrl.generation.sequence_logps against values computed by hand or by an independent forward pass."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from procrl.generation import sequence_logps


class ChainLM(nn.Module):
    """Deterministic toy LM: after token i it puts logit +30 on token i+1 (mod V) and -30 elsewhere."""

    def __init__(self, vocab_size: int = 16, shift: float = 0.0):
        super().__init__()
        self.vocab_size, self.shift = vocab_size, shift
        self.anchor = nn.Parameter(torch.zeros(1))  # gives the module a device

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        logits = torch.full((*input_ids.shape, self.vocab_size), -30.0)
        logits.scatter_(-1, ((input_ids + 1) % self.vocab_size).unsqueeze(-1), 30.0)
        return SimpleNamespace(logits=logits + self.shift)


def test_consistent_chain_scores_near_zero():
    # every token is the certain successor: each log-prob is -(V-1)·e^-60 ≈ 0
    (logps,) = sequence_logps(ChainLM(), [[3, 4, 5, 6, 7]], [1])
    assert len(logps) == 4
    assert sum(logps) > -1e-3


def test_wrong_token_shows_up_at_its_position():
    # token 9 follows 4 (expected 5): log p = -60 - log(1 + 15·e^-60) ≈ -60 at scored index 2; the rest ≈ 0
    (logps,) = sequence_logps(ChainLM(), [[3, 4, 5, 9, 10]], [1])
    assert [i for i, v in enumerate(logps) if v < -1.0] == [2]
    assert logps[2] == pytest.approx(-60.0, abs=1e-3)


def test_constant_added_to_every_logit_changes_nothing():
    seqs, starts = [[1, 2, 3, 9, 4], [7, 8, 0]], [1, 2]
    shifted, plain = sequence_logps(ChainLM(shift=123.0), seqs, starts), sequence_logps(ChainLM(), seqs, starts)
    for got, want in zip(shifted, plain, strict=True):
        assert got == pytest.approx(want, abs=1e-6)


def _tiny_gpt2():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    return GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("model_kind", ["llama_rotary", "gpt2_absolute_positions"])
def test_padding_side_never_changes_a_score(model_kind, tiny_llama_factory):
    model = tiny_llama_factory(64) if model_kind == "llama_rotary" else _tiny_gpt2()
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(3, 64, (n,), generator=gen).tolist() for n in (5, 12, 9)]
    starts = [2, 7, 1]
    # reference: each example alone (no padding), plain model(input_ids).logits
    reference = []
    for seq, start in zip(seqs, starts, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0]
        logps = torch.log_softmax(logits[:-1].double(), -1).gather(-1, torch.tensor(seq[1:]).unsqueeze(-1)).squeeze(-1)
        reference.append(logps[start - 1 :].tolist())
    for side in ("left", "right"):
        batched = sequence_logps(model, seqs, starts, padding_side=side, batch_size=3)
        for got, want in zip(batched, reference, strict=True):
            assert got == pytest.approx(want, abs=1e-4)


def test_bad_score_from_raises():
    with pytest.raises(ValueError, match="out of range"):
        sequence_logps(ChainLM(), [[1, 2]], [0])
    with pytest.raises(ValueError, match="3 sequences"):
        sequence_logps(ChainLM(), [[1, 2]] * 3, [1])
