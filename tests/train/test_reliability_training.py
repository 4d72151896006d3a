"""Training survives failed calls, kills and full disks, and never runs code from a checkpoint."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from _faults import DiskFullFile, FlakyBackend

from puppeteer.envs.env import ConductorEnv
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.train.logging import JsonlLogger
from puppeteer.train.reinforce import ReinforceConfig, TrainingStopped, train
from puppeteer.utils.safeload import CheckpointError

FAST = PolicyConfig(encoder="hashing", hidden=16, max_steps=2)
CFG = ReinforceConfig(
    episodes=64, batch_episodes=16, group_size=4, eval_every=1000, checkpoint_every=2, parallel_envs=4, seed=0
)


def _env(backend=None) -> ConductorEnv:
    return ConductorEnv(
        mode="step", pool="sim-paper", suite="arith", split="train", n_tasks=24, max_steps=2, backend=backend
    )


def _flaky_env(rate: float, seed: int = 0) -> tuple[ConductorEnv, FlakyBackend]:
    flaky = FlakyBackend(_env().executor.backend, rate, seed)
    return _env(flaky), flaky


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_five_percent_failed_calls_are_recorded_as_wrong_and_training_finishes(tmp_path: Path) -> None:
    env, flaky = _flaky_env(0.05)
    policy = PuppeteerPolicy(env.pool, FAST, seed=0)
    state = train(env, policy, CFG, tmp_path, logger=JsonlLogger(tmp_path / "metrics.jsonl"))
    assert state.episodes == 64 and flaky.failures > 0
    trajs = [json.loads(line) for line in _lines(tmp_path / "trajectories.jsonl")]
    failed = [t for t in trajs if t.get("error")]
    assert len(trajs) == 64 and len(failed) == state.failed >= 1
    assert all(not t["correct"] and "injected backend failure" in t["error"] for t in failed)
    assert all(torch.isfinite(p).all() for p in policy.scorer.parameters())
    metrics = [json.loads(line) for line in _lines(tmp_path / "metrics.jsonl")]
    assert sum(m["train/failed"] * 16 for m in metrics) == pytest.approx(state.failed)
    assert (tmp_path / "final" / "policy.pt").exists()


def test_a_dead_backend_stops_training_cleanly_with_the_checkpoint_intact(tmp_path: Path) -> None:
    env, _ = _flaky_env(1.0)
    policy = PuppeteerPolicy(env.pool, FAST, seed=0)
    with pytest.raises(TrainingStopped, match=r"failed call.*rerun the same command to resume"):
        train(env, policy, CFG, tmp_path)
    ck = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert ck["state"]["update"] == ck["state"]["episodes"] // 16
    # the backend is back: the same command resumes and finishes
    state = train(_env(), PuppeteerPolicy(env.pool, FAST, seed=0), CFG, tmp_path)
    assert state.episodes == 64 and len(_lines(tmp_path / "trajectories.jsonl")) == 64


class _Killed(BaseException):
    pass


def _train_until(run: Path, stop_after_update: int | None) -> None:
    """Train; with ``stop_after_update`` die (like a kill) right after that update's logs are written."""
    env = _env()

    def progress(done: int, total: int, metrics: dict) -> None:
        if stop_after_update is not None and done // 16 == stop_after_update:
            raise _Killed

    with contextlib.suppress(_Killed):
        train(
            env,
            PuppeteerPolicy(env.pool, FAST, seed=0),
            CFG,
            run,
            progress=progress,
            logger=JsonlLogger(run / "metrics.jsonl"),
        )


def test_resume_after_a_kill_neither_duplicates_metrics_nor_trajectories(tmp_path: Path) -> None:
    _train_until(tmp_path / "straight", None)
    _train_until(tmp_path / "killed", 3)  # checkpoint at update 2, logs of update 3 already written
    assert len(_lines(tmp_path / "killed" / "metrics.jsonl")) == 3
    _train_until(tmp_path / "killed", None)  # resume
    steps = [json.loads(line)["step"] for line in _lines(tmp_path / "killed" / "metrics.jsonl")]
    assert steps == [16, 32, 48, 64]
    for name in ("trajectories.jsonl", "metrics.jsonl"):
        assert _lines(tmp_path / "killed" / name) == _lines(tmp_path / "straight" / name)


