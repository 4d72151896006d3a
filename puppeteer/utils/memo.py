"""A bounded, thread-safe memo: one computed value per key, shared by an env and its clones."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    """``get(key, compute)``: the value memoised for ``key``, computed once (outside the lock) when
    missing. Past ``max_items`` the memo starts over, so a long run's memory stays bounded."""

    def __init__(self, max_items: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._values: dict[K, V] = {}
        self._max = max_items

    def get(self, key: K, compute: Callable[[], V]) -> V:
        with self._lock:
            if key in self._values:
                return self._values[key]
        value = compute()
        with self._lock:
            if len(self._values) >= self._max:
                self._values.clear()
            self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)
