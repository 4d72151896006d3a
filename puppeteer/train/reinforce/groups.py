"""What a group of ``first_step=all`` tries: the open first and second actions, a group's k-of-n subset,
the fixed router's first choice (``trainer.init_first``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from puppeteer.agents.availability import draw_subset
from puppeteer.envs.env import ConductorEnv
from puppeteer.policies.puppeteer import PuppeteerPolicy


def first_actions(
    env: ConductorEnv, policy: PuppeteerPolicy, available: np.ndarray | None = None
) -> list[int]:
    """The actions open at an episode's first step (``first_step: all`` tries each): the available
    agents (``available``: the episode's own k-of-n draw, else the env's base availability), and the
    Terminator where neither the env nor the policy forbids stopping at once."""
    return _open_actions(env, policy, 0, available)


def second_actions(env: ConductorEnv, policy: PuppeteerPolicy) -> list[int]:
    """The actions open at an episode's second step (``second_step: all`` tries each after every first
    action): the available agents, and the Terminator unless one step is not yet enough to stop. On a
    pool with ``recorded_only`` an item may not offer some of them after some first actions: those
    pairs are not stepped (``Episode.unoffered``) and the loss leaves them out."""
    return _open_actions(env, policy, 1)


def _open_actions(
    env: ConductorEnv, policy: PuppeteerPolicy, acted: int, available: np.ndarray | None = None
) -> list[int]:
    """The available agents, and the Terminator where ``acted`` calls meet both min_steps."""
    mask = env.pool.availability(env.config.unavailable) if available is None else available
    recorded = env.parts.recorded
    if acted == 0 and recorded is not None:  # recorded_only: what the table holds first on every item
        mask = mask[: len(env.pool)] & recorded.first_agents(env.pool, [t.id for t in env.tasks])
    out = [a for a in range(len(env.pool)) if mask[a]]
    if env.config.min_steps <= acted and policy.config.min_steps <= acted:
        out.append(env.pool.terminator_id)
    return out


@dataclass(frozen=True)
class _SubsetDraw:
    """``first_step=all`` over k-of-n subsets: each group draws its subset in the trainer (the env's
    rule: ``k`` of the available agents, never a held-out subset) and offers it to every episode of
    the group (reset ``options["available"]``), so the group knows which agents to try first."""

    allowed: np.ndarray
    k: int
    held_out: frozenset[frozenset[int]]

    def __call__(self, rng: np.random.Generator) -> np.ndarray:
        return draw_subset(rng, self.allowed, self.k, self.held_out)

    @property
    def example(self) -> np.ndarray:
        """A mask of ``k`` agents: what sizes a group."""
        return np.arange(len(self.allowed)) < self.k


def _group_subsets(env: ConductorEnv) -> _SubsetDraw | None:
    if env.config.k_available is None:
        return None
    allowed = env.pool.availability(env.config.unavailable)[: len(env.pool)].astype(bool)
    held = frozenset(frozenset(s) for s in env.config.holdout_subsets)
    return _SubsetDraw(allowed, int(env.config.k_available), held)


class _RouterFirst:
    """(trainer.init_first) The fixed first scorer's greedy action on a group's first observation: each
    group tries only what the router would call, and every second action after it."""

    def __init__(self, env: ConductorEnv, policy: PuppeteerPolicy) -> None:
        self.env, self.policy = env.clone(), policy

    def __call__(self, seed: int, task_index: int) -> int:
        obs, _ = self.env.reset(seed=seed, options={"task_index": task_index})
        with torch.no_grad():
            return int(torch.argmax(self.policy.logits([self.policy.features(obs)])[0]))
