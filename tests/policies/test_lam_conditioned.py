"""One step policy for every price of cost (issue 36, section 1): lambda as an input.

The toy world: a dear agent right on 90% of the items and a cheap one right on 55%, at a hundredth of
the price, so which one a router should call depends on lambda alone (about 0.3 in cents).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.envs.build import EnvConfig, build_env
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.rollout import run_lockstep
from puppeteer.envs.wrappers import make_encoded_env
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.serving.orchestrator import Orchestrator
from puppeteer.tasks import load_suite
from puppeteer.train.reinforce import ReinforceConfig, evaluate, run_fingerprint, train
from puppeteer.train.reinforce.losses import _relabelled

# the mean return gap over the range's draws is about zero: no agent wins on average, so what the
# router learns is where lambda changes the choice (a range mostly below the break-even first pulls the
# policy onto the dear agent for every lambda, and it takes a few thousand episodes to come back)
RANGE = (0.01, 1.5)
DEAR, CHEAP = 0, 1


def _price_pool(tmp_path: Path) -> Pool:
    spec = {
        "name": "toy-price",
        "backend_options": {"sim": {"seed": 0, "rho": 0.5, "columns": {"gsm8k": "G", "mmlu": "M"}}},
        "models": {
            "dear": {"backend": "sim", "target": "dear", "price_in": 10.0, "price_out": 40.0, "params_b": 70,
                     "options": {"skills": {"G": 90, "M": 90}, "tokens_mean": 300}},
            "cheap": {"backend": "sim", "target": "cheap", "price_in": 0.1, "price_out": 0.4, "params_b": 8,
                      "options": {"skills": {"G": 55, "M": 55}, "tokens_mean": 300}},
        },
        "agents": [
            {"name": "dear-cot", "model": "dear", "pattern": "cot", "description": "strong and dear"},
            {"name": "cheap-cot", "model": "cheap", "pattern": "cot", "description": "weak and cheap"},
        ],
    }  # fmt: skip
    path = tmp_path / "toy-price.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_pool(path)


def _settings(**more: object) -> EnvConfig:
    return EnvConfig(mode="step", lam=0.1, max_steps=1, min_steps=1, cost_model="usd", **more)  # type: ignore[arg-type]


def _policy(pool: Pool, lam_range: tuple[float, float] | None = RANGE, seed: int = 0) -> PuppeteerPolicy:
    config = PolicyConfig(encoder="hashing", hidden=32, max_steps=1, min_steps=1, lam_range=lam_range)
    return PuppeteerPolicy(pool, config, seed=seed)


def _p_dear(policy: PuppeteerPolicy, env: ConductorEnv, lam: float, n: int = 10) -> float:
    """The policy's mean probability of calling the dear agent at ``lam`` over the first ``n`` items."""
    probs = []
    for i in range(n):
        obs, _ = env.reset(seed=i, options={"task_index": i, "lam": lam})
        with torch.no_grad():
            probs.append(float(torch.softmax(policy.logits([policy.features(obs)]), dim=-1)[0, DEAR]))
    return float(np.mean(probs))


# --------------------------------------------------------------------------- the range


def test_the_draw_is_log_uniform_and_zero_gets_a_shifted_scale() -> None:
    rng = np.random.default_rng(0)
    r = LamRange(0.01, 0.5)
    draws = np.array([r.sample(rng) for _ in range(20_000)])
    assert draws.min() >= 0.01 and draws.max() <= 0.5
    assert np.median(draws) == pytest.approx(math.sqrt(0.01 * 0.5), rel=0.05)  # the geometric middle
    assert np.mean(draws < 0.1) == pytest.approx(math.log(10) / math.log(50), abs=0.02)  # per factor
    grid = r.grid(5)
    assert grid[0] == pytest.approx(0.01) and grid[-1] == pytest.approx(0.5)
    assert np.allclose(np.diff(np.log(grid)), np.log(50) / 4)
    zero = LamRange(0.0, 1.0)  # log 0 does not exist: the scale is that of lambda + high/100
    draws0 = np.array([zero.sample(rng) for _ in range(20_000)])
    assert draws0.min() >= 0.0 and zero.grid(3)[0] == 0.0
    assert np.mean(draws0 < 0.01) == pytest.approx(math.log(2) / math.log(101), abs=0.02)
    for lam in (0.0, 0.3, 1.0, 7.0):
        assert np.all(np.abs(zero.features(lam)) <= 1.0)
    with pytest.raises(ValueError, match="low < high"):
        LamRange(0.5, 0.5)
    with pytest.raises(ValueError, match="lam_range"):
        LamRange(-0.1, 0.5)
    with pytest.raises(ValueError, match="two numbers"):
        LamRange.of([0.1])


