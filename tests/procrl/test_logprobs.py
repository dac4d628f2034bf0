"""procrl.generation.sequence_logps and sequence_self_certainty against values computed by hand or by an independent
forward pass."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from procrl.generation import sequence_logps, sequence_self_certainty


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


# ----------------------------------------------------------------------------------------------------------
# Self-certainty: mean over positions of KL(U || p_t) (Kang et al. 2025, arXiv 2502.18581)
# ----------------------------------------------------------------------------------------------------------


class FixedLM(nn.Module):
    """Toy LM whose next-token logits are the same vector at every position."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.tensor(logits, dtype=torch.float32)
        self.anchor = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return SimpleNamespace(logits=self.logits.expand(*input_ids.shape, -1).clone())


def _kl_uniform(logits) -> float:
    """KL(U || softmax(logits)) = sum_j (1/V) log((1/V) / p_j), straight from the definition, in float64."""
    p = torch.softmax(torch.as_tensor(logits, dtype=torch.float64), -1)
    v = p.numel()
    return float(sum((1 / v) * math.log((1 / v) / float(pj)) for pj in p))


def test_self_certainty_of_a_uniform_distribution_is_zero():
    (values,) = sequence_self_certainty(FixedLM([0.7] * 5), [[1, 2, 3, 4]], [1])
    assert values == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)


def test_self_certainty_by_hand():
    # V = 2, p = (1/4, 3/4): -log 2 - (log 1/4 + log 3/4) / 2 = 0.5 log 2 + 0.5 log(2/3) = 0.143841
    (values,) = sequence_self_certainty(FixedLM([0.0, math.log(3.0)]), [[0, 1, 1]], [2])
    assert values == pytest.approx([0.5 * math.log(2.0) + 0.5 * math.log(2.0 / 3.0)], abs=1e-6)
    assert values[0] == pytest.approx(_kl_uniform([0.0, math.log(3.0)]), abs=1e-6)


def test_self_certainty_of_a_near_one_hot_distribution_is_large():
    # ChainLM: logit +30 on one token, -30 on the 15 others: mean_j log p_j = (0 + 15 (-60)) / 16 = -56.25, so
    # KL = 56.25 - log 16 = 53.477 (up to terms in e^-60), whichever token follows
    for sequence in ([3, 4, 5, 6], [3, 9, 1, 0]):  # the chain followed, or not: the distribution is what counts
        (values,) = sequence_self_certainty(ChainLM(), [sequence], [1])
        assert values == pytest.approx([56.25 - math.log(16)] * 3, abs=1e-3)


def test_self_certainty_is_padding_invariant_and_matches_an_independent_forward(tiny_llama_factory):
    model = tiny_llama_factory(64)
    gen = torch.Generator().manual_seed(2)
    seqs = [torch.randint(3, 64, (n,), generator=gen).tolist() for n in (6, 11, 3)]
    starts = [3, 4, 3]  # the last one scores nothing: an empty list
    reference = []
    for seq, start in zip(seqs, starts, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0]  # alone: no padding
        reference.append([_kl_uniform(logits[t]) for t in range(start - 1, len(seq) - 1)])
    assert reference[2] == []
    for side in ("left", "right"):
        for batch_size in (1, 3):
            got = sequence_self_certainty(model, seqs, starts, padding_side=side, batch_size=batch_size)
            for row, want in zip(got, reference, strict=True):
                assert row == pytest.approx(want, abs=1e-4)
    # it reads the same forward as sequence_logps: one value per scored token
    assert [len(r) for r in sequence_logps(model, seqs, starts)] == [len(r) for r in reference]


def test_self_certainty_checks_its_arguments_like_sequence_logps():
    with pytest.raises(ValueError, match="out of range"):
        sequence_self_certainty(ChainLM(), [[1, 2]], [0])
    with pytest.raises(ValueError, match="3 sequences"):
        sequence_self_certainty(ChainLM(), [[1, 2]] * 3, [1])
    with pytest.raises(ValueError, match="padding_side"):
        sequence_self_certainty(ChainLM(), [[1, 2]], [1], padding_side="middle")
