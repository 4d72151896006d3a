"""Fault injection helpers shared by the reliability tests (not a test module)."""

from __future__ import annotations

import errno
import io
import random
from typing import Any

from puppeteer.types import Completion, CompletionRequest


class FlakyBackend:
    """Fails a seeded fraction of calls with ``ConnectionError``, passes the rest to ``inner``."""

    name = "flaky"

    def __init__(self, inner: Any, rate: float, seed: int = 0) -> None:
        self.inner, self.rate = inner, rate
        self.rng = random.Random(seed)
        self.calls = self.failures = 0

    def _fail(self) -> bool:
        self.calls += 1
        if self.rng.random() < self.rate:
            self.failures += 1
            return True
        return False

    def complete(self, request: CompletionRequest) -> Completion:
        if self._fail():
            raise ConnectionError("injected backend failure")
        return self.inner.complete(request)

    async def acomplete(self, request: CompletionRequest) -> Completion:
        if self._fail():
            raise ConnectionError("injected backend failure")
        return await self.inner.acomplete(request)


class DiskFullFile(io.TextIOWrapper):
    """A text file that accepts ``budget`` more bytes, writes part of the next chunk, then ENOSPC."""

    def __init__(self, raw: Any, budget: int) -> None:
        super().__init__(raw, encoding="utf-8")
        self.budget = budget

    def write(self, s: str) -> int:
        data = s.encode("utf-8")
        if len(data) > self.budget:
            super().write(data[: self.budget].decode("utf-8", "ignore"))
            super().flush()
            self.budget = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.budget -= len(data)
        return super().write(s)