# --------------------------------------------------------------------------- the env


def test_the_env_prices_each_episode_at_its_lambda_and_shows_it(tmp_path: Path) -> None:
    pool = _price_pool(tmp_path)
    tasks = load_suite("mix-math-mmlu", "train", n=8)
    plain = build_env(_settings(), pool=pool, tasks=tasks)
    obs, _ = plain.reset(seed=3)
    assert obs["lam"].tolist() == [0.1] and plain.observation_space.contains(obs)
    _, reward, _, _, info = plain.step(DEAR)
    assert reward == pytest.approx(float(info["correct"]) - 0.1 * info["cost"] * math.log(2))
    obs, _ = plain.reset(seed=3, options={"lam": 2.0})
    assert obs["lam"].tolist() == [2.0]
    _, priced, _, _, info2 = plain.step(DEAR)
    assert priced == pytest.approx(float(info2["correct"]) - 2.0 * info2["cost"] * math.log(2))
    with pytest.raises(ValueError, match="options\\['lam'\\]"):
        plain.reset(options={"lam": -1})
    # with a range, an episode given no lambda draws one; the other draws of the reset are unchanged
    ranged = build_env(_settings(lam_range=(0.01, 0.5)), pool=pool, tasks=tasks)
    seen = set()
    for seed in range(20):
        a, _ = plain.reset(seed=seed)
        b, _ = ranged.reset(seed=seed)
        assert a["task"] == b["task"] and 0.01 <= b["lam"][0] <= 0.5
        seen.add(float(b["lam"][0]))
    assert len(seen) == 20
    assert ranged.reset(seed=5)[0]["lam"][0] == ranged.reset(seed=5)[0]["lam"][0]
    assert ranged.reset(seed=5, options={"lam": 0.25})[0]["lam"][0] == 0.25


def test_the_encoded_observation_carries_lambda_for_outside_rl() -> None:
    env = make_encoded_env(pool="sim-paper", suite="arith", n_tasks=4, max_steps=2, lam_range=(0.01, 0.5))
    plain = make_encoded_env(pool="sim-paper", suite="arith", n_tasks=4, max_steps=2)
    assert env.observation_space.shape == (plain.observation_space.shape[0] + 2,)
    obs, _ = env.reset(seed=0, options={"lam": 0.5})
    assert obs[-2:].tolist() == [1.0, 1.0]  # lambda / high, and the top of the log scale
    obs, _ = env.reset(seed=0, options={"lam": 0.01})
    assert obs[-1] == -1.0


# --------------------------------------------------------------------------- training


