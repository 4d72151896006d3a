"""Episode rollouts: the one place that steps a :class:`~puppeteer.envs.env.ConductorEnv` until it ends.

* :func:`run_episode` drives one env with any ``act(obs, info) -> action`` function until the env
  ends the episode; every other single-env rollout is a thin adapter of it:
  :func:`run_step_episode` (a step policy), :func:`run_workflow_episode` (one planned workflow),
  :func:`run_conductor_episode` (a text-writing conductor that may recurse) and
  :func:`run_actions` (a fixed list of actions: the reference plans, ``puppeteer run --chain``).
* :func:`run_lockstep` runs many step-mode episodes side by side over an
  :class:`~puppeteer.envs.group.EnvGroup` (in this process or on Ray workers), so a puppeteer policy
  encodes all current observations in one batch; it is the trainer's rollout.
* :func:`summarize` is the one metrics summary of finished episodes (accuracy, the env's
  discounted return ``info["returns"][0]``, cost F, calls, tokens, USD).

Nothing here knows about training or evaluation files: callers record what they need.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from puppeteer.envs.group import EnvGroup, as_env_group
from puppeteer.envs.trajectories import trajectory_to_dict
from puppeteer.envs.workflow import format_workflow
from puppeteer.types import Task, Trajectory, Workflow

if TYPE_CHECKING:
    import torch

    from puppeteer.envs.env import ConductorEnv
    from puppeteer.policies.conductor import ConductorPolicy
    from puppeteer.policies.puppeteer import PuppeteerPolicy
    from puppeteer.policies.puppeteer_scorer import Features

Act = Callable[[dict[str, Any], dict[str, Any]], Any]


class EpisodeNotEnded(RuntimeError):
    """The env did not end the episode within the number of actions its settings allow."""


@dataclass(frozen=True)
class EpisodeEnd:
    """One finished single-env episode: the env's last ``info`` and what was paid on the way."""

    info: dict[str, Any]
    actions: tuple[Any, ...]
    rewards: tuple[float, ...]
    cost: float  # sum of the env's per-step cost F (``info["cost"]``)
    observations: tuple[dict[str, Any], ...] = ()  # what each action was chosen from

    @property
    def trajectory(self) -> Trajectory:
        return self.info["trajectory"]

    @property
    def correct(self) -> bool:
        return bool(self.info["correct"])

    @property
    def ret(self) -> float:
        """The env's discounted return of the episode (``info["returns"][0]``,
        :mod:`puppeteer.envs.reward`)."""
        return float(self.info["returns"][0])

    @property
    def calls(self) -> int:
        return len(self.trajectory.steps)

    @property
    def tokens(self) -> int:
        return self.trajectory.prompt_tokens + self.trajectory.completion_tokens

    @property
    def usd(self) -> float:
        return self.trajectory.cost_usd


def action_limit(env: ConductorEnv) -> int:
    """The most actions an episode of ``env`` can take: ``max_steps`` agents and the Terminator in step
    mode, ``max_depth + 1`` planning rounds in workflow mode."""
    c = env.config
    return c.max_steps + 1 if c.mode == "step" else c.max_depth + 1


