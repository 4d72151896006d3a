from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from puppeteer.backends.cache import CachedBackend, CacheError, request_key
from puppeteer.types import CallContext, Completion, CompletionRequest, Message, ModelSpec

SPEC = ModelSpec(name="m", backend="echo", target="echo-1", params_b=1.0, price_in=1.0, price_out=2.0)


class CountingBackend:
    """Test inner backend: deterministic text from the request, counts calls, optional delay."""

    name = "echo"

    def __init__(self, delay: float = 0.0, cost: float | None = 0.5) -> None:
        self.delay = delay
        self.cost = cost
        self.calls = 0
        self._lock = threading.Lock()

    def _make(self, request: CompletionRequest) -> Completion:
        with self._lock:
            self.calls += 1
            n = self.calls
        return Completion(
            text=f"{request.messages[-1].content}|{request.sample_index}|call{n}",
            prompt_tokens=11,
            completion_tokens=7,
            cost_usd=self.cost,
            flops=123.0,
            latency_s=0.25 + n,
            model=request.model.target,
        )

    def complete(self, request: CompletionRequest) -> Completion:
        time.sleep(self.delay)
        return self._make(request)

    async def acomplete(self, request: CompletionRequest) -> Completion:
        await asyncio.sleep(self.delay)
        return self._make(request)


def _completion(text: str) -> Completion:
    return Completion(text, 3, 2, cost_usd=0.0, flops=0.0, latency_s=0.1, model="echo-1")


def req(text: str = "hello", **kw: object) -> CompletionRequest:
    return CompletionRequest(model=SPEC, messages=(Message("system", "sys"), Message("user", text)), **kw)


def test_a_hit_knows_whether_the_generation_hit_its_budget(tmp_path: Path) -> None:
    # CountingBackend reports 7 completion tokens: truncated iff max_tokens <= 7
    with CachedBackend(CountingBackend(), tmp_path / "c.sqlite") as cache:
        for budget, truncated in [(7, True), (8, False), (512, False)]:
            cache.complete(req(max_tokens=budget))
            assert cache.complete(req(max_tokens=budget)).truncated is truncated


def test_miss_then_hit_returns_stored_completion(tmp_path: Path) -> None:
    inner = CountingBackend()
    with CachedBackend(inner, tmp_path / "c.sqlite") as cache:
        first = cache.complete(req())
        second = cache.complete(req())
        assert first.cached is False and second.cached is True
        assert dataclasses.replace(second, cached=False) == first
        assert second.latency_s == first.latency_s == 1.25
        assert inner.calls == 1
        assert (cache.stats.hits, cache.stats.misses) == (1, 1)
        assert cache.stats.hit_rate == 0.5
        cache.complete(req("other"))
        assert (cache.stats.hits, cache.stats.misses, len(cache)) == (1, 2, 2)


def test_none_cost_round_trips(tmp_path: Path) -> None:
    with CachedBackend(CountingBackend(cost=None), tmp_path / "c.sqlite") as cache:
        cache.complete(req("ünïcødé ✓"))
        hit = cache.complete(req("ünïcødé ✓"))
        assert hit.cached and hit.cost_usd is None and hit.text.startswith("ünïcødé ✓")


def test_persists_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "c.sqlite"
    with CachedBackend(CountingBackend(), path) as cache:
        original = cache.complete(req())
    inner2 = CountingBackend()
    with CachedBackend(inner2, path) as cache2:
        hit = cache2.complete(req())
        assert inner2.calls == 0 and hit.cached and hit.text == original.text
        assert (cache2.stats.hits, cache2.stats.misses) == (1, 0)


CHANGES = {
    "backend": lambda r: dataclasses.replace(r, model=dataclasses.replace(SPEC, backend="other")),
    "target": lambda r: dataclasses.replace(r, model=dataclasses.replace(SPEC, target="echo-2")),
    "message text": lambda r: dataclasses.replace(r, messages=(r.messages[0], Message("user", "hellO"))),
    "message role": lambda r: dataclasses.replace(r, messages=(Message("user", "sys"), r.messages[1])),
    "message count": lambda r: dataclasses.replace(r, messages=r.messages[1:]),
    "max_tokens": lambda r: dataclasses.replace(r, max_tokens=513),
    "temperature": lambda r: dataclasses.replace(r, temperature=0.7),
    "sample_index": lambda r: dataclasses.replace(r, sample_index=1),
    "stop": lambda r: dataclasses.replace(r, stop=("\n",)),
}


@pytest.mark.parametrize("field_name", sorted(CHANGES))
def test_each_field_changes_the_key(tmp_path: Path, field_name: str) -> None:
    # sampled requests: at temperature 0 the sample index does not decide the output (see below)
    base = req(temperature=0.5) if field_name == "sample_index" else req()
    changed = CHANGES[field_name](base)
    assert request_key(changed) != request_key(base)
    inner = CountingBackend()
    with CachedBackend(inner, tmp_path / "c.sqlite") as cache:
        cache.complete(base)
        cache.complete(changed)
        assert inner.calls == 2


def test_a_greedy_call_replays_for_any_sample_index(tmp_path: Path) -> None:
    """Every env reset draws a sample index; greedy calls must replay across them (training on a
    cached pool would otherwise call the model in every episode)."""
    inner = CountingBackend()
    with CachedBackend(inner, tmp_path / "c.sqlite") as cache:
        first = cache.complete(req(sample_index=17))
        again = cache.complete(req(sample_index=123456))
        assert inner.calls == 1 and again.cached and again.text == first.text
        assert request_key(req(sample_index=17)) != request_key(req(sample_index=123456))
        # sampled calls stay one per sample index
        cache.complete(req(temperature=0.7, sample_index=1))
        cache.complete(req(temperature=0.7, sample_index=2))
        assert inner.calls == 3
        # another prompt, budget or model is another call, greedy or not
        cache.complete(req(max_tokens=9, sample_index=17))
        assert inner.calls == 4


