from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from puppeteer.envs.env import ConductorEnv
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.tasks import load_suite
from puppeteer.train.reinforce import evaluate
from tests.experiment_modules import experiment_module

_offline = experiment_module("analytics", "offline")  # experiments/analytics/offline.py
OfflineConfig, ReplayBackend, ReplayMiss = _offline.OfflineConfig, _offline.ReplayBackend, _offline.ReplayMiss
Transition, fit_rwr, read_records = _offline.Transition, _offline.fit_rwr, _offline.read_records
replay, rwr_weights = _offline.replay, _offline.rwr_weights
train_offline, behaviour_probs = _offline.train_offline, _offline.behaviour_probs

FAST = PolicyConfig(encoder="hashing", hidden=32, max_steps=3)


def _env(**kw) -> ConductorEnv:
    return ConductorEnv(
        mode="step", pool="sim-paper", suite="arith", split="train", n_tasks=40, max_steps=3, lam=0.1, **kw
    )


@pytest.fixture(scope="module")
def random_logs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three runs of a random router over the same 40 items (seeds 0-2: other sample indices and choices)."""
    root = tmp_path_factory.mktemp("logs")
    tasks = load_suite("arith", "train", n=40)  # the items of _env()
    for seed in range(3):
        evaluate_policy(
            "random-step",
            "sim-paper",
            "arith",
            split="train",
            tasks=tasks,
            out_dir=root / f"s{seed}",
            seed=seed,
            lam=0.1,
            max_steps=3,
            progress=False,
        )
    return [root / f"s{seed}" for seed in range(3)]


def test_replay_rebuilds_the_logged_returns_without_model_calls(random_logs: list[Path]) -> None:
    records = read_records(random_logs)
    env = _env(backend=ReplayBackend())
    policy = PuppeteerPolicy(env.pool, FAST)
    data = replay(records, env, policy)
    first = {}
    for t in data:
        first.setdefault(t.episode, t)
    assert len(first) == len(records)
    for k, rec in enumerate(records):
        assert first[k].ret == pytest.approx(rec["reward"], abs=1e-9)
        assert first[k].action == (rec["steps"][0]["agent_id"] if rec["steps"] else env.pool.terminator_id)
    n_decisions = sum(len(r["steps"]) + (len(r["steps"]) < 3) for r in records)
    assert len(data) == n_decisions


def test_replay_refuses_calls_it_has_no_log_for() -> None:
    env = _env(backend=ReplayBackend())
    env.reset(seed=0, options={"task_index": 0})
    with pytest.raises(ReplayMiss):
        env.step(0)


def test_rwr_weights_known_values() -> None:
    w = rwr_weights(np.array([1.0, 0.0]), beta=1.0, max_weight=100.0)
    assert w[0] / w[1] == pytest.approx(np.e)
    # G - mean = (0.75, -0.25, ...); beta 0.01: exp(75) is clipped to 5, exp(-25) is ~0
    w = rwr_weights(np.array([1.0, 0.0, 0.0, 0.0]), beta=0.01, max_weight=5.0)
    raw = np.array([5.0, np.exp(-25.0), np.exp(-25.0), np.exp(-25.0)])
    assert w == pytest.approx(raw / raw.mean())
    assert w.mean() == pytest.approx(1.0)


def test_rwr_prefers_the_action_that_paid(random_logs: list[Path]) -> None:
    env = _env()
    policy = PuppeteerPolicy(env.pool, FAST, seed=0)
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    f = policy.features(obs)
    good, bad = 0, 1
    data = [Transition(f, good, 1.0, 0), Transition(f, bad, 0.0, 1)] * 20
    fit_rwr(policy, data, OfflineConfig(beta=0.1, updates=60, batch_size=16))
    with torch.no_grad():
        p = torch.softmax(policy.logits([f]), dim=-1)[0]
    assert p[good] > 0.9 and p[good] > 10 * p[bad]


def test_iw_offline_training_from_random_logs_beats_the_logging_policy(random_logs: list[Path]) -> None:
    env = _env()
    # the random logs never stop before an agent acted: the policy must not either (min_steps=1)
    policy = PuppeteerPolicy(env.pool, replace(FAST, min_steps=1), seed=0)
    data, losses = train_offline(random_logs, env, policy, OfflineConfig(objective="iw", updates=100))
    assert len(data) > 120 and np.isfinite(losses).all()
    logged = np.mean([r["reward"] for r in read_records(random_logs)])
    greedy = evaluate(env, policy)["return"]
    assert greedy > logged


def test_behaviour_probabilities_are_step_frequencies(random_logs: list[Path]) -> None:
    env = _env()
    policy = PuppeteerPolicy(env.pool, FAST)
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    f0 = policy.features(obs)
    f1 = replace(f0, step=1)
    data = [
        Transition(f0, 0, 1.0, 0),
        Transition(f0, 0, 1.0, 1),
        Transition(f0, 1, 0.0, 2),
        Transition(f1, 10, 1.0, 0),
    ]
    assert behaviour_probs(data) == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1.0])
