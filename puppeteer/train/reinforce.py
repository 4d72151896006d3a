"""REINFORCE with a baseline for the step-wise puppeteer, readable top to bottom.

One update = ``batch_episodes`` episodes in groups of ``group_size`` on the same task.
Advantage A_t = G_t - b_t with b_t from the chosen baseline: ``none`` (the Puppeteer
paper's plain REINFORCE), ``ema`` (moving average of returns), ``group``
(leave-one-out mean of the other episodes of the same task) or ``prefix`` (per step: the
other episodes of the same task that reached the same decision). Entropy bonus,
gradient clipping, AdamW. Every ``checkpoint_every`` updates the full state is saved
atomically (policy, optimiser, RNG, counters, baseline, best-so-far, trajectory-file
offset), so a killed run resumes losing at most the batch in flight.

One policy for every price: when the training env has ``lam_range``, each group draws one
lambda (:meth:`~puppeteer.envs.lam_range.LamRange.sample`) that all its episodes share, passed to the env
(reset ``options["lam"]``, so the returns are priced at it) and read by the policy from
``obs["lam"]``. A group's episodes share their task and their lambda, so the ``group`` and
``prefix`` baselines (and ``first_step=all``'s exact expectation) are conditioned on both; the
``ema`` baseline, one number for every lambda, is refused. Validation (the ``best/`` choice) is the
mean over three lambdas across the range.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from puppeteer.agents.availability import draw_subset
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.group import EnvGroup
from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.reward import step_cost
from puppeteer.envs.rollout import Episode, run_lockstep, summarize
from puppeteer.policies.puppeteer import Features, PuppeteerPolicy
from puppeteer.train.collapse import CollapseWatch
from puppeteer.train.logging import MetricLogger, Rewindable
from puppeteer.utils.checks import integer, number
from puppeteer.utils.safeload import CheckpointError, atomic_torch_save, safe_torch_load

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReinforceConfig:
    episodes: int = 2000
    batch_episodes: int = 64
    group_size: int = 4
    lr: float = 3e-3  # 1e-2 made Adam collapse every router onto one agent within a few updates
    weight_decay: float = 1e-4
    baseline: str = "group"  # none | ema | group | prefix
    # "sample": each group's episodes draw their first action from the policy; "all": a group tries
    # every available agent first on its task and the first decision's gradient is the exact
    # expectation over them (all-action policy gradient; later steps stay REINFORCE), which does not
    # commit to whichever agent was lucky early when agents differ by a few points
    first_step: str = "sample"
    # first_step=all, the baseline of each later decision (step t >= 1): "first", the value of the first
    # decision (V = sum_a pi(a) G_a, so a second call's advantage carries the first call's luck), or
    # "stop", what stopping at t would return (the answer so far graded, nothing more paid; a function
    # of the state, not the action): a call is credited with what it adds over stopping
    later_baseline: str = "first"
    # first_step=all and two-step episodes (max_steps=2): "all" also tries every second action (the
    # Terminator included) after every first one, so both decisions' gradients are exact expectations
    # over the group's item (|A| x (|A| + 1) episodes a group; cheap where calls replay from a table)
    second_step: str = "sample"
    # first_step=all, how the first decision's exact loss weighs each first action: "policy" (pi(a), the
    # gradient of the expected return) or "uniform" (1/|A|: a collapsed policy still learns that an
    # agent it has turned from is better; experiments/local-mix/README.md, section 6)
    first_weights: str = "policy"
    # second_step=all, what the decision after a call is fitted to: None, the exact policy gradient; a
    # temperature t, softmax(Q / t) over the returns of every second action tried on the item
    # (cross-entropy: an action the policy has turned from that pays on a few states is pulled back,
    # where the policy gradient's pull is weighed by its vanishing probability;
    # experiments/local-mix/README.md, section 7)
    second_target: float | None = None
    # a saved one-call router (a run's best/ or final/) that makes the first decision, its weights kept
    # fixed, while the decisions after a call are learned (needs policy.step_heads,
    # policy.one_call_first, first_step=all and second_step=all): each group tries the router's greedy
    # first action and every second action after it, so a router that already routes by kind learns
    # only when to call again
    init_first: str | None = None
    # a lambda-conditioned run (lam_range) of one-call episodes (max_steps=1) with first_step=all: each
    # group's first decision is also learned at this many more lambdas drawn from the range, the same
    # calls' returns re-priced (exact for one call: R(x) = R(lam) + (lam - x) C); 0: only its own lambda
    lam_relabel: int = 0
    ema_decay: float = 0.9
    entropy_coef: float = 0.01
    # the entropy bonus decays linearly to this fraction of entropy_coef over the run (1: constant): a
    # high early bonus keeps every agent tried until the slow ones to learn (specialists) have a say,
    # a low late one lets the policy commit
    entropy_final_fraction: float = 1.0
    max_grad_norm: float = 1.0
    lr_final_fraction: float = 0.1  # learning rate decays linearly to this fraction of lr
    checkpoint_every: int = 5
    eval_every: int = 10
    parallel_envs: int = 32  # episodes run in lockstep so observations are encoded in batches
    seed: int = 0
    rollout_workers: int = 0  # >0: the lockstep envs live on this many Ray workers (same results)
    ray_address: str | None = None  # None: a local Ray instance; "auto" or "ray://host:10001": a cluster
    # stop cleanly (checkpoint saved) once more than this fraction of the run's episodes ended on
    # a failed backend call; each such episode is recorded and graded as wrong
    max_failed_fraction: float = 0.25

    def __post_init__(self) -> None:
        integer("trainer.episodes", self.episodes, low=1)
        integer("trainer.batch_episodes", self.batch_episodes, low=1)
        integer("trainer.group_size", self.group_size, low=1)
        integer("trainer.checkpoint_every", self.checkpoint_every, low=1)
        integer("trainer.eval_every", self.eval_every, low=1)
        integer("trainer.parallel_envs", self.parallel_envs, low=1)
        number("trainer.lr", self.lr, low=0.0, low_open=True)
        number("trainer.weight_decay", self.weight_decay, low=0.0)
        number("trainer.ema_decay", self.ema_decay, low=0.0, high=1.0)
        number("trainer.entropy_coef", self.entropy_coef)
        number("trainer.entropy_final_fraction", self.entropy_final_fraction, low=0.0)
        number("trainer.max_grad_norm", self.max_grad_norm, low=0.0, low_open=True)
        number("trainer.lr_final_fraction", self.lr_final_fraction, low=0.0, high=1.0)
        integer("trainer.rollout_workers", self.rollout_workers, low=0)
        integer("trainer.lam_relabel", self.lam_relabel, low=0)
        number("trainer.max_failed_fraction", self.max_failed_fraction, low=0.0, high=1.0)
        if self.first_step not in FIRST_STEPS:
            raise ValueError(
                f"trainer.first_step: unknown {self.first_step!r}; known: {', '.join(FIRST_STEPS)}"
            )
        if self.baseline not in BASELINES:
            raise ValueError(f"trainer.baseline: unknown {self.baseline!r}; known: {', '.join(BASELINES)}")
        if self.batch_episodes % self.group_size:
            raise ValueError(
                f"trainer.batch_episodes={self.batch_episodes} must be a multiple of "
                f"trainer.group_size={self.group_size}"
            )


FIRST_STEPS = ("sample", "all")


class TrainingStopped(RuntimeError):
    """Training stopped cleanly (too many failed calls, or a write failed); the checkpoint is intact."""


# --------------------------------------------------------------------------- baselines
# A baseline gives, per group and episode, one value per step: the advantage of step t is
# G_t - b_t. ``none``, ``ema`` and ``group`` give every step of an episode the same value;
# ``prefix`` gives each step its own.
StepBaselines = list[list[list[float]]]
Groups = list[list[Episode]]


def _every_step(groups: Groups, values: list[list[float]]) -> StepBaselines:
    return [
        [[b] * len(e.returns) for e, b in zip(g, bs, strict=True)]
        for g, bs in zip(groups, values, strict=True)
    ]


def _baseline_none(groups: Groups, state: dict[str, float], cfg: ReinforceConfig) -> StepBaselines:
    return _every_step(groups, [[0.0] * len(g) for g in groups])


def _baseline_ema(groups: Groups, state: dict[str, float], cfg: ReinforceConfig) -> StepBaselines:
    b = state.get("ema", 0.0)
    out = [[b] * len(g) for g in groups]
    mean = float(np.mean([e.returns[0] for g in groups for e in g]))
    state["ema"] = mean if "ema" not in state else cfg.ema_decay * b + (1 - cfg.ema_decay) * mean
    return _every_step(groups, out)


def _group_means(g: list[Episode]) -> list[float]:
    """Leave-one-out mean of the other episodes' returns (0 for a group of one)."""
    if len(g) == 1:
        return [0.0]
    g0 = np.array([e.returns[0] for e in g])
    return [float(x) for x in (g0.sum() - g0) / (len(g) - 1)]