@pytest.mark.learning
def test_a_conditioned_policy_calls_the_cheap_agent_as_lambda_rises(tmp_path: Path) -> None:
    """Trained once over lambda in [0.01, 1.5] with lambda as an input, the router calls the dear agent
    (0.9 right, 1.16 cents) at low lambda and the cheap one (0.55 right, 0.012 cents) at high lambda,
    as the return r - lambda * C says (break-even near 0.3). Seeds 0-3 all pass (measured)."""
    pool = _price_pool(tmp_path)
    env = build_env(_settings(lam_range=RANGE), pool=pool, suite="mix-math-mmlu", split="train", n_tasks=32)
    policy = _policy(pool)
    cfg = ReinforceConfig(episodes=2048, batch_episodes=64, lr=0.01, first_step="all", eval_every=10**6)
    train(env, policy, cfg, tmp_path / "run")
    curve = [_p_dear(policy, env, lam) for lam in (0.01, 0.05, 0.2, 0.5, 1.5)]
    assert curve[0] > 0.9 and curve[-1] < 0.1, curve
    assert all(a >= b - 0.02 for a, b in itertools.pairwise(curve)), curve  # falls with lambda
    # the trajectories record each group's lambda, shared by the group (its baseline's too)
    lines = [json.loads(x) for x in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    lams = [x["lam"] for x in lines]
    assert all(RANGE[0] <= x <= RANGE[1] for x in lams)
    assert all(lams[i] == lams[i + 1] for i in range(0, len(lams), 2))  # groups of two: every agent once
    assert len(set(lams)) == len(lams) // 2
    # saved and loaded, the policy keeps its range and its choices
    loaded = PuppeteerPolicy.load(tmp_path / "run" / "final", pool)
    assert loaded.lam_range == LamRange(*RANGE)
    assert _p_dear(loaded, env, 0.05) == pytest.approx(_p_dear(policy, env, 0.05), abs=1e-6)
    # greedy at a price, on held-out items: the return follows the choice
    test = build_env(_settings(), pool=pool, suite="mix-math-mmlu", split="test", n_tasks=16)
    low, high = evaluate(test, policy, lam=0.01), evaluate(test, policy, lam=1.5)
    assert low["cost"] > 20 * high["cost"] and low["accuracy"] > high["accuracy"]


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Small networks on small batches run fastest on one thread; restored after, since the thread count
    changes float reductions and later tests compare runs across processes bit for bit."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_maskable_ppo_with_lambda_in_the_observation_calls_the_cheap_agent_as_lambda_rises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same toy for an outside RL library: sb3-contrib's MaskablePPO on ``make_encoded_env(lam_range=)``
    (lambda drawn per episode, read from the observation), saved as ``sb3:DIR`` and loaded without
    unpickling. Greedy, it calls the dear agent at low lambda and the cheap one at high lambda; the
    loaded policy reports its range (what ``eval/run/serve --lam`` read) and clamps outside it with one
    warning. 4,096 steps; seeds 0-2 pass (measured: all-dear at 0.01, all-cheap at 1.5)."""
    pytest.importorskip("sb3_contrib")
    from sb3_contrib import MaskablePPO

    from puppeteer.policies.external import load_sb3, save_sb3

    pool = _price_pool(tmp_path)
    tasks = load_suite("mix-math-mmlu", "train", n=32, seed=0)
    env = make_encoded_env(
        "hashing", pool=pool, tasks=tasks, max_steps=1, min_steps=1, cost_model="usd", lam_range=RANGE
    )
    model = MaskablePPO(
        "MlpPolicy", env, n_steps=256, batch_size=64, learning_rate=1e-3, ent_coef=0.0, seed=0, device="cpu"
    )
    model.learn(total_timesteps=4096)
    save_sb3(model, tmp_path / "ppo", pool, "hashing", 1, min_steps=1, lam_range=RANGE)
    policy = load_sb3(tmp_path / "ppo", pool)
    assert policy.lam_range == LamRange(*RANGE)

    def share_dear(lam: float) -> float:
        picks = []
        for i in range(16):
            obs, _ = env.unwrapped.reset(seed=i, options={"task_index": i, "lam": lam})
            picks.append(policy.act(obs, np.random.default_rng(i)) == DEAR)
        return float(np.mean(picks))

    curve = [share_dear(lam) for lam in (0.01, 0.05, 0.2, 0.5, 1.5)]
    assert curve[0] >= 0.9 and curve[-1] <= 0.1, curve
    assert all(a >= b - 0.2 for a, b in itertools.pairwise(curve)), curve
    with caplog.at_level(logging.WARNING):
        above = [share_dear(9.0) for _ in range(2)]
    assert above == [curve[-1]] * 2  # acts as at the top of its range
    assert sum("outside the policy's trained range" in r.getMessage() for r in caplog.records) == 1
    # saved without its range, the observation it was trained on cannot be rebuilt: refused, not misread
    save_sb3(model, tmp_path / "plain", pool, "hashing", 1, min_steps=1)
    assert json.loads((tmp_path / "plain" / "puppeteer.json").read_text())["lam_range"] is None
    with pytest.raises(ValueError, match="do not fit"):
        load_sb3(tmp_path / "plain", pool)


def test_relabelling_reprices_the_same_calls_exactly(tmp_path: Path) -> None:
    """``trainer.lam_relabel``: a group's one-call episodes re-priced at another lambda are the episodes
    the env pays at that lambda (same reset seed, same calls)."""
    pool = _price_pool(tmp_path)
    env = build_env(_settings(lam_range=RANGE), pool=pool, suite="mix-math-mmlu", split="train", n_tasks=4)
    policy = _policy(pool)

    def group(lam: float) -> list:
        return run_lockstep([env], policy, [(7, 1), (7, 1)], first_actions=[DEAR, CHEAP], lams=[lam, lam])

    feats, priced = _relabelled(policy, [group(0.3)], [[0.05, 1.2]], phi=1.0)
    for row, x in zip(priced.tolist(), (0.05, 1.2), strict=True):
        assert row == pytest.approx([e.returns[0] for e in group(x)], abs=1e-5)
    assert np.array_equal(feats[1].lam, LamRange(*RANGE).features(1.2))


@pytest.mark.learning
def test_relabelling_learns_where_the_draws_favour_one_agent(tmp_path: Path) -> None:
    """Over [0.01, 1] three draws in four sit below the break-even (~0.3), and seeds 1 and 3 put the dear
    agent first at every lambda after 2048 episodes (measured). Learning each group's first decision at
    four more lambdas from the same calls (``lam_relabel=4``) finds the price where the choice turns."""
    pool = _price_pool(tmp_path)
    lam_range = (0.01, 1.0)
    env = build_env(
        _settings(lam_range=lam_range), pool=pool, suite="mix-math-mmlu", split="train", n_tasks=32
    )
    policy = _policy(pool, lam_range=lam_range, seed=1)
    cfg = ReinforceConfig(
        episodes=1536, batch_episodes=64, lr=0.01, first_step="all", eval_every=10**6, seed=1, lam_relabel=4
    )
    train(env, policy, cfg, tmp_path / "run")
    curve = [_p_dear(policy, env, lam) for lam in (0.01, 0.1, 1.0)]
    assert curve[0] > 0.9 and curve[-1] < 0.1, curve
    multi = build_env(replace(_settings(lam_range=lam_range), max_steps=2), pool=pool, tasks=env.tasks)
    with pytest.raises(ValueError, match="max_steps=1"):
        train(multi, _policy(pool, lam_range=lam_range), replace(cfg, episodes=8), tmp_path / "a")
    with pytest.raises(ValueError, match="first_step=all"):
        train(env, policy, replace(cfg, first_step="sample", episodes=8), tmp_path / "b")
    plain = build_env(_settings(), pool=pool, tasks=env.tasks)
    with pytest.raises(ValueError, match="needs lam_range"):
        train(plain, _policy(pool, lam_range=None), replace(cfg, episodes=8), tmp_path / "c")


def test_a_conditioned_run_needs_a_policy_that_reads_lambda_and_a_baseline_that_shares_it(
    tmp_path: Path,
) -> None:
    pool = _price_pool(tmp_path)
    env = build_env(_settings(lam_range=RANGE), pool=pool, suite="mix-math-mmlu", split="train", n_tasks=4)
    cfg = ReinforceConfig(episodes=8, batch_episodes=8, group_size=4)
    with pytest.raises(ValueError, match="does not read it"):
        train(env, _policy(pool, lam_range=None), cfg, tmp_path / "a")
    with pytest.raises(ValueError, match="ema"):
        ema = ReinforceConfig(episodes=8, batch_episodes=8, baseline="ema")
        train(env, _policy(pool), ema, tmp_path / "b")
    with pytest.raises(KeyError, match="obs\\['lam'\\]"):
        _policy(pool).features({"task": "q", "state": "", "mask": [1, 1, 1], "step": 0, "counts": [0, 0, 0]})


def test_a_plain_lam_run_keeps_its_fingerprint_and_files(tmp_path: Path) -> None:
    """Runs that do not use the new setting resume from (and equal) the checkpoints made before it."""
    env = ConductorEnv(
        mode="step", pool="sim-paper", suite="arith", split="train", n_tasks=4, lam=0.2, max_steps=2,
        min_steps=1,
    )  # fmt: skip
    policy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=2, min_steps=1))
    cfg = ReinforceConfig(episodes=64, batch_episodes=32, first_step="all", seed=3)
    fingerprint = run_fingerprint(env, policy, cfg)
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()
    assert digest == "b3e2e349cbc9679540c879e567f0c3a34b92766954224b8cd703734afeb748f7"  # before issue 36
    assert "lam_range" not in fingerprint["env"] and "lam_range" not in fingerprint["policy"]
    policy.save(tmp_path / "p")
    assert "lam_range" not in json.loads((tmp_path / "p" / "policy.json").read_text())["config"]
    conditioned = PuppeteerPolicy(
        env.pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=2, min_steps=1, lam_range=(0.01, 0.5))
    )
    ranged = ConductorEnv(
        mode="step", pool="sim-paper", suite="arith", split="train", n_tasks=4, max_steps=2, min_steps=1,
        lam_range=(0.01, 0.5),
    )  # fmt: skip
    other = run_fingerprint(ranged, conditioned, cfg)
    assert other["env"] != fingerprint["env"] and other["policy"] != fingerprint["policy"]


# --------------------------------------------------------------------------- using it at a price


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Pool]:
    """An untrained but conditioned policy on the toy pool, saved (what eval / run / serve load)."""
    tmp = tmp_path_factory.mktemp("conditioned")
    pool = _price_pool(tmp)
    _policy(pool, lam_range=(0.05, 0.5)).save(tmp / "policy")
    return tmp / "policy", pool


def test_outside_its_range_the_policy_acts_as_at_the_nearest_end_with_one_warning(
    trained: tuple[Path, Pool], caplog: pytest.LogCaptureFixture
) -> None:
    path, pool = trained
    policy = PuppeteerPolicy.load(path, pool)
    env = build_env(_settings(), pool=pool, suite="mix-math-mmlu", split="test", n_tasks=2)
    obs, _ = env.reset(seed=0, options={"task_index": 0, "lam": 3.0})
    at_end, _ = env.reset(seed=0, options={"task_index": 0, "lam": 0.5})
    with caplog.at_level(logging.WARNING):
        far = policy.features_batch([obs, obs])
    assert np.array_equal(far[0].lam, policy.features(at_end).lam)
    assert caplog.text.count("outside the policy's trained range [0.05, 0.5]") == 1
    # eval: the env still prices the episodes at the asked lambda, the policy sees the clamped one
    eps = run_lockstep([env], policy, [(0, 0)], greedy=True, lams=[3.0])
    assert eps[0].lam == 3.0 and eps[0].trajectory["lam"] == 3.0
    with Orchestrator.load(f"puppeteer:{path}", pool, max_steps=1, lam=0.01, suite="mix-math-mmlu") as orch:
        assert orch.lam == 0.05  # the default, clamped once
        assert orch.episode_lam(0.2) == 0.2 and orch.episode_lam(9.0) == 0.5
        result = orch.answer(load_suite("mix-math-mmlu", "test", n=1)[0].question, lam=9.0)
    assert result.lam == 0.5 and result.calls == 1


@pytest.fixture(scope="module")
def server(trained: tuple[Path, Pool]) -> Iterator[str]:
    pytest.importorskip("fastapi")
    uvicorn = pytest.importorskip("uvicorn")
    from puppeteer.serving.serve import create_app

    path, pool = trained
    orch = Orchestrator.load(f"puppeteer:{path}", pool, max_steps=1, lam=0.1, suite="mix-math-mmlu")
    srv = uvicorn.Server(uvicorn.Config(create_app(orch), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(200):  # bounded wait for start-up
        if srv.started:
            break
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}/v1"
    srv.should_exit = True
    thread.join(timeout=10)
    orch.close()


def test_the_served_router_takes_lambda_per_request(server: str) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server, api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": load_suite("mix-math-mmlu", "test", n=1)[0].question}]

    def lam_used(**extra: object) -> float:
        reply = client.chat.completions.create(model="puppeteer", messages=messages, **extra)  # type: ignore[call-overload]
        return reply.usage.model_extra["lam"]

    assert lam_used() == 0.1  # the server's --lam
    assert lam_used(extra_body={"lam": 0.2}) == 0.2
    assert lam_used(extra_body={"lam": 7.0}) == 0.5  # clamped to the trained range
    assert lam_used(extra_body={"lam": 0}) == 0.05
    with pytest.raises(openai.BadRequestError, match="lam"):
        lam_used(extra_body={"lam": -1})
    import httpx

    health = httpx.get(server.removesuffix("/v1") + "/health").json()
    assert health["lam_range"] == [0.05, 0.5] and health["lam"] == 0.1


def test_a_fixed_lambda_router_refuses_a_per_request_lambda() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from puppeteer.serving.serve import create_app

    with Orchestrator.load("single:0", "sim-paper", suite="arith") as orch:
        client = TestClient(create_app(orch))
        question = load_suite("arith", "test")[0].question  # a simulated pool answers its suite's items
        body = {"model": "puppeteer", "messages": [{"role": "user", "content": question}]}
        plain = client.post("/v1/chat/completions", json=body)
        assert plain.status_code == 200 and "lam" not in plain.json()["usage"]
        refused = client.post("/v1/chat/completions", json={**body, "lam": 0.2})
        assert refused.status_code == 400 and "one price of cost" in refused.json()["error"]["message"]


# --------------------------------------------------------------------------- the commands


def test_sweep_conditioned_draws_the_front_and_eval_and_run_take_lam(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from puppeteer.cli import main

    out = tmp_path / "front"
    overrides = [
        "pool=sim-paper", "suite=arith", "policy.encoder=hashing", "policy.hidden=16", "max_steps=1",
        "trainer.episodes=44", "trainer.first_step=all", "trainer.eval_every=1000", "suite.n_train=8",
        "suite.n_val=4", "suite.n_eval=6",
    ]  # fmt: skip
    args = ["sweep", "--conditioned", "--lam-range", "0,0.5", "--points", "3", "--seeds", "1"]
    assert main([*args, "--out", str(out), *overrides]) == 0
    front = json.loads((out / "front.json").read_text())
    grid = front["grid"]
    assert len(grid) == 3 and grid[0] == 0.0 and grid[-1] == 0.5  # the range from 0: a shifted log scale
    assert [r["lam"] for r in front["conditioned"]] == grid
    assert sorted(r["lam"] for r in front["fixed"]) == grid  # ends and middle: every point here
    assert [r["lam"] for r in front["optimum"]] == grid and front["backend"] == "sim"
    assert (out / "front.png").stat().st_size > 0 and "conditioned / fixed" in (out / "front.md").read_text()
    run = out / "conditioned" / "seed0"
    results = json.loads((run / "results.json").read_text())
    assert results["lam_range"] == [0.0, 0.5] and len(results["heldout_by_lam"]) == 5
    assert json.loads((run / "final" / "policy.json").read_text())["config"]["lam_range"] == [0.0, 0.5]
    assert main(["sweep", "--conditioned", "--lam-range", "0,0.5", "--out", str(out), "lam=0.2"]) == 2
    capsys.readouterr()
    # eval --lam and run --lam use the conditioned policy; outside its range with a warning
    spec = f"puppeteer:{run / 'final'}"
    with caplog.at_level(logging.WARNING):
        code = main(
            ["eval", "--pool", "sim-paper", "--suite", "arith", "--policy", spec, "--n", "3",
             "--max-steps", "1", "--lam", "2", "--json", "--out", str(tmp_path / "eval")]
        )  # fmt: skip
    # (the runs' Hydra logging may still write to stdout in this process: the summary is the last line)
    shown = capsys.readouterr()
    assert code == 0 and json.loads(shown.out.strip().splitlines()[-1])["lam"] == 2.0
    assert "outside the policy's trained range [0, 0.5]" in shown.out + shown.err + caplog.text
    argv = [
        "run",
        "--policy",
        spec,
        "--pool",
        "sim-paper",
        "--suite",
        "arith",
        "--max-steps",
        "1",
        "--lam",
        "0.2",
    ]
    assert main(argv) == 0 and "lambda=0.2" in capsys.readouterr().out
