"""Held-out agent subsets (issue 29, section 4): k-of-n subsets kept out of training by construction."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from puppeteer.agents.availability import draw_subset, holdout_subsets
from puppeteer.envs.env import ConductorEnv
from puppeteer.jobs.hydra_entry import check_values
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.train.config_schema import register_configs
from puppeteer.train.reinforce import ReinforceConfig, train


def test_the_picker_is_seeded_distinct_and_leaves_subsets_to_train_on() -> None:
    held = holdout_subsets(10, 3, 10, seed=0)
    assert held == holdout_subsets(10, 3, 10, seed=0) != holdout_subsets(10, 3, 10, seed=1)
    assert len(set(held)) == 10 and all(len(s) == 3 and list(s) == sorted(set(s)) for s in held)
    with pytest.raises(ValueError, match="leave some"):
        holdout_subsets(4, 2, math.comb(4, 2))


def test_draws_are_uniform_over_the_subsets_left_and_never_a_held_out_one() -> None:
    held = frozenset(frozenset(s) for s in [(0, 1), (2, 3)])
    rng = np.random.default_rng(0)
    counts = Counter(
        tuple(np.flatnonzero(draw_subset(rng, np.ones(4, bool), 2, held)).tolist()) for _ in range(4000)
    )
    assert set(counts) == {(0, 2), (0, 3), (1, 2), (1, 3)}  # C(4, 2) = 6 less the two held out
    assert min(counts.values()) > 850  # about 1000 each
    everything = frozenset(frozenset(s) for s in [(0, 1), (0, 2), (1, 2)])
    with pytest.raises(ValueError, match="every 2-of-3 subset is held out"):
        draw_subset(rng, np.ones(3, bool), 2, everything)


def test_a_training_env_never_offers_a_held_out_subset_but_reset_may_still_name_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = holdout_subsets(10, 3, 10, seed=0)
    env = ConductorEnv(
        mode="step", pool="sim-paper", suite="arith", n_tasks=8, max_steps=1, min_steps=1,
        k_available=3, holdout_subsets=held,
    )  # fmt: skip
    offered = Counter()
    for i in range(2000):
        obs, _ = env.reset(seed=i)
        offered[tuple(np.flatnonzero(obs["mask"][:10]).tolist())] += 1
    assert len(offered) == math.comb(10, 3) - 10 and not set(offered) & set(held)
    obs, _ = env.reset(seed=0, options={"available": list(held[0])})  # evaluation names it
    assert tuple(np.flatnonzero(obs["mask"][:10]).tolist()) == held[0]
    # REINFORCE on it (its clones draw too): no training episode is offered a held-out subset
    drawn: list[tuple[int, ...]] = []

    def recording(*args: object) -> np.ndarray:
        mask = draw_subset(*args)  # type: ignore[arg-type]
        drawn.append(tuple(np.flatnonzero(mask).tolist()))
        return mask

    monkeypatch.setattr("puppeteer.envs.env.draw_subset", recording)
    policy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=8, max_steps=1, min_steps=1))
    train(env, policy, ReinforceConfig(episodes=64, batch_episodes=32, seed=0), tmp_path / "run")
    assert len(drawn) >= 64 and not set(drawn) & set(held)
    with pytest.raises(ValueError, match="needs k_available"):
        ConductorEnv(mode="step", pool="sim-paper", suite="arith", n_tasks=2, holdout_subsets=held)
    with pytest.raises(ValueError, match="each must name 3 distinct agents"):
        ConductorEnv(mode="step", pool="sim-paper", suite="arith", n_tasks=2, k_available=3,
                     holdout_subsets=[(0, 1)])  # fmt: skip
    with pytest.raises(ValueError, match=r"agent ids must be in 0\.\.9"):
        ConductorEnv(mode="step", pool="sim-paper", suite="arith", n_tasks=2, k_available=3,
                     holdout_subsets=[(0, 1, 12)])  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["holdout_subsets=[[0,1,3]]"], "needs k_available"),
        (["k_available=3", "holdout_subsets=[[0,1]]"], "each must name 3 distinct agents"),
        (["k_available=3", "holdout_subsets=[[0,1,99]]"], r"agent ids must be in 0\.\.9"),
        (["k_available=3", "holdout_subsets=[0,1,2]"], "must be a list of lists"),
    ],
)
def test_the_training_config_refuses_bad_held_out_subsets_before_any_work(
    overrides: list[str], message: str
) -> None:
    register_configs()
    with pytest.raises(ValueError, match=message):
        check_values(["pool=sim-paper", *overrides])
    check_values(["pool=sim-paper", "k_available=3", "holdout_subsets=[[0,1,3],[2,4,6]]"])  # valid


@pytest.mark.learning
def test_trying_every_agent_first_works_over_k_of_n_subsets_and_never_a_held_out_one(tmp_path: Path) -> None:
    """trainer.first_step=all with k_available: each group draws its subset in the trainer, offers it
    to all its episodes and tries each of its k agents once as the first action; no group is offered a
    held-out subset, and the learned router still routes (each domain to its specialist among those on
    offer: the toy's math model on GSM8K, the knowledge model on MMLU)."""
    import json

    import yaml

    spec = {
        "name": "toy-k-of-n",
        "backend_options": {"sim": {"seed": 0, "rho": 0.5, "columns": {"gsm8k": "G", "mmlu": "M"}}},
        "models": {
            name: {"backend": "sim", "target": name, "price_in": 0.1, "price_out": 0.4, "params_b": 8,
                   "options": {"skills": skills, "tokens_mean": 300}}
            for name, skills in [("mathy", {"G": 95, "M": 30}), ("wordy", {"G": 30, "M": 92}),
                                 ("so-so", {"G": 60, "M": 60}), ("weak", {"G": 20, "M": 20})]
        },
        "agents": [{"name": f"{m}-cot", "model": m, "pattern": "cot", "description": m}
                   for m in ("mathy", "wordy", "so-so", "weak")],
    }  # fmt: skip
    pool_file = tmp_path / "toy-k-of-n.yaml"
    pool_file.write_text(yaml.safe_dump(spec))
    held = ((1, 2, 3),)
    env = ConductorEnv(
        mode="step", pool=str(pool_file), suite="mix-math-mmlu", split="train", n_tasks=64, max_steps=1,
        min_steps=1, k_available=3, holdout_subsets=held, cost_model="usd", lam=0.1,
    )  # fmt: skip
    policy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=32, max_steps=1, min_steps=1))
    cfg = ReinforceConfig(episodes=6144, batch_episodes=96, lr=0.01, first_step="all", seed=0)
    train(env, policy, cfg, tmp_path / "run")
    lines = [json.loads(x) for x in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 6144
    groups = [lines[i : i + 3] for i in range(0, len(lines), 3)]
    names = [a.name for a in env.pool.agents]
    subsets = Counter()
    for g in groups:
        assert len({e["task_id"] for e in g}) == 1  # one task per group
        tried = tuple(sorted(e["steps"][0]["agent_id"] for e in g))
        assert len(set(tried)) == 3  # each agent of the group's subset once
        subsets[tried] += 1
    assert set(subsets) == {(0, 1, 2), (0, 1, 3), (0, 2, 3)}  # C(4, 3) less the held-out one
    # the router routes by domain among those on offer (measured 18 / 20 and 19 / 20 on a training
    # subset); the held-out one (1, 2, 3), without the math model, still sends MMLU to wordy (20 / 20)
    test = ConductorEnv(
        mode="step", pool=str(pool_file), suite="mix-math-mmlu", split="test", n_tasks=40, max_steps=1,
        min_steps=1, cost_model="usd", lam=0.1,
    )  # fmt: skip
    for offer, want in (
        ([0, 1, 2], {"gsm8k": "mathy-cot", "mmlu": "wordy-cot"}),
        ([1, 2, 3], {"mmlu": "wordy-cot"}),
    ):
        chosen = Counter()
        for i, task in enumerate(test.tasks):
            obs, _ = test.reset(seed=i, options={"task_index": i, "available": offer})
            chosen[task.domain, names[policy.choose(policy.features(obs), greedy=True)]] += 1
        for domain, agent in want.items():
            assert chosen[domain, agent] >= 0.8 * sum(v for (d, _), v in chosen.items() if d == domain)
