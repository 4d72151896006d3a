"""Environment assembly: typed config + built backend; the keyword form and gym.make go the same way."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import gymnasium as gym
import pytest

from puppeteer.agents.pool import load_pool
from puppeteer.backends.base import Router
from puppeteer.envs.build import BackendSpec, EnvConfig, backend_options, build_backend, build_env, env_parts
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import run_actions
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.tasks import load_suite
from puppeteer.train.reinforce import ReinforceConfig, run_fingerprint


def _episode(env: ConductorEnv, index: int) -> tuple:
    end = run_actions(env, [0, 2, env.pool.terminator_id], seed=index, options={"task_index": index})
    t = end.trajectory
    return t.final_answer, t.correct, end.rewards, t.prompt_tokens, t.completion_tokens


def test_build_env_from_a_config_equals_the_keyword_form_and_gym_make() -> None:
    config = EnvConfig(mode="step", lam=0.3, gamma=0.9, max_steps=3, min_steps=1)
    built = build_env(config, pool="sim-paper", suite="arith", split="train", n_tasks=6)
    keyword = ConductorEnv(
        mode="step",
        pool="sim-paper",
        suite="arith",
        split="train",
        n_tasks=6,
        lam=0.3,
        gamma=0.9,
        max_steps=3,
        min_steps=1,
    )
    made = gym.make(
        "Conductor-v0",
        pool="sim-paper",
        suite="arith",
        split="train",
        n_tasks=6,
        lam=0.3,
        gamma=0.9,
        max_steps=3,
        min_steps=1,
    ).unwrapped
    assert isinstance(made, ConductorEnv)
    assert built.config == keyword.config == made.config == config
    assert [t.id for t in built.tasks] == [t.id for t in keyword.tasks] == [t.id for t in made.tasks]
    for i in range(len(built.tasks)):
        assert _episode(built, i) == _episode(keyword, i) == _episode(made, i)


def test_clone_shares_config_tasks_and_backend_but_does_not_own_it() -> None:
    env = ConductorEnv(
        mode="workflow",
        pool="sim-paper",
        suite="arith",
        n_tasks=4,
        max_depth=1,
        render_mode="ansi",
        unavailable=[1],
    )
    twin = env.clone()
    assert twin.config == env.config and twin.config.unavailable == (1,)
    assert twin.tasks == env.tasks and twin.pool is env.pool
    assert twin.executor.backend is env.executor.backend
    assert twin.render_mode == "ansi"
    assert env.backend_spec == BackendSpec() and twin.backend_spec is None
    assert not twin.action_masks()[1]


def test_config_is_checked_when_made_and_settings_are_not_mixed_with_a_config() -> None:
    with pytest.raises(ValueError, match="mode must be"):
        EnvConfig(mode="plan")
    with pytest.raises(ValueError, match="min_steps"):
        EnvConfig(max_steps=2, min_steps=3)
    with pytest.raises(ValueError, match="max_depth"):
        EnvConfig(mode="step", max_depth=1)
    with pytest.raises(TypeError, match="unknown environment setting"):
        ConductorEnv(pool="sim-paper", max_stepz=3)
    with pytest.raises(TypeError, match="config must be an EnvConfig"):
        ConductorEnv("workflow")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="either config or settings"):
        env_parts(EnvConfig(), lam=0.2)


def test_backend_assembly_merges_options_and_adds_the_answer_key() -> None:
    pool = load_pool("sim-paper")
    tasks = load_suite("arith", "test", n=3)
    options = backend_options(pool, tasks, {"sim": {"seed": 123}})
    assert options["sim"]["seed"] == 123
    assert set(options["sim"]["answer_key"]) == {t.id for t in tasks}
    assert dict(pool.backend_options["sim"]).get("seed") != 123  # the pool itself is untouched
    backend = build_backend(pool, tasks, BackendSpec.of({"sim": {"seed": 123}}))
    assert isinstance(backend, Router)
    sim = backend.backend("sim")
    assert set(sim.answer_key) == {t.id for t in tasks}  # type: ignore[attr-defined]


def test_a_backend_passed_in_is_used_as_is_and_not_closed() -> None:
    pool = load_pool("sim-paper")
    tasks = load_suite("arith", "test", n=3)
    backend = build_backend(pool, tasks)
    env = build_env(EnvConfig(), pool=pool, tasks=tasks, backend=backend)
    assert env.executor.backend is backend and env.backend_spec is None


def test_the_oracle_router_does_not_import_the_env_module() -> None:
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from puppeteer.policies.baselines import OracleRouter\n"
        "from puppeteer.agents.pool import load_pool\n"
        "from puppeteer.tasks import load_suite\n"
        "pool = load_pool('sim-paper')\n"
        "task = load_suite('mix-paper', 'test', n=1)[0]\n"
        "OracleRouter.from_pool(pool).plan(task, pool, np.random.default_rng(0))\n"
        "print('puppeteer.envs.env' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_fingerprint_of_an_env_without_excluded_agents_is_unchanged() -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", n_tasks=4)
    policy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=8))
    fp = json.loads(run_fingerprint(env, policy, ReinforceConfig())["env"])
    assert "unavailable" not in fp and fp["lam"] == 0.1
    narrowed = ConductorEnv.from_parts(replace(env.parts, config=replace(env.config, unavailable=(0,))))
    assert json.loads(run_fingerprint(narrowed, policy, ReinforceConfig())["env"])["unavailable"] == [0]


def test_step_and_workflow_mode_send_one_agent_the_same_request_for_a_question_with_end_spaces() -> None:
    """A workflow strips its subtasks; step mode once sent the raw question, so on `mix-local`'s
    ``mmlu/10511`` (its last option ends in a space) a trained step router missed the outcome table that
    the single-agent (workflow) runs had built, under strict replay: one item graded wrong per run."""
    from puppeteer.backends.base import SyncBackend
    from puppeteer.envs.workflow import Workflow, format_workflow
    from puppeteer.types import Completion, CompletionRequest

    class Recording(SyncBackend):
        name = "recording"

        def __init__(self) -> None:
            self.requests: list[CompletionRequest] = []

        def complete(self, request: CompletionRequest) -> Completion:
            self.requests.append(request)
            return Completion("Answer: 4", 10, 2, 0.0, 0.0, 0.0, request.model.target)

    pool = load_pool("sim-paper")
    task = replace(load_suite("arith", "test", n=1)[0], question=" What is 2 + 2? \n")
    step_backend, flow_backend = Recording(), Recording()
    step_env = build_env(EnvConfig(mode="step", max_steps=1), pool=pool, tasks=[task], backend=step_backend)
    step_env.reset(seed=0)
    step_env.step(0)
    flow_env = build_env(EnvConfig(mode="workflow"), pool=pool, tasks=[task], backend=flow_backend)
    flow_env.reset(seed=0)
    flow_env.step(format_workflow(Workflow((0,), (task.question,), ((),))))
    (sent,), (planned,) = step_backend.requests, flow_backend.requests
    assert sent.messages == planned.messages
    assert sent.messages[-1].content.startswith("What is 2 + 2?\n")
