"""Settings that left the library after their study (policy.step_logits, stop_prior,
card_noise, rest_dropout): a saved policy or run config that names them off still loads; one that
turns one on is refused in one line that names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from puppeteer.agents.pool import load_pool
from puppeteer.envs.env import ConductorEnv
from puppeteer.errors import UserError
from puppeteer.jobs.train import job_of
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import REMOVED_SETTINGS, PolicyConfig, RemovedSetting
from puppeteer.train.config_schema import check_overrides
from puppeteer.utils.resources import data_dir

OFF = {"step_logits": False, "stop_prior": 0.0, "card_noise": 0.0, "rest_dropout": 0.0}


def _saved(tmp_path: Path, **extra: object) -> tuple[Path, PuppeteerPolicy]:
    """A saved policy whose policy.json also names ``extra`` settings (as an older version wrote)."""
    pool = load_pool("sim-paper")
    policy = PuppeteerPolicy(pool, PolicyConfig(encoder="hashing", hidden=8, max_steps=3), seed=0)
    d = policy.save(tmp_path / "p")
    meta = json.loads((d / "policy.json").read_text())
    meta["config"].update(extra)
    (d / "policy.json").write_text(json.dumps(meta))
    return d, policy


def test_a_saved_policy_that_names_the_removed_settings_off_loads_as_before(tmp_path: Path) -> None:
    assert set(OFF) == set(REMOVED_SETTINGS)
    d, policy = _saved(tmp_path, **OFF)
    loaded = PuppeteerPolicy.load(d, policy.pool)
    assert loaded.config == policy.config
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", max_steps=3)
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    with torch.no_grad():
        assert torch.equal(loaded.logits([loaded.features(obs)]), policy.logits([policy.features(obs)]))


@pytest.mark.parametrize(("name", "value"), [("step_logits", True), ("stop_prior", 3.0), ("card_noise", 0.5)])
def test_a_saved_policy_that_turns_a_removed_setting_on_is_refused_in_one_line(
    tmp_path: Path, name: str, value: object
) -> None:
    d, policy = _saved(tmp_path, **{name: value})
    with pytest.raises(RemovedSetting) as info:
        PuppeteerPolicy.load(d, policy.pool)
    message = str(info.value)
    assert "\n" not in message and f"policy.{name}={value!r}" in message and "was removed" in message
    assert str(d / "policy.json") in message
    assert isinstance(info.value, UserError)  # the CLI prints it as one line


def _run_config() -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from puppeteer.train.config_schema import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(data_dir("configs")), version_base="1.3"):
        cfg = compose("train", overrides=["pool=sim-paper", "suite=arith"])
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def test_a_run_config_json_with_the_removed_settings_off_builds_the_same_job() -> None:
    """A training run's config.json (as runs before their removal wrote it) builds the job it always did;
    with step_logits=true it is refused, naming the setting."""
    cfg = _run_config()
    old = {**cfg, "policy": {**cfg["policy"], **OFF}}
    assert job_of(old).policy_config == job_of(cfg).policy_config
    on = {**cfg, "policy": {**cfg["policy"], **OFF, "step_logits": True}}
    with pytest.raises(RemovedSetting, match=r"^policy\.step_logits=True was removed from the library"):
        job_of(on)


def test_a_removed_setting_given_on_the_command_line_is_named() -> None:
    problem = check_overrides(str(data_dir("configs")), "train", ["policy.stop_prior=3"])
    assert problem is not None and problem.startswith("policy.stop_prior was removed from the library")
