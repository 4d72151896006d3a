"""One queryable trajectory store: every episode of every eval and training run, in SQLite.

Runs keep writing ``trajectories.jsonl`` (one episode per line, appended and flushed as each
episode ends); the store indexes those files into three tables a user can query with SQL or
pandas:

- ``runs``: one row per run directory (kind ``eval`` | ``train``, policy, pool, suite, split,
  lambda, seed, backends);
- ``episodes``: one row per episode (task id, suite, split, policy, mode, final answer, correct,
  reward, calls, tokens, USD, FLOPs, and for training runs the update index it came from);
- ``steps``: one row per agent activation (agent, subtask, access list, tokens, cost, answer,
  tool calls).

Why SQLite (and not DuckDB over the run files): it is in the standard library, it takes many
writers and readers at once (WAL), and each episode is one transaction, so a writer killed
mid-episode loses at most that episode and never corrupts earlier ones. Ingestion is
incremental and exactly-once: a run's byte offset into its ``trajectories.jsonl`` advances in
the same transaction as the episode it covers, and a torn last line (a writer killed
mid-``write``) is left for later.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

TRAJECTORIES = "trajectories.jsonl"

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, path TEXT, kind TEXT, policy TEXT, pool TEXT, suite TEXT, split TEXT,
    mode TEXT, lam REAL, seed INTEGER, backend TEXT, batch_episodes INTEGER, offset INTEGER DEFAULT 0,
    n_lines INTEGER DEFAULT 0
);
CREATE TABLE IF NOT EXISTS episodes (
    run_id TEXT, episode INTEGER, task_id TEXT, suite TEXT, split TEXT, domain TEXT, policy TEXT,
    mode TEXT, item_index INTEGER, update_index INTEGER, final_answer TEXT, gold TEXT,
    correct INTEGER, reward REAL, parse_error TEXT, error TEXT, calls INTEGER, prompt_tokens INTEGER,
    completion_tokens INTEGER, tokens INTEGER, cost_usd REAL, flops REAL, latency_s REAL, wall_s REAL,
    tool_calls INTEGER, PRIMARY KEY (run_id, episode)
);
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT, episode INTEGER, step INTEGER, agent_id INTEGER, agent_name TEXT, subtask TEXT,
    access TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, cost_usd REAL, flops REAL,
    latency_s REAL, answer TEXT, tool_calls INTEGER, cached INTEGER, truncated INTEGER,
    PRIMARY KEY (run_id, episode, step)
);
CREATE INDEX IF NOT EXISTS episodes_task ON episodes (task_id);
"""

EPISODE_COLUMNS = (
    "run_id",
    "episode",
    "task_id",
    "suite",
    "split",
    "domain",
    "policy",
    "mode",
    "item_index",
    "update_index",
    "final_answer",
    "gold",
    "correct",
    "reward",
    "parse_error",
    "error",
    "calls",
    "prompt_tokens",
    "completion_tokens",
    "tokens",
    "cost_usd",
    "flops",
    "latency_s",
    "wall_s",
    "tool_calls",
)
STEP_COLUMNS = (
    "run_id",
    "episode",
    "step",
    "agent_id",
    "agent_name",
    "subtask",
    "access",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "flops",
    "latency_s",
    "answer",
    "tool_calls",
    "cached",
    "truncated",
)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def run_metadata(run_dir: str | Path) -> dict[str, Any]:
    """What a run directory says about itself (``results.json`` of an eval, ``config.json`` of training)."""
    d = Path(run_dir)
    results, config = _read_json(d / "results.json"), _read_json(d / "config.json")
    if "trainer" in config:  # a training run (puppeteer.jobs.train)
        suite = config.get("suite") or {}
        return {
            "kind": "train",
            "policy": "puppeteer (training)",
            "pool": (config.get("pool") or {}).get("name"),
            "suite": suite.get("name"),
            "split": suite.get("train_split"),
            "mode": "step",
            "lam": config.get("lam"),
            "seed": config.get("seed"),
            "backend": results.get("backend"),
            "batch_episodes": int((config.get("trainer") or {}).get("batch_episodes") or 0) or None,
        }
    backends = results.get("backends")
    return {
        "kind": "eval",
        "policy": results.get("policy"),
        "pool": results.get("pool"),
        "suite": results.get("suite"),
        "split": results.get("split"),
        "mode": results.get("mode"),
        "lam": results.get("lam"),
        "seed": results.get("seed"),
        "backend": ",".join(backends) if isinstance(backends, list) else backends,
        "batch_episodes": None,
    }


