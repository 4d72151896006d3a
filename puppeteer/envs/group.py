"""A group of step-mode environments stepped together: in this process, or spread over Ray workers.

The trainer's lockstep loop (:func:`puppeteer.envs.rollout.run_lockstep`) keeps the policy,
the encoder and the random generator in the driver and hands the group one batch of actions
at a time. :class:`LocalEnvGroup` steps the envs here, one after another;
:class:`puppeteer.envs.distributed.RayEnvGroup` sends each env's action to the Ray worker that
holds that env (with its own backends) and steps the workers in parallel. Either way the
driver sees the same observations in the same order, so the results are identical.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from gymnasium.error import InvalidAction, ResetNeeded

from puppeteer.errors import RunStopped

log = logging.getLogger(__name__)

ResetCall = tuple[int, int | None, dict[str, Any] | None]  # (env slot, seed, options)
StepCall = tuple[int, Any]  # (env slot, action)
StepResult = tuple[Any, float, bool, bool, dict[str, Any]]


def step_or_abort(env: Any, action: Any) -> StepResult:
    """``env.step``; a call that raises (backend down, timeout...) ends the episode as wrong."""
    try:
        return env.step(action)
    except (InvalidAction, ResetNeeded, RunStopped):
        raise  # a bug in the caller, or the end of the whole run: not a failed call
    except Exception as exc:
        log.warning("a call failed, episode graded as wrong: %s: %s", type(exc).__name__, exc)
        return env.abort(f"{type(exc).__name__}: {exc}")


@runtime_checkable
class EnvGroup(Protocol):
    gamma: float

    def __len__(self) -> int: ...

    def reset_many(self, calls: Sequence[ResetCall]) -> list[tuple[Any, dict[str, Any]]]: ...

    def step_many(self, calls: Sequence[StepCall]) -> list[StepResult]: ...


class LocalEnvGroup:
    """Envs in this process (the single-process path)."""

    def __init__(self, envs: Sequence[Any]) -> None:
        if not envs:
            raise ValueError("an env group needs at least one env")
        self.envs = list(envs)
        self.gamma = float(self.envs[0].config.gamma)

    def __len__(self) -> int:
        return len(self.envs)

    def reset_many(self, calls: Sequence[ResetCall]) -> list[tuple[Any, dict[str, Any]]]:
        return [self.envs[k].reset(seed=seed, options=options) for k, seed, options in calls]

    def step_many(self, calls: Sequence[StepCall]) -> list[StepResult]:
        """Each env's step; in threads when the pool calls models, so that their calls batch."""
        from puppeteer.envs.parallel import default_concurrency

        if len(calls) < 2 or default_concurrency(self.envs[0].pool.backends()) < 2:
            return [step_or_abort(self.envs[k], action) for k, action in calls]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="rollout") as pool:
            return list(pool.map(lambda call: step_or_abort(self.envs[call[0]], call[1]), calls))


def as_env_group(envs: Sequence[Any] | EnvGroup) -> EnvGroup:
    return envs if isinstance(envs, EnvGroup) else LocalEnvGroup(envs)  # type: ignore[arg-type]


__all__ = [
    "EnvGroup",
    "LocalEnvGroup",
    "ResetCall",
    "StepCall",
    "StepResult",
    "as_env_group",
    "step_or_abort",
]
