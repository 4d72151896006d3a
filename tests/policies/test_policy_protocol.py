"""The one policy contract: a kind registered from outside the package runs everywhere a spec runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.envs.build import EnvConfig
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import run_actions
from puppeteer.evaluation.evaluate import evaluate, evaluate_policy
from puppeteer.evaluation.settings import EvalSettings
from puppeteer.policies.baselines import SpecError
from puppeteer.policies.protocol import (
    EpisodeRecord,
    EpisodeSettings,
    PlannedRunner,
    Policy,
    StepRunner,
    as_policy,
)
from puppeteer.policies.registry import (
    REGISTRY,
    PolicyRegistry,
    default_registry,
    load_policy,
    make_policy,
    register_policy,
)
from puppeteer.serving.orchestrator import Orchestrator
from puppeteer.tasks import load_suite
from puppeteer.types import Task


@pytest.fixture(scope="module")
def pool() -> Pool:
    return load_pool("sim-paper")


@pytest.fixture
def registered() -> Iterator[list[str]]:
    """Kinds registered by a test are removed afterwards (the registry is shared by the process)."""
    kinds: list[str] = []
    yield kinds
    for kind in kinds:
        REGISTRY.factories.pop(kind, None)


@dataclass
class LastAgent:
    """An outside step policy: the pool's last available agent once, then the Terminator."""

    name: str = "last-agent"

    def reset(self, task_id: str) -> None:
        return None

    def act(self, obs: dict[str, Any], rng: np.random.Generator) -> int:
        mask = np.asarray(obs["mask"], dtype=bool)
        if int(obs["step"]) > 0:
            return len(mask) - 1
        return int(np.flatnonzero(mask[:-1])[-1])


class TwoStepEpisodes:
    """An outside policy that runs its own episodes: agent ``first`` then agent 0, then the Terminator."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.name = f"two-step:{first}"
        self.forks = 0

    def configure(
        self, settings: EpisodeSettings, tasks: Sequence[Task], seeds: Sequence[int], pool: Pool
    ) -> EnvConfig:
        return settings.step_config()

    def start(self, env: ConductorEnv, shared: Any, cache: Any = None) -> None:
        return None

    def episode(
        self, env: ConductorEnv, *, index: int, seed: int, options: Mapping[str, Any] | None = None
    ) -> EpisodeRecord:
        terminator = env.pool.n_actions - 1
        end = run_actions(env, [self.first, 0, terminator], seed=seed, options={"task_index": index})
        return end.trajectory, {"note": f"item {index}"}

    def fork(self) -> TwoStepEpisodes:
        self.forks += 1
        return self


def test_a_step_policy_registered_from_outside_runs_in_eval_and_run(
    pool: Pool, registered: list[str]
) -> None:
    register_policy("last-agent", lambda arg, pool, max_steps: LastAgent(), "last-agent   the last agent")
    registered.append("last-agent")
    assert "last-agent   the last agent" in REGISTRY.spec_forms()
    result = evaluate_policy("last-agent", pool, "arith", n=12, progress=False)
    single = evaluate_policy(f"single:{pool.agents[-1].name}", pool, "arith", n=12, progress=False)
    assert result.mode == "step" and result.mean_calls == 1.0
    assert result.correct == single.correct  # the same agent on the same items and reset seeds
    with Orchestrator.load("last-agent", pool) as orch:
        task = load_suite("arith", "test", n=1)[0]
        answered = orch.run_task(task)
    assert [s.agent_name for s in answered.steps] == [pool.agents[-1].name]


def test_a_policy_running_its_own_episodes_is_used_as_is(pool: Pool, registered: list[str]) -> None:
    register_policy("two-step", lambda arg, pool, max_steps: TwoStepEpisodes(int(arg)))
    registered.append("two-step")
    policy = make_policy("two-step:5", pool)
    assert isinstance(policy, Policy) and as_policy(policy) is policy
    with pytest.raises(SpecError, match="nothing after"):
        make_policy("two-step:", pool)
    result = evaluate(policy, EvalSettings(pool=pool, suite="arith", n=6, progress=False, concurrency=3))
    assert result.mean_calls == 2.0 and result.policy == "two-step:5"
    assert policy.forks == 2  # three concurrent items: the policy and two forks
    with Orchestrator.load("two-step:2", pool, suite="arith") as orch:  # a simulated pool: a suite item
        steps = orch.answer(load_suite("arith", "test")[0].question).steps
    assert [s.agent_name for s in steps] == [pool.agents[2].name, pool.agents[0].name]


def test_the_adapters_cover_the_built_in_kinds(pool: Pool) -> None:
    assert isinstance(load_policy("vote:3", pool), PlannedRunner)
    assert isinstance(load_policy("random-step", pool), StepRunner)
    assert isinstance(load_policy("cascade:0,1", pool), StepRunner)
    conductor = make_policy("conductor:smollm2-135m", pool)
    assert as_policy(conductor) is conductor  # the conductor runs its own (possibly recursive) episodes
    with pytest.raises(TypeError, match="is not a policy"):
        as_policy(object())


def test_plans_follow_each_item_and_raise_the_step_limit(pool: Pool) -> None:
    runner = load_policy("chain:0,1,2,3,4,5", pool)
    tasks = load_suite("arith", "test", n=3)
    config = runner.configure(EpisodeSettings(max_steps=2), tasks, [1, 2, 3], pool)
    assert config.mode == "workflow" and config.max_steps == 6  # the plan is longer than max_steps
    fork = runner.fork()
    fork.configure(EpisodeSettings(max_steps=2), tasks[:1], [1], pool)  # a fork plans its own items
    env = ConductorEnv(config, pool=pool, tasks=tasks)
    trajectory, _ = runner.episode(env, index=2, seed=3)
    assert len(trajectory.steps) == 6 and trajectory.task_id == tasks[2].id


def test_the_registry_resolves_the_longest_kind_and_imports_lazily(pool: Pool) -> None:
    registry = PolicyRegistry()
    registry.register("single", "puppeteer.policies.baselines:_single")  # imported on first use
    registry.register("single:fast", lambda arg, pool, max_steps: ("fast", arg))
    assert registry.make("single:fast:x", pool) == ("fast", "x")
    assert registry.make("single:gpt5-cot", pool).agent == "gpt5-cot"
    assert callable(registry.factories["single"])  # the string was replaced by the function
    with pytest.raises(ValueError, match="already registered"):
        registry.register("single", lambda *a: None)
    with pytest.raises(SpecError, match="unknown policy spec"):
        registry.make("nobody", pool)
    # the core names the GRPO kind without importing the trainer (a fresh registry: the shared one may
    # have resolved it already in this process)
    assert default_registry().factories["conductor:grpo"] == "puppeteer.train.grpo.policy:grpo_conductor"
