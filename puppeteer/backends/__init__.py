"""Backends: one protocol, several implementations, chosen by name from a registry.

Implementations are imported lazily by their factories, so importing puppeteer
never imports litellm or llama.cpp.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from puppeteer.backends.base import CACHEABLE, Backend, BackendRegistry, Router, SyncBackend

__all__ = [
    "CACHEABLE",
    "Backend",
    "BackendRegistry",
    "Router",
    "SyncBackend",
    "default_registry",
    "make_router",
]

# how a pool's shipped outcome table is used (``PUPPETEER_REPLAY``, ``--no-replay``)
REPLAY_MODES = ("on", "strict", "off")
REPLAY_ENV = "PUPPETEER_REPLAY"


def _sim(**options: Any) -> Backend:
    from puppeteer.backends.sim import SimBackend

    return SimBackend(**options)


def _litellm(**options: Any) -> Backend:
    from puppeteer.backends.litellm_backend import LiteLLMBackend

    return LiteLLMBackend(**options)


def _llamacpp(**options: Any) -> Backend:
    from puppeteer.backends.llamacpp import LlamaCppBackend

    return LlamaCppBackend(**options)


def _transformers(**options: Any) -> Backend:
    from puppeteer.backends.transformers_backend import TransformersBackend

    return TransformersBackend(**options)


def _logged(**options: Any) -> Backend:
    from puppeteer.backends.logged import LoggedBackend

    return LoggedBackend(**options)


def default_registry() -> BackendRegistry:
    """A fresh registry with the built-in backends: ``sim``, ``logged``, ``litellm``, ``llamacpp``,
    ``transformers``."""
    registry = BackendRegistry()
    registry.register("sim", _sim)
    registry.register("logged", _logged)
    registry.register("litellm", _litellm)
    registry.register("llamacpp", _llamacpp)
    registry.register("transformers", _transformers)
    return registry


def make_router(
    options: dict[str, dict[str, Any]] | None = None,
    cache: str | Path | None = None,
    registry: BackendRegistry | None = None,
    replay: str | Path | None = None,
    replay_mode: str = "on",
) -> Router:
    """A router over the default backends; with ``cache``, model-calling backends share one SQLite cache;
    with ``replay`` (a shipped outcome table, :mod:`puppeteer.backends.replay`), the calls it holds are served
    from it before the cache and the model (``replay_mode``: ``on``, ``strict`` to raise on a call it
    lacks, ``off`` to ignore it).

    Raises :class:`~puppeteer.backends.cache.CacheError` at once when ``cache`` is unusable.
    """
    if replay_mode not in REPLAY_MODES:
        raise ValueError(f"replay mode must be one of {', '.join(REPLAY_MODES)}, got {replay_mode!r}")
    layers: list[Any] = []
    if cache is not None:
        from puppeteer.backends.cache import CachedBackend, check_cache

        path = Path(cache)
        check_cache(path)  # an unusable cache stops the run here, not item by item later
        layers.append(lambda b: CachedBackend(b, path))
    if replay is not None and replay_mode != "off":
        from puppeteer.backends.replay import ReplayBackend, load_table

        table = load_table(Path(replay), strict=replay_mode == "strict")  # checked here, before any item
        layers.append(lambda b: ReplayBackend(b, table, strict=replay_mode == "strict"))

    def wrap(name: str, backend: Backend) -> Backend:
        if name in CACHEABLE:
            for layer in layers:
                backend = layer(backend)
        return backend

    return Router(registry or default_registry(), options, wrap=wrap if layers else None)