def _baseline_group(groups: Groups, state: dict[str, float], cfg: ReinforceConfig) -> StepBaselines:
    return _every_step(groups, [_group_means(g) for g in groups])


def _baseline_prefix(groups: Groups, state: dict[str, float], cfg: ReinforceConfig) -> StepBaselines:
    """Per step t: the mean G_t of the other episodes of the group (same task) that took the same
    actions before step t, so reached the same decision; where none did, the group baseline.

    Step 0 is the ``group`` baseline. A later decision is judged against the other choices made in
    its own situation, not against the whole episodes of the group: in a two-step cascade the second
    call's advantage no longer carries the first call's luck (experiments/local-experiment/README.md)."""
    out: StepBaselines = []
    for g in groups:
        fallback = _group_means(g)
        rows = []
        for i, e in enumerate(g):
            row = []
            for t in range(len(e.returns)):
                same = [
                    o.returns[t]
                    for j, o in enumerate(g)
                    if j != i and len(o.returns) > t and o.actions[:t] == e.actions[:t]
                ]
                row.append(float(np.mean(same)) if same else fallback[i])
            rows.append(row)
        out.append(rows)
    return out


LATER_BASELINES = ("first", "stop")  # first_step=all: the later decisions' baseline (ReinforceConfig)
UNIFORM_SHARE = 0.1  # second_step=all: the share of each second-step state's weight spread evenly

BASELINES: dict[str, Callable[[Groups, dict[str, float], ReinforceConfig], StepBaselines]] = {
    "none": _baseline_none,
    "ema": _baseline_ema,
    "group": _baseline_group,
    "prefix": _baseline_prefix,
}


# --------------------------------------------------------------------------- evaluation
def top_share(actions: Sequence[int]) -> float:
    """The share of the most common action (1.0: every episode made the same choice)."""
    return float(np.bincount(actions).max() / len(actions)) if len(actions) else 0.0