def test_kill_9_during_a_checkpoint_write_loses_nothing_before_it(tmp_path: Path) -> None:
    """A child process trains and is SIGKILLed halfway through writing its second checkpoint."""
    run = tmp_path / "run"
    script = textwrap.dedent(f"""
        import os, signal, sys
        import torch
        import puppeteer.utils.safeload as safeload
        torch.set_num_threads({torch.get_num_threads()})  # the parent's: same float sums, same losses
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[1])!r}]  # test, helpers
        import test_reliability_training as t
        saves = []
        real_save = torch.save
        def dying_save(obj, f, *a, **k):
            saves.append(1)
            if len(saves) == 2:  # write half of the bytes, then die like kill -9
                import io
                buf = io.BytesIO(); real_save(obj, buf, *a, **k)
                f.write(buf.getvalue()[: len(buf.getvalue()) // 2]); f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            return real_save(obj, f, *a, **k)
        torch.save = dying_save
        t._train_until(__import__("pathlib").Path({str(run)!r}), None)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    ck = torch.load(run / "checkpoint.pt", weights_only=True)  # the first checkpoint, whole
    assert ck["state"]["update"] == 2
    _train_until(run, None)  # resume
    _train_until(tmp_path / "straight", None)
    for name in ("trajectories.jsonl", "metrics.jsonl"):
        assert _lines(run / name) == _lines(tmp_path / "straight" / name)


def test_a_full_disk_while_writing_trajectories_stops_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _train_until(tmp_path / "straight", None)
    run = tmp_path / "run"
    _train_until(run, 3)  # 3 updates on disk, checkpoint at update 2
    good = (run / "trajectories.jsonl").read_bytes()
    real_open = Path.open

    def full_open(self: Path, mode: str = "r", *args, **kwargs):
        if self.name == "trajectories.jsonl" and "a" in mode:
            return DiskFullFile(real_open(self, "ab"), budget=500)
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full_open)
    env = _env()
    with pytest.raises(TrainingStopped, match="No space left on device"):
        train(
            env, PuppeteerPolicy(env.pool, FAST, seed=0), CFG, run, logger=JsonlLogger(run / "metrics.jsonl")
        )
    monkeypatch.undo()
    # the file was cut back to what the checkpoint covers: no torn line, nothing earlier lost
    data = (run / "trajectories.jsonl").read_bytes()
    assert good.startswith(data) and data.endswith(b"\n")
    assert [json.loads(line) for line in data.decode().splitlines()]
    _train_until(run, None)  # space is back: resume finishes the run as if nothing happened
    assert _lines(run / "trajectories.jsonl") == _lines(tmp_path / "straight" / "trajectories.jsonl")


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_checkpoint_is_refused_without_running_its_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    torch.save({"policy": _Evil(str(marker))}, tmp_path / "checkpoint.pt")
    env = _env()
    with pytest.raises(CheckpointError, match="refusing to unpickle"):
        train(env, PuppeteerPolicy(env.pool, FAST, seed=0), CFG, tmp_path)
    assert not marker.exists()
    policy_dir = tmp_path / "policy"
    PuppeteerPolicy(env.pool, FAST, seed=0).save(policy_dir)
    torch.save({"w": _Evil(str(marker))}, policy_dir / "policy.pt")
    with pytest.raises(CheckpointError, match="refusing to unpickle"):
        PuppeteerPolicy.load(policy_dir, env.pool)
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_corrupt_checkpoint_is_a_clear_error_and_is_kept(tmp_path: Path, damage: str) -> None:
    _train_until(tmp_path, 3)  # checkpoint at update 2
    ck = tmp_path / "checkpoint.pt"
    data = ck.read_bytes()
    garbage = [np.random.default_rng(seed).bytes(4096) for seed in range(8)]  # several byte patterns
    for content in {"truncate": [data[: len(data) // 2]], "garbage": garbage, "empty": [b""]}[damage]:
        ck.write_bytes(content)
        before = ck.read_bytes()
        env = _env()
        with pytest.raises(CheckpointError, match="corrupt or truncated"):
            train(env, PuppeteerPolicy(env.pool, FAST, seed=0), CFG, tmp_path)
        assert ck.read_bytes() == before


def test_trainer_settings_are_validated() -> None:
    for bad in ({"lr": float("nan")}, {"lr": 0}, {"batch_episodes": 0}, {"max_failed_fraction": 2.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ReinforceConfig(**bad)


def test_episodes_not_a_multiple_of_the_group_are_said_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 33: `trainer.episodes=300` ran 320 with the progress line at 107%; now the run says how many
    it trains (whole groups) and the progress line counts to that."""
    env = _env()
    cfg = ReinforceConfig(episodes=10, batch_episodes=8, group_size=4, eval_every=1000, parallel_envs=4)
    seen: list[tuple[int, int]] = []
    with caplog.at_level("WARNING", logger="puppeteer.train.reinforce"):
        state = train(
            env,
            PuppeteerPolicy(env.pool, FAST, seed=0),
            cfg,
            tmp_path,
            progress=lambda d, t, m: seen.append((d, t)),
        )
    assert state.episodes == 12 and seen[-1] == (12, 12) and all(t == 12 for _, t in seen)
    assert "training runs 12 episodes" in caplog.text
