"""Environment benchmarks (simulator backend), measured side by side in one process.

1. Step-mode env steps per second on the sim-paper pool (random valid actions).
2. Concurrency: a workflow of 4 independent steps against 4 dependent steps on a
   backend with a fixed per-call latency; the ratio shows that independent steps run
   concurrently.

    python benchmarks/bench_env.py [--latency 0.25] [--episodes 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import MappingProxyType
from typing import Any

import numpy as np

from puppeteer.env import ConductorEnv
from puppeteer.pool import Pool, load_pool
from puppeteer.rollout import run_episode, run_workflow_episode
from puppeteer.types import Agent, ModelSpec, Workflow


def steps_per_second(episodes: int) -> tuple[float, float]:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", max_steps=5)
    rng = np.random.default_rng(0)
    steps = 0

    def act(_obs: dict[str, Any], _info: dict[str, Any]) -> int:
        nonlocal steps
        action = int(rng.integers(env.pool.n_actions)) if steps % 3 else 0
        steps += 1
        return action

    start = time.perf_counter()
    for ep in range(episodes):
        run_episode(env, act, seed=ep)
    wall = time.perf_counter() - start
    return steps / wall, episodes / wall


def fixed_latency_pool(latency: float) -> Pool:
    base = load_pool("sim-paper")
    agents = []
    for a in base.agents[:4]:
        options = dict(a.model.options)
        options.update(first_token_s=latency, tokens_per_s=1e12)  # latency = first_token_s exactly
        model = ModelSpec(
            a.model.name,
            a.model.backend,
            a.model.target,
            a.model.params_b,
            a.model.price_in,
            a.model.price_out,
            MappingProxyType(options),
        )
        agents.append(Agent(a.name, model, a.pattern, a.tools, a.description, a.max_tokens))
    opts = {"sim": MappingProxyType({**base.backend_options["sim"], "realtime": True})}
    return Pool("fixed-latency", tuple(agents), backend_options=MappingProxyType(opts))


def concurrency(latency: float, reps: int) -> tuple[float, float]:
    env = ConductorEnv(mode="workflow", pool=fixed_latency_pool(latency), suite="arith")
    independent = Workflow((0, 1, 2, 3), ("Solve.",) * 4, ((),) * 4)
    dependent = Workflow((0, 1, 2, 3), ("Solve.",) * 4, ((), (0,), (1,), (2,)))
    times: dict[str, list[float]] = {"independent": [], "dependent": []}
    for r in range(reps):  # interleaved A/B so drift hits both alike (each time includes a sim reset)
        for name, wf in (("independent", independent), ("dependent", dependent)):
            start = time.perf_counter()
            run_workflow_episode(env, wf, seed=r)
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["independent"]), statistics.median(times["dependent"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=2000)
    p.add_argument("--latency", type=float, default=0.25)
    p.add_argument("--reps", type=int, default=7)
    a = p.parse_args()
    sps, eps = steps_per_second(a.episodes)
    ind, dep = concurrency(a.latency, a.reps)
    print("backend: sim (pool sim-paper)")
    print(f"step mode: {sps:,.0f} env steps/s, {eps:,.0f} episodes/s over {a.episodes} episodes")
    print(
        f"workflow of 4 steps, {a.latency:.2f} s per call: independent {ind:.3f} s, dependent {dep:.3f} s, "
        f"ratio dependent/independent {dep / ind:.2f}x (ideal 4.00x)"
    )


if __name__ == "__main__":
    main()
