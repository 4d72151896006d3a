"""What `puppeteer train` does with no flag: the cost model the pool supports, a cheap transcript
encoder, and the learner settings that route (checked on the composed config, not by training)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from puppeteer.envs.encoders import hashing_encoder
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.reward import auto_cost_model
from puppeteer.jobs.train import cost_model_of, job_of
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig, state_window
from puppeteer.types import ModelSpec


def _model(**kw: float) -> ModelSpec:
    return ModelSpec(name="m", backend="sim", target="m", params_b=1.0, **kw)


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        ([_model(price_in=1.0, price_out=2.0), _model(price_out=0.5)], "usd"),
        ([_model(price_in=1.0), _model(prefill_tps=50.0, decode_tps=10.0)], "tokens"),  # one has no price
        ([_model(prefill_tps=50.0, decode_tps=10.0), _model(prefill_tps=90.0, decode_tps=20.0)], "minutes"),
        ([_model(prefill_tps=50.0)], "tokens"),  # a speed needs both rates
        ([], "tokens"),
    ],
)
def test_auto_picks_the_units_every_model_of_the_pool_declares(models: list, expected: str) -> None:
    assert auto_cost_model(models) == expected


def _composed(*overrides: str) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from puppeteer.train.config_schema import register_configs
    from puppeteer.utils.resources import data_dir

    register_configs()
    with initialize_config_dir(config_dir=str(data_dir("configs")), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def test_the_default_training_config_prices_the_pools_units_and_carries_the_routing_learner() -> None:
    cfg = _composed("pool=sim-routing", "suite=mix-routing", "lam=0.1")
    assert cfg["cost_model"] == "auto"
    assert cost_model_of(cfg) == "usd"  # every sim-routing model has a list price
    assert cost_model_of({**cfg, "pool": {**cfg["pool"], "name": "local-mix"}}) == "minutes"
    assert cost_model_of({**cfg, "cost_model": "tokens"}) == "tokens"  # a user's choice wins
    job = job_of(cfg)
    assert job.settings.cost_model == "usd"
    assert job.trainer.first_step == "all" and job.trainer.entropy_coef == 0.05
    assert job.trainer.entropy_final_fraction == 0.1
    assert job.trainer.episodes == 16384 and job.trainer.batch_episodes == 256
    assert job.policy_config.task_dims == 8 and job.policy_config.state_encoder == "hashing"


def test_a_hashed_transcript_has_the_question_encoders_dimension_and_the_question_keeps_its_encoder(
    tmp_path: Path,
) -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", max_steps=3)
    config = PolicyConfig(encoder="hashing", encoder_options=(("dim", 64),), hidden=16, max_steps=3)
    same = PuppeteerPolicy(env.pool, config, seed=0)
    hashed = PuppeteerPolicy(env.pool, replace(config, state_encoder="hashing"), seed=0)
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(0)
    f_same, f_hashed = same.features(obs), hashed.features(obs)
    assert f_hashed.state.shape == f_same.state.shape == (64,)
    np.testing.assert_array_equal(f_hashed.task, f_same.task)
    np.testing.assert_allclose(f_hashed.state, hashing_encoder(64).encode([state_window(obs["state"])])[0])
    hashed.save(tmp_path / "p")
    assert json.loads((tmp_path / "p" / "policy.json").read_text())["config"]["state_encoder"] == "hashing"
    assert PuppeteerPolicy.load(tmp_path / "p", env.pool).config.state_encoder == "hashing"


def test_an_unknown_state_encoder_is_refused_in_one_line() -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", max_steps=3)
    with pytest.raises(ValueError, match=r"policy\.state_encoder: unknown 'bert'"):
        PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", state_encoder="bert"))
