"""A persistent response cache in front of any backend (SQLite, WAL mode).

The key is the sha256 of the canonical JSON of what decides a completion:
``(model.backend, model.target, messages, max_tokens, temperature, sample_index, stop)``.
Greedy requests (temperature 0) also answer to a *greedy key* without ``sample_index``: a greedy
call's output does not depend on which sample it is, so an episode that draws another sample
index (every ``reset`` of the env draws one) replays what any earlier identical greedy call
stored. The ``greedy`` table maps greedy keys to the first stored row; rows written without it
(older versions, other processes) are indexed from their stored request when a cache is opened.
The :class:`~puppeteer.types.CallContext` is deliberately not part of it, nor are
``ModelSpec.options`` (keep options that change outputs out of shared caches, or
give such models distinct targets). A hit returns the stored completion with
``cached=True`` and the original ``latency_s``; its ``truncated`` flag is not stored but
re-derived as ``completion_tokens >= max_tokens`` (what finish reason "length" means).

Every thread gets its own SQLite connection; async calls reach SQLite through
``asyncio.to_thread``. Identical concurrent misses call the inner backend once (the
others wait and count as hits). A database that is not SQLite raises
:class:`CacheError` at open time and is left untouched. A write that fails (for
example, the database stayed locked past ``timeout``) still returns the fresh
completion, logs a warning and counts in ``stats.write_errors``; pass
``on_write_error="raise"`` to fail instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from puppeteer.backends.base import CACHEABLE, Backend
from puppeteer.errors import UserError
from puppeteer.types import Completion, CompletionRequest

if TYPE_CHECKING:
    from puppeteer.agents.pool import Pool

log = logging.getLogger(__name__)

KEY_VERSION = 1
RESPONSE_CACHE_ENV = "PUPPETEER_RESPONSE_CACHE"


def default_response_cache() -> Path:
    """``$PUPPETEER_RESPONSE_CACHE`` or ``~/.cache/puppeteer/responses.sqlite`` (shared by all runs)."""
    env = os.environ.get(RESPONSE_CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "puppeteer" / "responses.sqlite"


def resolve_cache(
    pool: Pool, cache: str | Path | None, no_cache: bool, model_policy: bool = False
) -> Path | None:
    """The cache a run uses: none with ``no_cache`` or when nothing calls a model (neither the pool's
    backends nor, with ``model_policy``, the policy itself: a conductor LM is cached on any pool);
    else ``cache`` or the shared default."""
    if no_cache or not (model_policy or set(pool.backends()) & CACHEABLE):
        return None
    return Path(cache).expanduser() if cache else default_response_cache()


_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_usd REAL,
    flops REAL NOT NULL,
    latency_s REAL NOT NULL,
    model TEXT NOT NULL,
    created REAL NOT NULL,
    request TEXT NOT NULL
)
"""
_COLUMNS = "text, prompt_tokens, completion_tokens, cost_usd, flops, latency_s, model"
# greedy key -> the key of the first row stored for it; ``meta.greedy_rowid``: rows indexed so far
_GREEDY_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS greedy (gkey TEXT PRIMARY KEY, key TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)


class CacheError(UserError, RuntimeError):
    """The cache database cannot be used (not SQLite, corrupt, unreadable)."""


def _unusable(path: Path, why: object) -> CacheError:
    return CacheError(
        f"response cache {path} is unusable ({why}); it was left untouched: move it away, "
        "point --cache elsewhere, or run without a cache (--no-cache)"
    )


