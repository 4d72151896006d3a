"""A REINFORCE run's saved state: the counters, the run fingerprint a resume must match, loading and
checking a checkpoint, durable trajectory lines, saving the policy."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from puppeteer.envs.env import ConductorEnv
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.train.reinforce.config import ReinforceConfig
from puppeteer.utils.safeload import CheckpointError, safe_torch_load

log = logging.getLogger(__name__)


class TrainingStopped(RuntimeError):
    """Training stopped cleanly (too many failed calls, or a write failed); the checkpoint is intact."""


@dataclass
class TrainState:
    update: int = 0
    episodes: int = 0
    baseline: dict[str, float] = field(default_factory=dict)
    best: float = float("-inf")
    best_update: int = -1
    history: list[dict[str, float]] = field(default_factory=list)
    traj_offset: int = 0
    failed: int = 0  # episodes ended by a failed call


class ResumeMismatch(ValueError):
    """``run_dir`` holds the checkpoint of a different run."""


def run_fingerprint(env: ConductorEnv, policy: PuppeteerPolicy, config: ReinforceConfig) -> dict[str, str]:
    """What must match for a checkpoint to be resumed; ``episodes`` may grow (to train longer)."""
    # where rollouts run does not change the results: a run may resume with more or fewer workers
    trainer = {
        k: v
        for k, v in asdict(config).items()
        if k not in ("episodes", "rollout_workers", "ray_address", "max_failed_fraction")
    }
    pol = {k: v for k, v in asdict(policy.config).items() if k != "greedy"}
    # settings that joined later are left out at the value older runs had, so those runs still resume
    # (with policy.layers=tanh for a run saved before the scorer's layers were a choice)
    for settings, key, old in (
        (trainer, "first_step", "sample"),
        (trainer, "lam_relabel", 0),
        (trainer, "entropy_final_fraction", 1.0),
        (trainer, "later_baseline", "first"),
        (trainer, "second_step", "sample"),
        (trainer, "first_weights", "policy"),
        (trainer, "init_first", None),
        (trainer, "second_target", None),
        (trainer, "first_tries", "router"),
        (trainer, "init_policy", None),
        (trainer, "freeze_later", False),
        (pol, "one_call_first", False),
        (pol, "later_inputs", "all"),
        (pol, "layers", "tanh"),
        (pol, "surface", False),
        (pol, "lam_range", None),
        (pol, "task_dims", None),
        (pol, "by_kind", False),
        (pol, "cards", False),
        (pol, "cards_linear", False),
        (pol, "cards_text", True),
        (pol, "step_heads", False),
        (pol, "state_encoder", "same"),
    ):
        if settings.get(key) == old:
            settings.pop(key)
    # ``unavailable``, ``lam_range``, ``holdout_subsets``, ``price_in_prompt``, ``recursion`` and
    # ``visible_checks`` joined the env config later: left out while empty or at their default, so older
    # checkpoints resume
    env_settings = {
        k: v
        for k, v in asdict(env.config).items()
        if (k not in ("unavailable", "holdout_subsets", "price_in_prompt", "visible_checks") or v)
        and (k != "lam_range" or v is not None)
        and (k != "recursion" or v != "offer")
    }
    fingerprint = {
        "trainer": json.dumps(trainer, sort_keys=True, default=str),
        "policy": json.dumps(pol, sort_keys=True, default=str),
        "env": json.dumps(env_settings, sort_keys=True, default=str),
        "agents": json.dumps([a.name for a in env.pool.agents]),
        "tasks": hashlib.sha256("\n".join(t.id for t in env.tasks).encode()).hexdigest(),
    }
    # backend options given over the pool's (pool.options) change the draws; left out while none
    spec = env.backend_spec
    if spec is not None and spec.options:
        fingerprint["backend"] = json.dumps({k: dict(v) for k, v in spec.options.items()}, sort_keys=True)
    return fingerprint


def _check_resumable(
    ck: dict[str, Any], fingerprint: dict[str, str], config: ReinforceConfig, where: Path
) -> None:
    saved = ck.get("fingerprint")
    if saved is None:  # a checkpoint from before fingerprints: nothing to compare
        log.warning("%s has no run fingerprint; resuming without checking the configuration", where)
        return
    differs = sorted(k for k in fingerprint if saved.get(k) != fingerprint[k])
    if differs:
        raise ResumeMismatch(
            f"{where} is the checkpoint of another run (different {', '.join(differs)}); use a new run "
            "directory or delete it"
        )
    done = int(ck["state"]["episodes"])
    # a finished run has done == asked; older versions overshot by less than their last batch
    if done >= config.episodes + config.batch_episodes:
        raise ResumeMismatch(
            f"{where} is the checkpoint of another run ({done} episodes, {config.episodes} asked); use a "
            "new run directory or delete it"
        )
    if done >= config.episodes:
        log.info(
            "%s: already trained %d episodes (%d asked): nothing left to train", where, done, config.episodes
        )


def _load_resumable(path: Path) -> dict[str, Any]:
    ck = safe_torch_load(path)
    required = ("policy", "optimizer", "numpy_rng", "torch_rng", "state")
    if not isinstance(ck, dict) or any(k not in ck for k in required):
        raise CheckpointError(f"{path} is not a training checkpoint of this project (missing fields)")
    return ck


def _append_lines(path: Path, lines: Sequence[str], offset: int) -> int:
    """Append ``lines`` durably; on failure cut the file back to ``offset`` (its last good size)."""
    try:
        with path.open("a", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        with contextlib.suppress(OSError), path.open("r+b") as f:
            f.truncate(offset)
        raise
    return path.stat().st_size


def _save_policy(policy: PuppeteerPolicy, where: Path, stop: Callable[[str], TrainingStopped]) -> None:
    """Save the policy; a failed write (a full disk) stops training in one line, the checkpoint kept."""
    try:
        policy.save(where)
    except CheckpointError as exc:
        raise stop(str(exc)) from exc
    except OSError as exc:
        raise stop(f"could not write {where} ({exc.strerror or exc})") from exc


def check_resume(
    run_dir: str | Path, env: ConductorEnv, policy: PuppeteerPolicy, config: ReinforceConfig
) -> None:
    """Raise unless ``run_dir`` is empty of checkpoints or holds one that this run may resume."""
    path = Path(run_dir) / "checkpoint.pt"
    if path.exists():
        _check_resumable(_load_resumable(path), run_fingerprint(env, policy, config), config, path)
