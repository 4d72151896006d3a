"""Environment assembly in one place: :func:`build_env` makes a :class:`~puppeteer.envs.env.ConductorEnv`
from a typed config and its sources; the parts it is made of are importable from here too.

The parts (:class:`EnvConfig`, :class:`BackendSpec`, :class:`EnvParts`, :func:`env_parts`,
:func:`build_backend`, ...) live in :mod:`puppeteer.envs.parts`, below :mod:`puppeteer.envs.env`, which
imports them from there: the env never imports this module, so the two form no cycle. Importing this
module does not import the env (policies take their settings type from here); :func:`build_env`
imports it when called.

    env = build_env(EnvConfig(mode="step", lam=0.2), pool="sim-paper", suite="arith")
    twin = env.clone()  # same config, pool, tasks and backend
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from puppeteer.envs.parts import (
    BackendSpec,
    EnvConfig,
    EnvParts,
    GradeMemo,
    backend_options,
    build_backend,
    env_parts,
    sim_answer_key,
)

if TYPE_CHECKING:
    from puppeteer.envs.env import ConductorEnv


def build_env(
    config: EnvConfig, *, render_mode: str | None = None, seed: int | None = None, **sources: Any
) -> ConductorEnv:
    """A :class:`~puppeteer.envs.env.ConductorEnv` from a typed config; ``sources`` as :func:`env_parts`
    takes them (pool, suite, split, tasks, n_tasks, backend, backend_options, cache)."""
    from puppeteer.envs.env import ConductorEnv

    return ConductorEnv.from_parts(env_parts(config, **sources), render_mode=render_mode, seed=seed)


__all__ = [
    "BackendSpec",
    "EnvConfig",
    "EnvParts",
    "GradeMemo",
    "backend_options",
    "build_backend",
    "build_env",
    "env_parts",
    "sim_answer_key",
]
