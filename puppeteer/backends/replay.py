"""Shipped outcome tables: every agent's response, grade and cost on every item, replayed without a model.

A table is a folder (named by a pool's ``replay:`` field, beside its YAML) with two gzipped JSONL files:

- ``outcomes.jsonl.gz``: one row per ``(suite, split, task_id, agent)``: the grade, the extracted
  answer, the tokens, the single-stream model seconds, truncation and tool calls, and the response text.
  This is the per-agent table that analytics and reports read.
- ``responses.jsonl.gz``: one row per model call, keyed by the response cache's *greedy key* (the
  request without its sample index, see :mod:`puppeteer.backends.cache`), with the completion's
  text and tokens. :class:`ReplayBackend` serves these in front of the pool's real backend, so
  ``eval``, ``train``, ``ab`` and the quickstart run every episode whose calls are in the table with
  no model loaded; a call that is not there goes to the real backend (``strict=True`` raises instead).
- ``steps.jsonl.gz`` (optional): one row per two-step chain ``(suite, split, task_id, first, agent)``:
  the first agent's call replayed from the table, then a second agent that reads it (a verifier or a
  reviser), called for real. The second call's prompt is fixed by the item and the first response, so
  its response (in ``responses.jsonl.gz``) replays exactly whenever that chain runs again.

Both files are written sorted, so a table grows by shards with readable diffs of its row counts and
the same rows always give the same bytes.
"""

from __future__ import annotations

import functools
import gzip
import json
import sqlite3
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from puppeteer.backends.cache import CacheStats, greedy_key, greedy_key_of
from puppeteer.errors import RunStopped, UserError
from puppeteer.types import Completion, CompletionRequest

OUTCOMES_FILE = "outcomes.jsonl.gz"
RESPONSES_FILE = "responses.jsonl.gz"
STEPS_FILE = "steps.jsonl.gz"


class ReplayMiss(RunStopped, LookupError):
    """A strict replay met a call that the table does not hold: the run stops there."""


class TableError(UserError):
    """A replay table file that is damaged or does not hold what it claims."""


@dataclass(frozen=True)
class Outcome:
    """One agent alone on one item (a single-agent episode)."""

    suite: str
    split: str
    task_id: str
    domain: str
    agent: str
    correct: bool
    answer: str | None
    prompt_tokens: int
    completion_tokens: int
    model_s: float  # single-stream seconds at the pool's declared speeds
    truncated: bool
    tool_calls: int
    error: str | None = None
    response: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.suite, self.split, self.task_id, self.agent)


@dataclass(frozen=True)
class StepOutcome:
    """A second agent's call on one item after a first agent's answer (a two-step chain).

    ``answer`` is the second call's own extracted answer (None: it stated none); ``correct`` grades the
    chain's final answer, the last one given (the first answer stands where the second gave none).
    ``first_answer`` and ``first_correct`` are the first call's, as the table's :class:`Outcome` holds them.
    """

    suite: str
    split: str
    task_id: str
    domain: str
    first: str
    agent: str
    correct: bool
    answer: str | None
    first_correct: bool
    first_answer: str | None
    prompt_tokens: int
    completion_tokens: int
    model_s: float  # the second call's single-stream seconds at the pool's declared speeds
    truncated: bool
    error: str | None = None
    response: str = ""

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.suite, self.split, self.task_id, self.first, self.agent)


@dataclass(frozen=True)
class Response:
    """One stored model call."""

    key: str  # greedy key of the request
    backend: str
    target: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    flops: float

    def completion(self, max_tokens: int) -> Completion:
        return Completion(
            text=self.text,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cost_usd=0.0,
            flops=self.flops,
            latency_s=self.latency_s,
            model=self.target,
            cached=True,
            truncated=self.completion_tokens >= max_tokens,
        )


# --------------------------------------------------------------------------- files


# the JSON types each field of a row may hold (ints are numbers too where a float is asked)
_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "bool": (bool,),
    "int": (int,),
    "float": (int, float),
    "str | None": (str, type(None)),
}


def _check_row(row: Any, cls: type, where: str) -> Any:
    """``row`` (a decoded JSON line) as ``cls``: every field present (or defaulted) with its type."""
    if not isinstance(row, dict):
        raise TableError(f"{where}: not a JSON object")
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in row:
            if f.default is not MISSING:
                continue
            raise TableError(f"{where}: no {f.name!r} field")
        value, allowed = row[f.name], _TYPES[str(f.type)]
        if not isinstance(value, allowed) or (bool not in allowed and isinstance(value, bool)):
            raise TableError(f"{where}: {f.name}={value!r:.60} is not a {f.type}")
        values[f.name] = value
    return cls(**values)


def _read_rows(path: Path, cls: type) -> Iterator[Any]:
    """The rows of a gzipped JSONL file as ``cls`` (nothing when the file is absent), each checked.

    A damaged file (not gzip, truncated, bad CRC, not UTF-8) is a :class:`TableError` naming it.
    """
    if not path.is_file():
        return
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TableError(f"{path}:{n}: not a JSON line ({e.msg})") from None
                yield _check_row(row, cls, f"{path}:{n}")
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        what = "truncated" if isinstance(e, EOFError) else "damaged"
        raise TableError(
            f"{path}: the file is {what} ({type(e).__name__}: {str(e) or 'end of file too early'}); "
            "restore it or rebuild it with `puppeteer outcomes build`"
        ) from None


def _unique(rows: Iterable[Any], key: Callable[[Any], Any], path: Path) -> dict[Any, Any]:
    """Rows by key; a key that two rows share is a :class:`TableError` naming it."""
    out: dict[Any, Any] = {}
    for row in rows:
        k = key(row)
        if k in out:
            raise TableError(f"{path}: two rows for {k!r:.120}; a table holds each key once")
        out[k] = row
    return out


