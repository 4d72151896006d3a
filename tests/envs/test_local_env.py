"""Real local models (llama.cpp) driven through Conductor-v0 in both modes. Slow: loads the models."""

from __future__ import annotations

import pytest

from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.workflow import format_workflow
from puppeteer.types import Task, Workflow

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.slow

EASY = Task(
    id="t/easy",
    question="A shop sells pens at 3 dollars each. Tom buys 4 pens. How many dollars does he pay?",
    answer="12",
    suite="t",
    domain="gsm8k",
    grader="numeric",
)
MC = Task(
    id="t/mc",
    question="Which planet is known as the Red Planet?\n(A) Venus\n(B) Mars\n(C) Jupiter\n(D) Saturn",
    answer="B",
    suite="t",
    domain="mmlu",
    grader="letter",
    meta={"choices": ("Venus", "Mars", "Jupiter", "Saturn")},
)


@pytest.fixture(scope="module")
def env_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[ConductorEnv, ConductorEnv]:
    cache = tmp_path_factory.mktemp("cache") / "responses.sqlite"
    step = ConductorEnv(mode="step", pool="local", tasks=[EASY, MC], max_steps=3, cache=cache)
    wf = ConductorEnv(mode="workflow", pool="local", tasks=[EASY, MC], backend=step.executor.backend)
    return step, wf


def test_workflow_mode_on_real_models(env_pair: tuple[ConductorEnv, ConductorEnv]) -> None:
    _, env = env_pair
    pool = env.pool
    solver, verifier = pool.index("qwen1.5b-cot"), pool.index("qwen1.5b-verify")
    env.reset(seed=0, options={"task": EASY})
    wf = Workflow((solver, verifier), ("Solve the word problem.", "Check the earlier answer."), ((), "all"))
    _, reward, terminated, _, info = env.step(format_workflow(wf))
    traj = info["trajectory"]
    assert terminated and len(traj.steps) == 2
    assert traj.steps[1].visible == (0,)
    assert all(s.completion.completion_tokens > 0 and s.completion.latency_s > 0 for s in traj.steps)
    assert info["final_answer"] == "12" and reward == 1.0


def test_step_mode_on_real_models_with_cache(env_pair: tuple[ConductorEnv, ConductorEnv]) -> None:
    env, _ = env_pair
    agent = env.pool.index("qwen0.5b-cot")
    env.reset(seed=0, options={"task": MC})
    _, r1, done, _, info1 = env.step(agent)
    assert not done and r1 < 0  # the call costs tokens
    step = info1["step"]
    assert step.completion.prompt_tokens > 20 and step.answer in {"A", "B", "C", "D", None}
    _, _, done, _, info = env.step(env.pool.terminator_id)
    assert done and info["final_answer"] == step.answer
    # the same episode again is served from the response cache
    env.reset(seed=0, options={"task": MC})
    _, _, _, _, again = env.step(agent)
    assert again["step"].completion.cached and again["step"].completion.text == step.completion.text


def test_python_tool_agent_runs_code_in_the_sandbox(env_pair: tuple[ConductorEnv, ConductorEnv]) -> None:
    env, _ = env_pair
    env.reset(seed=0, options={"task": EASY})
    _, _, _, _, info = env.step(env.pool.index("qwen1.5b-python"))
    step = info["step"]
    assert step.completion.completion_tokens > 0
    # the model may or may not write code; either way the tool loop is bounded
    assert step.tool_calls <= env.executor.max_tool_rounds
