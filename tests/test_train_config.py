"""``puppeteer train``'s Hydra configs: groups from envs/ and agents/."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from puppeteer.resources import available, data_dir
from puppeteer.tasks import split_sizes
from puppeteer.tasks.spec import suite_names
from puppeteer.train.config_schema import fit_to_split, register_configs

CONFIGS = str(data_dir("configs"))


@pytest.fixture
def composer() -> Iterator[object]:
    register_configs()
    with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
        yield lambda *overrides: compose(config_name="train", overrides=list(overrides))
    GlobalHydra.instance().clear()


# ------------------------------------------------------------------ groups from the declarative files


def test_every_suite_and_pool_is_a_config_group_option(composer) -> None:
    assert len(suite_names()) >= 12 and len(available("agents")) >= 3
    for suite in suite_names():
        cfg: DictConfig = composer(f"suite={suite}")
        assert cfg.suite.name == suite and cfg.suite.eval_split == "test"
    for pool in available("agents"):
        assert composer(f"pool={pool}").pool.name == pool


def test_no_copies_of_suites_or_pools_under_configs() -> None:
    assert not (Path(CONFIGS) / "suite").exists() and not (Path(CONFIGS) / "pool").exists()


def test_suite_sizes_are_upper_bounds_that_fit_the_split(caplog: pytest.LogCaptureFixture) -> None:
    capacity = split_sizes("mix-paper")["test"]
    assert capacity < 200  # the README's suite=mix-paper used to ask for more than the mix holds
    with caplog.at_level(logging.WARNING):
        assert fit_to_split("mix-paper", "test", 200) == capacity
    assert "mix-paper" in caplog.text and str(capacity) in caplog.text
    assert fit_to_split("arith", "test", 200) == 200  # arith keeps its documented default
    assert fit_to_split("arith", "test", None) is None