def test_rows_stored_without_a_greedy_alias_are_indexed_when_the_cache_opens(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    with CachedBackend(CountingBackend(), path) as cache:
        cache.complete(req("old", sample_index=5))
        cache.complete(req("older", sample_index=6))
    raw = sqlite3.connect(path)  # as if an older version (no greedy table) had written both rows
    raw.execute("DELETE FROM greedy")
    raw.execute("DELETE FROM meta")
    raw.commit()
    raw.close()
    inner = CountingBackend()
    with CachedBackend(inner, path) as cache:
        assert cache.complete(req("old", sample_index=99)).cached
        assert cache.complete(req("older", sample_index=0)).cached
        assert inner.calls == 0


def test_the_exact_key_wins_over_the_greedy_alias(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    with CachedBackend(CountingBackend(), path) as cache:
        cache.complete(req(sample_index=1))
        # a second greedy row for the same request under another sample index, with other text
        # (batched llama.cpp greedy decoding is not bit-stable, so this happens for real)
        cache.store(request_key(req(sample_index=2)), req(sample_index=2), _completion("batched text"))
        assert cache.complete(req(sample_index=2)).text == "batched text"
        assert cache.complete(req(sample_index=3)).text != "batched text"  # the alias: the first row


def test_context_name_and_options_do_not_change_the_key() -> None:
    base = req()
    same = [
        dataclasses.replace(base, context=CallContext(item_key="q1", pattern="cot", step_index=3)),
        dataclasses.replace(base, model=dataclasses.replace(SPEC, name="renamed", price_in=9.0)),
        dataclasses.replace(base, temperature=0),  # int 0 and float 0.0 are the same request
    ]
    assert {request_key(r) for r in same} == {request_key(base)}


def test_threads_identical_misses_call_inner_once(tmp_path: Path) -> None:
    inner = CountingBackend(delay=0.05)
    cache = CachedBackend(inner, tmp_path / "c.sqlite")
    results: list[Completion] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            for j in range(10):
                c = cache.complete(req(f"q{j % 4}"))
                with lock:
                    results.append(c)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 80
    assert inner.calls == 4  # one call per distinct request, despite 8 threads racing
    assert len(cache) == 4
    by_q: dict[str, set[str]] = {}
    for c in results:
        by_q.setdefault(c.text.split("|")[0], set()).add(c.text)
    assert all(len(texts) == 1 for texts in by_q.values())  # everyone saw the same answer
    assert (cache.stats.hits, cache.stats.misses) == (76, 4)
    cache.close()


def test_async_identical_misses_call_inner_once(tmp_path: Path) -> None:
    inner = CountingBackend(delay=0.05)
    cache = CachedBackend(inner, tmp_path / "c.sqlite")

    async def main() -> list[Completion]:
        return await asyncio.gather(*(cache.acomplete(req(f"q{i % 3}")) for i in range(12)))

    results = asyncio.run(main())
    assert inner.calls == 3
    assert sum(not c.cached for c in results) == 3
    assert (cache.stats.hits, cache.stats.misses) == (9, 3)
    again = asyncio.run(cache.acomplete(req("q1")))
    assert again.cached and inner.calls == 3
    cache.close()


def test_async_inner_error_propagates_and_is_not_cached(tmp_path: Path) -> None:
    class Failing(CountingBackend):
        async def acomplete(self, request: CompletionRequest) -> Completion:
            self.calls += 1
            await asyncio.sleep(0.01)
            raise ValueError("boom")

    inner = Failing()
    cache = CachedBackend(inner, tmp_path / "c.sqlite")

    async def main() -> list[object]:
        return await asyncio.gather(*(cache.acomplete(req()) for _ in range(3)), return_exceptions=True)

    outcomes = asyncio.run(main())
    assert all(isinstance(o, ValueError) for o in outcomes) and inner.calls == 1
    assert len(cache) == 0
    cache.close()


def test_corrupt_database_raises_and_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    garbage = b"this is not a sqlite database\x00" * 200
    path.write_bytes(garbage)
    with pytest.raises(CacheError, match="unusable"):
        CachedBackend(CountingBackend(), path)
    assert path.read_bytes() == garbage


def test_locked_database_returns_fresh_completion_and_reports(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "c.sqlite"
    inner = CountingBackend()
    cache = CachedBackend(inner, path, timeout=0.2)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        fresh = cache.complete(req())
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert fresh.text.startswith("hello") and not fresh.cached
    assert cache.stats.write_errors == 1
    assert "cache write" in caplog.text and "locked" in caplog.text
    assert len(cache) == 0
    # after the lock is gone the request is computed again and now persisted
    cache.complete(req())
    assert inner.calls == 2 and len(cache) == 1
    assert cache.complete(req()).cached
    cache.close()


def test_locked_database_can_be_made_fatal(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = CachedBackend(CountingBackend(), path, timeout=0.1, on_write_error="raise")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CacheError, match="locked"):
            cache.complete(req())
    finally:
        other.execute("ROLLBACK")
        other.close()
    cache.close()


def test_wal_mode_and_name(tmp_path: Path) -> None:
    cache = CachedBackend(CountingBackend(), tmp_path / "c.sqlite")
    mode = sqlite3.connect(tmp_path / "c.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal" and cache.name == "echo"
    cache.close()
