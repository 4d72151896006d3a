"""The one rollout module: single-env episodes, the lockstep rollout and the metrics summary agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import (
    EpisodeNotEnded,
    action_limit,
    run_actions,
    run_episode,
    run_lockstep,
    run_step_episode,
    run_workflow_episode,
    summarize,
)
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.types import Workflow


class _Chain:
    """A step policy that activates fixed agents in order (resets itself per episode)."""

    def __init__(self, actions: list[int]) -> None:
        self.actions, self.resets, self._left = actions, 0, list(actions)

    def reset(self, task_id: str) -> None:
        self.resets += 1
        self._left = list(self.actions)

    def act(self, obs: dict, rng: np.random.Generator) -> int:
        return self._left.pop(0)


def _env(**kw: object) -> ConductorEnv:
    return ConductorEnv(
        mode="step",
        pool="sim-paper",
        suite="arith",
        split="train",
        max_steps=3,
        lam=0.3,
        gamma=0.9,
        n_tasks=12,
        **kw,
    )  # type: ignore[arg-type]


def test_lockstep_episodes_replay_exactly_through_run_actions() -> None:
    env = _env()
    policy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=3))
    specs = [(100 + s, s % 12) for s in range(10)]
    gen = torch.Generator().manual_seed(1)
    eps = run_lockstep([env, env.clone(), env.clone()], policy, specs, generator=gen)
    replay = _env()
    ends = [
        run_actions(replay, e.actions, seed=seed, options={"task_index": ti})
        for e, (seed, ti) in zip(eps, specs, strict=True)
    ]
    for e, end in zip(eps, ends, strict=True):
        assert list(end.rewards) == e.rewards
        assert end.ret == e.returns[0] == end.info["returns"][0]
        assert end.cost == pytest.approx(e.cost, abs=1e-12)
        assert (end.correct, end.calls, end.tokens, end.usd) == (e.correct, e.calls, e.tokens, e.usd)
    assert summarize(ends) == pytest.approx(summarize(eps), abs=1e-12)
    assert summarize(eps)["calls"] == pytest.approx(np.mean([len(e.trajectory["steps"]) for e in eps]))


def test_run_actions_takes_a_plan_of_the_task_and_stops_at_the_end() -> None:
    env = _env()
    seen = []

    def plan(task: object) -> list[int]:
        seen.append(task)
        return [0, 1, env.pool.terminator_id, 2]  # the last action is never taken

    end = run_actions(env, plan, seed=5, options={"task_index": 4})
    assert seen == [env.tasks[4]]
    assert end.actions == (0, 1, env.pool.terminator_id)
    assert end.calls == 2 and end.info["terminated_by"] == "terminator"
    with pytest.raises(EpisodeNotEnded, match="ran out"):
        run_actions(env, [0], seed=5, options={"task_index": 4})


def test_run_episode_stops_at_the_limit_and_calls_start_once() -> None:
    env = _env()
    starts: list[str] = []
    end = run_episode(env, lambda _o, _i: 0, seed=0, options={"task_index": 2}, start=starts.append)
    assert starts == [env.tasks[2].id]
    assert len(end.actions) == 3 == action_limit(env) - 1  # max_steps agents end the episode
    assert end.info["terminated_by"] == "max_steps"
    assert end.cost == pytest.approx(
        sum(end.info["trajectory"].steps[i].completion.total_tokens for i in range(3)) / 1000
    )


def test_step_and_workflow_episodes_of_the_same_plan_agree() -> None:
    step_env = _env()
    wf_env = ConductorEnv(
        mode="workflow",
        pool="sim-paper",
        suite="arith",
        split="train",
        max_steps=3,
        n_tasks=12,
        aggregate="vote",
    )
    rng = np.random.default_rng(0)
    step_traj = run_step_episode(step_env, _Chain([0, 1, step_env.pool.terminator_id]), rng, seed=7, index=3)
    plan = Workflow((0, 1), ("Solve.", "Solve."), ((), (0,)))
    wf_traj = run_workflow_episode(wf_env, plan, seed=7, index=3)
    assert [s.agent_id for s in step_traj.steps] == [0, 1] == [s.agent_id for s in wf_traj.steps]
    assert step_traj.task_id == wf_traj.task_id == step_env.tasks[3].id
    assert wf_traj.workflow == plan
