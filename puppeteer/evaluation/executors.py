"""Where an evaluation's items run: threads in this process, or shards on Ray workers.

:func:`item_workers` gives each concurrent item its own env clone and policy fork, for
:func:`puppeteer.envs.parallel.map_as_completed` to run in threads. :func:`evaluate_on_ray` splits the
items into contiguous shards, runs each on a Ray worker (the ``ray`` extra; settings in
:class:`~puppeteer.evaluation.settings.RayExecutor`) and gathers the shards' lines and results into one
:class:`~puppeteer.evaluation.results.EvalResult`. Every item's reset seed depends only on ``(seed, task
id)``, so either way the results equal the one-item-at-a-time run's.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from puppeteer.agents.pool import Pool
from puppeteer.envs.env import ConductorEnv
from puppeteer.evaluation.results import EvalResult, _conductor_fields, _line_record, _summary, _write_results
from puppeteer.evaluation.settings import EvalSettings, RayExecutor
from puppeteer.policies.protocol import Policy
from puppeteer.types import Task

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- threads in this process


def item_workers(
    env: ConductorEnv, policy: Policy, concurrency: int, n: int
) -> list[tuple[ConductorEnv, Policy]]:
    """``(env, policy)`` per concurrent item: env clones and policy forks (their per-episode state)."""
    workers: list[tuple[ConductorEnv, Policy]] = [(env, policy)]
    for _ in range(min(concurrency, n) - 1):
        try:
            twin = policy.fork()
        except Exception as e:  # a policy that cannot be copied runs its items one at a time
            log.warning("policy %s cannot be copied (%s); items run one at a time", policy.name, e)
            return workers[:1]
        workers.append((env.clone(), twin))
    return workers


# --------------------------------------------------------------------------- shards on Ray workers


def evaluate_on_ray(
    spec: str,
    items: Sequence[Task],
    settings: EvalSettings,
    ray_exec: RayExecutor,
    shard: Callable[[str, EvalSettings], tuple[dict[str, Any], list[dict[str, Any]]]],
) -> EvalResult:
    """Run ``items`` in contiguous shards on Ray, ``shard(spec, settings)`` per shard (the evaluation's
    own loop, :func:`puppeteer.evaluation.evaluate._eval_shard`: a results dict and its trajectory lines),
    and gather them into one result, written to ``settings.out_dir`` like a single-process run's."""
    from puppeteer.envs.distributed import init_ray

    pool = settings.pool
    assert isinstance(pool, Pool)
    runtime_env = dict(ray_exec.runtime_env) if ray_exec.runtime_env is not None else None
    ray = init_ray(ray_exec.address, ray_exec.num_cpus, runtime_env)
    k = max(1, min(len(items), ray_exec.workers or int(ray.cluster_resources().get("CPU", 1))))
    bounds = np.linspace(0, len(items), k + 1).astype(int)
    remote = ray.remote(num_cpus=ray_exec.worker_cpus, max_retries=0)(shard)
    cache = str(settings.cache) if settings.cache is not None else None
    base = replace(settings, cache=cache, n=None, out_dir=None)
    start = time.perf_counter()
    futures = [
        remote.remote(spec, replace(base, tasks=tuple(items[lo:hi]))) for lo, hi in itertools.pairwise(bounds)
    ]
    parts = ray.get(futures)
    wall = time.perf_counter() - start

    lines: list[dict[str, Any]] = []
    for (_, shard_lines), offset in zip(parts, bounds[:-1], strict=True):
        lines += [{**line, "index": int(line["index"]) + int(offset)} for line in shard_lines]
    first = parts[0][0]
    hits = [p[0]["cache_hits"] for p in parts if p[0]["cache_hits"] is not None]
    misses = [p[0]["cache_misses"] for p in parts if p[0]["cache_misses"] is not None]
    out = Path(settings.out_dir) if settings.out_dir is not None else None
    keep = ("policy_name", "mode", "lam", "max_depth", "recursion", "final_answer", "train_items")
    fields: dict[str, Any] = dict(
        {key: first[key] for key in keep},
        policy=spec,
        pool=pool.name,
        suite=settings.suite,
        split=settings.split,
        seed=settings.seed,
        backends=tuple(first["backends"]),
        available=tuple(first["available"]) if first["available"] else None,
        max_steps=max(int(p[0]["max_steps"]) for p in parts),  # workflow plans may raise the limit
        cache_path=cache,
        out_dir=str(out) if out is not None else None,
        cache_hits=sum(hits) if hits else None,
        cache_misses=sum(misses) if misses else None,
    )
    records = [_line_record(line) for line in lines]
    fields.update(_conductor_fields(records, int(fields["max_depth"])))
    result = _summary(
        records, len(items), speeds=pool, wall_s=wall, completed=len(lines) == len(items), **fields
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with (out / "trajectories.jsonl").open("w") as sink:
            for line in lines:
                sink.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
        _write_results(out, result)
    return result