def evaluate(
    env: ConductorEnv | Sequence[ConductorEnv],
    policy: PuppeteerPolicy,
    n: int | None = None,
    seed: int = 10_000,
    lam: float | None = None,
) -> dict[str, float]:
    """Greedy policy, each task once (the first ``n``); several envs run in lockstep. ``lam``: price
    every episode at this lambda (reset ``options["lam"]``) instead of the env's own."""
    envs = [env] if isinstance(env, ConductorEnv) else list(env)
    count = len(envs[0].tasks) if n is None else min(n, len(envs[0].tasks))
    specs = [(seed + i, i) for i in range(count)]
    eps = run_lockstep(envs, policy, specs, greedy=True, lams=None if lam is None else [lam] * count)
    return {**summarize(eps), "top_first_share": top_share([e.actions[0] for e in eps if e.actions])}


def evaluate_over(
    env: ConductorEnv | Sequence[ConductorEnv],
    policy: PuppeteerPolicy,
    lams: Sequence[float],
    n: int | None = None,
    seed: int = 10_000,
) -> dict[str, float]:
    """:func:`evaluate` at each of ``lams`` (the same items and seeds): the means over the lambdas, and
    each lambda's return as ``return@LAM``."""
    runs = [evaluate(env, policy, n, seed, lam=x) for x in lams]
    out = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
    out.update({f"return@{x:.4g}": r["return"] for x, r in zip(lams, runs, strict=True)})
    return out


VALIDATION_LAMS = 3  # a lambda-conditioned run's model selection: the mean over this many lambdas


# --------------------------------------------------------------------------- checkpointing
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


# the warning of a run whose episodes are not whole groups (a job that chose the count itself may filter it)
ROUNDED_UP = "trainer.episodes=%d is not a multiple of the group size %d: training runs %d episodes"


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
        (pol, "one_call_first", False),
        (pol, "later_inputs", "all"),
        (pol, "layers", "tanh"),
        (pol, "surface", False),
        (pol, "lam_range", None),
        (pol, "task_dims", None),
        (pol, "cards", False),
        (pol, "cards_linear", False),
        (pol, "cards_text", True),
        (pol, "card_noise", 0.0),
        (pol, "rest_dropout", 0.0),
        (pol, "step_logits", False),
        (pol, "stop_prior", 0.0),
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


MIN_EPISODES_FOR_FAILURE_RATE = 64  # a few early failures alone do not stop a run


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


def first_actions(
    env: ConductorEnv, policy: PuppeteerPolicy, available: np.ndarray | None = None
) -> list[int]:
    """The actions open at an episode's first step (``first_step: all`` tries each): the available
    agents (``available``: the episode's own k-of-n draw, else the env's base availability), and the
    Terminator where neither the env nor the policy forbids stopping at once."""
    return _open_actions(env, policy, 0, available)


def second_actions(env: ConductorEnv, policy: PuppeteerPolicy) -> list[int]:
    """The actions open at an episode's second step (``second_step: all`` tries each after every first
    action): the available agents, and the Terminator unless one step is not yet enough to stop."""
    return _open_actions(env, policy, 1)


def _open_actions(
    env: ConductorEnv, policy: PuppeteerPolicy, acted: int, available: np.ndarray | None = None
) -> list[int]:
    """The available agents, and the Terminator where ``acted`` calls meet both min_steps."""
    mask = env.pool.availability(env.config.unavailable) if available is None else available
    out = [a for a in range(len(env.pool)) if mask[a]]
    if env.config.min_steps <= acted and policy.config.min_steps <= acted:
        out.append(env.pool.terminator_id)
    return out


def check_lam_conditioning(
    env: ConductorEnv, policy: PuppeteerPolicy, config: ReinforceConfig
) -> LamRange | None:
    """The training env's lambda range, checked against the policy and the baseline (None: fixed)."""
    lam_range = LamRange.of(env.config.lam_range)
    if lam_range is None:
        if config.lam_relabel:
            raise ValueError("trainer.lam_relabel re-prices episodes at other lambdas: it needs lam_range")
        return None
    if config.lam_relabel and (config.first_step != "all" or env.config.max_steps != 1):
        raise ValueError(
            "trainer.lam_relabel re-prices every first action's call at other lambdas: it needs "
            f"trainer.first_step=all and max_steps=1 (got {config.first_step!r}, {env.config.max_steps})"
        )
    if policy.lam_range is None:
        raise ValueError(
            f"the env draws lambda from lam_range={list(lam_range.bounds)} but the policy does not read it: "
            "give the policy the same range (PolicyConfig.lam_range)"
        )
    if policy.lam_range != lam_range:
        log.warning(
            "the policy reads lambda over %s, the env draws it over %s",
            list(policy.lam_range.bounds),
            list(lam_range.bounds),
        )
    if config.baseline == "ema":
        raise ValueError(
            "trainer.baseline=ema is one number for every lambda; a lambda-conditioned run needs a "
            "baseline that shares the episode's lambda: group or prefix"
        )
    return lam_range


def entropy_coef(config: ReinforceConfig, frac: float) -> float:
    """The entropy bonus's weight after ``frac`` of the run's episodes (linear decay)."""
    return config.entropy_coef * (1.0 - (1.0 - config.entropy_final_fraction) * frac)


