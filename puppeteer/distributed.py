"""Rollouts on a Ray cluster (the ``ray`` extra): evaluation shards and the trainer's envs.

* :func:`evaluate_policy_ray` splits a suite's items into contiguous shards; each Ray task
  runs :func:`puppeteer.evaluation.evaluate_policy` on its shard with its own env and
  backends. Every item's reset seed depends only on ``(seed, task id)``, so the gathered
  ``results.json`` and ``trajectories.jsonl`` equal the single-process run's (up to the
  wall-clock fields).
* :class:`RayEnvGroup` puts the trainer's lockstep envs on Ray actors; the policy, encoder
  and random generator stay in the driver (see :mod:`puppeteer.envgroup`), so training
  with ``rollout_workers=N`` gives the same checkpoints as without.

``address=None`` (or ``"local"``) starts a local Ray instance with ``num_cpus`` CPUs;
``"auto"`` joins the cluster this machine belongs to; ``"ray://HEAD:10001"`` connects a
client to a remote cluster. Every node needs this package installed (or pass a
``runtime_env``, see docs/scaling.md).
"""

from __future__ import annotations

import itertools
import json
import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from puppeteer.envgroup import ResetCall, StepCall, StepResult, step_or_abort
from puppeteer.evaluation import (
    EvalResult,
    _Record,
    _summary,
    _write_results,
    check_out_dir,
    evaluate_policy,
)
from puppeteer.pool import Pool, load_pool
from puppeteer.tasks import load_suite
from puppeteer.trajectories import trajectory_from_dict
from puppeteer.types import Task

log = logging.getLogger(__name__)

LOCAL = "local"
WALL_FIELDS = ("wall_s",)  # the only fields in which a Ray run may differ from a single-process one


def init_ray(
    address: str | None = None, num_cpus: int | None = 2, runtime_env: dict[str, Any] | None = None
) -> Any:
    """Connect to Ray once per process (a local instance for ``None``/``"local"``); returns the module."""
    try:
        import ray
    except ImportError as e:
        raise ImportError("Ray rollouts need the ray extra: pip install 'puppeteer-orchestra[ray]'") from e
    if not ray.is_initialized():
        if address in (None, LOCAL):
            ray.init(
                num_cpus=num_cpus,
                include_dashboard=False,
                runtime_env=runtime_env,
                log_to_driver=False,
                configure_logging=False,
            )
        else:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, configure_logging=False)
    return ray


# --------------------------------------------------------------------------- evaluation


