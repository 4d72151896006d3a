"""Discounted returns are computed once (puppeteer.envs.reward, by the env); trainer and references read
them."""

from __future__ import annotations

import pytest
import torch

from puppeteer.analytics.references import run_plan
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.reward import discounted_returns
from puppeteer.envs.rollout import run_lockstep
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig


def _env() -> ConductorEnv:
    return ConductorEnv(
        mode="step",
        pool="sim-paper",
        suite="arith",
        split="train",
        max_steps=3,
        lam=0.3,
        gamma=0.9,
        n_tasks=12,
    )


def test_trainer_episode_returns_are_the_discounted_rewards() -> None:
    env = _env()
    policy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=3))
    eps = run_lockstep(
        [env, env.clone()],
        policy,
        [(s, s % 12) for s in range(12)],
        generator=torch.Generator().manual_seed(0),
    )
    assert any(len(e.rewards) > 1 for e in eps)  # some episodes have intermediate costs to discount
    for e in eps:
        assert e.returns == pytest.approx(discounted_returns(e.rewards, 0.9), abs=1e-12)


def test_reference_plan_return_is_the_discounted_sum_of_rewards() -> None:
    env = _env()
    ref = run_plan(env, lambda _task: [0, 1], "two agents")
    by_hand = []
    for i in range(len(env.tasks)):
        env.reset(seed=10_000 + i, options={"task_index": i})
        rewards = [env.step(a)[1] for a in (0, 1, env.pool.terminator_id)]
        by_hand.append(sum(r * 0.9**t for t, r in enumerate(rewards)))
    assert ref.ret == pytest.approx(sum(by_hand) / len(by_hand), abs=1e-9)
    assert ref.calls == 2.0
