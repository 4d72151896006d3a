"""Rollouts on a Ray cluster (the ``ray`` extra): evaluation shards and the trainer's envs.

* Evaluation on Ray is an executor choice of the one evaluation
  (:class:`puppeteer.evaluation.settings.RayExecutor`): contiguous shards, each run by a Ray task with its
  own env and backends. Every item's reset seed depends only on ``(seed, task id)``, so the
  gathered ``results.json`` and ``trajectories.jsonl`` equal the single-process run's (up to the
  wall-clock fields, :data:`WALL_FIELDS`).
* :class:`RayEnvGroup` puts the trainer's lockstep envs on Ray actors; the policy, encoder
  and random generator stay in the driver (see :mod:`puppeteer.envs.group`), so training
  with ``rollout_workers=N`` gives the same checkpoints as without.

``address=None`` (or ``"local"``) starts a local Ray instance with ``num_cpus`` CPUs;
``"auto"`` joins the cluster this machine belongs to; ``"ray://HEAD:10001"`` connects a
client to a remote cluster. Every node needs this package installed (or pass a
``runtime_env``, see docs/scaling.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from puppeteer.envs.group import ResetCall, StepCall, StepResult, step_or_abort

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


# --------------------------------------------------------------------------- training envs


class _EnvWorker:
    """A Ray actor holding some of the trainer's envs (and their backends)."""

    def __init__(self, parts: dict[str, Any], slots: Sequence[int]) -> None:
        from puppeteer.envs.build import build_env

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


__all__ = ["WALL_FIELDS", "RayEnvGroup", "init_ray"]
