"""The Backend protocol and the name -> factory registry."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from puppeteer.types import Completion, CompletionRequest

# Backends that call a model; only these are worth caching (the simulator is deterministic and free).
CACHEABLE = frozenset({"litellm", "llamacpp", "transformers"})


@runtime_checkable
class Backend(Protocol):
    """Turns a request into a completion. ``acomplete`` must not block the event loop."""

    name: str

    def complete(self, request: CompletionRequest) -> Completion: ...

    async def acomplete(self, request: CompletionRequest) -> Completion: ...


class SyncBackend:
    """Mixin: derive ``acomplete`` from a blocking ``complete`` run in a worker thread."""

    name: str = "sync"

    def complete(self, request: CompletionRequest) -> Completion:  # pragma: no cover - abstract
        raise NotImplementedError

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return await asyncio.to_thread(self.complete, request)


def refuse_grammar(request: CompletionRequest, backend: str) -> None:
    """Raise for a constrained request on a backend that cannot apply a GBNF grammar."""
    if request.grammar is not None:
        raise NotImplementedError(f"the {backend} backend cannot decode under a grammar (llamacpp can)")


BackendFactory = Callable[..., Backend]


class BackendRegistry:
    """Name -> factory. Factories take keyword options from configs."""

    def __init__(self) -> None:
        self._factories: dict[str, BackendFactory] = {}

    def register(self, name: str, factory: BackendFactory) -> None:
        if name in self._factories:
            raise ValueError(f"backend {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))

    def create(self, name: str, **options: Any) -> Backend:
        try:
            factory = self._factories[name]
        except KeyError:
            raise KeyError(f"unknown backend {name!r}; known: {', '.join(self.names())}") from None
        return factory(**options)


class Router:
    """Dispatches each request to the backend named by its model spec.

    Backends are created lazily, once, with the options given for their name.
    """

    name = "router"

    def __init__(
        self,
        registry: BackendRegistry,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        wrap: Callable[[str, Backend], Backend] | None = None,
    ) -> None:
        self._registry = registry
        self._options = dict(options or {})
        self._wrap = wrap
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()

    def backend(self, name: str) -> Backend:
        backend = self._backends.get(name)  # created once: later calls need no lock
        if backend is not None:
            return backend
        with self._lock:
            if name not in self._backends:
                backend = self._registry.create(name, **dict(self._options.get(name, {})))
                self._backends[name] = self._wrap(name, backend) if self._wrap else backend
            return self._backends[name]

    def complete(self, request: CompletionRequest) -> Completion:
        return self.backend(request.model.backend).complete(request)

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return await self.backend(request.model.backend).acomplete(request)

    def close(self) -> None:
        """Close every backend created so far (caches, loaded models); later calls recreate them."""
        with self._lock:
            backends, self._backends = list(self._backends.values()), {}
        for backend in backends:
            for part in (backend, getattr(backend, "inner", None)):
                close = getattr(part, "close", None)
                if callable(close):
                    close()