def run_episode(
    env: ConductorEnv,
    act: Act,
    *,
    seed: int | None = None,
    options: Mapping[str, Any] | None = None,
    start: Callable[[str], None] | None = None,
) -> EpisodeEnd:
    """Reset ``env`` (``seed``, ``options``) and step it with ``act(obs, info)`` until it ends the episode.

    ``start(task_id)`` is called after the reset, before the first action (a policy's ``reset``).
    """
    obs, info = env.reset(seed=seed, options=dict(options) if options is not None else None)
    if start is not None:
        start(env.task.id)
    actions: list[Any] = []
    rewards: list[float] = []
    seen: list[dict[str, Any]] = []
    cost = 0.0
    for _ in range(action_limit(env)):
        action = act(obs, info)
        seen.append(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        actions.append(action)
        rewards.append(float(reward))
        cost += info.get("cost", 0.0)
        if terminated or truncated:
            return EpisodeEnd(info, tuple(actions), tuple(rewards), cost, tuple(seen))
    what = "max_steps + 1 actions" if env.config.mode == "step" else "max_depth + 1 planning rounds"
    raise EpisodeNotEnded(f"the environment did not end the episode after {what}")


def _options(index: int | None, options: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**({"task_index": index} if index is not None else {}), **(options or {})}


def run_step_episode(
    env: ConductorEnv,
    policy: Any,
    rng: np.random.Generator,
    *,
    seed: int | None,
    index: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> Trajectory:
    """A step policy (``reset(task_id)``, ``act(obs, rng)``) on item ``index``; its trajectory."""
    return run_episode(
        env,
        lambda obs, _info: policy.act(obs, rng),
        seed=seed,
        options=_options(index, options),
        start=policy.reset,
    ).trajectory


def run_workflow_episode(
    env: ConductorEnv,
    plan: Workflow | str,
    *,
    seed: int | None,
    index: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> Trajectory:
    """One planned workflow (or a conductor's completion text) on item ``index``; its trajectory."""
    text = plan if isinstance(plan, str) else format_workflow(plan)
    return run_episode(env, lambda _obs, _info: text, seed=seed, options=_options(index, options)).trajectory


def run_conductor_episode(
    env: ConductorEnv,
    policy: ConductorPolicy,
    *,
    seed: int | None,
    index: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> tuple[Trajectory, dict[str, Any]]:
    """One episode of a text-writing conductor: it acts until the env ends it (recursion acts again).

    The conductor's completions come with its actions, so the episode's cost counts its tokens.
    Returns the trajectory and the conductor's record: its own calls, every planning round
    (graded as if the episode had stopped there) and the agents available in the episode.
    """
    end = run_episode(env, policy.action, seed=seed, options=_options(index, options), start=policy.reset)
    return end.trajectory, conductor_record(env, end.info, [c.to_dict() for c in policy.calls])


def conductor_record(
    env: ConductorEnv, info: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """What an eval line of a conductor episode adds (the env has just ended it): the conductor's own
    ``calls``, every planning round graded as if the episode had stopped there, the episode's agents."""
    grader = env.graders[env.task.grader]
    rounds = [
        {**r, "correct": grader.grade(r["answer"], env.task) if r["parse_error"] is None else False}
        for r in info["rounds"]
    ]
    return {
        "conductor": [dict(c) for c in calls],
        "rounds": rounds,
        "available": [a.name for a, ok in zip(env.pool.agents, env.available(), strict=True) if ok],
    }


def run_actions(
    env: ConductorEnv,
    actions: Iterable[Any] | Callable[[Task], Iterable[Any]],
    *,
    seed: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> EpisodeEnd:
    """Take ``actions`` in order until the env ends the episode (the rest are not taken).

    ``actions`` may be a function of the episode's task (called after the reset): a reference plan.
    Raises :class:`EpisodeNotEnded` when the actions run out first.
    """
    queue: list[Iterator[Any]] = []

    def start(_task_id: str) -> None:
        queue.append(iter(actions(env.task) if callable(actions) else actions))

    def act(_obs: dict[str, Any], _info: dict[str, Any]) -> Any:
        try:
            return next(queue[0])
        except StopIteration:
            raise EpisodeNotEnded("the actions ran out before the environment ended the episode") from None

    return run_episode(env, act, seed=seed, options=options, start=start)


# --------------------------------------------------------------------------- lockstep (the trainer's)


@dataclass
class Episode:
    """A step-mode episode as the trainer sees it: encoded observations, actions, the env's returns."""

    task_id: str
    feats: list[Features]
    actions: list[int]
    rewards: list[float]
    returns: list[float] = field(default_factory=list)
    correct: bool = False
    cost: float = 0.0
    trajectory: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the failed call that ended the episode, if one did
    lam: float | None = None  # the episode's lambda when the caller set one (reset options["lam"])
    # per action after the first: what stopping instead would have returned (the env's info["stop_return"]
    # after the previous step: the answer so far graded, nothing more paid); stop_returns[t - 1] is step t's
    stop_returns: list[float] = field(default_factory=list)
    # a forced later action the env did not offer (a pool with ``recorded_only``: a call its table
    # lacks; ``first_actions`` pairs only): the episode ends before it, unstepped; its feats and actions
    # include that state and action, its returns are the NaNs of an outcome nobody saw, and a trainer
    # leaves the action out
    unoffered: bool = False

    @property
    def ret(self) -> float:
        return self.returns[0]

    @property
    def calls(self) -> int:
        return len(self.trajectory["steps"])

    @property
    def tokens(self) -> int:
        return self.trajectory["prompt_tokens"] + self.trajectory["completion_tokens"]

    @property
    def usd(self) -> float:
        return self.trajectory["cost_usd"]


def run_lockstep(
    envs: Sequence[ConductorEnv] | EnvGroup,
    policy: PuppeteerPolicy,
    specs: Sequence[tuple[int, int | None]],
    generator: torch.Generator | None = None,
    greedy: bool = False,
    on_episode: Callable[[Episode], None] | None = None,
    first_actions: Sequence[int | tuple[int, ...] | None] | None = None,
    lams: Sequence[float | None] | None = None,
    available: Sequence[Sequence[int] | None] | None = None,
) -> list[Episode]:
    """Run one episode per (reset seed, task index) spec, ``len(envs)`` at a time in lockstep.

    ``first_actions`` (one per spec, None: the policy's choice) forces an episode's first action, or its
    first actions when a tuple (then the policy chooses from the step after them).
    ``lams`` (one per spec, None: the env's own) prices an episode's cost (reset ``options["lam"]``);
    the trajectory line then records it as ``lam``. ``available`` (one per spec, None: the env's own
    draw) offers an episode these agent ids (reset ``options["available"]``).

    Lockstep lets the policy encode all current observations in one batch. ``envs`` may be an
    :class:`~puppeteer.envs.group.EnvGroup` (e.g. envs on Ray workers): the results are the same.
    A step whose call raises ends its episode, graded as wrong, with ``Episode.error`` set
    (:func:`puppeteer.envs.group.step_or_abort`).
    """
    group = as_env_group(envs)
    out: list[Episode] = []
    for lo in range(0, len(specs), len(group)):
        chunk = specs[lo : lo + len(group)]
        eps: dict[int, Episode] = {}
        obs: dict[int, dict[str, Any]] = {}
        chunk_lams = list(lams[lo : lo + len(group)]) if lams is not None else [None] * len(chunk)
        offered = list(available[lo : lo + len(group)]) if available is not None else [None] * len(chunk)
        resets = group.reset_many(
            [
                (k, seed, _reset_options(ti, lam, on_offer))
                for k, ((seed, ti), lam, on_offer) in enumerate(zip(chunk, chunk_lams, offered, strict=True))
            ]
        )
        for k, (first, info) in enumerate(resets):
            obs[k] = first
            eps[k] = Episode(task_id=info["task_id"], feats=[], actions=[], rewards=[], lam=chunk_lams[k])
        active = list(eps)
        forced = (
            list(first_actions[lo : lo + len(group)]) if first_actions is not None else [None] * len(chunk)
        )
        while active:
            feats = policy.features_batch([obs[k] for k in active])
            actions = policy.choose_batch(feats, generator, greedy=greedy)
            actions = [
                _forced(forced[k], len(eps[k].actions), a) for k, a in zip(active, actions, strict=True)
            ]
            offered = [
                _offered(forced[k], len(eps[k].actions), obs[k]["mask"], a)
                for k, a in zip(active, actions, strict=True)
            ]
            for k, f, a, ok in zip(active, feats, actions, offered, strict=True):
                if not ok:
                    ep = eps[k]
                    ep.feats.append(f)
                    ep.actions.append(a)
                    ep.unoffered = True
                    ep.returns = [math.nan] * len(ep.actions)
            active = [k for k, ok in zip(active, offered, strict=True) if ok]
            feats = [f for f, ok in zip(feats, offered, strict=True) if ok]
            actions = [a for a, ok in zip(actions, offered, strict=True) if ok]
            still = []
            results = group.step_many(list(zip(active, actions, strict=True))) if active else []
            for k, f, a, result in zip(active, feats, actions, results, strict=True):
                obs[k], r, terminated, truncated, info = result
                ep = eps[k]
                ep.feats.append(f)
                ep.actions.append(a)
                ep.rewards.append(float(r))
                ep.cost += float(info.get("cost", 0.0))
                if terminated or truncated:
                    ep.returns = list(info["returns"])  # discounted by the env (puppeteer.envs.reward)
                    ep.correct = bool(info["correct"])
                    ep.trajectory = trajectory_to_dict(info["trajectory"])
                    if info.get("error"):
                        ep.error = str(info["error"])
                        ep.trajectory["error"] = ep.error
                    if ep.lam is not None:
                        ep.trajectory["lam"] = ep.lam
                    if on_episode is not None:
                        on_episode(ep)
                else:
                    if "stop_return" in info:
                        ep.stop_returns.append(float(info["stop_return"]))
                    still.append(k)
            active = still
        out += [eps[k] for k in range(len(chunk))]
    return out


def _offered(forced: int | tuple[int, ...] | None, step: int, mask: np.ndarray, action: int) -> bool:
    """False for a later action of a forced tuple that the env does not offer now (the pairs of every
    first and second action, where an item's table lacks some): that episode ends unstepped. Any other
    action is stepped, and an env that forbids it says so."""
    return not (isinstance(forced, tuple) and 1 <= step < len(forced) and not mask[action])


def _forced(forced: int | tuple[int, ...] | None, step: int, chosen: int) -> int:
    """The action at ``step``: the forced one (an int forces the first step, a tuple the first few),
    else the policy's ``chosen``."""
    if forced is None:
        return chosen
    if isinstance(forced, tuple):
        return forced[step] if step < len(forced) else chosen
    return forced if step == 0 else chosen


def _reset_options(
    task_index: int | None, lam: float | None, available: Sequence[int] | None = None
) -> dict[str, Any] | None:
    options: dict[str, Any] = {}
    if task_index is not None:
        options["task_index"] = task_index
    if lam is not None:
        options["lam"] = lam
    if available is not None:
        options["available"] = list(available)
    return options or None


# --------------------------------------------------------------------------- the metrics summary


def summarize(eps: Sequence[Episode] | Sequence[EpisodeEnd]) -> dict[str, float]:
    """Means over finished episodes: accuracy, return (the env's), cost F, calls, tokens, USD."""
    return {
        "accuracy": float(np.mean([e.correct for e in eps])),
        "return": float(np.mean([e.ret for e in eps])),
        "cost": float(np.mean([e.cost for e in eps])),
        "calls": float(np.mean([e.calls for e in eps])),
        "tokens": float(np.mean([e.tokens for e in eps])),
        "usd": float(np.mean([e.usd for e in eps])),
    }


__all__ = [
    "Act",
    "Episode",
    "EpisodeEnd",
    "EpisodeNotEnded",
    "action_limit",
    "run_actions",
    "run_conductor_episode",
    "run_episode",
    "run_lockstep",
    "run_step_episode",
    "run_workflow_episode",
    "summarize",
]
