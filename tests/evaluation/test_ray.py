"""Rollouts on Ray give the same results as the single-process path (local Ray, 2 CPUs, sim pool).

Ray start-up takes tens of seconds on 2 cores, so these few tests share one Ray instance and are slow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_local() -> Iterator[object]:
    pytest.importorskip("ray")
    from puppeteer.envs.distributed import init_ray

    ray = init_ray(None, num_cpus=2)
    yield ray
    ray.shutdown()


def _lines(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row.pop("wall_s")
    return rows


def _result(path: Path) -> dict:
    d = json.loads(path.read_text())
    for key in ("wall_s", "out_dir"):
        d.pop(key)
    return d


@pytest.mark.parametrize("spec", ["vote:3", "random-step"])
def test_eval_on_ray_equals_the_single_process_eval(ray_local, tmp_path: Path, spec: str) -> None:
    from puppeteer.evaluation.evaluate import evaluate_policy
    from puppeteer.evaluation.settings import RayExecutor

    one = evaluate_policy(spec, "sim-paper", "arith", n=30, seed=4, out_dir=tmp_path / "one", progress=False)
    ray = RayExecutor(workers=3)
    many = evaluate_policy(spec, "sim-paper", "arith", n=30, seed=4, out_dir=tmp_path / "ray", ray=ray)
    assert _result(tmp_path / "one" / "results.json") == _result(tmp_path / "ray" / "results.json")
    assert _lines(tmp_path / "one" / "trajectories.jsonl") == _lines(tmp_path / "ray" / "trajectories.jsonl")
    assert many.accuracy == one.accuracy and many.n == 30 and 0 < one.correct < 30


def test_cli_eval_with_ray(ray_local, tmp_path: Path) -> None:
    from puppeteer.cli import main

    assert (
        main(
            [
                "eval",
                "--pool",
                "sim-paper",
                "--suite",
                "arith",
                "--policy",
                "vote:3",
                "--n",
                "12",
                "--out",
                str(tmp_path / "cli"),
                "--ray",
                "--ray-workers",
                "2",
                "--quiet",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "cli" / "results.json").read_text())["n"] == 12


def test_training_with_ray_rollout_workers_equals_the_single_process_run(ray_local, tmp_path: Path) -> None:
    from puppeteer.envs.env import ConductorEnv
    from puppeteer.policies.puppeteer import PuppeteerPolicy
    from puppeteer.policies.puppeteer_config import PolicyConfig
    from puppeteer.train.reinforce import ReinforceConfig, train

    def run(workers: int, out: Path):
        env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", split="train", max_steps=3)
        policy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=3), seed=0)
        cfg = ReinforceConfig(
            episodes=48,
            batch_episodes=16,
            group_size=4,
            parallel_envs=4,
            eval_every=1000,
            seed=0,
            rollout_workers=workers,
        )
        state = train(env, policy, cfg, out)
        return state, policy

    s1, p1 = run(0, tmp_path / "local")
    s2, p2 = run(2, tmp_path / "ray")
    assert s1.history == s2.history and s1.episodes == s2.episodes == 48
    local, ray = tmp_path / "local" / "trajectories.jsonl", tmp_path / "ray" / "trajectories.jsonl"
    assert local.read_text() == ray.read_text()
    for a, b in zip(p1.scorer.parameters(), p2.scorer.parameters(), strict=True):
        assert torch.equal(a, b)
