"""Before a training run on a pool with a shipped outcome table: does the table hold every item it needs?

A replayed pool answers with no model only for the items its table holds (every agent alone on each
item). A training run reads three splits (training, model selection, held-out evaluation); an item
of any of them that the table lacks would load the real models (replay on) or fail the episode
(strict). :func:`check_replay_coverage` refuses such a run before any work, in one line that names
the split, how many items are missing, the first of them and how to proceed.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from puppeteer.errors import UserError


class ReplayCoverageError(UserError):
    """A training run needs items that its pool's outcome table does not hold."""


@dataclass(frozen=True)
class SplitNeed:
    """One split a run reads: its name, the config key that sizes it, how many items (None: all)."""

    split: str
    key: str
    n: int | None


def needs_of(cfg: Mapping[str, Any]) -> tuple[SplitNeed, ...]:
    """The splits a composed training config reads, with their sizes (a size of 0 reads nothing)."""
    suite = cfg["suite"]
    return tuple(
        SplitNeed(str(suite.get(f"{part}_split", default)), f"suite.n_{part}", suite.get(f"n_{part}"))
        for part, default in (("train", "train"), ("val", "validation"), ("eval", "test"))
        if suite.get(f"n_{part}") != 0
    )


def check_replay_coverage(cfg: Mapping[str, Any]) -> None:
    """Raise :class:`ReplayCoverageError` if the pool replays a table that lacks an item the run needs."""
    from puppeteer.agents.pool import configured_pool
    from puppeteer.backends import REPLAY_ENV

    pool = configured_pool(cfg["pool"])
    mode = os.environ.get(REPLAY_ENV, "on").strip().lower() or "on"
    if pool.replay is None or mode == "off":
        return
    from puppeteer.backends.replay import read_outcomes
    from puppeteer.tasks import load_suite

    suite = str(cfg["suite"]["name"])
    agents = {a.name for a in pool.agents}
    held: dict[tuple[str, str], set[str]] = defaultdict(set)
    for o in read_outcomes(pool.replay):
        if o.suite == suite and o.agent in agents:
            held[(o.split, o.task_id)].add(o.agent)
    splits = sorted({split for split, _ in held})
    for need in needs_of(cfg):
        tasks = load_suite(suite, need.split, n=need.n)
        missing = [t.id for t in tasks if held.get((need.split, t.id), set()) != agents]
        if missing:
            table = str(pool.replay)
            raise ReplayCoverageError(_message(pool.name, table, suite, need, missing, splits, len(tasks)))


def _message(
    pool: str,
    table: str,
    suite: str,
    need: SplitNeed,
    missing: Sequence[str],
    splits: Sequence[str],
    n_tasks: int,
) -> str:
    held = ", ".join(splits) or "none"
    return (
        f"pool {pool} replays {table}, which lacks {len(missing)} of the {n_tasks} {need.split!r} items "
        f"of suite {suite} that {need.key} asks for (first: {missing[0]}; the table holds the splits: "
        f"{held}): read a split it holds (suite.val_split=train), fewer items, or PUPPETEER_REPLAY=off "
        "to call the models"
    )
