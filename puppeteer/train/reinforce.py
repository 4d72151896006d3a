"""REINFORCE with a baseline for the step-wise puppeteer, readable top to bottom.

One update = ``batch_episodes`` episodes in groups of ``group_size`` on the same task.
Advantage A_t = G_t - b with b from the chosen baseline: ``none`` (the Puppeteer
paper's plain REINFORCE), ``ema`` (moving average of returns) or ``group``
(leave-one-out mean of the other episodes of the same task). Entropy bonus,
gradient clipping, AdamW. Every ``checkpoint_every`` updates the full state is saved
atomically (policy, optimiser, RNG, counters, baseline, best-so-far, trajectory-file
offset), so a killed run resumes losing at most the batch in flight.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from puppeteer.env import ConductorEnv
from puppeteer.policies.puppeteer import Features, PuppeteerPolicy
from puppeteer.reward import discounted_returns
from puppeteer.train.logging import MetricLogger
from puppeteer.trajectories import trajectory_to_dict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReinforceConfig:
    episodes: int = 2000
    batch_episodes: int = 64
    group_size: int = 4
    lr: float = 1e-2
    weight_decay: float = 1e-4
    baseline: str = "group"  # none | ema | group
    ema_decay: float = 0.9
    entropy_coef: float = 0.01
    max_grad_norm: float = 1.0
    lr_final_fraction: float = 0.1  # learning rate decays linearly to this fraction of lr
    checkpoint_every: int = 5
    eval_every: int = 10
    parallel_envs: int = 32  # episodes run in lockstep so observations are encoded in batches
    seed: int = 0


@dataclass
class Episode:
    task_id: str
    feats: list[Features]
    actions: list[int]
    rewards: list[float]
    returns: list[float] = field(default_factory=list)
    correct: bool = False
    cost: float = 0.0
    trajectory: dict[str, Any] = field(default_factory=dict)


def _step_all(envs: Sequence[ConductorEnv], actions: Sequence[int]) -> list[tuple[Any, ...]]:
    """``env.step(action)`` for each pair; in threads when the pool calls models, so their calls batch."""
    from puppeteer.parallel import default_concurrency

    if len(envs) < 2 or default_concurrency(envs[0].pool.backends()) < 2:
        return [env.step(a) for env, a in zip(envs, actions, strict=True)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(envs), thread_name_prefix="rollout") as pool:
        return list(pool.map(lambda pair: pair[0].step(pair[1]), zip(envs, actions, strict=True)))


def run_episodes(
    envs: Sequence[ConductorEnv],
    policy: PuppeteerPolicy,
    specs: Sequence[tuple[int, int | None]],
    generator: torch.Generator | None = None,
    greedy: bool = False,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """Run one episode per (reset seed, task index) spec, ``len(envs)`` at a time in lockstep.

    Lockstep lets the policy encode all current observations in one batch.
    """
    out: list[Episode] = []
    for lo in range(0, len(specs), len(envs)):
        chunk = specs[lo : lo + len(envs)]
        eps: dict[int, Episode] = {}
        obs: dict[int, dict[str, Any]] = {}
        for k, (seed, task_index) in enumerate(chunk):
            options = {"task_index": task_index} if task_index is not None else None
            obs[k], info = envs[k].reset(seed=seed, options=options)
            eps[k] = Episode(task_id=info["task_id"], feats=[], actions=[], rewards=[])
        active = list(eps)
        while active:
            feats = policy.features_batch([obs[k] for k in active])
            actions = policy.choose_batch(feats, generator, greedy=greedy)
            still = []
            stepped = _step_all([envs[k] for k in active], actions)  # concurrently when envs call models
            for k, f, a, result in zip(active, feats, actions, stepped, strict=True):
                obs[k], r, terminated, truncated, info = result
                ep = eps[k]
                ep.feats.append(f)
                ep.actions.append(a)
                ep.rewards.append(float(r))
                ep.cost += float(info.get("cost", 0.0))
                if terminated or truncated:
                    ep.returns = discounted_returns(ep.rewards, envs[k].config.gamma)
                    ep.correct = bool(info["correct"])
                    ep.trajectory = trajectory_to_dict(info["trajectory"])
                    if on_episode is not None:
                        on_episode(ep)
                else:
                    still.append(k)
            active = still
        out += [eps[k] for k in range(len(chunk))]
    return out


# --------------------------------------------------------------------------- baselines
def _baseline_none(
    groups: list[list[Episode]], state: dict[str, float], cfg: ReinforceConfig
) -> list[list[float]]:
    return [[0.0] * len(g) for g in groups]


def _baseline_ema(
    groups: list[list[Episode]], state: dict[str, float], cfg: ReinforceConfig
) -> list[list[float]]:
    b = state.get("ema", 0.0)
    out = [[b] * len(g) for g in groups]
    mean = float(np.mean([e.returns[0] for g in groups for e in g]))
    state["ema"] = mean if "ema" not in state else cfg.ema_decay * b + (1 - cfg.ema_decay) * mean
    return out


def _baseline_group(
    groups: list[list[Episode]], state: dict[str, float], cfg: ReinforceConfig
) -> list[list[float]]:
    out = []
    for g in groups:
        g0 = np.array([e.returns[0] for e in g])
        if len(g) == 1:
            out.append([0.0])
        else:
            out.append(list((g0.sum() - g0) / (len(g) - 1)))  # leave-one-out mean
    return out


BASELINES: dict[
    str, Callable[[list[list[Episode]], dict[str, float], ReinforceConfig], list[list[float]]]
] = {
    "none": _baseline_none,
    "ema": _baseline_ema,
    "group": _baseline_group,
}


# --------------------------------------------------------------------------- evaluation
def evaluate(
    env: ConductorEnv | Sequence[ConductorEnv],
    policy: PuppeteerPolicy,
    n: int | None = None,
    seed: int = 10_000,
) -> dict[str, float]:
    """Greedy policy, each task once (the first ``n``); several envs run in lockstep."""
    envs = [env] if isinstance(env, ConductorEnv) else list(env)
    count = len(envs[0].tasks) if n is None else min(n, len(envs[0].tasks))
    eps = run_episodes(envs, policy, [(seed + i, i) for i in range(count)], greedy=True)
    return summarize(eps)


def summarize(eps: list[Episode]) -> dict[str, float]:
    return {
        "accuracy": float(np.mean([e.correct for e in eps])),
        "return": float(np.mean([e.returns[0] for e in eps])),
        "cost": float(np.mean([e.cost for e in eps])),
        "calls": float(np.mean([len(e.trajectory["steps"]) for e in eps])),
        "tokens": float(
            np.mean([e.trajectory["prompt_tokens"] + e.trajectory["completion_tokens"] for e in eps])
        ),
        "usd": float(np.mean([e.trajectory["cost_usd"] for e in eps])),
    }


# --------------------------------------------------------------------------- checkpointing
def _save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


@dataclass
class TrainState:
    update: int = 0
    episodes: int = 0
    baseline: dict[str, float] = field(default_factory=dict)
    best: float = float("-inf")
    best_update: int = -1
    history: list[dict[str, float]] = field(default_factory=list)
    traj_offset: int = 0


class ResumeMismatch(ValueError):
    """``run_dir`` holds the checkpoint of a different run."""


def run_fingerprint(env: ConductorEnv, policy: PuppeteerPolicy, config: ReinforceConfig) -> dict[str, str]:
    """What must match for a checkpoint to be resumed; ``episodes`` may grow (to train longer)."""
    trainer = {k: v for k, v in asdict(config).items() if k != "episodes"}
    pol = {k: v for k, v in asdict(policy.config).items() if k != "greedy"}
    return {
        "trainer": json.dumps(trainer, sort_keys=True, default=str),
        "policy": json.dumps(pol, sort_keys=True, default=str),
        "env": json.dumps(asdict(env.config), sort_keys=True, default=str),
        "agents": json.dumps([a.name for a in env.pool.agents]),
        "tasks": hashlib.sha256("\n".join(t.id for t in env.tasks).encode()).hexdigest(),
    }


def _check_resumable(
    ck: dict[str, Any], fingerprint: dict[str, str], config: ReinforceConfig, where: Path
) -> None:
    saved = ck.get("fingerprint")
    if saved is None:  # a checkpoint from before fingerprints: nothing to compare
        log.warning("%s has no run fingerprint; resuming without checking the configuration", where)
        return
    differs = sorted(k for k in fingerprint if saved.get(k) != fingerprint[k])
    done = int(ck["state"]["episodes"])
    if differs or done > config.episodes:
        why = f"different {', '.join(differs)}" if differs else f"{done} episodes, {config.episodes} asked"
        raise ResumeMismatch(
            f"{where} is the checkpoint of another run ({why}); use a new run directory or delete it"
        )


def train(
    env: ConductorEnv,
    policy: PuppeteerPolicy,
    config: ReinforceConfig,
    run_dir: str | Path,
    eval_env: ConductorEnv | None = None,
    logger: MetricLogger | None = None,
    progress: Callable[[int, int, dict[str, float]], None] | None = None,
    eval_n: int | None = None,
    on_episode: Callable[[Episode], None] | None = None,
) -> TrainState:
    """Train ``policy`` on ``env``; resumes from ``run_dir/checkpoint.pt`` when it exists."""
    if config.baseline not in BASELINES:
        raise KeyError(f"unknown baseline {config.baseline!r}; known: {', '.join(BASELINES)}")
    if config.batch_episodes % config.group_size:
        raise ValueError("batch_episodes must be a multiple of group_size")
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    ckpt_path, traj_path = run / "checkpoint.pt", run / "trajectories.jsonl"
    opt = torch.optim.AdamW(policy.scorer.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    rng = np.random.default_rng(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    state = TrainState()
    fingerprint = run_fingerprint(env, policy, config)
    if ckpt_path.exists():
        ck = torch.load(ckpt_path, weights_only=False)
        _check_resumable(ck, fingerprint, config, ckpt_path)
        policy.scorer.load_state_dict(ck["policy"])
        opt.load_state_dict(ck["optimizer"])
        rng.bit_generator.state = ck["numpy_rng"]
        gen.set_state(ck["torch_rng"])
        state = TrainState(**ck["state"])
        if traj_path.exists():
            with traj_path.open("r+b") as f:
                f.truncate(state.traj_offset)
        log.info("resumed from update %d (%d episodes)", state.update, state.episodes)
    baseline_fn = BASELINES[config.baseline]
    envs = [env, *(env.clone() for _ in range(config.parallel_envs - 1))]
    eval_envs = (
        [] if eval_env is None else [eval_env, *(eval_env.clone() for _ in range(config.parallel_envs - 1))]
    )
    n_groups = config.batch_episodes // config.group_size

    while state.episodes < config.episodes:
        specs: list[tuple[int, int | None]] = []
        for _ in range(n_groups):
            task_index = int(rng.integers(len(env.tasks)))
            specs += [(int(rng.integers(2**31)), task_index) for _ in range(config.group_size)]
        flat = run_episodes(envs, policy, specs, generator=gen, on_episode=on_episode)
        groups = [flat[i : i + config.group_size] for i in range(0, len(flat), config.group_size)]
        baselines = baseline_fn(groups, state.baseline, config)
        feats, actions, advs = [], [], []
        for g, bs in zip(groups, baselines, strict=True):
            for ep, b in zip(g, bs, strict=True):
                feats += ep.feats
                actions += ep.actions
                advs += [ret - b for ret in ep.returns]
        logits = policy.logits(feats)
        logp_all = torch.log_softmax(logits, dim=-1)
        act = torch.as_tensor(actions)
        logp = logp_all.gather(1, act[:, None]).squeeze(1)
        probs = logp_all.exp()
        # masked actions have logp -inf and p 0: zero them before the product (torch.where would
        # still send 0 * inf = nan through the untaken branch in backward)
        entropy = -(probs * logp_all.masked_fill(probs == 0, 0.0)).sum(-1).mean()
        adv = torch.as_tensor(advs, dtype=torch.float32)
        loss = -(adv * logp).sum() / config.batch_episodes - config.entropy_coef * entropy
        frac = min(state.episodes / max(config.episodes, 1), 1.0)
        for group in opt.param_groups:
            group["lr"] = config.lr * (1.0 - (1.0 - config.lr_final_fraction) * frac)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.scorer.parameters(), config.max_grad_norm)
        opt.step()

        batch = [e for g in groups for e in g]
        state.update += 1
        state.episodes += len(batch)
        metrics = {f"train/{k}": v for k, v in summarize(batch).items()}
        metrics.update(
            {
                "train/loss": float(loss.detach()),
                "train/entropy": float(entropy.detach()),
                "episodes": state.episodes,
            }
        )
        if eval_env is not None and (
            state.update % config.eval_every == 0 or state.episodes >= config.episodes
        ):
            ev = evaluate(eval_envs, policy, eval_n)
            metrics.update({f"eval/{k}": v for k, v in ev.items()})
            if ev["return"] > state.best:
                state.best, state.best_update = ev["return"], state.update
                policy.save(run / "best")
        state.history.append(metrics)
        with traj_path.open("a") as f:
            for e in batch:
                f.write(json.dumps(e.trajectory) + "\n")
        state.traj_offset = traj_path.stat().st_size
        if logger is not None:
            logger.log(metrics, state.episodes)
        if progress is not None:
            progress(state.episodes, config.episodes, metrics)
        if state.update % config.checkpoint_every == 0 or state.episodes >= config.episodes:
            _save_checkpoint(
                ckpt_path,
                {
                    "policy": policy.scorer.state_dict(),
                    "optimizer": opt.state_dict(),
                    "numpy_rng": rng.bit_generator.state,
                    "torch_rng": gen.get_state(),
                    "state": asdict(state),
                    "config": asdict(config),
                    "fingerprint": fingerprint,
                },
            )
    policy.save(run / "final")
    return state
