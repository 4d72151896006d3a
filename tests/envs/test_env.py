from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import InvalidAction, ResetNeeded
from gymnasium.utils.env_checker import check_env

import puppeteer  # noqa: F401  (registers Conductor-v0)
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.workflow import format_workflow
from puppeteer.types import Workflow


@pytest.fixture(params=["step", "workflow"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


def test_check_env_passes(mode: str) -> None:
    env = gym.make("Conductor-v0", mode=mode, pool="sim-paper", suite="arith")
    check_env(env.unwrapped, skip_render_check=True)


def test_make_with_module_prefix_and_kwargs() -> None:
    env = gym.make("puppeteer:Conductor-v0", mode="step", lam=0.2, max_steps=3)
    obs, info = env.reset(seed=3)
    assert set(obs) == {"task", "state", "mask", "step", "counts", "signals", "lam"}
    assert env.action_space.n == len(env.unwrapped.pool) + 1
    assert obs["mask"].tolist() == [1] * env.action_space.n
    assert info["action_mask"].dtype == bool


def _rollout(env: ConductorEnv, actions: list[int], seed: int) -> tuple[list[float], object]:
    env.reset(seed=seed)
    rewards, info = [], {}
    for a in actions:
        _, r, terminated, truncated, info = env.step(a)
        rewards.append(r)
        if terminated or truncated:
            break
    return rewards, info.get("trajectory")


def test_reset_seed_is_reproducible() -> None:
    a = ConductorEnv(mode="step", pool="sim-paper", suite="arith")
    b = ConductorEnv(mode="step", pool="sim-paper", suite="arith")
    for seed in range(5):
        ra, ta = _rollout(a, [0, 3, 5, a.pool.terminator_id], seed)
        rb, tb = _rollout(b, [0, 3, 5, b.pool.terminator_id], seed)
        assert ra == rb
        assert ta == tb
    # different seeds pick different items
    ids = {a.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert len(ids) > 10


def test_step_rewards_match_the_formula_by_hand() -> None:
    env = ConductorEnv(
        mode="step", pool="sim-paper", suite="arith", lam=0.3, gamma=0.9, max_steps=4, cost_model="tokens"
    )
    env.reset(seed=11)
    costs, rewards = [], []
    for a in (1, 2):
        _, r, term, _, info = env.step(a)
        assert not term
        f = info["step"].completion.total_tokens / 1000
        assert info["cost"] == pytest.approx(f)
        costs.append(f)
        rewards.append(r)
    _, r_final, term, trunc, info = env.step(env.pool.terminator_id)
    assert term and not trunc
    phi = 4.0
    assert rewards[0] == pytest.approx(-0.3 * costs[0] * math.log(1 + 1 / phi))
    assert rewards[1] == pytest.approx(-0.3 * costs[1] * math.log(1 + 2 / phi))
    assert r_final == (1.0 if info["correct"] else 0.0)
    traj = info["trajectory"]
    assert len(traj.steps) == 2
    expected_return = rewards[0] + 0.9 * rewards[1] + 0.81 * r_final
    assert traj.reward == pytest.approx(expected_return)
    assert info["returns"][0] == pytest.approx(expected_return)


def test_episode_ends_at_max_steps_with_graded_majority() -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", max_steps=3, lam=0.0)
    env.reset(seed=0)
    for i in range(3):
        _, r, term, _, info = env.step(0)
        assert term == (i == 2)
    assert info["terminated_by"] == "max_steps"
    answers = [s.answer for s in info["trajectory"].steps]
    from puppeteer.envs.aggregate import majority_vote

    assert info["final_answer"] == majority_vote(answers)
    assert r == (1.0 if info["correct"] else 0.0)
    with pytest.raises(ResetNeeded):
        env.step(0)


def test_bad_actions_raise_gymnasium_errors() -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", unavailable=[2])
    with pytest.raises(ResetNeeded):
        env.step(0)
    obs, _ = env.reset(seed=0)
    assert obs["mask"][2] == 0 and not env.action_masks()[2]
    for bad in (-1, env.pool.n_actions, 2, "0", 1.5, True):
        with pytest.raises(InvalidAction):
            env.step(bad)
    env.step(np.int64(0))  # numpy ints are fine


def test_min_steps_masks_the_terminator_until_enough_agents_acted() -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", max_steps=4, min_steps=2)
    term = env.pool.terminator_id
    obs, info = env.reset(seed=0)
    for step in range(3):
        assert bool(obs["mask"][term]) == (step >= 2) == bool(env.action_masks()[term])
        assert obs["mask"][:term].all()
        if step < 2:
            with pytest.raises(InvalidAction, match="masked until 2"):
                env.step(term)
        obs, *_ = env.step(0)
    *_, done, _, info = env.step(term)
    assert done and len(info["trajectory"].steps) == 3
    with pytest.raises(ValueError, match="min_steps"):
        ConductorEnv(mode="step", pool="sim-paper", suite="arith", max_steps=2, min_steps=3)


def test_terminator_first_means_no_answer() -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith")
    env.reset(seed=0)
    _, r, term, _, info = env.step(env.pool.terminator_id)
    assert term and r == 0.0 and info["final_answer"] is None and not info["correct"]


def test_workflow_mode_rewards_and_hostile_input() -> None:
    env = ConductorEnv(mode="workflow", pool="sim-paper", suite="arith")
    obs, _ = env.reset(seed=1)
    assert "model_id" in obs["prompt"] and obs["task"] in obs["prompt"]
    assert "gpt" in obs["prompt"].lower()
    wf = Workflow(
        (0, 1, 2), ("Solve it.", "Solve it independently.", "Verify and conclude."), ((), (), "all")
    )
    _, r, term, trunc, info = env.step("Plan: ask two, then verify.\n" + format_workflow(wf))
    assert term and not trunc
    traj = info["trajectory"]
    assert traj.workflow == wf and len(traj.steps) == 3
    assert traj.steps[2].visible == (0, 1) and traj.steps[0].visible == ()
    assert r == (1.0 if info["correct"] else 0.5)
    assert info["final_answer"] == traj.steps[-1].answer
    for hostile in (
        "",
        "model_id = [0]",
        "model_id=[__import__('os').system('id')]\nsubtasks=['a']\naccess_list=[[]]",
        "x" * 300_000,
        42,
    ):
        env.reset(seed=2)
        _, r, term, _, info = env.step(hostile)
        assert term and r == 0.0 and info["parse_error"]
        assert info["trajectory"].steps == ()


def test_workflow_accuracy_tracks_the_skill_table() -> None:
    # GPT-5 (id 0) alone vs gemma (weakest) alone on arithmetic mapped to the MATH500 column
    env = ConductorEnv(mode="workflow", pool="sim-paper", suite="arith", n_tasks=None)
    pool = env.pool
    strong = min(range(len(pool)), key=lambda i: -pool.agent(i).model.options["skills"]["MATH500"])
    weak = min(range(len(pool)), key=lambda i: pool.agent(i).model.options["skills"]["MATH500"])
    acc = {}
    for agent in (strong, weak):
        wins = 0
        for s in range(300):
            env.reset(seed=s)
            _, r, *_ = env.step(format_workflow(Workflow((agent,), ("Solve.",), ((),))))
            wins += r == 1.0
        acc[agent] = wins / 300
    p_strong = pool.agent(strong).model.options["skills"]["MATH500"]
    p_weak = pool.agent(weak).model.options["skills"]["MATH500"]
    p_strong = p_strong / 100 if p_strong > 1 else p_strong
    p_weak = p_weak / 100 if p_weak > 1 else p_weak
    assert abs(acc[strong] - p_strong) < 0.07
    assert abs(acc[weak] - p_weak) < 0.09


@pytest.mark.parametrize(
    ("domain", "forbidden"),
    [
        ("gsm8k", "train travels"),
        ("arith", "train travels"),
        ("mmlu", "organelle"),
        ("humaneval", "is_palindrome"),
    ],
)
def test_conductor_prompt_few_shots_come_from_other_domains(domain: str, forbidden: str) -> None:
    from puppeteer.agents.pool import load_pool
    from puppeteer.envs.conductor_prompt import conductor_prompt

    prompt = conductor_prompt(load_pool("sim-paper"), "Q?", domain)
    assert forbidden not in prompt
    assert prompt.count("model_id = [") == 3  # the format line and two examples