def _entropy(logp_all: torch.Tensor) -> torch.Tensor:
    probs = logp_all.exp()
    # masked actions have logp -inf and p 0: zero them before the product (torch.where would
    # still send 0 * inf = nan through the untaken branch in backward)
    return -(probs * logp_all.masked_fill(probs == 0, 0.0)).sum(-1).mean()


def _sampled_loss(
    policy: PuppeteerPolicy, groups: Groups, baselines: StepBaselines
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """REINFORCE: sum over steps of -(G_t - b_t) log pi(a_t | s_t), per episode. Also returns the first
    actions taken (the collapse watch)."""
    feats, actions, advs = [], [], []
    for g, bs in zip(groups, baselines, strict=True):
        for ep, b in zip(g, bs, strict=True):
            feats += ep.feats
            actions += ep.actions
            advs += [ret - bt for ret, bt in zip(ep.returns, b, strict=True)]
    logp_all = torch.log_softmax(policy.logits(feats), dim=-1)
    logp = logp_all.gather(1, torch.as_tensor(actions)[:, None]).squeeze(1)
    adv = torch.as_tensor(advs, dtype=torch.float32)
    n = sum(len(g) for g in groups)
    firsts = [e.actions[0] for g in groups for e in g if e.actions]
    return -(adv * logp).sum() / n, _entropy(logp_all), firsts


@dataclass(frozen=True)
class _SubsetDraw:
    """``first_step=all`` over k-of-n subsets: each group draws its subset in the trainer (the env's
    rule: ``k`` of the available agents, never a held-out subset) and offers it to every episode of
    the group (reset ``options["available"]``), so the group knows which agents to try first."""

    allowed: np.ndarray
    k: int
    held_out: frozenset[frozenset[int]]

    def __call__(self, rng: np.random.Generator) -> np.ndarray:
        return draw_subset(rng, self.allowed, self.k, self.held_out)

    @property
    def example(self) -> np.ndarray:
        """A mask of ``k`` agents: what sizes a group."""
        return np.arange(len(self.allowed)) < self.k


def _group_subsets(env: ConductorEnv) -> _SubsetDraw | None:
    if env.config.k_available is None:
        return None
    allowed = env.pool.availability(env.config.unavailable)[: len(env.pool)].astype(bool)
    held = frozenset(frozenset(s) for s in env.config.holdout_subsets)
    return _SubsetDraw(allowed, int(env.config.k_available), held)


class _RouterFirst:
    """(trainer.init_first) The fixed first scorer's greedy action on a group's first observation: each
    group tries only what the router would call, and every second action after it."""

    def __init__(self, env: ConductorEnv, policy: PuppeteerPolicy) -> None:
        self.env, self.policy = env.clone(), policy

    def __call__(self, seed: int, task_index: int) -> int:
        obs, _ = self.env.reset(seed=seed, options={"task_index": task_index})
        with torch.no_grad():
            return int(torch.argmax(self.policy.logits([self.policy.features(obs)])[0]))


def _exact_first(
    first_logp: torch.Tensor, index: torch.Tensor, returns: torch.Tensor, weights: str = "policy"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-sum_a w(a) (G_a - V) log pi(a) summed over rows, V = sum_a pi(a) G_a (pi's weights held fixed);
    also pi and V. ``weights="policy"``: w = pi, the gradient of the expected return; ``"uniform"``:
    w = 1 / |A|, whose gradient on a logit tends to the action's advantage (over |A|) as pi(a) -> 0,
    where pi's own weight vanishes: an agent the policy has turned from is still pulled back when it
    is better than the policy's choice (the tabular natural gradient's direction)."""
    tried = first_logp.gather(1, index)  # (rows, tried actions): index holds each row's tried actions
    pi = tried.exp().detach()
    pi = pi / pi.sum(dim=1, keepdim=True).clamp_min(1e-12)
    baseline = (pi * returns).sum(dim=1, keepdim=True)
    w = pi if weights == "policy" else torch.full_like(pi, 1.0 / pi.shape[1])
    return -(w * (returns - baseline) * tried).sum(), pi, baseline


def _relabelled(
    policy: PuppeteerPolicy, groups: Groups, lams: Sequence[Sequence[float]], phi: float
) -> tuple[list[Features], torch.Tensor]:
    """The groups' first observations and returns re-priced at other lambdas (one row per group and
    lambda). One-call episodes only: G(x) = r - x C with C = step_cost(F, 1, phi), so
    G(x) = G(lam) + (lam - x) C; checked against the env's own return at the episode's lambda."""
    lam_range = policy.lam_range
    if lam_range is None:
        raise ValueError("re-pricing at other lambdas needs a policy that reads lambda (lam_range)")
    feats: list[Features] = []
    rows: list[list[float]] = []
    for g, xs in zip(groups, lams, strict=True):
        priced = [step_cost(e.cost, 1, phi) if e.actions and e.cost else 0.0 for e in g]
        for e, c in zip(g, priced, strict=True):
            lam = float(e.lam if e.lam is not None else 0.0)
            paid = float(e.correct) - lam * c
            if len(e.returns) != 1 or abs(e.returns[0] - paid) > 1e-6 * max(1.0, abs(paid)):
                raise ValueError(
                    f"trainer.lam_relabel: episode of {e.task_id} is not one call priced r - lam C "
                    f"(return {e.returns}, expected {paid})"
                )
        for x in xs:
            feats.append(replace(g[0].feats[0], lam=lam_range.features(x)))
            rows.append(
                [e.returns[0] + (float(e.lam or 0.0) - x) * c for e, c in zip(g, priced, strict=True)]
            )
    return feats, torch.as_tensor(rows, dtype=torch.float32)


def _all_first_loss(
    policy: PuppeteerPolicy,
    groups: Groups,
    firsts: Sequence[Sequence[int]],
    relabel: Sequence[Sequence[float]] | None = None,
    phi: float = 1.0,
    later_baseline: str = "first",
    first_weights: str = "policy",
) -> tuple[torch.Tensor, torch.Tensor, list[int], float]:
    """Each group tried every first action open to it (``firsts``: per group, in its episodes' order)
    on one task; also returns V's mean over the groups, the policy's own expected return (the batch's
    mean return weighs every first action alike). The first decision's loss is the exact
    expectation -sum_a pi(a) (G_a - V) log pi(a) with V = sum_a pi(a) G_a (pi's weights held fixed);
    a later step t of the episode that opened with a0 adds -pi(a0) (G_t - b_t) log pi(a_t | s_t), with
    b_t = V (``later_baseline="first"``) or what stopping at t returns (``"stop"``).
    ``relabel`` (one-call episodes of a lambda-conditioned run): per group, more lambdas at which its
    first decision is learned too, from the same calls re-priced (:func:`_relabelled`)."""
    first_logp = torch.log_softmax(policy.logits([g[0].feats[0] for g in groups]), dim=-1)  # (groups, A)
    index = torch.as_tensor([list(f) for f in firsts])  # (groups, tried actions)
    returns = torch.as_tensor([[e.returns[0] for e in g] for g in groups], dtype=torch.float32)
    loss, pi, baseline = _exact_first(first_logp, index, returns, first_weights)
    rows = len(groups)
    if relabel is not None and any(relabel):
        feats, priced = _relabelled(policy, groups, relabel, phi)
        per_group = torch.as_tensor([len(xs) for xs in relabel])
        more, _, _ = _exact_first(
            torch.log_softmax(policy.logits(feats), dim=-1),
            index.repeat_interleave(per_group, dim=0),
            priced,
            first_weights,
        )
        loss, rows = loss + more, rows + len(feats)
    later_feats, later_actions, later_pi, later_adv = [], [], [], []
    for gi, g in enumerate(groups):
        for ai, e in enumerate(g):
            for t in range(1, len(e.actions)):
                later_feats.append(e.feats[t])
                later_actions.append(e.actions[t])
                b = e.stop_returns[t - 1] if later_baseline == "stop" else float(baseline[gi, 0])
                later_pi.append(float(pi[gi, ai]))
                later_adv.append(e.returns[t] - b)
    later_weights = [p * a for p, a in zip(later_pi, later_adv, strict=True)]
    logps = [first_logp]
    if later_feats:
        later_logp = torch.log_softmax(policy.logits(later_feats), dim=-1)
        taken = later_logp.gather(1, torch.as_tensor(later_actions)[:, None]).squeeze(1)
        loss = loss - (torch.as_tensor(later_weights, dtype=torch.float32) * taken).sum()
        logps.append(later_logp)
    greedy = [
        f[int(i)] for f, i in zip(firsts, torch.argmax(first_logp.gather(1, index), dim=1), strict=True)
    ]
    return loss / rows, _entropy(torch.cat(logps)), greedy, float(baseline.mean())


def _all_pairs_loss(
    policy: PuppeteerPolicy,
    groups: Groups,
    firsts: Sequence[Sequence[int]],
    seconds: Sequence[int],
    first_weights: str = "policy",
    second_target: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[int], float]:
    """Each group tried every (first, second) pair of actions on one task (first-major: the episodes of
    first action i are ``g[i * S : (i + 1) * S]``, S = len(seconds)). Both decisions' losses are exact
    expectations under the current policy (its weights held fixed): after first action a0, with
    Q(b) = G_1 of the pair (a0, b) and V1 = sum_b pi(b | s1) Q(b), the second decision adds
    -(1 / |A0|) sum_b pi(b | s1) (Q(b) - V1) log pi(b | s1); the first is ``_exact_first`` on the
    returns G(a0) = sum_b pi(b | s1) G_0(a0, b), what a0 is worth when the policy then acts as it does.
    Weighing every first action's state alike (the gradient of the expected return would weigh it by
    pi(a0)) is policy iteration's order: each state's decision improves whether or not the policy
    goes there now, so a first action is judged by what the second step can make of it. With pi(a0)
    the cheap-first-then-escalate plan of tests/test_cascade.py was lost on one seed of three: once
    the first step turned from the cheap agent, nothing taught the step after it.

    With ``second_target`` t the second decision is instead fitted to softmax(Q / t) over the actions
    tried (cross-entropy, each state weighed as above): bounded, and its pull on an action that pays
    does not shrink with the action's probability, where the policy gradient's does. Also returns the
    policy's own expected return, V's mean over the groups."""
    n_second = len(seconds)
    first_logp = torch.log_softmax(policy.logits([g[0].feats[0] for g in groups]), dim=-1)  # (groups, A)
    index = torch.as_tensor([list(f) for f in firsts])
    s1_feats, s1_rows, blocks = [], [], []  # one second-step state per (group, first action)
    returns0 = torch.zeros(index.shape, dtype=torch.float32)
    for gi, g in enumerate(groups):
        for ai in range(len(firsts[gi])):
            block = g[ai * n_second : (ai + 1) * n_second]
            if all(len(e.feats) > 1 for e in block):
                s1_feats.append(block[0].feats[1])
                s1_rows.append((gi, ai))
                blocks.append(block)
            else:  # the first call ended the episode (a failed call): nothing to decide after it
                returns0[gi, ai] = block[0].returns[0]
    logps = [first_logp]
    second = None
    if s1_feats:
        second_logp = torch.log_softmax(policy.logits(s1_feats), dim=-1)
        tried = second_logp[:, list(seconds)]  # (states, S)
        pi2 = tried.exp().detach()
        pi2 = pi2 / pi2.sum(dim=1, keepdim=True).clamp_min(1e-12)
        q = torch.as_tensor([[e.returns[1] for e in block] for block in blocks], dtype=torch.float32)
        g0 = torch.as_tensor([[e.returns[0] for e in block] for block in blocks], dtype=torch.float32)
        for row, (gi, ai) in enumerate(s1_rows):
            returns0[gi, ai] = (pi2[row] * g0[row]).sum()
        second = (pi2, q, (pi2 * q).sum(dim=1, keepdim=True), tried)
        logps.append(second_logp)
    loss, pi1, value = _exact_first(first_logp, index, returns0, first_weights)
    if second is not None:
        # each state after a first action weighs what the policy gives that action, mixed with a tenth
        # of uniform: pi(a0) alone is the gradient of the expected return, but a first action the policy
        # has turned from then never learns its second step, and is judged by an untrained one
        pi2, q, v1, tried = second
        weight = torch.as_tensor(
            [
                (1 - UNIFORM_SHARE) * float(pi1[gi, ai]) + UNIFORM_SHARE / len(firsts[gi])
                for gi, ai in s1_rows
            ],
            dtype=torch.float32,
        )
        if second_target is None:
            loss = loss - (weight[:, None] * pi2 * (q - v1) * tried).sum()
        else:  # cross-entropy to the Boltzmann target over the tried actions' returns
            target = torch.softmax(q / second_target, dim=1)
            loss = loss - (weight[:, None] * target * tried).sum()
    greedy = [
        f[int(i)] for f, i in zip(firsts, torch.argmax(first_logp.gather(1, index), dim=1), strict=True)
    ]
    return loss / len(groups), _entropy(torch.cat(logps)), greedy, float(value.mean())


def _save_policy(policy: PuppeteerPolicy, where: Path, stop: Callable[[str], TrainingStopped]) -> None:
    """Save the policy; a failed write (a full disk) stops training in one line, the checkpoint kept."""
    try:
        policy.save(where)
    except CheckpointError as exc:
        raise stop(str(exc)) from exc
    except OSError as exc:
        raise stop(f"could not write {where} ({exc.strerror or exc})") from exc


def check_training(env: ConductorEnv, policy: PuppeteerPolicy, config: ReinforceConfig) -> LamRange | None:
    """Check that ``config`` fits ``env`` and ``policy``; raises before anything is written."""
    if config.baseline not in BASELINES:
        raise KeyError(f"unknown baseline {config.baseline!r}; known: {', '.join(BASELINES)}")
    if config.first_step == "all" and config.baseline != "group":
        log.warning(
            "trainer.baseline=%s is not used with trainer.first_step=all: the first decision is an exact "
            "expectation and later ones take trainer.later_baseline (%s)",
            config.baseline,
            config.later_baseline,
        )
    if config.later_baseline not in LATER_BASELINES:
        raise ValueError(
            f"trainer.later_baseline={config.later_baseline!r}: one of {', '.join(LATER_BASELINES)}"
        )
    if config.later_baseline != "first" and config.first_step != "all":
        raise ValueError(
            "trainer.later_baseline sets the later steps' baseline of first_step=all: set that too"
        )
    if config.first_weights not in ("policy", "uniform"):
        raise ValueError(f"trainer.first_weights={config.first_weights!r}: policy or uniform")
    if config.first_weights != "policy" and config.first_step != "all":
        raise ValueError("trainer.first_weights weighs first_step=all's first actions: set that too")
    if config.second_target is not None and (config.second_target <= 0 or config.second_step != "all"):
        raise ValueError(
            f"trainer.second_target={config.second_target}: a temperature > 0 for the returns of every "
            "second action (second_step=all)"
        )
    if config.second_step not in ("sample", "all"):
        raise ValueError(f"trainer.second_step={config.second_step!r}: sample or all")
    if config.second_step == "all" and (
        config.first_step != "all" or env.config.max_steps != 2 or env.config.k_available is not None
    ):
        raise ValueError(
            "trainer.second_step=all tries every pair of actions of a two-step episode: it needs "
            "trainer.first_step=all, max_steps=2 and every agent on offer (no k_available)"
        )
    if config.batch_episodes % config.group_size:
        raise ValueError("batch_episodes must be a multiple of group_size")
    lam_range = check_lam_conditioning(env, policy, config)
    if config.init_first is not None:
        if config.first_step != "all" or config.second_step != "all" or env.config.k_available is not None:
            raise ValueError(
                "trainer.init_first tries every second action after the fixed router's first choice: it "
                "needs trainer.first_step=all and trainer.second_step=all (and every agent on offer)"
            )
        if not policy.config.one_call_first:
            raise ValueError(
                "trainer.init_first loads a one-call router as the first scorer: set "
                "policy.step_heads=true and policy.one_call_first=true"
            )
    return lam_range


def check_resume(
    run_dir: str | Path, env: ConductorEnv, policy: PuppeteerPolicy, config: ReinforceConfig
) -> None:
    """Raise unless ``run_dir`` is empty of checkpoints or holds one that this run may resume."""
    path = Path(run_dir) / "checkpoint.pt"
    if path.exists():
        _check_resumable(_load_resumable(path), run_fingerprint(env, policy, config), config, path)


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
    save_trajectories: bool = True,
) -> TrainState:
    """Train ``policy`` on ``env``; resumes from ``run_dir/checkpoint.pt`` when it exists.

    Every training episode is appended to ``run_dir/trajectories.jsonl`` unless ``save_trajectories``
    is false (long runs on a replayed table write hundreds of MB there; results do not depend on it).

    Raises :class:`TrainingStopped` (checkpoint saved, rerun to resume) when too many calls
    fail or a run file cannot be written, :class:`CheckpointError` for an unusable checkpoint.
    """
    lam_range = check_training(env, policy, config)
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    ckpt_path, traj_path = run / "checkpoint.pt", run / "trajectories.jsonl"
    if config.init_first is not None:
        policy.freeze_first()
    trained = [p for p in policy.scorer.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=config.lr, weight_decay=config.weight_decay)
    rng = np.random.default_rng(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    state = TrainState()
    fingerprint = run_fingerprint(env, policy, config)
    if ckpt_path.exists():
        ck = _load_resumable(ckpt_path)
        _check_resumable(ck, fingerprint, config, ckpt_path)
        policy.scorer.load_state_dict(ck["policy"])
        opt.load_state_dict(ck["optimizer"])
        rng.bit_generator.state = ck["numpy_rng"]
        gen.set_state(ck["torch_rng"])
        state = TrainState(**ck["state"])
        if traj_path.exists():
            with traj_path.open("r+b") as f:
                f.truncate(state.traj_offset)
        if isinstance(logger, Rewindable):
            logger.rewind(state.episodes)  # metrics logged after the checkpoint are logged again
        log.info("resumed from update %d (%d episodes)", state.update, state.episodes)
    else:  # a fresh start: lines left by a run killed before its first checkpoint are not kept
        policy.fit_inputs([t.question for t in env.tasks], [t.domain for t in env.tasks])
        if config.init_first is not None:  # after fit_inputs: the router keeps the statistics it read by
            policy.load_first(config.init_first)
        if traj_path.exists():
            traj_path.write_bytes(b"")
        if isinstance(logger, Rewindable):
            logger.rewind(0)
    saved_update = state.update

    def checkpoint(numpy_rng: dict[str, Any], torch_rng: torch.Tensor) -> None:
        nonlocal saved_update
        atomic_torch_save(
            {
                "policy": policy.scorer.state_dict(),
                "optimizer": opt.state_dict(),
                "numpy_rng": numpy_rng,
                "torch_rng": torch_rng,
                "state": asdict(state),
                "config": asdict(config),
                "fingerprint": fingerprint,
            },
            ckpt_path,
        )
        saved_update = state.update

    def stop(why: str) -> TrainingStopped:
        return TrainingStopped(
            f"training stopped at update {state.update}: {why}; the checkpoint in {run} holds update "
            f"{saved_update}: rerun the same command to resume"
        )

    baseline_fn = BASELINES[config.baseline]
    envs: list[ConductorEnv] | EnvGroup
    if config.rollout_workers > 0:
        from puppeteer.envs.distributed import RayEnvGroup

        envs = RayEnvGroup(env, config.parallel_envs, config.rollout_workers, address=config.ray_address)
    else:
        envs = [env, *(env.clone() for _ in range(config.parallel_envs - 1))]
    eval_envs = (
        [] if eval_env is None else [eval_env, *(eval_env.clone() for _ in range(config.parallel_envs - 1))]
    )
    draw = _group_subsets(env) if config.first_step == "all" else None
    firsts = None
    if config.first_step == "all":  # the first actions a group tries (with subsets: how many)
        firsts = first_actions(env, policy, None if draw is None else draw.example)
    # init_first: the fixed router's greedy choice is the one first action a group tries
    router_first = _RouterFirst(env, policy) if config.init_first is not None else None
    phi = float(env.config.phi if env.config.phi is not None else env.config.max_steps)
    seconds = second_actions(env, policy) if config.second_step == "all" else None
    size = config.group_size if firsts is None else 1 if router_first is not None else len(firsts)
    if firsts is not None and seconds is not None:
        size *= len(seconds)
    n_groups = max(1, config.batch_episodes // size)
    planned = -(-config.episodes // size) * size  # whole groups: the last one may go past episodes
    if planned != config.episodes:  # say so (and the progress line counts to it)
        # a sampled group's size is the user's setting (a warning); trying every action, the pool sets it
        # and the progress line counts to the planned episodes
        level = logging.WARNING if firsts is None else logging.DEBUG
        log.log(level, ROUNDED_UP, config.episodes, size, planned)

    watch, collapse_told = CollapseWatch(), False
    while state.episodes < config.episodes:
        rng_before, gen_before = rng.bit_generator.state, gen.get_state()
        specs: list[tuple[int, int | None]] = []
        # the last batch is cut to what is left (whole groups), so a run trains ``episodes`` episodes
        left = -(-(config.episodes - state.episodes) // size)
        lams: list[float | None] | None = None if lam_range is None else []
        relabel: list[list[float]] = []
        tried: list[list[int]] = []
        offered: list[Sequence[int] | None] = []
        for _ in range(min(n_groups, left)):
            task_index = int(rng.integers(len(env.tasks)))
            if firsts is None:
                specs += [(int(rng.integers(2**31)), task_index) for _ in range(size)]
            else:  # one reset seed per group: every first action sees the same first observation
                seed = int(rng.integers(2**31))
                specs += [(seed, task_index) for _ in range(size)]
                if draw is not None:
                    mask = draw(rng)
                    tried.append(first_actions(env, policy, mask))
                    offered += [np.flatnonzero(mask).tolist()] * size
                elif router_first is not None:
                    tried.append([router_first(seed, task_index)])
                else:
                    tried.append(firsts)
            if lams is not None and lam_range is not None:  # one lambda per group (its baseline's too)
                lams += [lam_range.sample(rng)] * size
                relabel.append([lam_range.sample(rng) for _ in range(config.lam_relabel)])
        forced: list[int | tuple[int, ...]] | None = None
        if firsts is not None:
            forced = [a for group_firsts in tried for a in group_firsts]
            if seconds is not None:  # every (first, second) pair, first-major
                forced = [(int(a), b) for a in forced for b in seconds]
        flat = run_lockstep(
            envs,
            policy,
            specs,
            generator=gen,
            on_episode=on_episode,
            first_actions=forced,
            lams=lams,
            available=offered if draw is not None else None,
        )
        failed = sum(e.error is not None for e in flat)
        seen = max(state.episodes + len(flat), MIN_EPISODES_FOR_FAILURE_RATE)
        if failed and (state.failed + failed) / seen > config.max_failed_fraction:
            checkpoint(rng_before, gen_before)  # the state before this batch: a resume reruns it
            first = next(e.error for e in flat if e.error is not None)
            raise stop(
                f"{state.failed + failed} of {state.episodes + len(flat)} episodes ended on a failed call "
                f"(limit {config.max_failed_fraction:.0%}; last: {first})"
            )
        groups = [flat[i : i + size] for i in range(0, len(flat), size)]
        value: float | None = None  # first_step=all: the policy's expected return on the batch's items
        if firsts is None:
            pg_loss, entropy, first_choices = _sampled_loss(
                policy, groups, baseline_fn(groups, state.baseline, config)
            )
        elif seconds is not None:  # every pair of actions was tried
            pg_loss, entropy, first_choices, value = _all_pairs_loss(
                policy, groups, tried, seconds, config.first_weights, config.second_target
            )
        else:  # every first action was tried: the watch reads the policy's greedy first choice
            pg_loss, entropy, first_choices, value = _all_first_loss(
                policy, groups, tried, relabel or None, phi, config.later_baseline, config.first_weights
            )
        frac = min(state.episodes / max(config.episodes, 1), 1.0)
        loss = pg_loss - entropy_coef(config, frac) * entropy
        for group in opt.param_groups:
            group["lr"] = config.lr * (1.0 - (1.0 - config.lr_final_fraction) * frac)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, config.max_grad_norm)
        opt.step()

        batch = [e for g in groups for e in g]
        state.update += 1
        state.episodes += len(batch)
        state.failed += failed
        metrics = {f"train/{k}": v for k, v in summarize(batch).items()}
        metrics.update(
            {
                "train/loss": float(loss.detach()),
                "train/entropy": float(entropy.detach()),
                # collapse watch: the share of episodes that open with the most common first action
                "train/top_first_share": top_share(first_choices),
                "train/failed": failed / len(batch),
                "episodes": state.episodes,
            }
        )
        if value is not None:  # the batch tried every first action: its mean return is not the policy's
            metrics["train/policy_return"] = value
        if eval_env is not None and (
            state.update % config.eval_every == 0 or state.episodes >= config.episodes
        ):
            if lam_range is None:
                ev = evaluate(eval_envs, policy, eval_n)
            else:
                ev = evaluate_over(eval_envs, policy, lam_range.grid(VALIDATION_LAMS), eval_n)
            metrics.update({f"eval/{k}": v for k, v in ev.items()})
            if ev["return"] > state.best and ev["calls"] > 0:  # a policy that calls nobody is never kept
                state.best, state.best_update = ev["return"], state.update
                _save_policy(policy, run / "best", stop)
        state.history.append(metrics)
        if not collapse_told:
            told = watch.check(metrics, state.episodes, config.episodes)
            if told is not None:
                log.warning(told)
                collapse_told = True
        try:
            if save_trajectories:
                state.traj_offset = _append_lines(
                    traj_path, [json.dumps(e.trajectory) for e in batch], state.traj_offset
                )
            if logger is not None:
                logger.log(metrics, state.episodes)
        except OSError as exc:
            raise stop(f"could not write to {run} ({exc.strerror or exc})") from exc
        if progress is not None:
            progress(state.episodes, planned, metrics)
        if state.update % config.checkpoint_every == 0 or state.episodes >= config.episodes:
            try:
                checkpoint(rng.bit_generator.state, gen.get_state())
            except CheckpointError as exc:
                raise stop(str(exc)) from exc
    _save_policy(policy, run / "final", stop)
    close = getattr(envs, "close", None)  # Ray workers (they also end when the group is dropped)
    if callable(close):
        close()
    return state