def _write_rows(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write atomically (a temporary file, then a rename) with a fixed gzip mtime: same rows, same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with (
        open(tmp, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz,
    ):
        for row in rows:
            gz.write((json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    tmp.replace(path)


def read_outcomes(root: str | Path) -> tuple[Outcome, ...]:
    path = Path(root) / OUTCOMES_FILE
    return tuple(_unique(_read_rows(path, Outcome), lambda o: o.key, path).values())


def write_outcomes(root: str | Path, rows: Iterable[Outcome]) -> int:
    """Merge ``rows`` into the table's outcomes (a new row replaces an old one with its key)."""
    merged = {o.key: o for o in read_outcomes(root)}
    merged.update((o.key, o) for o in rows)
    _write_rows(Path(root) / OUTCOMES_FILE, (asdict(merged[k]) for k in sorted(merged)))
    return len(merged)


def read_steps(root: str | Path) -> tuple[StepOutcome, ...]:
    return tuple(_read_rows(Path(root) / STEPS_FILE, StepOutcome))


def write_steps(root: str | Path, rows: Iterable[StepOutcome]) -> int:
    """Merge ``rows`` into the table's two-step chains (a new row replaces an old one with its key)."""
    merged = {o.key: o for o in read_steps(root)}
    merged.update((o.key, o) for o in rows)
    _write_rows(Path(root) / STEPS_FILE, (asdict(merged[k]) for k in sorted(merged)))
    return len(merged)


def read_responses(root: str | Path) -> dict[str, Response]:
    path = Path(root) / RESPONSES_FILE
    return _unique(_read_rows(path, Response), lambda r: r.key, path)


def export_responses(cache: str | Path, root: str | Path) -> int:
    """Merge every greedy call of a SQLite response cache into the table's responses; returns the count."""
    merged = read_responses(root)
    conn = sqlite3.connect(f"file:{Path(cache)}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT text, prompt_tokens, completion_tokens, flops, latency_s, request FROM completions"
        ).fetchall()
    finally:
        conn.close()
    for text, pt, ct, flops, latency, request in rows:
        payload = json.loads(request)
        key = greedy_key_of(payload)
        if key is None or key in merged:  # sampled calls are not replayable; the first stored call wins
            continue
        merged[key] = Response(
            key=key,
            backend=str(payload["backend"]),
            target=str(payload["target"]),
            text=text,
            prompt_tokens=int(pt),
            completion_tokens=int(ct),
            latency_s=round(float(latency), 3),
            flops=float(flops),
        )
    _write_rows(Path(root) / RESPONSES_FILE, (asdict(merged[k]) for k in sorted(merged)))
    return len(merged)


# --------------------------------------------------------------------------- replay


@dataclass(frozen=True)
class ReplayTable:
    """The responses of one table, read once."""

    root: Path
    responses: Mapping[str, Response]

    @classmethod
    def load(cls, root: str | Path, strict: bool = False) -> ReplayTable:
        """The table at ``root``; an empty one where nothing was built yet (every call then misses).

        ``strict``: a missing or empty table is refused at once (every call would miss).
        """
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise TableError(f"replay table {root} is not a folder")
        table = cls(root, MappingProxyType(read_responses(root)))
        if strict and not table.responses:
            raise TableError(
                f"replay table {root} holds no responses ({RESPONSES_FILE} missing or empty); strict "
                "replay would miss every call: build it with `puppeteer outcomes build`, or replay off"
            )
        return table

    def __len__(self) -> int:
        return len(self.responses)

    def lookup(self, request: CompletionRequest) -> Completion | None:
        key = greedy_key(request)
        found = self.responses.get(key) if key is not None else None
        return found.completion(request.max_tokens) if found is not None else None


@functools.lru_cache(maxsize=8)
def load_table(root: Path, strict: bool = False) -> ReplayTable:
    """A table read once per process (every env clone and every run of a job shares it)."""
    return ReplayTable.load(root, strict=strict)


class ReplayBackend:
    """Answers from a :class:`ReplayTable`; a call it lacks goes to ``inner`` (or raises if ``strict``)."""

    def __init__(self, inner: Any, table: ReplayTable, strict: bool = False) -> None:
        self.inner = inner
        self.table = table
        self.strict = strict
        self.name = getattr(inner, "name", "replay")
        self.hits = 0
        self.misses = 0

    @property
    def stats(self) -> CacheStats:
        """Replayed calls count as hits; the misses are those of the cache behind (or this layer's)."""
        behind = getattr(self.inner, "stats", None)
        if isinstance(behind, CacheStats):  # a strict miss never reaches the cache: count it here
            return replace(
                behind,
                hits=behind.hits + self.hits,
                misses=behind.misses + (self.misses if self.strict else 0),
            )
        return CacheStats(hits=self.hits, misses=self.misses)

    def _miss(self, request: CompletionRequest) -> None:
        self.misses += 1
        if self.strict:
            raise ReplayMiss(
                f"{request.model.target}: a call that the replay table {self.table.root} does not hold "
                f"(strict replay; key {greedy_key(request) or 'none: a sampled call'}); the run stops here: "
                "run without strict replay to call the model, or extend the table with "
                "`puppeteer outcomes build`"
            )

    def complete(self, request: CompletionRequest) -> Completion:
        hit = self.table.lookup(request)
        if hit is not None:
            self.hits += 1
            return hit
        self._miss(request)
        return self.inner.complete(request)

    async def acomplete(self, request: CompletionRequest) -> Completion:
        hit = self.table.lookup(request)
        if hit is not None:
            self.hits += 1
            return hit
        self._miss(request)
        return await self.inner.acomplete(request)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()