def _eval_shard(
    spec: str,
    pool: Pool,
    suite: str,
    split: str,
    tasks: Sequence[Task],
    seed: int,
    cache: str | None,
    max_steps: int,
    lam: float,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One shard, run by a Ray worker: the evaluation's own loop on a few items."""
    with tempfile.TemporaryDirectory(prefix="puppeteer-shard-") as tmp:
        result = evaluate_policy(
            spec,
            pool,
            suite,
            split=split,
            seed=seed,
            out_dir=tmp,
            cache=cache,
            max_steps=max_steps,
            lam=lam,
            progress=False,
            tasks=tasks,
        )
        lines = [json.loads(line) for line in (Path(tmp) / "trajectories.jsonl").read_text().splitlines()]
    return result.to_dict(), lines


def _record(line: dict[str, Any]) -> _Record:
    if line.get("error") is not None:
        return _Record(False, line["error"], None)
    traj = trajectory_from_dict(line)
    return _Record(traj.correct, None, traj)


def evaluate_policy_ray(
    spec: str,
    pool: str | Path | Pool,
    suite: str,
    split: str = "test",
    n: int | None = None,
    seed: int = 0,
    out_dir: str | Path | None = None,
    cache: str | Path | None = None,
    max_steps: int = 5,
    lam: float = 0.1,
    *,
    address: str | None = None,
    workers: int | None = None,
    num_cpus: int | None = 2,
    tasks: Sequence[Task] | None = None,
    runtime_env: dict[str, Any] | None = None,
    worker_cpus: float = 1.0,
    overwrite: bool = False,
) -> EvalResult:
    """:func:`~puppeteer.evaluation.evaluate_policy` with the items spread over Ray workers.

    ``workers`` shards (default: the cluster's CPU count). The policy is a spec so each worker
    builds its own; ``cache`` is a path on each node (nodes do not share a SQLite file).
    ``worker_cpus`` is each shard's CPU request (below 1 for API-bound work that mostly waits).
    """
    pool = pool if isinstance(pool, Pool) else load_pool(pool)
    items = tuple(tasks)[:n] if tasks is not None else load_suite(suite, split, n=n, seed=seed)
    if not items:
        raise ValueError(f"no items to evaluate in {suite}/{split}")
    if out_dir is not None:
        check_out_dir(Path(out_dir), overwrite)  # before any work: never replace a finished result
    ray = init_ray(address, num_cpus, runtime_env)
    k = max(1, min(len(items), workers or int(ray.cluster_resources().get("CPU", 1))))
    bounds = np.linspace(0, len(items), k + 1).astype(int)
    shards = [items[lo:hi] for lo, hi in itertools.pairwise(bounds)]
    remote = ray.remote(num_cpus=worker_cpus, max_retries=0)(_eval_shard)
    cache_arg = str(cache) if cache is not None else None
    start = time.perf_counter()
    futures = [
        remote.remote(spec, pool, suite, split, shard, seed, cache_arg, max_steps, lam) for shard in shards
    ]
    parts = ray.get(futures)
    wall = time.perf_counter() - start

    lines: list[dict[str, Any]] = []
    for (_, shard_lines), offset in zip(parts, bounds[:-1], strict=True):
        for line in shard_lines:
            lines.append({**line, "index": int(line["index"]) + int(offset)})
    first = parts[0][0]
    hits = [p[0]["cache_hits"] for p in parts if p[0]["cache_hits"] is not None]
    misses = [p[0]["cache_misses"] for p in parts if p[0]["cache_misses"] is not None]
    out = Path(out_dir) if out_dir is not None else None
    fields: dict[str, Any] = dict(
        policy=spec,
        policy_name=first["policy_name"],
        pool=pool.name,
        suite=suite,
        split=split,
        seed=seed,
        mode=first["mode"],
        backends=tuple(first["backends"]),
        lam=lam,
        max_steps=max(int(p[0]["max_steps"]) for p in parts),  # workflow plans may raise the limit
        cache_path=cache_arg,
        out_dir=str(out) if out is not None else None,
        cache_hits=sum(hits) if hits else None,
        cache_misses=sum(misses) if misses else None,
    )
    result = _summary(
        [_record(line) for line in lines],
        len(items),
        speeds=pool,
        wall_s=wall,
        completed=len(lines) == len(items),
        **fields,
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with (out / "trajectories.jsonl").open("w") as sink:
            for line in lines:
                sink.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
        _write_results(out, result)
    return result


# --------------------------------------------------------------------------- training envs


class _EnvWorker:
    """A Ray actor holding some of the trainer's envs (and their backends)."""

    def __init__(self, parts: dict[str, Any], slots: Sequence[int]) -> None:
        from puppeteer.envbuild import build_env

        first = build_env(**parts)
        self.envs = {slot: first if i == 0 else first.clone() for i, slot in enumerate(slots)}

    def reset_many(self, calls: Sequence[ResetCall]) -> list[tuple[Any, dict[str, Any]]]:
        return [self.envs[k].reset(seed=seed, options=options) for k, seed, options in calls]

    def step_many(self, calls: Sequence[StepCall]) -> list[StepResult]:
        return [step_or_abort(self.envs[k], action) for k, action in calls]

    def close(self) -> None:
        for env in self.envs.values():
            env.close()


class RayEnvGroup:
    """``n_envs`` copies of ``env`` spread round-robin over ``workers`` Ray actors.

    Each actor builds its envs from ``env``'s settings with its own backends (a backend
    object passed to ``env`` cannot travel; the pool's backend options and cache path do).
    """

    def __init__(
        self,
        env: Any,
        n_envs: int,
        workers: int,
        *,
        address: str | None = None,
        num_cpus: int | None = 2,
        runtime_env: dict[str, Any] | None = None,
        worker_cpus: float = 1.0,
    ) -> None:
        if env.config.mode != "step":
            raise ValueError("RayEnvGroup runs step-mode envs (the trainer's)")
        spec = env.backend_spec
        if spec is None:
            raise ValueError("envs on Ray workers build their own backends: create the env without backend=")
        ray = init_ray(address, num_cpus, runtime_env)
        self.n_envs, self.gamma = n_envs, float(env.config.gamma)
        workers = max(1, min(workers, n_envs))
        parts = {
            "config": env.config,
            "pool": env.pool,
            "tasks": env.tasks,
            "cache": spec.cache,
            "backend_options": {k: dict(v) for k, v in spec.options.items()},
        }
        actor = ray.remote(num_cpus=worker_cpus)(_EnvWorker)
        self._slots = [list(range(w, n_envs, workers)) for w in range(workers)]
        self._owner = {slot: w for w, slots in enumerate(self._slots) for slot in slots}
        self._actors = [actor.remote(parts, slots) for slots in self._slots]
        self._ray = ray

    def __len__(self) -> int:
        return self.n_envs

    def _scatter(self, method: str, calls: Sequence[tuple[Any, ...]]) -> list[Any]:
        per_worker: dict[int, list[int]] = {}
        for i, call in enumerate(calls):
            per_worker.setdefault(self._owner[call[0]], []).append(i)
        futures = {
            w: getattr(self._actors[w], method).remote([calls[i] for i in idx])
            for w, idx in per_worker.items()
        }
        out: list[Any] = [None] * len(calls)
        for w, results in zip(futures, self._ray.get(list(futures.values())), strict=True):
            for i, result in zip(per_worker[w], results, strict=True):
                out[i] = result
        return out

    def reset_many(self, calls: Sequence[ResetCall]) -> list[tuple[Any, dict[str, Any]]]:
        return self._scatter("reset_many", calls)

    def step_many(self, calls: Sequence[StepCall]) -> list[StepResult]:
        return self._scatter("step_many", calls)

    def close(self) -> None:
        for actor in self._actors:
            try:
                self._ray.get(actor.close.remote())
            finally:
                self._ray.kill(actor)
        self._actors = []


__all__ = ["WALL_FIELDS", "RayEnvGroup", "evaluate_policy_ray", "init_ray"]
