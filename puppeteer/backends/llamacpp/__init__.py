"""The embedded llama.cpp backend (``llamacpp``): the GGUF models of :mod:`puppeteer.backends.models` on CPU.

- :mod:`~puppeteer.backends.llamacpp.backend`: :class:`LlamaCppBackend`, model loading, thread
  defaults;
- :mod:`~puppeteer.backends.llamacpp.continuous`: continuous batching, one decoding loop per model;
- :mod:`~puppeteer.backends.llamacpp.batch`: llama.cpp's ``llama_batch`` under that loop;
- :mod:`~puppeteer.backends.llamacpp.ggml_dl`: the CPU variant of a build with runtime dispatch.

llama_cpp itself is imported on first use, never by importing this package. The backend's public
names are re-exported here.
"""

from __future__ import annotations

from puppeteer.backends.llamacpp.backend import (
    LlamaCppBackend,
    available_cpus,
    build_has_amx,
    busy_cpus,
    default_kv_size,
    default_threads,
    load_llama,
)

__all__ = [
    "LlamaCppBackend",
    "available_cpus",
    "build_has_amx",
    "busy_cpus",
    "default_kv_size",
    "default_threads",
    "load_llama",
]
