"""The best one-call router given what the question shows, on a simulated step-mode env.

For every item and every available agent, the simulator knows the probability that the agent's
answer is correct given the item's visible difficulty score
(:meth:`~puppeteer.backends.sim.SimBackend.accuracy_given_visible`). The expected return of
calling agent ``a`` on item ``i`` (then stopping) is its realised return with the realised grade
replaced by that probability::

    E[G | i, a] = G_ia + g * (P(correct | d_i, a) - correct_ia)

(``g`` is the weight of a correct answer in the return: 1, or ``gamma`` when the Terminator pays
it a step later). The optimum picks, per item, the available agent of highest expected return, a
policy that reads only what a router could see: the item's domain, its question's length and the
price list. Its realised value on the env's items is what "% of optimum" compares a learned
router with (both are scored on the same draws). The hindsight oracle (the realised best agent per
item, unattainable) is reported beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from puppeteer.analytics.references import Reference
from puppeteer.backends.sim import SimBackend
from puppeteer.env import ConductorEnv
from puppeteer.envbuild import backend_options
from puppeteer.rollout import run_actions, summarize


@dataclass(frozen=True)
class ItemChoice:
    """The optimum's decision on one item."""

    task_id: str
    domain: str
    score: float | None  # the visible difficulty score d (None without a difficulty model)
    agent: int
    expected: float  # E[G] of the chosen agent


@dataclass(frozen=True)
class Optimum:
    """The optimum's realised value, the hindsight oracle's, and every single agent's (same items)."""

    optimum: Reference
    hindsight: Reference
    singles: tuple[Reference, ...]
    choices: tuple[ItemChoice, ...]
    expected_return: float  # mean E[G] of the optimum's choices (its value without the draws' luck)
    single_correct: Mapping[str, tuple[bool, ...]]  # per agent, its grade on each item (paired tests)

    @property
    def best_single(self) -> Reference:
        return max(self.singles, key=lambda r: r.ret)

    def shares(self, names: Sequence[str]) -> dict[str, float]:
        """Share of items the optimum sends to each agent."""
        counts = np.bincount([c.agent for c in self.choices], minlength=len(names))
        return {n: float(c) / max(len(self.choices), 1) for n, c in zip(names, counts, strict=True)}


def sim_backend(env: ConductorEnv) -> SimBackend:
    """A simulator with the env's pool options and answer key (the same draws as the env's)."""
    if "sim" not in env.pool.backends():
        raise ValueError(f"the optimum needs a simulated pool; {env.pool.name!r} uses {env.pool.backends()}")
    return SimBackend(**backend_options(env.pool, env.tasks)["sim"])


def visible_optimum(env: ConductorEnv, available: Sequence[int] | None = None, seed: int = 10_000) -> Optimum:
    """Per item, the available agent with the best expected return given the visible score.

    ``available``: agent ids on offer (default: every agent). Each item is run once per agent with
    the same seed as :func:`puppeteer.analytics.references.run_plan` uses.
    """
    agents = list(range(len(env.pool))) if available is None else sorted(set(available))
    if not agents:
        raise ValueError("the optimum needs at least one available agent")
    sim = sim_backend(env)
    stop = env.pool.terminator_id
    n = len(env.tasks)
    ends = {
        a: [run_actions(env, [a, stop], seed=seed + i, options={"task_index": i}) for i in range(n)]
        for a in agents
    }
    choices, picked, hindsight = [], [], []
    expected = []
    for i, task in enumerate(env.tasks):
        rows = []
        for a in agents:
            end = ends[a][i]
            g = env.config.gamma ** (len(end.rewards) - 1)
            p = sim.accuracy_given_visible(env.pool.agent(a), task.id)
            rows.append((end.info["returns"][0] + g * (p - float(end.correct)), a))
        best_e, best_a = max(rows, key=lambda r: (r[0], -r[1]))
        choices.append(ItemChoice(task.id, task.domain, sim.visible_score(task.id), best_a, best_e))
        expected.append(best_e)
        picked.append(ends[best_a][i])
        hindsight.append(max((ends[a][i] for a in agents), key=lambda e: e.info["returns"][0]))

    def ref(name: str, eps: Sequence[object]) -> Reference:
        m = summarize(eps)  # type: ignore[arg-type]
        return Reference(name, m["accuracy"], m["return"], m["cost"], m["calls"])

    singles = tuple(ref(env.pool.agent(a).name, ends[a]) for a in agents)
    return Optimum(
        optimum=ref("optimum (visible)", picked),
        hindsight=ref("hindsight oracle", hindsight),
        singles=singles,
        choices=tuple(choices),
        expected_return=float(np.mean(expected)),
        single_correct={env.pool.agent(a).name: tuple(e.correct for e in ends[a]) for a in agents},
    )


__all__ = ["ItemChoice", "Optimum", "sim_backend", "visible_optimum"]
