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

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.group import EnvGroup
from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.rollout import Episode, run_lockstep, summarize
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.train.collapse import CollapseWatch
from puppeteer.train.logging import MetricLogger, Rewindable
from puppeteer.train.reinforce.baselines import BASELINES
from puppeteer.train.reinforce.checkpoint import (
    TrainingStopped,
    TrainState,
    _append_lines,
    _check_resumable,
    _load_resumable,
    _save_policy,
    run_fingerprint,
)
from puppeteer.train.reinforce.config import LATER_BASELINES, ReinforceConfig
from puppeteer.train.reinforce.groups import _group_subsets, _RouterFirst, first_actions, second_actions
from puppeteer.train.reinforce.losses import _all_first_loss, _all_pairs_loss, _sampled_loss, entropy_coef
from puppeteer.train.reinforce.validation import VALIDATION_LAMS, evaluate, evaluate_over, top_share
from puppeteer.utils.safeload import CheckpointError, atomic_torch_save

log = logging.getLogger(__name__)


# the warning of a run whose episodes are not whole groups (a job that chose the count itself may filter it)
ROUNDED_UP = "trainer.episodes=%d is not a multiple of the group size %d: training runs %d episodes"


MIN_EPISODES_FOR_FAILURE_RATE = 64  # a few early failures alone do not stop a run


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
    if config.freeze_later and (config.first_step != "all" or config.second_step != "all"):
        raise ValueError(
            "trainer.freeze_later learns the first decision on what each first call is worth under the "
            "fixed later decisions: it needs trainer.first_step=all and trainer.second_step=all"
        )
    if config.freeze_later and not policy.config.step_heads:
        raise ValueError("trainer.freeze_later keeps the later scorer fixed: set policy.step_heads=true")
    return lam_range


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
    if config.freeze_later:
        policy.freeze_later()
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
        if config.init_policy is not None:  # after fit_inputs: it keeps the statistics it read by
            policy.load_weights(config.init_policy)
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
    by_router = config.init_first is not None and config.first_tries == "router"
    router_first = _RouterFirst(env, policy) if by_router else None
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

    # a fixed first decision (init_first: a trained router's weights, kept) routes as it was trained to:
    # one agent for most items is its routing, not a collapse of this run's exploration
    watch = None if config.init_first is not None else CollapseWatch()
    collapse_told = False
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
                policy,
                groups,
                tried,
                seconds,
                config.first_weights,
                config.second_target,
                # the router fixed and every first action tried: each state after one counts alike
                state_weights="uniform" if config.init_first is not None else "policy",
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

        tried_all = [e for g in groups for e in g]
        batch = [e for e in tried_all if not e.unoffered]  # what ran: unoffered pairs were not stepped
        state.update += 1
        state.episodes += len(tried_all)
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
        if watch is not None and not collapse_told:
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
