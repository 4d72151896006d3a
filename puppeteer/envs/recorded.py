"""The calls a replay table holds, as a step-mode action mask (a pool's ``recorded_only``).

A shipped outcome table (:mod:`puppeteer.backends.replay`) holds every solver's call alone on each of
its items and, in ``steps.jsonl.gz``, a reader's call (a verifier, a reviser) after one named first
agent. An episode replays exactly while each call it makes is one of those. :class:`RecordedCalls`
says which agents' next calls are, given the item and the agents that acted so far:

- at the first step, the agents recorded alone on the item;
- later, an agent that does not see earlier work (a solver of a pool with ``independent_solvers``)
  when it is recorded alone on the item (its request is its single call's);
- an agent that sees earlier work, only at the second step and only when the table holds its call
  after the agent that acted first.

So a policy trained on a table with second steps for some first agents only is offered the verifier
exactly where its call replays, and never asks the real model for a call the table lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from puppeteer.agents.pool import Pool
from puppeteer.backends.replay import read_outcomes, read_steps
from puppeteer.errors import UserError


@dataclass(frozen=True)
class RecordedCalls:
    """The (item, agent) single calls and (item, first, agent) chains of one replay table."""

    singles: frozenset[tuple[str, str]]
    chains: frozenset[tuple[str, str, str]]

    @classmethod
    def of_table(cls, root: str | Path) -> RecordedCalls:
        return cls(
            frozenset((o.task_id, o.agent) for o in read_outcomes(root)),
            frozenset((s.task_id, s.first, s.agent) for s in read_steps(root)),
        )

    @classmethod
    def of_pool(cls, pool: Pool) -> RecordedCalls:
        if pool.replay is None:
            raise UserError(
                f"recorded_only offers the calls a replay table holds: pool {pool.name!r} names no "
                "replay: folder"
            )
        return cls.of_table(pool.replay)

    def agents(self, pool: Pool, task_id: str, acted: Sequence[int]) -> np.ndarray:
        """Boolean mask over the pool's agents (no Terminator) whose next call on ``task_id``, after the
        agents ``acted`` (ids, in order), the table holds."""
        names = [a.name for a in pool.agents]
        out = np.zeros(len(names), dtype=bool)
        for i, name in enumerate(names):
            if not acted or not pool.sees_earlier_work(i):
                out[i] = (task_id, name) in self.singles
            elif len(acted) == 1:
                out[i] = (task_id, names[acted[0]], name) in self.chains
        return out

    def first_agents(self, pool: Pool, task_ids: Sequence[str]) -> np.ndarray:
        """The agents recorded alone on every one of ``task_ids``: what every episode can call first."""
        out = np.ones(len(pool), dtype=bool)
        for task_id in task_ids:
            out &= self.agents(pool, task_id, ())
        return out


__all__ = ["RecordedCalls"]
