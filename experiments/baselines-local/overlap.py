"""Which items each run solved, and how runs differ item by item.

Accuracy alone hides whether combining agents *moves* answers: a vote at 0.44 against its best
member at 0.40 may gain 5 items and lose 3, or gain 2 and lose 0. These helpers read the
per-item ``correct`` flags that ``evaluate_policy`` writes to ``trajectories.jsonl`` and answer:

- :func:`compare`: items a run gained and lost against a reference run on the same items;
- :func:`coverage`: items solved by at least one of several runs (for single agents: the best
  any router that picks one agent per item could do, an upper bound for learned routing).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Outcomes:
    """Per-item correctness of one run: ``solved`` is a subset of ``items``."""

    items: frozenset[str]
    solved: frozenset[str]

    def __post_init__(self) -> None:
        if not self.solved <= self.items:
            raise ValueError("solved items must be a subset of the run's items")

    @property
    def accuracy(self) -> float:
        return len(self.solved) / len(self.items) if self.items else 0.0


@dataclass(frozen=True)
class Comparison:
    """A run against a reference on the same items.

    ``gained``: right only in the run; ``lost``: right only in the reference; ``both``: right in both.
    """

    gained: int
    lost: int
    both: int
    n: int

    @property
    def net(self) -> int:
        return self.gained - self.lost


@dataclass(frozen=True)
class Coverage:
    """Items solved by at least one run (``any``) against the best single run (``best``, ``best_solved``)."""

    any: int
    best: str
    best_solved: int
    n: int


def _records(path: str | Path) -> Iterator[dict[str, Any]]:
    """The JSON records of a ``trajectories.jsonl`` file or of a run directory holding one."""
    path = Path(path)
    if path.is_dir():
        path = path / "trajectories.jsonl"
    with path.open() as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def read_outcomes(path: str | Path) -> Outcomes:
    """Outcomes from a ``trajectories.jsonl`` file or a run directory holding one."""
    items: set[str] = set()
    solved: set[str] = set()
    for record in _records(path):
        task_id = str(record["task_id"])
        if task_id in items:
            raise ValueError(f"{path}: item {task_id!r} appears twice")
        items.add(task_id)
        if record.get("correct"):
            solved.add(task_id)
    return Outcomes(frozenset(items), frozenset(solved))


def _same_items(a: Outcomes, b: Outcomes) -> None:
    if a.items != b.items:
        differ = len(a.items ^ b.items)
        raise ValueError(f"runs cover different items ({differ} differ); compare like with like")


def compare(run: Outcomes, reference: Outcomes) -> Comparison:
    """Items ``run`` solves that ``reference`` does not (gained), and the other way round (lost)."""
    _same_items(run, reference)
    return Comparison(
        gained=len(run.solved - reference.solved),
        lost=len(reference.solved - run.solved),
        both=len(run.solved & reference.solved),
        n=len(run.items),
    )


def coverage(runs: Mapping[str, Outcomes]) -> Coverage:
    """How many items at least one run solves, and the best run alone (first listed wins a tie)."""
    if not runs:
        raise ValueError("coverage needs at least one run")
    first = next(iter(runs.values()))
    for outcomes in runs.values():
        _same_items(outcomes, first)
    best = max(runs, key=lambda name: len(runs[name].solved))
    union = frozenset().union(*(o.solved for o in runs.values()))
    return Coverage(any=len(union), best=best, best_solved=len(runs[best].solved), n=len(first.items))


@dataclass(frozen=True)
class Revisions:
    """How the last step of multi-step episodes relates to the step before it.

    ``episodes``: episodes with at least two steps; ``same_answer``: the last step's extracted
    answer equals the previous step's; ``verbatim``: the last step's text repeats the previous
    step's text exactly (a model copying the earlier work it was shown).
    """

    episodes: int
    same_answer: int
    verbatim: int

    @property
    def changed(self) -> int:
        return self.episodes - self.same_answer


def read_revisions(path: str | Path) -> Revisions:
    """:class:`Revisions` of the episodes in a ``trajectories.jsonl`` file or run directory."""
    episodes = same = verbatim = 0
    for record in _records(path):
        steps = record.get("steps") or []
        if len(steps) < 2:
            continue
        prev, last = steps[-2], steps[-1]
        episodes += 1
        same += prev.get("answer") == last.get("answer")
        verbatim += prev["completion"]["text"].strip() == last["completion"]["text"].strip()
    return Revisions(episodes, same, verbatim)
