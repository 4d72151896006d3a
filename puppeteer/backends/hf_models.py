"""Embedded GGUF models as ``transformers`` models: one loader and one cache for every user.

An embedded model (:mod:`puppeteer.backends.models`: ``smollm2-135m``, ``qwen2.5-coder-0.5b``,
``qwen2.5-coder-1.5b``) loads in transformers through ``gguf_file=`` (needs the ``gguf``
package), which dequantises the weights and converts the tokenizer: slow (about a minute for
the tokenizer). The first load saves the result with ``save_pretrained`` under
``<root>/hf/<key>`` (``root``: ``$PUPPETEER_CACHE`` or ``~/.cache/puppeteer``; an atomic rename,
so concurrent processes are safe) and later loads read that directory. The ``transformers``
backend (``embedded:KEY`` targets) and the GRPO conductor loader both use it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def hf_cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where converted models live: ``cache_dir`` or ``$PUPPETEER_CACHE/hf`` or ``~/.cache/puppeteer/hf``."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get("PUPPETEER_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "puppeteer"
    return root / "hf"


def forget_gguf_quantizer(model: Any) -> None:
    """transformers dequantises GGUF weights on load but keeps the quantizer, which blocks
    ``save_pretrained`` and training; the weights are plain floats, so drop it."""
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def load_causal_lm(path: str | Path, dtype: Any = None, **kwargs: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a directory (or a hub id), without running code from it: no remote
    code, and weights only from safetensors files (a ``pytorch_model.bin`` is a pickle), except for
    the GGUF conversion (``gguf_file=``), which reads the GGUF tensors."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    safe = {"trust_remote_code": False, **({} if "gguf_file" in kwargs else {"use_safetensors": True})}
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, **safe, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False, **kwargs)
    return model, tokenizer


def load_embedded_hf(key: str, dtype: Any = None, cache_dir: str | Path | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of embedded model ``key``, converted once and cached (see the module notes)."""
    from puppeteer.backends.models import get_model, model_path

    get_model(key)  # a clear error for an unknown key
    cached = hf_cache_root(cache_dir) / key
    if (cached / "config.json").is_file():
        return load_causal_lm(cached, dtype)
    gguf = model_path(key)
    log.warning("converting %s from GGUF for transformers (once; cached in %s)", key, cached)
    model, tokenizer = load_causal_lm(gguf.parent, dtype, gguf_file=gguf.name)
    forget_gguf_quantizer(model)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cached.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        with contextlib.suppress(OSError):  # another process may have won the race
            tmp.rename(cached)  # atomic
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model, tokenizer
