"""Environment benchmarks (simulator backend), measured side by side in one process.

1. Step-mode env steps per second on the sim-paper pool (random valid actions), the two ways the
   env reads a simulated worker's answer, alternated round by round in one process: the fast path
   (the default: the simulator vouches for its final answer line, ``Completion.answer_text``, and the
   env extracts from it, memoised per item) and the text path (``backend_options={"sim":
   {"answer_text": False}}``: every answer extracted from the whole text). Both must give the same
   episodes; the script checks that they did.
2. Concurrency: a workflow of 4 independent steps against 4 dependent steps on a backend with a
   fixed per-call latency; the ratio shows that independent steps run concurrently.

    python benchmarks/bench_env.py [--episodes 2000] [--rounds 5] [--latency 0.25]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import numpy as np

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import run_episode, run_workflow_episode
from puppeteer.types import Agent, ModelSpec, Workflow

PATHS: dict[str, dict[str, Any]] = {"fast": {}, "text": {"sim": {"answer_text": False}}}


def stepper(
    backend_options: dict[str, Any], pool: str, suite: str, n_tasks: int | None
) -> Callable[[int], tuple[int, float, float, list[tuple[Any, ...]]]]:
    """A step-mode env and a random policy; ``run(n)`` plays its next ``n`` episodes and returns
    (steps, wall s, CPU s, each episode's task, final answer, reward, return, cost and tokens)."""
    env = ConductorEnv(
        mode="step", pool=pool, suite=suite, max_steps=5, n_tasks=n_tasks, backend_options=backend_options
    )
    # the random actions are drawn up front, so the policy's cost (a numpy draw per step would be a
    # twentieth of a step) stays out of what is measured
    actions = np.random.default_rng(0).integers(env.pool.n_actions, size=1 << 20).tolist()
    state = {"steps": 0, "episode": 0}

    def act(_obs: dict[str, Any], _info: dict[str, Any]) -> int:
        steps = state["steps"]
        state["steps"] = steps + 1
        return actions[steps & 0xFFFFF] if steps % 3 else 0

    def run(n: int) -> tuple[int, float, float, list[tuple[Any, ...]]]:
        first, results = state["steps"], []
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            end = run_episode(env, act, seed=state["episode"])
            state["episode"] += 1
            t = end.trajectory
            results.append((t.task_id, t.final_answer, t.reward, end.ret, end.cost, end.tokens))
        return state["steps"] - first, time.perf_counter() - wall, time.process_time() - cpu, results

    return run


def steps_per_second(
    episodes: int, rounds: int, pool: str = "sim-paper", suite: str = "arith", n_tasks: int | None = None
) -> dict[str, Any]:
    """Both paths, alternated: ``rounds`` rounds of ``episodes / rounds`` episodes each (each path's
    env sees the same episodes); medians of steps/s per path and of the per-round ratio."""
    runs = {name: stepper(dict(opts), pool, suite, n_tasks) for name, opts in PATHS.items()}
    for run in runs.values():  # warm-up: imports, first items
        run(20)
    per_round = max(1, episodes // rounds)
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    same = True
    for r in range(rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))  # neither path always goes first
        results = {}
        for name in order:
            steps, w, c, results[name] = runs[name](per_round)
            wall[name].append(steps / w)
            cpu[name].append(steps / c if c > 0 else float("nan"))
        same = same and results["fast"] == results["text"]
    return {
        "wall": {k: statistics.median(v) for k, v in wall.items()},
        "cpu": {k: statistics.median(v) for k, v in cpu.items()},
        "ratio_wall": statistics.median(f / t for f, t in zip(wall["fast"], wall["text"], strict=True)),
        "ratio_cpu": statistics.median(f / t for f, t in zip(cpu["fast"], cpu["text"], strict=True)),
        "identical": same,
        "episodes": per_round * rounds,
    }


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


def machine() -> str:
    """The CPU, its cores, the load at the start and Python's version (what the figures depend on)."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return f"{model}, {os.cpu_count()} cores{load}, Python {platform.python_version()}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=2000, help="episodes per path")
    p.add_argument("--rounds", type=int, default=5, help="alternations of the two paths")
    p.add_argument("--pool", default="sim-paper")
    p.add_argument("--suite", default="arith")
    p.add_argument("--n-tasks", type=int, default=None, help="the first N items of the suite (default all)")
    p.add_argument("--latency", type=float, default=0.25)
    p.add_argument("--reps", type=int, default=7)
    a = p.parse_args()
    r = steps_per_second(a.episodes, a.rounds, a.pool, a.suite, a.n_tasks)
    ind, dep = concurrency(a.latency, a.reps)
    print(f"machine: {machine()}")
    print(f"backend: sim (pool {a.pool}, suite {a.suite}, step mode, random valid actions)")
    for name in PATHS:
        print(
            f"{name} path: {r['wall'][name]:,.0f} env steps/s wall, {r['cpu'][name]:,.0f} per CPU second "
            f"(medians of {a.rounds} rounds, {r['episodes']} episodes)"
        )
    print(
        f"fast / text: {r['ratio_wall']:.2f}x wall, {r['ratio_cpu']:.2f}x CPU (medians of per-round ratios); "
        f"same episodes both ways: {'yes' if r['identical'] else 'NO'}"
    )
    print(
        f"workflow of 4 steps, {a.latency:.2f} s per call: independent {ind:.3f} s, dependent {dep:.3f} s, "
        f"ratio dependent/independent {dep / ind:.2f}x (ideal 4.00x)"
    )


if __name__ == "__main__":
    main()
