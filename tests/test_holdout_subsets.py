"""Held-out agent subsets (issue 29, section 4): k-of-n subsets kept out of training by construction."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from puppeteer.availability import draw_subset, holdout_subsets
from puppeteer.env import ConductorEnv
from puppeteer.jobs.hydra_entry import check_values
from puppeteer.policies.puppeteer import PolicyConfig, PuppeteerPolicy
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

    monkeypatch.setattr("puppeteer.env.draw_subset", recording)
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
