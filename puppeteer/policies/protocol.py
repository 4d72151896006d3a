"""The one policy contract: what evaluation, the Orchestrator (``run``, ``serve``) and Ray rollouts run.

A :class:`Policy` knows how to run its own episode on a :class:`~puppeteer.envs.env.ConductorEnv` and how
to fork itself for concurrent items. The callers never ask what kind of policy they hold::

    config = policy.configure(settings, tasks, seeds, pool)   # the env this policy acts in
    env = ConductorEnv(config, pool=pool, tasks=tasks, ...)
    policy.start(env, shared_backend, cache)                  # bind backends / batch work
    trajectory, extra = policy.fork().episode(env, index=i, seed=seeds[i], options=options)

Three adapters cover the project's kinds; a new kind is one class with these four methods plus
a registry entry (:func:`puppeteer.policies.registry.register_policy`):

* :class:`StepRunner` wraps a step policy (``reset(task_id)``, ``act(obs, rng) -> action``): the
  trained puppeteer, SB3 models, ``random-step``, ``cascade``.
* :class:`PlannedRunner` wraps a :class:`~puppeteer.policies.baselines.WorkflowPolicy`
  (``plan(task, pool, rng) -> Workflow``): the fixed-workflow baselines, planned up front so the
  env's step limit fits the longest plan.
* The text-writing conductors (:class:`~puppeteer.policies.conductor.ConductorPolicy`, a GRPO run)
  implement the protocol themselves.

:func:`as_policy` is the one place that tells the raw kinds apart (by what they can do).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from puppeteer.envs.build import EnvConfig
from puppeteer.envs.rollout import run_step_episode, run_workflow_episode
from puppeteer.errors import RunStopped
from puppeteer.types import Task, TrainItems, Trajectory, Workflow

if TYPE_CHECKING:
    from puppeteer.agents.pool import Pool
    from puppeteer.backends.base import Backend
    from puppeteer.envs.env import ConductorEnv

EpisodeRecord = tuple[Trajectory, dict[str, Any]]
"""One finished item: its trajectory and what its eval line adds (a conductor's calls and rounds)."""


@dataclass(frozen=True)
class EpisodeSettings:
    """What a caller asks of every episode, whatever the policy: the env's settings it may adapt."""

    lam: float = 0.1
    max_steps: int = 5
    max_depth: int = 0  # planning rounds after the first (conductors only)
    recursion: str = "offer"  # conductors: "offer" itself as a worker, or "always" review (EnvConfig)
    k_available: int | None = None  # a random k-of-n subset of agents per item
    price_in_prompt: bool = False  # conductors: the prompt states the price of cost (``lam`` per unit)
    prompt: str | None = None  # conductors: configs/conductor/<prompt>.yaml (None: the default prompt)
    cost_model: str | None = None  # conductors: what ``lam`` prices (tokens, usd, ...; None: tokens)
    # every arm's final answer (last | vote | plan, EnvConfig.aggregate) in place of the policy's own,
    # so two arms choose it alike (None: each policy's own; "plan" needs a workflow policy)
    final_answer: str | None = None

    def step_config(self, aggregate: str | None = None, *, visible_checks: bool = False) -> EnvConfig:
        """Step mode: one agent per action, the Terminator ends the episode (``visible_checks``: the
        answer signals carry the visible checks' verdicts, for a policy that reads them)."""
        return EnvConfig(
            mode="step",
            lam=self.lam,
            max_steps=self.max_steps,
            aggregate=self.final_answer or aggregate,
            k_available=self.k_available,
            visible_checks=visible_checks,
        )

    def workflow_config(self, aggregate: str | None, max_steps: int | None = None, **more: Any) -> EnvConfig:
        """Workflow mode: one action is a whole workflow, priced at ``lam``."""
        return EnvConfig(
            mode="workflow",
            workflow_lam=self.lam,
            lam=self.lam,
            max_steps=max_steps or self.max_steps,
            aggregate=self.final_answer or aggregate,
            k_available=self.k_available,
            **{
                "price_in_prompt": self.price_in_prompt,
                **({"prompt": self.prompt} if self.prompt is not None else {}),
                **({"cost_model": self.cost_model} if self.cost_model is not None else {}),
                **more,
            },
        )


@runtime_checkable
class Policy(Protocol):
    """A policy that runs its own episodes (see the module docstring for the call order)."""

    name: str

    def configure(
        self, settings: EpisodeSettings, tasks: Sequence[Task], seeds: Sequence[int], pool: Pool
    ) -> EnvConfig:
        """The env settings this policy acts in for these items (up-front work, e.g. plans, goes here)."""
        ...

    def start(self, env: ConductorEnv, shared: Backend | None, cache: str | Path | None = None) -> None:
        """Called once the env exists, before any episode: bind backends (``shared``: the env's, None when
        the caller gave its own; ``cache``: the response cache path), or do batched work."""
        ...

    def episode(
        self, env: ConductorEnv, *, index: int, seed: int, options: Mapping[str, Any] | None = None
    ) -> EpisodeRecord:
        """Run item ``index`` of ``env`` (reset with ``seed`` and ``options``) to its end."""
        ...

    def fork(self) -> Policy:
        """A copy for one more concurrent episode (per-episode state apart, models shared)."""
        ...


class StepRunner:
    """A step policy (``reset``, ``act(obs, rng)``) under the :class:`Policy` contract.

    Step policies carry no state from one step to the next (the observation does), so forks share
    the one policy and call its ``reset``/``act`` one at a time under a lock (model calls, outside
    the lock, still overlap). A step policy that keeps per-episode state declares
    ``episode_state = True`` and is deep-copied per fork instead.
    """

    def __init__(self, step: Any, lock: threading.Lock | None = None) -> None:
        self.step = step
        self.name: str = step.name
        self._lock = lock or threading.Lock()  # shared with this runner's forks

    def configure(
        self, settings: EpisodeSettings, tasks: Sequence[Task], seeds: Sequence[int], pool: Pool
    ) -> EnvConfig:
        return settings.step_config(
            getattr(self.step, "aggregate", None),
            visible_checks=bool(getattr(self.step, "reads_checks", False)),
        )

    def start(self, env: ConductorEnv, shared: Backend | None, cache: str | Path | None = None) -> None:
        return None

    def episode(
        self, env: ConductorEnv, *, index: int, seed: int, options: Mapping[str, Any] | None = None
    ) -> EpisodeRecord:
        policy = _Serialized(self.step, self._lock)
        rng = np.random.default_rng(seed)
        return run_step_episode(env, policy, rng, seed=seed, index=index, options=options), {}

    @property
    def lam_range(self) -> Any:
        """The lambdas a conditioned step policy was trained over (None: one fixed lambda)."""
        return getattr(self.step, "lam_range", None)

    def fork(self) -> StepRunner:
        if getattr(self.step, "episode_state", False):
            return StepRunner(copy.deepcopy(self.step))
        return StepRunner(self.step, self._lock)


class _Serialized:
    """A step policy whose ``reset``/``act`` run one at a time (episodes still overlap in model calls)."""

    def __init__(self, policy: Any, lock: threading.Lock) -> None:
        self.policy, self.name, self._lock = policy, policy.name, lock

    def reset(self, task_id: str) -> None:
        with self._lock:
            self.policy.reset(task_id)

    def act(self, obs: dict[str, Any], rng: np.random.Generator) -> int:
        with self._lock:
            return int(self.policy.act(obs, rng))


class PlannedRunner:
    """A :class:`~puppeteer.policies.baselines.WorkflowPolicy` under the :class:`Policy` contract.

    Every item's workflow is planned in :meth:`configure` (rng seeded by the item's reset seed), so
    the env's step limit fits the longest plan; a plan that fails is raised by that item's episode.
    Forks read the plans made so far and plan their own items without touching the original's.
    """

    def __init__(self, planner: Any, plans: Mapping[str, Workflow | BaseException] | None = None) -> None:
        self.planner = planner
        self.name: str = planner.name
        self._plans: dict[str, Workflow | BaseException] = dict(plans or {})

    def configure(
        self, settings: EpisodeSettings, tasks: Sequence[Task], seeds: Sequence[int], pool: Pool
    ) -> EnvConfig:
        plans: dict[str, Workflow | BaseException] = {}
        for task, seed in zip(tasks, seeds, strict=True):
            try:
                plans[task.id] = self.planner.plan(task, pool, np.random.default_rng(seed))
            except RunStopped:
                raise  # e.g. a strict replay's missing call: the whole run stops
            except Exception as e:  # raised by the item's episode, recorded as its error
                plans[task.id] = e
        self._plans = plans
        longest = max((len(p) for p in plans.values() if isinstance(p, Workflow)), default=1)
        return settings.workflow_config(self.planner.aggregate, max(settings.max_steps, longest))

    def start(self, env: ConductorEnv, shared: Backend | None, cache: str | Path | None = None) -> None:
        return None

    def episode(
        self, env: ConductorEnv, *, index: int, seed: int, options: Mapping[str, Any] | None = None
    ) -> EpisodeRecord:
        plan = self._plans.get(env.tasks[index].id)
        if plan is None:
            raise RuntimeError(f"{self.name}: item {index} was not planned (configure() first)")
        if isinstance(plan, BaseException):
            raise plan
        return run_workflow_episode(env, plan, seed=seed, index=index, options=options), {}

    def fork(self) -> PlannedRunner:
        return PlannedRunner(self.planner, self._plans)


def train_items(policy: Any) -> TrainItems | None:
    """The items ``policy`` was trained or fitted on, where it says (its ``train_items``, or that of
    the step policy or planner an adapter wraps); None: untrained, or not recorded."""
    for obj in (policy, getattr(policy, "step", None), getattr(policy, "planner", None)):
        items = getattr(obj, "train_items", None)
        if isinstance(items, TrainItems):
            return items
    return None


def as_policy(obj: Any) -> Policy:
    """The :class:`Policy` for any object the registry builds: itself when it runs its own episodes,
    else the adapter for what it can do (``plan`` a workflow, or ``act`` step by step)."""
    if isinstance(obj, Policy):
        return obj
    if callable(getattr(obj, "plan", None)) and hasattr(obj, "aggregate"):
        return PlannedRunner(obj)
    if callable(getattr(obj, "act", None)) and callable(getattr(obj, "reset", None)):
        return StepRunner(obj)
    raise TypeError(
        f"{type(obj).__name__} is not a policy: it needs episode/configure/start/fork, "
        "plan(task, pool, rng) with an aggregate, or reset(task_id) and act(obs, rng)"
    )


__all__ = [
    "EpisodeRecord",
    "EpisodeSettings",
    "PlannedRunner",
    "Policy",
    "StepRunner",
    "as_policy",
    "train_items",
]
