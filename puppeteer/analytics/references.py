"""Reference policies with known value on a step-mode env: fixed sequences and the oracle router."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import run_actions, summarize
from puppeteer.types import Task


@dataclass(frozen=True)
class Reference:
    name: str
    accuracy: float
    ret: float
    cost: float
    calls: float


def run_plan(
    env: ConductorEnv, plan: Callable[[Task], Sequence[int]], name: str, seed: int = 10_000
) -> Reference:
    """Every task of ``env`` once: activate ``plan(task)`` in order, then the Terminator."""
    ends = [
        run_actions(
            env, lambda task: [*plan(task), env.pool.terminator_id], seed=seed + i, options={"task_index": i}
        )
        for i in range(len(env.tasks))
    ]
    m = summarize(ends)  # returns are the env's discounted returns (puppeteer.envs.reward)
    return Reference(name, m["accuracy"], m["return"], m["cost"], m["calls"])


def oracle_router(env: ConductorEnv) -> Reference:
    """Best single agent per task domain from the simulator's skill table, then the Terminator."""
    from puppeteer.policies.baselines import OracleRouter

    router = OracleRouter.from_pool(env.pool)
    rng = np.random.default_rng(0)  # the oracle's plan is deterministic; the generator is unused
    return run_plan(env, lambda task: router.plan(task, env.pool, rng).model_id, "oracle router")


def best_fixed_sequence(env: ConductorEnv, max_len: int = 2) -> tuple[Reference, list[Reference]]:
    """Brute force over every sequence of 1..max_len agents followed by the Terminator."""
    n = len(env.pool)
    refs = []
    for length in range(1, max_len + 1):
        for seq in itertools.product(range(n), repeat=length):
            names = " -> ".join(env.pool.agent(a).name for a in seq)
            refs.append(run_plan(env, lambda _t, s=seq: list(s), names))
    return max(refs, key=lambda r: r.ret), refs