def check_cache(path: Path | str) -> None:
    """Raise :class:`CacheError` unless ``path`` is (or can become) a sound SQLite response cache.

    Checks the schema and runs ``PRAGMA quick_check`` (catches truncated or damaged files), so a
    run stops at its start instead of failing item by item.
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise _unusable(path, "not a regular file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise _unusable(path, exc) from exc
    try:
        conn.execute(_SCHEMA)
        verdict = conn.execute("PRAGMA quick_check").fetchone()
        if verdict is None or verdict[0] != "ok":
            raise _unusable(path, f"integrity check: {verdict[0] if verdict else 'no answer'}")
        conn.execute(f"SELECT {_COLUMNS} FROM completions LIMIT 1").fetchall()
    except sqlite3.Error as exc:
        raise _unusable(path, exc) from exc
    finally:
        conn.close()


@dataclass(frozen=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    write_errors: int = 0
    read_errors: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


def request_payload(request: CompletionRequest) -> dict[str, Any]:
    """The fields of a request that decide its completion (the cache key's content)."""
    payload = {
        "v": KEY_VERSION,
        "backend": request.model.backend,
        "target": request.model.target,
        "messages": [[m.role, m.content] for m in request.messages],
        "max_tokens": int(request.max_tokens),
        "temperature": float(request.temperature),
        "sample_index": int(request.sample_index),
        "stop": list(request.stop),
    }
    if request.grammar is not None:  # only when set: unconstrained keys stay what they were
        payload["grammar"] = request.grammar
    return payload


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def request_key(request: CompletionRequest) -> str:
    return hashlib.sha256(canonical_json(request_payload(request)).encode("utf-8")).hexdigest()


def greedy_key_of(payload: dict[str, Any]) -> str | None:
    """The key shared by every sample index of a greedy request (None unless temperature is 0)."""
    if float(payload.get("temperature", 1.0)) != 0.0:
        return None
    rest = {k: v for k, v in payload.items() if k != "sample_index"}
    return hashlib.sha256(canonical_json({**rest, "greedy": True}).encode("utf-8")).hexdigest()


def greedy_key(request: CompletionRequest) -> str | None:
    return greedy_key_of(request_payload(request))


@dataclass
class _Flight:
    """An in-progress miss for one key: later identical requests wait on ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


class CachedBackend:
    """Wraps ``inner`` with a SQLite cache at ``path``. ``name`` is the inner backend's name."""

    def __init__(
        self,
        inner: Backend,
        path: Path | str,
        timeout: float = 30.0,
        on_write_error: Literal["warn", "raise"] = "warn",
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.path = Path(path)
        self.timeout = timeout
        self.on_write_error = on_write_error
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self._counts = {"hits": 0, "misses": 0, "write_errors": 0, "read_errors": 0}
        self._flights: dict[str, _Flight] = {}
        self._afutures: dict[tuple[int, str], asyncio.Future[Completion]] = {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = self._conn()
            conn.execute(_SCHEMA)
            for statement in _GREEDY_SCHEMA:
                conn.execute(statement)
            self._index_greedy(conn)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise _unusable(self.path, exc) from exc

    def _index_greedy(self, conn: sqlite3.Connection) -> None:
        """Give the rows stored since the last indexing (by any writer) their greedy keys."""
        row = conn.execute("SELECT value FROM meta WHERE name = 'greedy_rowid'").fetchone()
        done = int(row[0]) if row else 0
        new = conn.execute(
            "SELECT rowid, key, request FROM completions WHERE rowid > ? ORDER BY rowid", (done,)
        ).fetchall()
        if not new:
            return
        pairs = []
        for _, key, request in new:
            try:
                gkey = greedy_key_of(json.loads(request))
            except (ValueError, TypeError):  # a request this version cannot read: no greedy alias
                gkey = None
            if gkey is not None:
                pairs.append((gkey, key))
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR IGNORE INTO greedy VALUES (?, ?)", pairs)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('greedy_rowid', ?)", (int(new[-1][0]),))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ sqlite

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._guard:
                self._connections.append(conn)
        return conn

    def _count(self, name: str) -> None:
        with self._guard:
            self._counts[name] += 1

    def lookup(self, key: str, request: CompletionRequest | None = None) -> Completion | None:
        """The stored completion for ``key``; with ``request``, ``truncated`` is derived from its budget."""
        try:
            conn = self._conn()
            row = conn.execute(f"SELECT {_COLUMNS} FROM completions WHERE key = ?", (key,)).fetchone()
            gkey = greedy_key(request) if row is None and request is not None else None
            if gkey is not None:
                row = conn.execute(
                    f"SELECT {_COLUMNS} FROM completions WHERE key = (SELECT key FROM greedy WHERE gkey = ?)",
                    (gkey,),
                ).fetchone()
        except sqlite3.Error as exc:
            self._count("read_errors")
            log.warning("cache read from %s failed (%s); treating as a miss", self.path, exc)
            return None
        if row is None:
            return None
        text, pt, ct, cost, flops, latency, model = row
        return Completion(
            text=text,
            prompt_tokens=pt,
            completion_tokens=ct,
            cost_usd=cost,
            flops=flops,
            latency_s=latency,
            model=model,
            cached=True,
            truncated=request is not None and ct >= request.max_tokens,
        )

    def store(self, key: str, request: CompletionRequest, completion: Completion) -> bool:
        """Persist ``completion`` under ``key`` (first writer wins). False if the write failed."""
        payload = request_payload(request)
        gkey = greedy_key_of(payload)
        try:
            conn = self._conn()
            conn.execute(
                "INSERT OR IGNORE INTO completions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    completion.text,
                    completion.prompt_tokens,
                    completion.completion_tokens,
                    completion.cost_usd,
                    completion.flops,
                    completion.latency_s,
                    completion.model,
                    time.time(),
                    canonical_json(payload),
                ),
            )
            if gkey is not None:  # a crash before this line is repaired by the next open's indexing
                conn.execute("INSERT OR IGNORE INTO greedy VALUES (?, ?)", (gkey, key))
        except sqlite3.Error as exc:
            self._count("write_errors")
            if self.on_write_error == "raise":
                raise CacheError(f"cache write to {self.path} failed: {exc}") from exc
            log.warning(
                "cache write to %s failed (%s); the completion is returned but not cached", self.path, exc
            )
            return False
        return True

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT count(*) FROM completions").fetchone()[0])

    @property
    def stats(self) -> CacheStats:
        with self._guard:
            return CacheStats(**self._counts)

    def close(self) -> None:
        with self._guard:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()

    def __enter__(self) -> CachedBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ calls

    def complete(self, request: CompletionRequest) -> Completion:
        key = request_key(request)
        hit = self.lookup(key, request)
        if hit is not None:
            self._count("hits")
            return hit
        with self._guard:
            flight = self._flights.setdefault(key, _Flight())
            flight.users += 1
        try:
            with flight.lock:
                hit = self.lookup(key, request)  # a concurrent identical miss may have filled it
                if hit is not None:
                    self._count("hits")
                    return hit
                self._count("misses")
                completion = self.inner.complete(request)
                self.store(key, request, completion)
                return completion
        finally:
            with self._guard:
                flight.users -= 1
                if flight.users == 0:
                    del self._flights[key]

    async def acomplete(self, request: CompletionRequest) -> Completion:
        key = request_key(request)
        hit = await asyncio.to_thread(self.lookup, key, request)
        if hit is not None:
            self._count("hits")
            return hit
        fkey = (id(asyncio.get_running_loop()), key)
        with self._guard:
            pending = self._afutures.get(fkey)
            if pending is None:
                future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
                self._afutures[fkey] = future
        if pending is not None:
            shared = await asyncio.shield(pending)
            self._count("hits")
            return replace(shared, cached=True)
        try:
            self._count("misses")
            completion = await self.inner.acomplete(request)
            await asyncio.to_thread(self.store, key, request, completion)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it, no "never retrieved" warning
            raise
        else:
            future.set_result(completion)
            return completion
        finally:
            with self._guard:
                del self._afutures[fkey]
