"""One builder for every job's env, policy and trainer (puppeteer/jobs/builder.py)."""

from __future__ import annotations

import pytest
import torch

from puppeteer.agents.pool import load_pool
from puppeteer.envs.build import BackendSpec, EnvConfig
from puppeteer.jobs.builder import StepJob, env_copies, heldout
from puppeteer.jobs.train import build, job_of
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.train.reinforce import ReinforceConfig, evaluate


def _job() -> StepJob:
    return StepJob(
        settings=EnvConfig(mode="step", lam=0.2, max_steps=2, k_available=3),
        pool=load_pool("sim-paper"),
        policy_config=PolicyConfig(encoder="hashing", hidden=8, max_steps=2),
        trainer=ReinforceConfig(episodes=16, batch_episodes=8),
        suite="arith",
        seed=3,
    )


def test_training_env_draws_agent_subsets_the_others_do_not() -> None:
    job = _job()
    train_env, test_env = job.env("train", 5, training=True), job.env("test", 7)
    assert train_env.config.k_available == 3 and test_env.config.k_available is None
    assert (train_env.config.lam, test_env.config.lam) == (0.2, 0.2)
    assert len(train_env.tasks) == 5 and len(test_env.tasks) == 7
    assert train_env.executor.backend is not test_env.executor.backend  # own answer keys
    assert train_env.backend_spec == test_env.backend_spec == BackendSpec()
    train_env.reset(seed=0)
    assert int(train_env.available().sum()) == 3


def test_seeded_job_changes_policy_and_trainer_seed_only() -> None:
    job = _job()
    other = job.seeded(7)
    assert (other.seed, other.trainer.seed) == (7, 7)
    assert other.settings == job.settings and other.trainer.episodes == job.trainer.episodes
    a, b, c = job.policy(), job.policy(), other.policy()
    wa, wb, wc = (torch.cat([w.detach().flatten() for w in p.scorer.parameters()]) for p in (a, b, c))
    assert wa.equal(wb) and not wa.equal(wc)


def test_heldout_is_the_greedy_evaluation_on_clones() -> None:
    job = _job()
    env, policy = job.env("test", 10), job.policy()
    assert len(env_copies(env, 4)) == 4
    assert heldout(env, policy, 4) == pytest.approx(evaluate([env], policy), abs=1e-12)


def test_train_job_builds_from_the_composed_config() -> None:
    cfg = {
        "lam": 0.3,
        "gamma": 0.9,
        "phi": None,
        "max_steps": 3,
        "min_steps": 1,
        "cost_model": "tokens",
        "temperature": 0.0,
        "samples_per_item": None,
        "k_available": 2,
        "cache": None,
        "seed": 5,
        "pool": {"name": "sim-paper"},
        "suite": {"name": "arith", "train_split": "train", "eval_split": "test", "n_train": 6, "n_eval": 4},
        "policy": {"encoder": "hashing", "hidden": 8, "encoder_options": None},
        "trainer": {"episodes": 8, "batch_episodes": 4},
    }
    env, eval_env, policy, tcfg = build(cfg)
    assert (env.config.k_available, eval_env.config.k_available) == (2, None)
    assert env.config.min_steps == policy.config.min_steps == 1 and env.config.gamma == 0.9
    assert (len(env.tasks), len(eval_env.tasks)) == (6, 4)
    assert tcfg.seed == 5 and tcfg.episodes == 8 and job_of(cfg).seed == 5


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_steps", 99_999_999_999, "max_steps=99999999999: must be <= 256"),
        ("k_available", 99_999_999_999, r"k_available=99999999999: must offer 1\.\.10 agents"),
        ("k_available", 0, r"k_available=0: must offer 1\.\.10"),
    ],
)
def test_sizes_beyond_what_the_pool_or_the_scorer_holds_are_refused_before_any_work(
    key: str, value: int, message: str
) -> None:
    """Found by the CLI fuzz: an endless scorer allocation (max_steps) and a k-of-n subset larger than
    the pool (k_available) used to fail only after Hydra had made its run directory."""
    from puppeteer.jobs.hydra_entry import check_values
    from puppeteer.train.config_schema import register_configs

    register_configs()
    with pytest.raises(ValueError, match=message):
        check_values(["pool=sim-paper", f"{key}={value}"])


def test_episodes_to_stay_counts_from_the_last_rise_above_the_target() -> None:
    from tests.experiment_modules import experiment_module

    study = experiment_module("_shared", "study")  # experiments/_shared/study.py
    episodes_to_reach, episodes_to_stay = study.episodes_to_reach, study.episodes_to_stay

    curve = [(100, 0.5), (200, 0.95), (300, 0.8), (400, 0.91), (500, 0.99)]
    assert episodes_to_reach(curve, 0.9) == 200  # touched once, then fell back
    assert episodes_to_stay(curve, 0.9) == 400
    assert episodes_to_stay(curve, 0.95) == 500
    assert episodes_to_stay([*curve, (600, 0.7)], 0.9) is None  # ends below
    assert episodes_to_stay([], 0.9) is None
