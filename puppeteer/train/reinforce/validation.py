"""Greedy evaluation of a step-mode policy during training (the ``best/`` choice), at one lambda or
over several."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import run_lockstep, summarize
from puppeteer.policies.puppeteer import PuppeteerPolicy


def top_share(actions: Sequence[int]) -> float:
    """The share of the most common action (1.0: every episode made the same choice)."""
    return float(np.bincount(actions).max() / len(actions)) if len(actions) else 0.0


def evaluate(
    env: ConductorEnv | Sequence[ConductorEnv],
    policy: PuppeteerPolicy,
    n: int | None = None,
    seed: int = 10_000,
    lam: float | None = None,
) -> dict[str, float]:
    """Greedy policy, each task once (the first ``n``); several envs run in lockstep. ``lam``: price
    every episode at this lambda (reset ``options["lam"]``) instead of the env's own."""
    envs = [env] if isinstance(env, ConductorEnv) else list(env)
    count = len(envs[0].tasks) if n is None else min(n, len(envs[0].tasks))
    specs = [(seed + i, i) for i in range(count)]
    eps = run_lockstep(envs, policy, specs, greedy=True, lams=None if lam is None else [lam] * count)
    return {**summarize(eps), "top_first_share": top_share([e.actions[0] for e in eps if e.actions])}


def evaluate_over(
    env: ConductorEnv | Sequence[ConductorEnv],
    policy: PuppeteerPolicy,
    lams: Sequence[float],
    n: int | None = None,
    seed: int = 10_000,
) -> dict[str, float]:
    """:func:`evaluate` at each of ``lams`` (the same items and seeds): the means over the lambdas, and
    each lambda's return as ``return@LAM``."""
    runs = [evaluate(env, policy, n, seed, lam=x) for x in lams]
    out = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
    out.update({f"return@{x:.4g}": r["return"] for x, r in zip(lams, runs, strict=True)})
    return out


VALIDATION_LAMS = 3  # a lambda-conditioned run's model selection: the mean over this many lambdas
