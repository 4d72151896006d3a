"""Offline training of the step-wise puppeteer from stored trajectories (no new model calls).

Logged episodes (any run's ``trajectories.jsonl``: production logs, a random policy's eval run,
an earlier training run) are replayed through :class:`~puppeteer.envs.env.ConductorEnv` with a
:class:`ReplayBackend` that answers each call with the logged completion. The environment so
rebuilds exactly the observations the policy sees online and recomputes the rewards under the
current cost weight, without calling any model. The policy is then fitted by reward-weighted
regression (RWR, Peters & Schaal 2007): maximise ``sum_t w_t log pi(a_t | s_t)`` with
``w_t = min(exp((G_t - mean G) / beta), w_max)``, i.e. behaviour cloning of the logged actions
with exponentially more weight on those that led to high return. Clipping ``w`` bounds the
variance, as clipped importance weights do; RWR needs no behaviour-policy probabilities, which
production logs seldom carry.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from puppeteer.backends.base import SyncBackend
from puppeteer.envs.build import build_env
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import run_actions
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_scorer import Features
from puppeteer.types import Completion, CompletionRequest, Task

log = logging.getLogger(__name__)


class ReplayMiss(LookupError):
    """The replayed episode asked for a call the log does not hold."""


class ReplayBackend(SyncBackend):
    """Answers step ``i`` of the episode being replayed with its logged completion."""

    name = "replay"

    def __init__(self) -> None:
        self._completions: dict[int, Completion] = {}
        self._item = ""

    def load(self, record: Mapping[str, Any]) -> None:
        self._item = str(record["task_id"])
        self._completions = {int(s["index"]): Completion(**s["completion"]) for s in record["steps"]}

    def complete(self, request: CompletionRequest) -> Completion:
        ctx = request.context
        if ctx.item_key != self._item or ctx.step_index not in self._completions:
            raise ReplayMiss(f"no logged completion for {ctx.item_key!r} step {ctx.step_index}")
        return self._completions[ctx.step_index]


@dataclass(frozen=True)
class Transition:
    """One logged decision with the features the policy scores and the return that followed."""

    features: Features
    action: int
    ret: float
    episode: int


@dataclass(frozen=True)
class OfflineConfig:
    objective: str = "iw"  # iw (clipped importance-weighted REINFORCE) | rwr (reward-weighted regression)
    max_ratio: float = 5.0  # clip of pi / mu in the iw objective
    beta: float = 0.1  # RWR temperature: smaller trusts the best logged returns more
    max_weight: float = 20.0  # clip of the exponential weights
    updates: int = (
        150  # gradient steps on minibatches drawn with replacement (compute independent of log size)
    )
    batch_size: int = 128
    lr: float = 1e-2
    weight_decay: float = 1e-4
    entropy_coef: float = 0.0
    seed: int = 0


def read_records(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Step-mode episodes from run directories or ``trajectories.jsonl`` files.

    Episodes that ended before any agent acted are kept: stopping at once is a logged decision too.
    Items that raised (``error``) are left out.
    """
    out: list[dict[str, Any]] = []
    for p in map(Path, paths):
        f = p / "trajectories.jsonl" if p.is_dir() else p
        with f.open() as fh:
            for line in fh:
                if not line.endswith("\n"):  # a torn last line of a killed writer
                    break
                if line.strip():
                    d = json.loads(line)
                    if d.get("mode", "step") == "step" and not d.get("error"):
                        out.append(d)
    return out


def replay(
    records: Sequence[Mapping[str, Any]],
    env: ConductorEnv,
    policy: PuppeteerPolicy,
    tasks: Mapping[str, Task] | None = None,
) -> list[Transition]:
    """Rebuild observations, actions and returns of logged episodes through ``env`` (its backend replays)."""
    backend = env.executor.backend
    if not isinstance(backend, ReplayBackend):
        raise TypeError("the env must run on a ReplayBackend (ConductorEnv(..., backend=ReplayBackend()))")
    by_id = dict(tasks) if tasks is not None else {t.id: t for t in env.tasks}
    obs_all: list[dict[str, Any]] = []
    meta: list[tuple[int, int, float]] = []
    skipped = 0
    for k, rec in enumerate(records):
        task = by_id.get(str(rec["task_id"]))
        if task is None:
            skipped += 1
            continue
        backend.load(rec)
        agents = [int(s["agent_id"]) for s in sorted(rec["steps"], key=lambda s: s["index"])]
        actions = agents + ([env.pool.terminator_id] if len(agents) < env.config.max_steps else [])
        end = run_actions(env, actions, seed=0, options={"task": task})
        obs_all += end.observations
        meta += [(a, k, g) for a, g in zip(end.actions, end.info["returns"], strict=True)]
    if skipped:
        log.warning("%d logged episodes are of items not in the environment's tasks, skipped", skipped)
    feats = policy.features_batch(obs_all) if obs_all else []
    return [Transition(f, a, g, k) for f, (a, k, g) in zip(feats, meta, strict=True)]


