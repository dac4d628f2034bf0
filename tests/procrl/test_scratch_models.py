"""Model organisms (procrl/scratch_models.py): the `scratch:` grammar, its refusals, and the model it builds (shapes,
vocabulary and special tokens from the tokenizer, seeded weights, a checkpoint that reloads with its chat template)."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_tiny_chat_tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from procrl.scratch_models import ScratchSpec, build_scratch_model, is_scratch_spec, parse_scratch_spec


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-tokenizer")
    make_tiny_chat_tokenizer().save_pretrained(path)
    return path


def test_every_key_reaches_its_field():
    spec = parse_scratch_spec(
        "scratch:llama,hidden=96,layers=3,heads=6,kv_heads=2,intermediate=200,positions=512,tie=false,seed=7,"
        "tokenizer=/some/dir"
    )
    assert spec == ScratchSpec("llama", 96, 3, 6, 2, 200, 512, False, 7, "/some/dir")
    assert spec.head_dim == 16


def test_defaults_spaces_case_and_aliases():
    spec = parse_scratch_spec(" Scratch:LLAMA , hidden = 64 , tokenizer = SmolLM2 ")
    assert (spec.hidden, spec.layers, spec.heads, spec.kv_heads, spec.intermediate) == (64, 4, 4, 4, 256)
    assert (spec.positions, spec.tie, spec.seed, spec.tokenizer) == (2048, True, 0, "default")
    assert parse_scratch_spec("scratch:llama") == ScratchSpec()
    # the canonical string names every key and parses back to the same spec
    assert parse_scratch_spec(spec.canonical) == spec
    assert is_scratch_spec("scratch:llama") and not is_scratch_spec("/models/scratch:llama") and not is_scratch_spec("")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("scratch:gpt2,hidden=64", "architecture 'gpt2'"),
        ("scratch:llama,width=64", "unknown key 'width'"),
        ("scratch:llama,hidden=64,hidden=32", "hidden is given twice"),
        ("scratch:llama,hidden=sixty", "is not an integer"),
        ("scratch:llama,hidden", "is not key=value"),
        ("scratch:llama,tokenizer=", "is not key=value"),
        ("scratch:llama,hidden=100,heads=3", "multiple of heads"),
        ("scratch:llama,hidden=36,heads=4", "must be even"),
        ("scratch:llama,heads=4,kv_heads=3", "must divide heads"),
        ("scratch:llama,layers=0", "layers=0 must be >= 1"),
        ("scratch:llama,seed=-1", "seed=-1"),
        ("scratch:llama,tie=maybe", "tie='maybe'"),
        ("llama,hidden=64", "not a scratch model spec"),
    ],
)
def test_bad_specs_raise_with_the_grammar(text, words):
    with pytest.raises(ValueError, match="scratch") as info:
        parse_scratch_spec(text)
    assert words in str(info.value)


def test_the_model_has_the_spec_shapes_and_the_tokenizer_vocabulary(tokenizer_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    spec = (
        f"scratch:llama,hidden=32,layers=2,heads=2,kv_heads=1,intermediate=48,positions=128,tokenizer={tokenizer_dir}"
    )
    model, tok = build_scratch_model(spec)
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (32, 2, 2)
    assert (config.num_key_value_heads, config.intermediate_size, config.max_position_embeddings) == (1, 48, 128)
    assert config.vocab_size == len(tokenizer) == model.get_input_embeddings().weight.shape[0]
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 2)
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()  # tie=true
    assert model.model.layers[0].mlp.up_proj.weight.shape == (48, 32)
    assert model.model.layers[0].self_attn.k_proj.weight.shape == (16, 32)  # one kv head of size 32/2
    assert next(model.parameters()).dtype == torch.float32
    # an ordinary checkpoint: it reloads with its chat template
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(reloaded.lm_head.weight, model.lm_head.weight)
    assert AutoTokenizer.from_pretrained(tmp_path).chat_template == tokenizer.chat_template


def test_the_seed_decides_the_weights_and_leaves_the_callers_rng_alone(tokenizer_dir):
    base = f"scratch:llama,hidden=32,layers=1,heads=2,tokenizer={tokenizer_dir}"
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    first, _ = build_scratch_model(base)
    assert torch.equal(torch.rand(3), before)  # the caller's RNG continues as if nothing was drawn
    again, _ = build_scratch_model(base)
    other, _ = build_scratch_model(base + ",seed=1")
    weight = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(first.state_dict()[weight], again.state_dict()[weight])
    assert not torch.equal(first.state_dict()[weight], other.state_dict()[weight])


def test_a_tokenizer_without_chat_template_is_refused(tmp_path):
    tokenizer = make_tiny_chat_tokenizer()
    tokenizer.chat_template = None
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no chat template"):
        build_scratch_model(f"scratch:llama,hidden=32,heads=2,tokenizer={tmp_path}")
