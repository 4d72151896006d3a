"""The parts a :class:`~puppeteer.envs.env.ConductorEnv` is made of: the typed settings, the tasks and pool,
and the built backend.

:class:`EnvConfig` holds every setting of an episode (checked when it is made). An env is made of
that config, a pool, its tasks and a built backend (:class:`EnvParts`, resolved by :func:`env_parts`).
:func:`build_backend` is the only place that assembles a backend for a pool: the pool's backend
options merged with the caller's, the simulator's answer key for simulated pools, and the response
cache around model-calling backends.

This module sits below :mod:`puppeteer.envs.env`, which imports it (not :mod:`puppeteer.envs.build`);
:func:`puppeteer.envs.build.build_env` puts the parts and the env together:

    env = build_env(EnvConfig(mode="step", lam=0.2), pool="sim-paper", suite="arith")
    twin = env.clone()  # same config, pool, tasks and backend

The keyword form ``ConductorEnv(mode="step", pool="sim-paper", suite="arith", lam=0.2, ...)`` and
``gym.make("Conductor-v0", **same)`` go through :func:`env_parts` too.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.agents.pot import ProgramMemo
from puppeteer.backends import REPLAY_ENV, make_router
from puppeteer.backends.base import Backend
from puppeteer.envs.aggregate import FINAL_CHOICES, PLAN_CHOICES
from puppeteer.envs.conductor_prompt import DEFAULT_PROMPT
from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.recorded import RecordedCalls
from puppeteer.tasks import load_suite
from puppeteer.tasks.visible import VISIBLE_CHECKS
from puppeteer.types import Task
from puppeteer.utils.checks import check_env_settings
from puppeteer.utils.memo import BoundedMemo

if TYPE_CHECKING:
    from puppeteer.backends.sim.answers import SimItem

MODES = ("step", "workflow")
INVALID_ACTIONS = ("raise", "remap")
# workflow mode with max_depth >= 1: "offer" lists the conductor as one more worker (naming it as the
# last step plans again); "always" follows every round below max_depth with a review round (the
# conductor sees its workflow and the last answer and plans again or keeps it): test-time scaling
RECURSION = ("offer", "always")
DEFAULT_POOL = "sim-paper"
DEFAULT_SUITE = "arith"


@dataclass(frozen=True)
class EnvConfig:
    """Every setting of a :class:`~puppeteer.envs.env.ConductorEnv` episode (see its docstring)."""

    mode: str = "step"
    lam: float = 0.1
    gamma: float = 0.99
    phi: float | None = None
    max_steps: int = 5
    min_steps: int = 0
    cost_model: str = "tokens"
    # how the final answer is chosen (puppeteer.envs.aggregate): "last" (the last step's answer), "vote"
    # (majority vote over the steps' answers) or, in workflow mode, "plan" (the plan's own ``final``
    # line names a step, 'vote' or 'last'; without one, the last step's answer) or "cascade" ("plan",
    # and the line may also say 'cascade:TRIGGER': each later step runs only when the trigger fires on
    # the answer before it). None: "vote" in step mode, "last" in workflow mode
    aggregate: str | None = None
    workflow_lam: float = 0.0
    temperature: float = 0.0
    samples_per_item: int | None = None
    show_question: bool = True
    k_available: int | None = None
    # k-of-n subsets (agent ids) that ``k_available`` never draws: held out of training, for evaluation
    holdout_subsets: tuple[tuple[int, ...], ...] = ()
    max_depth: int = 0
    recursion: str = "offer"
    prompt: str = DEFAULT_PROMPT
    unavailable: tuple[int, ...] = ()  # agent ids never offered in this env
    # step mode, an in-range action that the mask forbids: "raise" (InvalidAction), or "remap" it to the
    # next allowed action (cyclically) so RL algorithms that ignore masks (PPO, DQN, SB3's check_env) run
    invalid_action: str = "raise"
    # [low, high]: each episode draws its lambda from this range (puppeteer.envs.lam_range: log-uniform)
    # unless ``reset(options={"lam": x})`` gives one; None: every episode prices cost at ``lam``
    lam_range: tuple[float, float] | None = None
    # workflow mode: the conductor's prompt states the episode's price of cost (the prompt config's
    # price line); always on with ``lam_range``, where the price differs from episode to episode
    price_in_prompt: bool = False
    # step mode: run each answer against what its question shows (puppeteer.tasks.visible: a HumanEval
    # function on its docstring's examples, in the sandbox) and put the verdict in obs["signals"]
    visible_checks: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be 'step' or 'workflow', got {self.mode!r}")
        if self.max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        if not 0 <= self.min_steps <= self.max_steps:
            raise ValueError(f"min_steps must be in 0..max_steps ({self.max_steps}), got {self.min_steps}")
        check_env_settings(
            lam=self.lam,
            gamma=self.gamma,
            phi=self.phi,
            workflow_lam=self.workflow_lam,
            temperature=self.temperature,
            samples_per_item=self.samples_per_item,
        )
        if self.aggregate is not None and self.aggregate not in FINAL_CHOICES:
            raise ValueError(f"aggregate must be one of {', '.join(FINAL_CHOICES)}, got {self.aggregate!r}")
        if self.aggregate in PLAN_CHOICES and self.mode != "workflow":
            raise ValueError(
                f"aggregate={self.aggregate!r} lets the conductor's plan name its final answer: "
                "needs mode='workflow'"
            )
        if self.price_in_prompt and self.mode != "workflow":
            raise ValueError(
                "price_in_prompt states the price in the conductor's prompt: needs mode='workflow'"
            )
        if self.max_depth < 0 or (self.max_depth and self.mode != "workflow"):
            raise ValueError("max_depth (recursion) must be >= 0 and needs mode='workflow'")
        if self.recursion not in RECURSION:
            raise ValueError(f"recursion must be one of {', '.join(RECURSION)}, got {self.recursion!r}")
        if self.recursion == "always" and self.max_depth < 1:
            raise ValueError("recursion='always' plans again after each round: needs max_depth >= 1")
        object.__setattr__(self, "unavailable", tuple(int(i) for i in self.unavailable))
        held = tuple(tuple(sorted(int(i) for i in subset)) for subset in self.holdout_subsets)
        object.__setattr__(self, "holdout_subsets", held)
        if held and self.k_available is None:
            raise ValueError(
                "holdout_subsets needs k_available (they are k-of-n subsets kept out of its draws)"
            )
        if any(len(subset) != self.k_available or len(set(subset)) != len(subset) for subset in held):
            raise ValueError(f"holdout_subsets: each must name {self.k_available} distinct agents")
        if self.invalid_action not in INVALID_ACTIONS:
            raise ValueError(
                f"invalid_action must be one of {', '.join(INVALID_ACTIONS)}, got {self.invalid_action!r}"
            )
        lam_range = LamRange.of(self.lam_range)
        object.__setattr__(self, "lam_range", lam_range.bounds if lam_range is not None else None)

    @property
    def final_answer(self) -> str:
        """How this env chooses the final answer: ``aggregate``, or the mode's default."""
        return self.aggregate or ("vote" if self.mode == "step" else "last")

    @property
    def states_price(self) -> bool:
        """Whether the conductor's prompt states each episode's price of cost (workflow mode)."""
        return self.mode == "workflow" and (self.price_in_prompt or self.lam_range is not None)


CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(EnvConfig))


@dataclass(frozen=True)
class BackendSpec:
    """How an env builds its own backend: options merged over the pool's, and the response cache."""

    options: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    cache: str | None = None

    @classmethod
    def of(
        cls, options: Mapping[str, Mapping[str, Any]] | None = None, cache: str | Path | None = None
    ) -> BackendSpec:
        frozen = {k: MappingProxyType(dict(v)) for k, v in (options or {}).items()}
        return cls(MappingProxyType(frozen), str(cache) if cache is not None else None)


@dataclass(frozen=True)
class EnvParts:
    """What an env is made of. ``backend_spec`` is how the env built ``backend`` (then the env owns and
    closes it); None when the caller passed a built backend in (the caller's to close)."""

    config: EnvConfig
    pool: Pool
    tasks: tuple[Task, ...]
    backend: Backend
    backend_spec: BackendSpec | None
    # grades of (task, answer) pairs, shared by an env and its clones: the simulator answers an item
    # with one of a few texts, so a sandbox-graded code item is run once per distinct answer
    grades: GradeMemo = field(default_factory=lambda: GradeMemo())
    # program-of-thought runs by (program, limits), shared likewise: a replayed or cached completion's
    # program is run in the sandbox once per process, not at every step that calls its agent
    programs: ProgramMemo = field(default_factory=lambda: ProgramMemo())
    # visible checks' verdicts (EnvConfig.visible_checks), shared likewise: one sandbox run per answer
    checks: CheckMemo = field(default_factory=lambda: CheckMemo())
    # a pool with ``recorded_only``: the calls its replay table holds (step mode offers only these)
    recorded: RecordedCalls | None = None


