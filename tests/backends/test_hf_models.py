"""One GGUF -> transformers loader and cache, shared by the transformers backend and the GRPO conductor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from puppeteer.backends import hf_models
from puppeteer.train.conductor_model import ModelSpec, load_conductor_model


def _cache_a_converted_model(root: Path, key: str) -> Any:
    model, tok = load_conductor_model(ModelSpec(id="tiny-random"))
    model.save_pretrained(root / key)
    tok.save_pretrained(root / key)
    return model


def test_a_converted_model_in_the_cache_is_loaded_without_converting(tmp_path: Path, monkeypatch) -> None:
    original = _cache_a_converted_model(tmp_path, "smollm2-135m")
    never = lambda *a, **k: pytest.fail("converted again")  # noqa: E731
    monkeypatch.setattr("puppeteer.backends.models.model_path", never)
    model, tok = hf_models.load_embedded_hf("smollm2-135m", cache_dir=tmp_path)
    assert model.config.hidden_size == original.config.hidden_size == 32 and len(tok) == len(tok.get_vocab())
    # the conductor loader reads the same directory
    model2, _ = load_conductor_model(ModelSpec(id="smollm2-135m", cache_dir=str(tmp_path)))
    assert model2.config.num_hidden_layers == 2
    with pytest.raises(KeyError):
        hf_models.load_embedded_hf("no-such-model", cache_dir=tmp_path)


def test_the_transformers_backend_loads_embedded_targets_through_the_shared_loader(monkeypatch) -> None:
    from puppeteer.backends.transformers_backend import TransformersBackend

    model, tok = load_conductor_model(ModelSpec(id="tiny-random"))
    seen: list[str] = []

    def fake(key: str, dtype: Any = None, cache_dir: Any = None) -> tuple[Any, Any]:
        seen.append(key)
        return model, tok

    monkeypatch.setattr(hf_models, "load_embedded_hf", fake)
    backend = TransformersBackend()
    loaded = backend.load("embedded:qwen2.5-coder-0.5b")
    assert seen == ["qwen2.5-coder-0.5b"] and loaded.model is model and loaded.tokenizer is tok
    assert backend.load("embedded:qwen2.5-coder-0.5b") is loaded and seen == ["qwen2.5-coder-0.5b"]


def test_cache_root_follows_puppeteer_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PUPPETEER_CACHE", str(tmp_path))
    assert hf_models.hf_cache_root() == tmp_path / "hf"
    assert hf_models.hf_cache_root(tmp_path / "x") == tmp_path / "x"


def test_a_model_directory_with_pickled_weights_is_refused_without_running_them(tmp_path) -> None:
    """Issue 33's audit of loaders of user-supplied files: `conductor:hf:DIR` and GRPO `final/` load
    weights only from safetensors (a pytorch_model.bin is a pickle that can run code) and never remote
    code."""
    import pickle

    from transformers import GPT2Config

    from puppeteer.backends.hf_models import load_causal_lm

    class Planted:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=16, n_positions=8).save_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps(Planted()))
    with pytest.raises(OSError, match="safetensors"):  # refused before any unpickling is tried
        load_causal_lm(tmp_path)
    assert not (tmp_path / "pwned").exists()
