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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from puppeteer.analytics.references import Reference
from puppeteer.backends.sim import SimBackend
from puppeteer.envs.build import backend_options
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import run_actions, summarize


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


GIVEN = ("visible", "item")


def _item_rows(
    env: ConductorEnv, agents: Sequence[int], seed: int, given: str
) -> tuple[dict[int, list[Any]], np.ndarray]:
    """Each agent's realised one-call episode on each item (seed ``seed + i``) and its expected return
    ``E[G | i, a]`` (items x agents) given what the question shows (``given="visible"``) or given the
    item's whole latent difficulty (``given="item"``)."""
    if given not in GIVEN:
        raise ValueError(f"given: unknown {given!r}; known: {', '.join(GIVEN)}")
    sim = sim_backend(env)
    accuracy = sim.accuracy_given_visible if given == "visible" else sim.accuracy_given_item
    stop = env.pool.terminator_id
    n = len(env.tasks)
    ends = {
        a: [run_actions(env, [a, stop], seed=seed + i, options={"task_index": i}) for i in range(n)]
        for a in agents
    }
    expected = np.zeros((n, len(agents)))
    for i, task in enumerate(env.tasks):
        for j, a in enumerate(agents):
            end = ends[a][i]
            g = env.config.gamma ** (len(end.rewards) - 1)
            p = accuracy(env.pool.agent(a), task.id)
            expected[i, j] = end.info["returns"][0] + g * (p - float(end.correct))
    return ends, expected


def _agents(env: ConductorEnv, available: Sequence[int] | None) -> list[int]:
    agents = list(range(len(env.pool))) if available is None else sorted(set(available))
    if not agents:
        raise ValueError("the optimum needs at least one available agent")
    return agents


def visible_optimum(env: ConductorEnv, available: Sequence[int] | None = None, seed: int = 10_000) -> Optimum:
    """Per item, the available agent with the best expected return given the visible score.

    ``available``: agent ids on offer (default: every agent). Each item is run once per agent with
    the same seed as :func:`puppeteer.analytics.references.run_plan` uses.
    """
    agents = _agents(env, available)
    sim = sim_backend(env)
    ends, expected = _item_rows(env, agents, seed, "visible")
    choices, picked, hindsight = [], [], []
    for i, task in enumerate(env.tasks):
        # the best expected return; ties go to the lowest agent id
        j = int(np.argmax(expected[i]))
        best_a = agents[j]
        score = sim.visible_score(task.id)
        choices.append(ItemChoice(task.id, task.domain, score, best_a, float(expected[i, j])))
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
        expected_return=float(expected.max(axis=1).mean()),
        single_correct={env.pool.agent(a).name: tuple(e.correct for e in ends[a]) for a in agents},
    )


@dataclass(frozen=True)
class TrainingLimit:
    """What the training items can teach a router that routes by domain, and what it is worth.

    ``picks``: per domain, the agent with the best mean expected return over that domain's training
    items *given each item's whole latent difficulty* (as if every training item had been tried
    endlessly: the most a learner can extract from them). ``expected_return``: those picks' mean
    expected return on the held-out items given what their questions show, beside the held-out
    optimum's (per item, given the visible score) and every single agent's. When ``expected_return``
    is below the best single agent's, the training split is too small for this world's per-domain
    differences: no learner that reads only the domain can beat that agent from it.
    """

    picks: Mapping[str, str]
    expected_return: float
    optimum_expected_return: float
    single_expected_returns: Mapping[str, float]
    train_gaps: Mapping[str, float]  # per domain: the training items' best mean minus the runner-up's
    # E[G | i, a] on the held-out items given what they show (items x agents, the agents in pool order
    # among those on offer): any router's value without the luck of the draws
    held_out_expected: np.ndarray = field(repr=False, compare=False)

    @property
    def best_single(self) -> tuple[str, float]:
        return max(self.single_expected_returns.items(), key=lambda kv: kv[1])


def training_limit(
    train: ConductorEnv, test: ConductorEnv, available: Sequence[int] | None = None, seed: int = 10_000
) -> TrainingLimit:
    """The per-domain routes the training items support, valued on the held-out items (see
    :class:`TrainingLimit`). Both envs must share the pool."""
    if [a.name for a in train.pool.agents] != [a.name for a in test.pool.agents]:
        raise ValueError("training_limit needs the same pool on both envs")
    agents = _agents(train, available)
    names = [train.pool.agent(a).name for a in agents]
    _, learned = _item_rows(train, agents, seed, "item")
    _, held = _item_rows(test, agents, seed, "visible")
    picks: dict[str, int] = {}
    gaps: dict[str, float] = {}
    for domain in sorted({t.domain for t in train.tasks}):
        rows = [i for i, t in enumerate(train.tasks) if t.domain == domain]
        means = learned[rows].mean(axis=0)
        picks[domain] = int(np.argmax(means))
        top = np.sort(means)[::-1]
        gaps[domain] = float(top[0] - top[1]) if len(top) > 1 else 0.0
    fallback = int(np.argmax(learned.mean(axis=0)))  # a held-out domain never seen in training
    chosen = [picks.get(t.domain, fallback) for t in test.tasks]
    return TrainingLimit(
        picks={d: names[j] for d, j in picks.items()},
        expected_return=float(np.mean([held[i, j] for i, j in enumerate(chosen)])),
        optimum_expected_return=float(held.max(axis=1).mean()),
        single_expected_returns=dict(zip(names, (float(x) for x in held.mean(axis=0)), strict=True)),
        train_gaps=gaps,
        held_out_expected=held,
    )


__all__ = [
    "ItemChoice",
    "Optimum",
    "TrainingLimit",
    "sim_backend",
    "training_limit",
    "visible_optimum",
]