class CheckMemo(BoundedMemo[tuple[str, str, "str | None"], "bool | None"]):
    """Visible checks' verdicts keyed by (task id, grader, answer); None: nothing to check."""

    def check(self, task: Task, answer: str | None) -> bool | None:
        check = VISIBLE_CHECKS.get(task.grader)
        if check is None:
            return None
        return self.get((task.id, task.grader, answer), lambda: check.check(answer, task))


class GradeMemo(BoundedMemo[tuple[str, str, "str | None"], bool]):
    """Graders' verdicts keyed by (task id, grader, answer)."""

    def grade(self, task: Task, answer: str | None, grade: Callable[[str | None, Task], bool]) -> bool:
        return self.get((task.id, task.grader, answer), lambda: bool(grade(answer, task)))


def sim_answer_key(tasks: Sequence[Task]) -> dict[str, SimItem]:
    """What the simulator needs to know about each item (never shown to real backends)."""
    from puppeteer.backends.sim.answers import SimItem
    from puppeteer.backends.sim.difficulty import visible_feature

    kinds = {"numeric": "numeric", "math": "math", "letter": "letter", "code": "code"}
    return {
        t.id: SimItem(
            gold=t.answer,
            domain=t.domain,
            kind=kinds.get(t.grader, "text"),
            choices=tuple(t.meta.get("choices", ())),
            visible_x=visible_feature(t.question),
        )
        for t in tasks
    }


def backend_options(
    pool: Pool, tasks: Sequence[Task], extra: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """The pool's backend options, ``extra`` merged over them, and the answer key of a simulated pool."""
    options = {k: dict(v) for k, v in pool.backend_options.items()}
    for k, v in (extra or {}).items():
        options.setdefault(k, {}).update(v)
    if pool.needs_answer_key:
        options.setdefault("sim", {})["answer_key"] = sim_answer_key(tasks)
    if "logged" in pool.backends() and pool.replay is not None:  # an imported table answers for its models
        options.setdefault("logged", {}).setdefault("table", str(pool.replay))
    return options


def build_backend(pool: Pool, tasks: Sequence[Task], spec: BackendSpec = BackendSpec()) -> Backend:
    """The router over the pool's backends for these tasks; model-calling backends behind ``spec.cache``
    and the pool's shipped outcome table (``PUPPETEER_REPLAY=off|on|strict``, default on)."""
    return make_router(
        backend_options(pool, tasks, spec.options),
        cache=spec.cache,
        replay=pool.replay,
        replay_mode=os.environ.get(REPLAY_ENV, "on").strip().lower() or "on",
    )


def env_parts(
    config: EnvConfig | None = None,
    *,
    pool: str | Path | Pool = DEFAULT_POOL,
    suite: str = DEFAULT_SUITE,
    split: str = "train",
    tasks: Sequence[Task] | None = None,
    n_tasks: int | None = None,
    backend: Backend | None = None,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
    cache: str | Path | None = None,
    **settings: Any,
) -> EnvParts:
    """Resolve an env's parts: ``config`` or the :class:`EnvConfig` fields as keywords (not both); the
    pool (a name, a YAML path or a :class:`Pool`); ``tasks`` or the first ``n_tasks`` of
    ``suite``/``split``; ``backend`` as given (``backend_options`` and ``cache`` then do not apply), or
    built from the pool, ``backend_options`` and ``cache``."""
    if config is not None and not isinstance(config, EnvConfig):
        raise TypeError(
            f"config must be an EnvConfig, got {type(config).__name__}; pass settings as "
            "keywords (ConductorEnv(mode='step', ...))"
        )
    if config is None:
        unknown = sorted(set(settings) - CONFIG_FIELDS)
        if unknown:
            raise TypeError(f"unknown environment setting(s) {', '.join(unknown)}")
        config = EnvConfig(**settings)
    elif settings:
        raise TypeError(f"give either config or settings, not both (got {', '.join(sorted(settings))})")
    resolved = pool if isinstance(pool, Pool) else load_pool(pool)
    items = tuple(tasks) if tasks is not None else load_suite(suite, split, n=n_tasks)
    if not items:
        raise ValueError("the environment needs at least one task")
    recorded = RecordedCalls.of_pool(resolved) if resolved.recorded_only and config.mode == "step" else None
    if backend is not None:
        return EnvParts(config, resolved, items, backend, None, recorded=recorded)
    spec = BackendSpec.of(backend_options, cache)
    return EnvParts(config, resolved, items, build_backend(resolved, items, spec), spec, recorded=recorded)


__all__ = [
    "BackendSpec",
    "EnvConfig",
    "EnvParts",
    "GradeMemo",
    "backend_options",
    "build_backend",
    "env_parts",
    "sim_answer_key",
]