class MalformedRecord(UserError, ValueError):
    """A line of a ``trajectories.jsonl`` that is not an episode record (named by file and record)."""


def checked_record(record: object) -> Mapping[str, Any]:
    """``record`` if it has an episode record's shape: a JSON object whose ``steps`` is a list of objects."""
    if not isinstance(record, Mapping):
        raise ValueError(f"a JSON object was expected, got {type(record).__name__}")
    steps = record.get("steps", [])
    if steps is not None and (not isinstance(steps, list) or not all(isinstance(x, Mapping) for x in steps)):
        raise ValueError("'steps' must be a list of objects")
    return record


def episode_rows(
    run_id: str, episode: int, d: Mapping[str, Any], meta: Mapping[str, Any]
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """One ``trajectories.jsonl`` record as an episode row and its step rows."""
    steps = d.get("steps") or []
    batch = meta.get("batch_episodes")
    update = d.get("update", episode // batch + 1 if batch else None)

    def comp(s: Mapping[str, Any], key: str, default: Any = 0) -> Any:
        return (s.get("completion") or {}).get(key, default)

    prompt = sum(comp(s, "prompt_tokens") for s in steps)
    completion = sum(comp(s, "completion_tokens") for s in steps)
    episode_row = (
        run_id,
        episode,
        d.get("task_id"),
        d.get("suite"),
        d.get("split", meta.get("split")),
        d.get("domain"),
        d.get("policy", meta.get("policy")),
        d.get("mode", meta.get("mode")),
        d.get("index"),
        update,
        d.get("final_answer"),
        d.get("gold"),
        int(bool(d.get("correct"))),
        d.get("reward"),
        d.get("parse_error"),
        d.get("error"),
        len(steps),
        prompt,
        completion,
        prompt + completion,
        sum(comp(s, "cost_usd", 0.0) or 0.0 for s in steps),
        sum(comp(s, "flops", 0.0) for s in steps),
        sum(comp(s, "latency_s", 0.0) for s in steps),
        d.get("wall_s"),
        sum(s.get("tool_calls", 0) for s in steps),
    )
    step_rows = [
        (
            run_id,
            episode,
            s.get("index", k),
            s.get("agent_id"),
            s.get("agent_name"),
            s.get("subtask"),
            json.dumps(list(s.get("visible") or [])),
            comp(s, "prompt_tokens"),
            comp(s, "completion_tokens"),
            comp(s, "cost_usd", 0.0),
            comp(s, "flops", 0.0),
            comp(s, "latency_s", 0.0),
            s.get("answer"),
            s.get("tool_calls", 0),
            int(bool(comp(s, "cached", False))),
            int(bool(comp(s, "truncated", False))),
        )
        for k, s in enumerate(steps)
    ]
    return episode_row, step_rows


def complete_lines(path: Path, offset: int) -> Iterator[tuple[int, bytes]]:
    """``(end offset, line)`` for every newline-terminated line after ``offset``; a torn tail is left."""
    with path.open("rb") as f:
        f.seek(offset)
        pos = offset
        for raw in f:
            if not raw.endswith(b"\n"):
                return
            pos += len(raw)
            yield pos, raw


class TrajectoryStore:
    """A SQLite file (or ``":memory:"``) holding the episodes of many runs."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)  # explicit transactions
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            "PRAGMA synchronous=NORMAL"
        )  # durable across process crashes; one fsync per checkpoint
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing
    def register_run(self, run_id: str, meta: Mapping[str, Any], path: str = "") -> None:
        cols = (
            "kind",
            "policy",
            "pool",
            "suite",
            "split",
            "mode",
            "lam",
            "seed",
            "backend",
            "batch_episodes",
        )
        self.db.execute(
            f"INSERT INTO runs (run_id, path, {', '.join(cols)}) VALUES (?, ?, {', '.join('?' * len(cols))}) "
            f"ON CONFLICT(run_id) DO UPDATE SET {', '.join(f'{c}=excluded.{c}' for c in cols)}",
            (run_id, path, *(meta.get(c) for c in cols)),
        )

    def _insert(self, episode_row: tuple[Any, ...], step_rows: list[tuple[Any, ...]]) -> None:
        self.db.execute(
            f"INSERT OR REPLACE INTO episodes VALUES ({', '.join('?' * len(EPISODE_COLUMNS))})", episode_row
        )
        self.db.executemany(
            f"INSERT OR REPLACE INTO steps VALUES ({', '.join('?' * len(STEP_COLUMNS))})", step_rows
        )

    def add_episode(
        self, run_id: str, episode: int, record: Mapping[str, Any], meta: Mapping[str, Any] | None = None
    ) -> None:
        """Write one episode (a ``trajectories.jsonl`` record) and its steps in one transaction."""
        ep, steps = episode_rows(run_id, episode, record, meta or {})
        with self._transaction():
            self._insert(ep, steps)

    def ingest(self, run_dir: str | Path) -> int:
        """Index the run's new complete episodes; returns how many were added."""
        d = Path(run_dir).resolve()
        path = d / TRAJECTORIES
        run_id = str(d)
        meta = run_metadata(d)
        self.register_run(run_id, meta, str(d))
        if not path.exists():
            return 0
        offset, n = self.db.execute("SELECT offset, n_lines FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if path.stat().st_size < offset:  # the file was rewritten (a rerun into the same directory)
            with self._transaction():
                self.db.execute("DELETE FROM episodes WHERE run_id=?", (run_id,))
                self.db.execute("DELETE FROM steps WHERE run_id=?", (run_id,))
            offset, n = 0, 0
        added = 0
        for end, raw in complete_lines(path, offset):
            text = raw.strip()
            rows = None
            if text:
                try:
                    rows = episode_rows(run_id, n, checked_record(json.loads(text)), meta)
                except (ValueError, TypeError, AttributeError, KeyError) as exc:
                    raise MalformedRecord(f"{path}: episode record {n + 1}: {exc}") from None
            with self._transaction():
                if rows is not None:
                    self._insert(*rows)
                    n += 1
                    added += 1
                self.db.execute("UPDATE runs SET offset=?, n_lines=? WHERE run_id=?", (end, n, run_id))
        return added

    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)

    # ------------------------------------------------------------------ reading
    def query(self, sql: str, params: Iterable[Any] = ()) -> pd.DataFrame:
        import pandas as pd

        return pd.read_sql_query(sql, self.db, params=tuple(params))

    def episodes(self) -> pd.DataFrame:
        """Episodes joined with their run's metadata."""
        df = self.query(
            "SELECT e.*, r.kind, r.pool, r.lam, r.seed, r.backend, r.path AS run_path "
            "FROM episodes e LEFT JOIN runs r USING (run_id) ORDER BY e.run_id, e.episode"
        )
        df["correct"] = df["correct"].astype(bool)
        return df

    def steps(self) -> pd.DataFrame:
        """Steps joined with their episode's task, suite, policy, mode and update index."""
        df = self.query(
            "SELECT s.*, e.task_id, e.suite, e.split, e.domain, e.policy, e.mode, e.update_index, e.correct, "
            "r.kind, r.pool FROM steps s JOIN episodes e USING (run_id, episode) "
            "LEFT JOIN runs r USING (run_id) ORDER BY s.run_id, s.episode, s.step"
        )
        df["access"] = df["access"].map(json.loads)
        return df


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.db.execute("ROLLBACK" if exc_type is not None else "COMMIT")


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Run directories: each path itself if it holds ``trajectories.jsonl``, else every run below it."""
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"no such run directory: {p}")
        if (p / TRAJECTORIES).exists():
            found.append(p)
        else:
            found += sorted(t.parent for t in p.rglob(TRAJECTORIES))
    return found


def load(*runs: str | Path, store: str | Path | None = None, level: str = "episodes") -> pd.DataFrame:
    """Episodes (``level="episodes"``) or steps (``level="steps"``) of the given runs as a DataFrame.

    ``runs`` are run directories or folders that contain runs (searched recursively). ``store``
    is a SQLite file to index into and keep (re-loading only reads what was appended since);
    by default an in-memory store. With no ``runs``, everything already in ``store``.
    """
    if level not in ("episodes", "steps"):
        raise ValueError(f"level must be 'episodes' or 'steps', got {level!r}")
    with closing(TrajectoryStore(store or ":memory:")) as st:
        ids = []
        for run in find_runs(runs):
            st.ingest(run)
            ids.append(str(run.resolve()))
        df = st.episodes() if level == "episodes" else st.steps()
    if runs:
        df = df[df["run_id"].isin(ids)].reset_index(drop=True)
    return df