def rwr_weights(returns: np.ndarray, beta: float, max_weight: float) -> np.ndarray:
    """``min(exp((G - mean G) / beta), max_weight)``, normalised to mean 1."""
    z = (returns - returns.mean()) / max(beta, 1e-8)
    w = np.minimum(np.exp(np.minimum(z, np.log(max_weight))), max_weight)
    return w / w.mean()


def behaviour_probs(data: Sequence[Transition]) -> np.ndarray:
    """Estimated probability of each logged action under the logging policy: its frequency at that step.

    Logs seldom carry propensities; a step-conditional frequency is exact for policies whose
    choice depends only on the step (a random router, a fixed mix) and a proxy otherwise.
    """
    steps = np.array([t.features.step for t in data])
    actions = np.array([t.action for t in data])
    out = np.empty(len(data))
    for s in np.unique(steps):
        at = steps == s
        values, counts = np.unique(actions[at], return_counts=True)
        freq = dict(zip(values.tolist(), (counts / at.sum()).tolist(), strict=True))
        out[at] = [freq[a] for a in actions[at]]
    return out


def step_baseline(data: Sequence[Transition]) -> np.ndarray:
    """Mean logged return at each step index (the advantage baseline of the IW objective)."""
    steps = np.array([t.features.step for t in data])
    rets = np.array([t.ret for t in data])
    means = {s: rets[steps == s].mean() for s in np.unique(steps)}
    return np.array([means[s] for s in steps])


def _rwr_loss(logp: torch.Tensor, batch: dict[str, torch.Tensor], config: OfflineConfig) -> torch.Tensor:
    return -(batch["weight"] * logp).mean()


def _iw_loss(logp: torch.Tensor, batch: dict[str, torch.Tensor], config: OfflineConfig) -> torch.Tensor:
    ratio = (logp.detach().exp() / batch["mu"]).clamp(max=config.max_ratio)
    return -(ratio * batch["advantage"] * logp).mean()


LossFn = Callable[[torch.Tensor, dict[str, torch.Tensor], OfflineConfig], torch.Tensor]
OBJECTIVES: dict[str, LossFn] = {"rwr": _rwr_loss, "iw": _iw_loss}


def fit_offline(
    policy: PuppeteerPolicy, data: Sequence[Transition], config: OfflineConfig = OfflineConfig()
) -> list[float]:
    """Fit ``policy`` to logged decisions with ``config.objective``; returns the loss per update.

    ``rwr``: maximise ``w_t log pi(a_t|s_t)`` with the clipped exponential weights of
    :func:`rwr_weights`. ``iw``: importance-weighted REINFORCE, ``-min(pi/mu, c) (G_t - b_step)
    log pi(a_t|s_t)`` with ``mu`` from :func:`behaviour_probs` and the ratio clipped at
    ``max_ratio``; unlike RWR it also pushes down logged actions that did worse than usual.
    """
    if not data:
        raise ValueError("no logged transitions to learn from")
    if config.objective not in OBJECTIVES:
        raise KeyError(f"unknown objective {config.objective!r}; known: {', '.join(OBJECTIVES)}")
    loss_fn = OBJECTIVES[config.objective]
    gen = torch.Generator().manual_seed(config.seed)
    rets = np.array([t.ret for t in data])
    columns = {
        "weight": rwr_weights(rets, config.beta, config.max_weight),
        "mu": behaviour_probs(data),
        "advantage": rets - step_baseline(data),
    }
    tensors = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in columns.items()}
    actions = torch.as_tensor([t.action for t in data])
    opt = torch.optim.AdamW(policy.scorer.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    losses = []
    for _ in range(config.updates):
        idx = torch.randint(len(data), (min(config.batch_size, len(data)),), generator=gen)
        logp_all = torch.log_softmax(policy.logits([data[int(i)].features for i in idx]), dim=-1)
        logp = logp_all.gather(1, actions[idx][:, None]).squeeze(1)
        probs = logp_all.exp()
        entropy = -(probs * logp_all.masked_fill(probs == 0, 0.0)).sum(-1).mean()
        loss = loss_fn(logp, {k: v[idx] for k, v in tensors.items()}, config) - config.entropy_coef * entropy
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def fit_rwr(
    policy: PuppeteerPolicy, data: Sequence[Transition], config: OfflineConfig = OfflineConfig()
) -> list[float]:
    """:func:`fit_offline` with the reward-weighted regression objective."""
    return fit_offline(policy, data, replace(config, objective="rwr"))


def train_offline(
    runs: Iterable[str | Path],
    env: ConductorEnv,
    policy: PuppeteerPolicy,
    config: OfflineConfig = OfflineConfig(),
) -> tuple[list[Transition], list[float]]:
    """Read logs, replay them through a copy of ``env`` on a :class:`ReplayBackend`, fit them."""
    # the same settings on the logged episodes' own agents: no drawn or excluded subsets
    settings = replace(env.config, mode="step", k_available=None, unavailable=())
    replay_env = build_env(settings, pool=env.pool, tasks=env.tasks, backend=ReplayBackend())
    data = replay(read_records(runs), replay_env, policy)
    log.info("offline: %d transitions from logged episodes", len(data))
    return data, fit_offline(policy, data, config)
