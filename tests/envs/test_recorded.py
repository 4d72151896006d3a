"""``recorded_only`` pools: step mode offers only the calls the pool's replay table holds, the trainer
tries only those, and the shipped table with second steps replays every call a trained policy makes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from puppeteer.agents.pool import PoolError, pool_from_dict
from puppeteer.backends.replay import Outcome, StepOutcome, write_outcomes, write_steps
from puppeteer.envs.build import EnvConfig, build_env
from puppeteer.envs.recorded import RecordedCalls
from puppeteer.envs.rollout import run_lockstep
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.tasks import load_suite
from puppeteer.train.reinforce.groups import first_actions, second_actions
from puppeteer.utils.yamlsafe import load_yaml

ROOT = Path(__file__).resolve().parents[2]
SOLVERS = ("qwen1.5b-pot", "qwen0.5b-direct")
VERIFIER = "qwen0.5b-verify"


def _outcome(task_id: str, agent: str) -> Outcome:
    return Outcome(
        "mix-local", "train", task_id, task_id.split("/")[0], agent, True, "1", 10, 5, 1.0, False, 0
    )


def _step(task_id: str, first: str) -> StepOutcome:
    return StepOutcome(
        "mix-local", "train", task_id, task_id.split("/")[0], first, VERIFIER, True, "1", True, "1", 10, 5,
        1.0, False,
    )  # fmt: skip


@pytest.fixture
def world(tmp_path: Path):
    """The simulated mirror of local-mix-steps (three of its agents) over a table of three items:
    both solvers recorded alone on each; the verifier recorded after ``qwen1.5b-pot`` on the first two
    items, after ``qwen0.5b-direct`` on the first only."""
    tasks = load_suite("mix-local", "train", n=3)
    ids = [t.id for t in tasks]
    table = tmp_path / "table"
    write_outcomes(table, [_outcome(i, a) for i in ids for a in SOLVERS])
    write_steps(table, [_step(ids[0], SOLVERS[0]), _step(ids[1], SOLVERS[0]), _step(ids[0], SOLVERS[1])])
    raw = dict(load_yaml((ROOT / "agents" / "sim-local.yaml").read_text(encoding="utf-8")))
    raw["agents"] = [a for a in raw["agents"] if a["name"] in (*SOLVERS, VERIFIER)]
    pool = pool_from_dict({**raw, "replay": "table", "recorded_only": True}, base=tmp_path)
    return pool, tasks, ids


def _names(pool, mask) -> list[str]:
    return [a.name for a, m in zip(pool.agents, mask, strict=False) if m]


def test_the_mask_follows_the_table_step_by_step(world) -> None:
    pool, tasks, _ = world
    env = build_env(EnvConfig(mode="step", max_steps=3, min_steps=1), pool=pool, tasks=tasks)
    pot, direct, verify = (pool.index(n) for n in (*SOLVERS, VERIFIER))
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    # first: the solvers recorded alone; the verifier has nothing to check and no single row
    assert _names(pool, obs["mask"]) == list(SOLVERS)
    obs, *_ = env.step(pot)
    assert _names(pool, obs["mask"]) == [*SOLVERS, VERIFIER]  # its chain after pot on item 0
    assert obs["mask"][pool.terminator_id]
    obs, *_ = env.step(direct)
    assert _names(pool, obs["mask"]) == list(SOLVERS)  # after two answers: no chain is recorded
    for index, first, offered in ((1, pot, True), (1, direct, False), (2, pot, False)):
        env.reset(seed=0, options={"task_index": index})
        obs, *_ = env.step(first)
        assert bool(obs["mask"][verify]) is offered, (index, first)
        assert bool(env.action_masks()[verify]) is offered
    env.reset(seed=0, options={"task_index": 2})
    env.step(pot)
    with pytest.raises(Exception, match="not available"):
        env.step(verify)


def test_recorded_calls_by_hand(world) -> None:
    pool, _, ids = world
    calls = RecordedCalls.of_pool(pool)
    assert len(calls.singles) == 6 and len(calls.chains) == 3
    pot = pool.index(SOLVERS[0])
    assert _names(pool, calls.agents(pool, ids[1], [pot])) == [*SOLVERS, VERIFIER]
    assert _names(pool, calls.agents(pool, ids[1], [pot, pot])) == list(SOLVERS)
    assert _names(pool, calls.agents(pool, "mix/unknown", ())) == []
    assert _names(pool, calls.first_agents(pool, ids)) == list(SOLVERS)


def test_an_item_the_table_lacks_is_refused_and_a_pool_needs_a_table(world, tmp_path: Path) -> None:
    pool, _, _ = world
    other = load_suite("mix-local", "train", n=5)[4:]
    env = build_env(EnvConfig(mode="step", max_steps=2, min_steps=1), pool=pool, tasks=other)
    with pytest.raises(ValueError, match="no call in pool"):
        env.reset(seed=0)
    raw = dict(load_yaml((ROOT / "agents" / "sim-local.yaml").read_text(encoding="utf-8")))
    with pytest.raises(PoolError, match="needs replay"):
        pool_from_dict({**raw, "recorded_only": True}, base=tmp_path)
    with pytest.raises(PoolError, match="true or false"):
        pool_from_dict({**raw, "replay": "t", "recorded_only": "yes"}, base=tmp_path)
    assert pool.subset(list(SOLVERS)).recorded_only  # a subset keeps the table and the rule


def test_trying_every_pair_leaves_out_the_pairs_the_table_lacks(world) -> None:
    pool, tasks, _ = world
    env = build_env(EnvConfig(mode="step", max_steps=2, min_steps=1, lam=0.0), pool=pool, tasks=tasks)
    policy = PuppeteerPolicy(
        pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=2, min_steps=1), seed=0
    )
    firsts, seconds = first_actions(env, policy), second_actions(env, policy)
    assert _names(pool, np.isin(np.arange(len(pool)), firsts)) == list(SOLVERS)  # never the verifier first
    assert len(seconds) == len(pool) + 1  # every agent and the Terminator, item by item as offered
    specs = [(0, ti) for ti in range(3) for _ in firsts for _ in seconds]
    forced = [(a, b) for _ in range(3) for a in firsts for b in seconds]
    eps = run_lockstep([env, env.clone()], policy, specs, first_actions=forced)
    verify = pool.index(VERIFIER)
    unoffered = {(e.task_id, e.actions[0]) for e in eps if e.unoffered}
    ids = [t.id for t in tasks]
    # the verifier is recorded after pot on items 0 and 1 and after direct on item 0 only
    assert unoffered == {
        (ids[1], pool.index(SOLVERS[1])),
        (ids[2], pool.index(SOLVERS[0])),
        (ids[2], pool.index(SOLVERS[1])),
    }
    for e in eps:
        assert e.unoffered == (e.actions[1] == verify and (e.task_id, e.actions[0]) in unoffered)
        if e.unoffered:
            assert np.isnan(e.returns).all() and not e.trajectory
        else:
            assert np.isfinite(e.returns).all() and [s["agent_id"] for s in e.trajectory["steps"]] == [
                a for a in e.actions if a != pool.terminator_id
            ]


def test_training_every_pair_never_calls_what_the_table_lacks(world, tmp_path: Path) -> None:
    """The trainer's exact two-step loss over a world where some pairs are not on offer: finite at every
    update, and the episodes it ran (and wrote) never call the verifier after a first agent the table
    holds no chain for."""
    import json
    import math

    from puppeteer.train.reinforce import ReinforceConfig, train

    pool, tasks, ids = world
    env = build_env(EnvConfig(mode="step", max_steps=2, min_steps=1, lam=0.0), pool=pool, tasks=tasks)
    policy = PuppeteerPolicy(
        pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=2, min_steps=1), seed=0
    )
    per_group = 2 * (len(pool) + 1)  # the two solvers first, then every second action
    config = ReinforceConfig(
        episodes=6 * per_group,
        batch_episodes=3 * per_group,
        first_step="all",
        second_step="all",
        second_target=0.1,
        later_baseline="stop",
        parallel_envs=4,
        eval_every=10**9,
        seed=0,
    )
    state = train(env, policy, config, tmp_path / "run")
    assert state.episodes == 6 * per_group
    assert all(math.isfinite(m["train/loss"]) for m in state.history)
    chained = {(ids[0], SOLVERS[0]), (ids[1], SOLVERS[0]), (ids[0], SOLVERS[1])}
    lines = [json.loads(x) for x in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    verified = 0
    for line in lines:
        agents = [pool.agents[s["agent_id"]].name for s in line["steps"]]
        if VERIFIER in agents:
            verified += 1
            assert agents.index(VERIFIER) == 1 and (line["task_id"], agents[0]) in chained
    # groups of items 0 and 1 try the verifier after the recorded first agents only; item 2 never
    assert verified > 0 and len(lines) < 6 * per_group


def test_only_the_later_actions_of_forced_pairs_can_go_unoffered(world) -> None:
    """A forced first action the env does not offer is refused as before (never skipped in silence)."""
    pool, tasks, _ = world
    env = build_env(EnvConfig(mode="step", max_steps=2, min_steps=1), pool=pool, tasks=tasks)
    policy = PuppeteerPolicy(
        pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=2, min_steps=1), seed=0
    )
    verify = pool.index(VERIFIER)
    for forced in (verify, (verify, pool.terminator_id)):
        with pytest.raises(Exception, match="not available"):
            run_lockstep([env], policy, [(0, 0)], first_actions=[forced])
