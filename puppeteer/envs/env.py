"""``Conductor-v0``: one Gymnasium environment, two action modes.

* ``mode="step"`` (the puppeteer): an action is the next agent id, or the Terminator
  (id ``n_agents``). The episode ends on the Terminator or after ``max_steps``
  activations; the majority-vote answer is graded. With ``min_steps=k`` the Terminator
  is masked until ``k`` agents have acted (``min_steps=1``: no empty episodes).
* ``mode="workflow"`` (the conductor): an action is the conductor's completion text
  holding ``model_id``, ``subtasks`` and ``access_list``; one step runs the whole
  workflow; the last step's answer is graded.

The final answer (``aggregate``, :mod:`puppeteer.envs.aggregate`): ``"last"``, ``"vote"`` or, in workflow
mode, ``"plan"``: the plan's own ``final = k | 'vote' | 'last'`` line says (absent: the last step's
answer). The trajectory's ``final_choice`` records what was used (``last``, ``vote`` or ``step k``).

The conductor's cost (workflow mode): an action given as a
:class:`~puppeteer.types.ConductorAction` carries the completion that wrote the plan; its tokens
(seconds under ``cost_model="minutes"`` without declared speeds) are priced like a worker's call and
added to the episode's cost, so the reward pays for them too. ``info["conductor_cost"]`` and the
trajectory's ``conductor_tokens`` report that part apart. A plain string action has no conductor part.

The price of cost (lambda): ``reset(options={"lam": x})`` prices one episode's cost at ``x`` (the
step reward's lambda in step mode, ``workflow_lam`` in workflow mode); with ``lam_range=[low, high]``
an episode given none draws its own (:class:`~puppeteer.envs.lam_range.LamRange`: log-uniform).
``obs["lam"]`` is the episode's lambda, so a policy conditioned on it can read it.

Worker subsets (k of n): ``reset(options={"available": [names or ids]})`` fixes the agents of one
episode; ``k_available=k`` draws a random k-of-n subset each episode (from the agents not listed in
``unavailable``), never one of ``holdout_subsets`` (kept out of training to evaluate on;
:func:`~puppeteer.agents.availability.holdout_subsets` picks them). The observation's ``mask``,
:meth:`action_masks`, the conductor prompt and the workflow parser all follow it: a workflow naming
an unavailable agent is a parse error (reward 0).

Recursion (workflow mode, ``max_depth >= 1``): the conductor is offered as one more worker with id
``len(pool)`` and may be named as the LAST step of a workflow. The steps before it run, and the
episode goes on (``terminated=False``, reward 0) with a new observation whose prompt shows the
parent workflow and the last worker's answer; the policy acts again with a new workflow, or with
three empty lists to keep that answer. At depth ``max_depth`` the conductor is no longer offered.
With ``recursion="always"`` the conductor is not offered as a worker: every round below
``max_depth`` is followed by such a review round (test-time scaling, measured per depth).
``info["rounds"]`` lists every planning round (depth, text, parse error, steps, answer).

Construction: the settings are an :class:`~puppeteer.envs.parts.EnvConfig`; the pool, the tasks and
the built backend come from :mod:`puppeteer.envs.build` (``build_env(config, pool=..., suite=...)``,
or the keyword form ``ConductorEnv(mode=..., pool=..., lam=...)`` that gym.make uses). Episodes are
rolled out by :mod:`puppeteer.envs.rollout`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import InvalidAction, ResetNeeded

from puppeteer.agents.availability import draw_subset, resolve_available
from puppeteer.agents.reasoning import ANSWER_FORMATS, DEFAULT_FORMAT
from puppeteer.envs.aggregate import PLAN_DEFAULT, aggregator, choice_label, final_answer
from puppeteer.envs.conductor_prompt import (
    ConductorPrompt,
    Followup,
    Price,
    build_prompt,
    load_prompt_config,
)
from puppeteer.envs.executor import EpisodeContext, Executor, Extractor
from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.parts import BackendSpec, EnvConfig, EnvParts, env_parts
from puppeteer.envs.reward import (
    COST_UNITS,
    PuppeteerReward,
    check_cost_model,
    conductor_cost,
    conductor_reward,
    discounted_return,
    discounted_returns,
)
from puppeteer.envs.spaces import UnicodeText
from puppeteer.envs.workflow import (
    MAX_TEXT_CHARS,
    PlanSpace,
    WorkflowError,
    WorkflowLimits,
    extract_lists,
    format_workflow,
    parse_workflow,
)
from puppeteer.tasks import Grader, default_graders
from puppeteer.tasks.signals import N_SIGNALS, AnswerTally
from puppeteer.tools import default_tools
from puppeteer.types import Completion, ConductorAction, ModelSpec, Step, Task, Trajectory, Workflow
from puppeteer.utils.checks import number
from puppeteer.utils.textsafe import encodable

MAX_OBS_CHARS = 200_000
RESPONSE_CHARS_IN_STATE = 1_500
FOLLOWUP_ANSWER_CHARS = 800
# graders whose extraction from a simulated completion's vouched answer_text equals their extraction
# from its whole text (tests/test_sim_fast_path.py); any other grader always reads the whole text
VOUCHED_GRADERS = frozenset(type(g) for g in default_graders().values())
_MEMO_TASKS = 10_000  # tasks whose extractions are remembered before the memo starts over

__all__ = ["ConductorEnv", "EnvConfig"]


def _same_number(a: float, b: float) -> bool:
    """Whether ``a`` and ``b`` compute alike: same type and value, and the same sign of zero."""
    return type(a) is type(b) and a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _lam_space() -> spaces.Box:
    """``obs["lam"]``: the episode's price of cost (float64: a range's ends read back exactly; any
    finite lambda fits)."""
    return spaces.Box(0.0, np.finfo(np.float64).max, shape=(1,), dtype=np.float64)


class ConductorEnv(gym.Env[dict[str, Any], Any]):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(
        self,
        config: EnvConfig | None = None,
        *,
        parts: EnvParts | None = None,
        render_mode: str | None = None,
        seed: int | None = None,
        **sources: Any,
    ) -> None:
        """``ConductorEnv(mode="step", pool="sim-paper", suite="arith", lam=0.1, ...)``: every
        :class:`~puppeteer.envs.build.EnvConfig` field and every source that
        :func:`~puppeteer.envs.parts.env_parts` takes (``pool``, ``suite``, ``split``, ``tasks``,
        ``n_tasks``, ``backend``, ``backend_options``, ``cache``) as keywords; or a typed
        ``config`` with the sources; or built ``parts`` (:func:`~puppeteer.envs.build.build_env`)."""
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        if parts is None:
            parts = env_parts(config, **sources)
        elif config is not None or sources:
            raise TypeError("give built parts alone, or a config / settings with their sources")
        self.parts = parts
        self.config = config = parts.config
        self.render_mode = render_mode
        self.pool, self.tasks = parts.pool, parts.tasks
        self.graders: Mapping[str, Grader] = default_graders()
        missing = {t.grader for t in self.tasks} - set(self.graders)
        if missing:
            raise ValueError(f"unknown grader(s) {sorted(missing)}")
        self._base_mask = self.pool.availability(config.unavailable)
        # read at every step: the pool and config are fixed for the env's life
        self._n_actions, self._terminator = self.pool.n_actions, self.pool.terminator_id
        self._min_steps = config.min_steps if config.mode == "step" else 0  # Terminator masked before
        self._models = tuple(a.model for a in self.pool.agents)
        self._patterns = tuple(a.pattern for a in self.pool.agents)
        self._sees_work = tuple(self.pool.sees_earlier_work(i) for i in range(len(self.pool)))
        self._mask = self._base_mask.copy()
        n_base = int(self._base_mask[: len(self.pool)].sum())
        k_available = config.k_available
        if k_available is not None and not 1 <= k_available <= n_base:
            raise ValueError(f"k_available must be in 1..{n_base} (the available agents), got {k_available}")
        self._held_out = frozenset(frozenset(subset) for subset in config.holdout_subsets)
        if any(max(subset) >= len(self.pool) for subset in self._held_out):
            raise ValueError(f"holdout_subsets: agent ids must be in 0..{len(self.pool) - 1}")
        mode, max_steps = config.mode, config.max_steps
        self._prompt_config = load_prompt_config(config.prompt) if mode == "workflow" else None
        if config.states_price and self._prompt_config is not None and not self._prompt_config.price:
            raise ValueError(f"prompt {config.prompt!r} has no price line to state the price of cost")
        self._cost = check_cost_model(config.cost_model, (a.model for a in self.pool.agents))
        phi = config.phi
        self._base_reward = PuppeteerReward(
            lam=config.lam, gamma=config.gamma, phi=float(phi if phi is not None else max_steps)
        )
        self._reward = self._base_reward  # this episode's (its lambda: reset's options["lam"])
        self._lam_range = LamRange.of(config.lam_range)
        self._lam = self._default_lam()
        self._final_default = PLAN_DEFAULT if config.final_answer == "plan" else config.final_answer
        self._aggregate = aggregator(self._final_default)
        self._owns_backend = parts.backend_spec is not None  # close() releases only what this env built
        self.executor = Executor(
            backend=parts.backend,
            pool=self.pool,
            tools=default_tools(),
            show_question=config.show_question,
            programs=parts.programs,
        )
        self.action_space: spaces.Space[Any]
        self.observation_space: spaces.Space[Any]
        if mode == "step":
            self.action_space = spaces.Discrete(self.pool.n_actions)
            self.observation_space = spaces.Dict(
                {
                    "task": UnicodeText(MAX_OBS_CHARS),
                    "state": UnicodeText(MAX_OBS_CHARS),
                    "mask": spaces.MultiBinary(self.pool.n_actions),
                    "step": spaces.Discrete(max_steps + 1),
                    "counts": spaces.MultiDiscrete([max_steps + 1] * self.pool.n_actions),
                    "signals": spaces.Box(0.0, 1.0, shape=(N_SIGNALS,), dtype=np.float32),
                    "lam": _lam_space(),
                }
            )
        else:
            self.action_space = UnicodeText(MAX_TEXT_CHARS)
            self.observation_space = spaces.Dict(
                {
                    "task": UnicodeText(MAX_OBS_CHARS),
                    "prompt": UnicodeText(MAX_OBS_CHARS),
                    "mask": spaces.MultiBinary(self.pool.n_actions),
                    "depth": spaces.Discrete(config.max_depth + 1),
                    "lam": _lam_space(),
                }
            )
        self._task: Task | None = None
        self._steps: list[Step] = []
        self._rewards: list[float] = []
        self._done = True
        self._result: Trajectory | None = None
        self._rendered = 0  # lines already written in human render mode this episode
        self._grades: dict[str | None, bool] = {}  # this episode's grade per final answer
        self._sample_index = 0
        self._depth = 0
        self._rounds: list[dict[str, Any]] = []
        self._followup: Followup | None = None
        self._workflow: Workflow | None = None
        # the final answer's choice of the latest planning round and the index of its first step
        self._final: tuple[str | int, int] = (self._final_default, 0)
        self._conductor: list[tuple[Completion, ModelSpec | None]] = []  # this episode's plans' calls
        self._ctx: EpisodeContext | None = None  # this episode's (built on its first call)
        self._state_parts: list[str] = []  # obs["state"], a line per step so far
        self._agent_counts = np.zeros(self._n_actions, dtype=np.int64)  # obs["counts"], steps it counted
        self._counted = 0
        self._signal_vectors: dict[tuple[int, ...], np.ndarray] = {}  # obs["signals"] vectors made so far
        self._tally = AnswerTally(self._signal_vectors)  # obs["signals"] so far
        self._lam_array = np.array([self._lam])  # obs["lam"] of this episode
        # extractions from vouched answer texts, per task object and grader: (task, grader, memo)
        self._extractions: dict[int, tuple[Task, Grader, dict[tuple[str, bool], str | None]]] = {}
        if seed is not None:
            self.reset(seed=seed)

    @classmethod
    def from_parts(
        cls, parts: EnvParts, *, render_mode: str | None = None, seed: int | None = None
    ) -> ConductorEnv:
        """An env of built parts (:func:`puppeteer.envs.build.build_env` makes them from a config)."""
        return cls(parts=parts, render_mode=render_mode, seed=seed)

    @property
    def backend_spec(self) -> BackendSpec | None:
        """How this env built its backend (None: a backend passed in, or shared by :meth:`clone`)."""
        return self.parts.backend_spec

    def clone(self) -> ConductorEnv:
        """A fresh env with the same config, tasks, pool and backend (models are not loaded twice)."""
        return ConductorEnv.from_parts(replace(self.parts, backend_spec=None), render_mode=self.render_mode)

    # ----------------------------------------------------------------- helpers
    @property
    def task(self) -> Task:
        if self._task is None:
            raise ResetNeeded("call reset() before using the environment")
        return self._task

    def action_masks(self) -> np.ndarray:
        """Valid actions now (MaskablePPO convention)."""
        mask = self._mask.astype(bool)
        if self._terminator_masked():
            mask[self._terminator] = False
        return mask

    def _current_mask(self) -> np.ndarray:
        mask = self._mask.copy()
        if self._terminator_masked():
            mask[self._terminator] = 0
        return mask

    def _terminator_masked(self) -> bool:
        """Whether the Terminator is masked now (step mode, before ``min_steps`` agents acted)."""
        return len(self._steps) < self._min_steps

    def _allowed(self, action: int) -> bool:
        """``_current_mask()[action]`` of an in-range action, without copying the mask."""
        return bool(self._mask[action]) and not (
            action == self._terminator and len(self._steps) < self._min_steps
        )

    def _grader(self) -> Grader:
        return self.graders[self.task.grader]

    def _grade(self, answer: str | None) -> bool:
        """The task's grader on ``answer``, memoised across this env and its clones."""
        return self.parts.grades.grade(self.task, answer, self._grader().grade)

    def _context(self) -> EpisodeContext:
        """What every call of this episode shares (built once per episode)."""
        if self._ctx is None:
            task, grader = self.task, self._grader()
            self._ctx = EpisodeContext(
                question=task.question,
                item_key=task.id,
                extract=lambda text, truncated: grader.extract(text, task, truncated=truncated),
                answer_format=ANSWER_FORMATS.get(task.grader, DEFAULT_FORMAT),
                sample_index=self._sample_index,
                temperature=self.config.temperature,
                extract_vouched=self._vouched_extractor(task, grader),
            )
        return self._ctx

    def _vouched_extractor(self, task: Task, grader: Grader) -> Extractor | None:
        """The grader on a completion's vouched answer text, memoised per task (a simulated item is
        answered with a few distinct texts); None for a grader not known to agree on it."""
        if type(grader) not in VOUCHED_GRADERS:
            return None
        entry = self._extractions.get(id(task))
        if entry is None or entry[0] is not task or entry[1] is not grader:
            if len(self._extractions) >= _MEMO_TASKS:
                self._extractions.clear()
            entry = self._extractions[id(task)] = (task, grader, {})
        memo = entry[2]

        def extract(text: str, truncated: bool) -> str | None:
            key = (text, truncated)
            if key not in memo:
                memo[key] = grader.extract(text, task, truncated=truncated)
            return memo[key]

        return extract

    def _state_text(self) -> str:
        parts = self._state_parts  # one line per step, kept across the steps of an episode
        if len(parts) > len(self._steps):
            parts.clear()
        for s in self._steps[len(parts) :]:
            text = s.completion.text
            if len(text) > RESPONSE_CHARS_IN_STATE:
                text = "..." + text[-RESPONSE_CHARS_IN_STATE:]
            parts.append(f"[{s.index + 1}] {s.agent_name} ({self._patterns[s.agent_id]}): {text}")
        return "\n".join(parts)[-MAX_OBS_CHARS:]

    def _counts(self) -> np.ndarray:
        """Calls per agent so far (counted once per step, kept across the steps of an episode)."""
        steps, counts = self._steps, self._agent_counts
        if self._counted > len(steps):  # the steps were replaced: count again
            counts = self._agent_counts = np.zeros(self._n_actions, dtype=np.int64)
            self._counted = 0
        for s in steps[self._counted :]:
            counts[s.agent_id] += 1
        self._counted = len(steps)
        return counts.copy()

    def _signals(self) -> np.ndarray:
        """``answer_signals`` of the steps' answers (each answer tallied once per episode)."""
        steps, tally = self._steps, self._tally
        if tally.n > len(steps):  # the steps were replaced: tally again
            tally = self._tally = AnswerTally(self._signal_vectors)
        checks = self.parts.checks if self.config.visible_checks else None
        for i in range(tally.n, len(steps)):
            answer = steps[i].answer
            tally.add(answer, checks.check(self.task, answer) if checks is not None else None)
        return tally.signals()

    def _obs(self) -> dict[str, Any]:
        task = self.task  # raises before the first reset
        if self.config.mode == "step":
            return {
                "task": task.question[:MAX_OBS_CHARS],
                "state": self._state_text(),
                "mask": self._current_mask(),
                "step": len(self._steps),
                "counts": self._counts(),
                "signals": self._signals(),
                "lam": self._lam_array.copy(),
            }
        return {
            "task": task.question[:MAX_OBS_CHARS],
            "prompt": self.prompt().text[:MAX_OBS_CHARS],
            "mask": self._current_mask(),
            "depth": self._depth,
            "lam": self._lam_array.copy(),
        }

    @property
    def self_id(self) -> int | None:
        """The conductor's own worker id while it may still recurse (``len(pool)``), else None (also
        under ``recursion="always"``, where the next round comes without being asked for)."""
        c = self.config
        if c.mode == "workflow" and c.recursion == "offer" and self._depth < c.max_depth:
            return len(self.pool)
        return None

    def available(self) -> np.ndarray:
        """Boolean mask over the agents available in this episode (no Terminator)."""
        return self._mask[: len(self.pool)].astype(bool)

    def plan_space(self) -> PlanSpace:
        """What a valid plan of the current planning round may contain (:func:`_parse` accepts it)."""
        return PlanSpace(
            available=tuple(int(i) for i in np.flatnonzero(self.available())),
            max_steps=self.config.max_steps,
            self_id=self.self_id,
            allow_empty=self._depth > 0,
            final=self.config.final_answer == "plan",
        )

    def prompt(self) -> ConductorPrompt:
        """The conductor prompt of the current planning round (chat messages; ``.text`` is obs["prompt"])."""
        return build_prompt(
            self.pool,
            self.task.question,
            self.task.domain,
            self.config.max_steps,
            available=self.available(),
            self_id=self.self_id,
            followup=self._followup,
            config=self._prompt_config,
            final=self.config.final_answer,
            price=(
                Price(self._lam, COST_UNITS[self.config.cost_model], self.config.cost_model)
                if self.config.states_price
                else None
            ),
        )

    def _trajectory(
        self,
        answer: str | None,
        correct: bool,
        reward: float,
        parse_error: str | None = None,
        workflow: Workflow | None = None,
        final_choice: str | None = None,
    ) -> Trajectory:
        task = self.task  # positional: made at every step, and keywords cost a third of the call
        mode, steps = self.config.mode, tuple(self._steps)
        tokens = self._conductor_tokens()
        return Trajectory(
            task.id, task.suite, mode, steps, answer, correct, reward, parse_error, workflow,
            final_choice or self._final_default, tokens,
        )  # fmt: skip

    def _conductor_tokens(self) -> int | None:
        """The conductor's tokens this episode (None: no generation came with its actions)."""
        if not self._conductor:
            return None
        return sum(c.total_tokens for c, _ in self._conductor)

    def _conductor_cost(self) -> float:
        """F of the conductor's own generations this episode (0 without any)."""
        name = self.config.cost_model
        return sum(conductor_cost(name, c, model) for c, model in self._conductor)

    def _info(self, **extra: Any) -> dict[str, Any]:
        info = {"task_id": self.task.id, "action_mask": self.action_masks(), **extra}
        if self.config.mode == "workflow" and not self._done:
            info["conductor_prompt"] = self.prompt()  # chat layout of obs["prompt"]
            info["plan_space"] = self.plan_space()  # what a valid plan of this round may contain
        return info

    # ----------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[override]
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            task = options["task"]
            if not isinstance(task, Task):
                raise TypeError("options['task'] must be a puppeteer Task")
        elif "task_index" in options:
            task = self.tasks[int(options["task_index"]) % len(self.tasks)]
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        question = encodable(task.question)  # text from outside (a user's task) reaches no backend raw
        self._task = task if question is task.question else replace(task, question=question)
        n = self.config.samples_per_item
        self._sample_index = int(self.np_random.integers(n if n else 2**31 - 1))
        self._steps, self._rewards, self._done = [], [], False
        self._result, self._rendered, self._ctx, self._state_parts = None, 0, None, []
        self._agent_counts, self._counted = np.zeros(self._n_actions, dtype=np.int64), 0
        self._tally = AnswerTally(self._signal_vectors)
        self._grades = {}
        self._depth, self._rounds, self._followup, self._workflow = 0, [], None, None
        self._final, self._conductor = (self._final_default, 0), []
        self._mask = self._episode_mask(options)
        self._lam = self._episode_lam(options)
        self._lam_array = np.array([self._lam])
        if self.config.mode == "step" and not _same_number(self._reward.lam, self._lam):
            self._reward = replace(self._base_reward, lam=self._lam)
        if self.render_mode == "human":
            self.render()
        return self._obs(), self._info()

    @property
    def lam(self) -> float:
        """This episode's price of cost (the step reward's lambda; ``workflow_lam`` in workflow mode)."""
        return self._lam

    def _default_lam(self) -> float:
        return self.config.lam if self.config.mode == "step" else self.config.workflow_lam

    def _episode_lam(self, options: Mapping[str, Any]) -> float:
        """``options["lam"]``, else a draw from ``lam_range`` (after every other draw of the reset, so
        an env without a range draws exactly what it did before), else the config's lambda."""
        if options.get("lam") is not None:
            return number("options['lam']", options["lam"], low=0.0)
        if self._lam_range is not None:
            return self._lam_range.sample(self.np_random)
        return self._default_lam()

    def _episode_mask(self, options: Mapping[str, Any]) -> np.ndarray:
        """The action mask of a new episode: ``options["available"]``, a random k of n, or the base."""
        mask = self._base_mask.copy()
        n = len(self.pool)
        if options.get("available") is not None:
            chosen = resolve_available(self.pool, options["available"])
            if (chosen & ~self._base_mask[:n].astype(bool)).any():
                raise ValueError("options['available'] names an agent the env was told is unavailable")
            mask[:n] = chosen
        elif self.config.k_available is not None:
            mask[:n] = draw_subset(
                self.np_random, self._base_mask[:n].astype(bool), self.config.k_available, self._held_out
            )
        return mask

    def step(self, action: Any):  # type: ignore[override]
        if self._task is None or self._done:
            raise ResetNeeded("the episode has ended (or never started): call reset()")
        result = self._step_workflow(action) if self.config.mode == "workflow" else self._step_agent(action)
        if self.render_mode == "human":
            self.render()
        return result

    def close(self) -> None:
        """Release what this env created: response-cache connections and loaded models.

        A backend passed in (or shared by :meth:`clone`) belongs to the caller and stays open.
        """
        if self._owns_backend:
            close = getattr(self.executor.backend, "close", None)
            if callable(close):
                close()
        super().close()

    def _finish(self, reward: float, **info: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self._done = True
        self._rewards.append(reward)
        self._result = info.get("trajectory")
        return self._obs(), reward, True, False, self._info(**info)

    def _step_agent(self, action: Any):
        if type(action) is not int:  # a plain int is the common case
            action = self._agent_id(action)
        a = action
        if not 0 <= a < self._n_actions:
            raise InvalidAction(
                f"action {a} out of range 0..{self.pool.terminator_id} (the last is the Terminator)"
            )
        if not self._allowed(a):
            if self.config.invalid_action == "remap":  # the next valid action after it
                mask = self._current_mask()
                a = next(b for k in range(1, len(mask)) if mask[b := (a + k) % len(mask)])
            elif a == self._terminator:
                raise InvalidAction(f"the Terminator is masked until {self.config.min_steps} agent(s) acted")
            else:
                raise InvalidAction(f"agent {a} ({self.pool.agent(a).name}) is not available")
        t = len(self._steps)
        if a == self._terminator:
            return self._end_episode(f=0.0, t=t, terminated_by="terminator")
        visible = self._steps if self._sees_work[a] else []
        # the question as a workflow step gets it (``Workflow`` strips subtasks), so one agent on one item
        # sends the same request in both modes and a table built from one replays the other
        step = self.executor.run_step(self._context(), t, a, self._task.question.strip(), visible)
        self._steps.append(step)
        f = self._step_cost(step)
        if len(self._steps) >= self.config.max_steps:
            return self._end_episode(f=f, t=t + 1, terminated_by="max_steps")
        reward = self._reward.step_reward(f, t + 1)
        self._rewards.append(reward)
        return self._obs(), reward, False, False, self._info(step=step, cost=f, **self._graded_so_far())

    @staticmethod
    def _agent_id(action: Any) -> int:
        """A step-mode action as an int: what Discrete.contains accepts (int, numpy integers and 0-d
        integer arrays, model.predict's output)."""
        if isinstance(action, np.ndarray) and action.shape == () and np.issubdtype(action.dtype, np.integer):
            action = action.item()
        if isinstance(action, bool) or not isinstance(action, int | np.integer):
            shape = f" of shape {action.shape}" if isinstance(action, np.ndarray) else ""
            raise InvalidAction(f"step-mode actions are agent ids (int), got {type(action).__name__}{shape}")
        return int(action)

    def _graded_so_far(self) -> dict[str, Any]:
        """The episode graded as if it ended now, so a wrapper's truncation (``TimeLimit``) is graded too.

        The same keys as at the end (``trajectory``, ``correct``, ``final_answer``); the
        trajectory's reward is the discounted return of the rewards paid so far.
        """
        answer = self._aggregate([s.answer for s in self._steps])
        if answer not in self._grades:  # the majority answer rarely changes from step to step
            self._grades[answer] = self._grade(answer)
        correct = self._grades[answer]
        ret = discounted_return(self._rewards, self.config.gamma)
        return {
            "trajectory": self._trajectory(answer, correct, ret),
            "correct": correct,
            "final_answer": answer,
            # what the Terminator would be paid now (no cost: it calls nobody), the return from here if
            # the episode stopped: a baseline for the next decision (trainer.later_baseline=stop)
            "stop_return": self._reward.final_reward(correct, 0.0, max(len(self._steps), 1)),
        }

    def _end_episode(self, f: float, t: int, terminated_by: str):
        answer = self._aggregate([s.answer for s in self._steps])
        correct = self._grades[answer] if answer in self._grades else self._grade(answer)
        reward = self._reward.final_reward(correct, f, max(t, 1))
        returns = discounted_returns([*self._rewards, reward], self.config.gamma)
        traj = self._trajectory(answer, correct, returns[0] if returns else reward)
        return self._finish(
            reward,
            trajectory=traj,
            correct=correct,
            final_answer=answer,
            terminated_by=terminated_by,
            returns=returns,
            cost=f,
        )

    def _answer_so_far(self) -> str | None:
        """What grading would take if the episode ended now (the aggregate, not the last step's answer:
        a last step that extracted nothing leaves the earlier answer standing)."""
        return self._workflow_final()[0]

    def _workflow_final(self) -> tuple[str | None, str]:
        """The final answer under the latest round's choice, and that choice as recorded: the plan's
        named step (counted from its round's first step), ``vote`` or ``last`` over all steps."""
        choice, offset = self._final
        answers = [s.answer for s in self._steps]
        if isinstance(choice, int):
            return final_answer(answers, offset + choice), choice_label(choice)
        return final_answer(answers, choice), choice

    def _round(self, text: str | None, **fields: Any) -> dict[str, Any]:
        record = {
            "depth": self._depth,
            "text": text,
            "parse_error": None,
            "workflow": None,
            "steps": [],
            "answer": None,
            "recurse": False,
            **fields,
        }
        self._rounds.append(record)
        return record

    def _parse(self, text: str | None) -> Workflow | None:
        """The round's workflow; None for the empty-lists "keep the answer" end of an inner round."""
        if text is None:
            raise WorkflowError("a workflow action is text")
        if self._depth > 0:
            try:
                if extract_lists(text) == ([], [], []):
                    return None
            except WorkflowError:
                pass
        self_id = self.self_id
        available = self.available().tolist() + ([True] if self_id is not None else [])
        workflow = parse_workflow(
            text,
            len(available),
            available,
            WorkflowLimits(max_steps=self.config.max_steps),
            final=self.config.final_answer == "plan",
        )
        if self_id is not None and self_id in workflow.model_id[:-1]:
            raise WorkflowError(f"the conductor (id {self_id}) may only be the last step")
        if self_id is not None and workflow.model_id[-1] == self_id and workflow.final == len(workflow) - 1:
            raise WorkflowError("final names the conductor's own step, which gives no answer")
        return workflow

    def _step_workflow(self, action: Any):
        if isinstance(action, ConductorAction):  # the plan and the generation that wrote it
            if action.completion is not None:
                self._conductor.append((action.completion, action.model))
            action = action.text
        text = encodable(action) if isinstance(action, str) else None  # no lone surrogates past here
        try:
            if text is None:
                raise WorkflowError(f"a workflow action is text, got {type(action).__name__}")
            workflow = self._parse(text)
        except WorkflowError as e:
            self._round(text, parse_error=str(e))
            traj = self._trajectory(None, False, 0.0, parse_error=str(e))
            spent = self._conductor_cost()  # the plan that failed to parse was paid for
            return self._finish(
                0.0,
                trajectory=traj,
                correct=False,
                final_answer=None,
                parse_error=str(e),
                rounds=list(self._rounds),
                depth=self._depth,
                cost=sum(self._step_cost(s) for s in self._steps) + spent,
                conductor_cost=spent,
            )
        if workflow is None:  # an inner round kept its parent's answer
            self._round(text, answer=self._answer_so_far())
            return self._end_workflow(self._workflow)
        self._workflow = workflow
        self._final = (
            workflow.final if workflow.final is not None else self._final_default,
            len(self._steps),
        )
        named = self.self_id is not None and workflow.model_id[-1] == self.self_id
        recurse = named or (self.config.recursion == "always" and self._depth < self.config.max_depth)
        run = workflow
        if named:
            run = Workflow(workflow.model_id[:-1], workflow.subtasks[:-1], workflow.access_list[:-1])
        prior = tuple(self._steps[-1:])
        steps: tuple[Step, ...] = ()
        if len(run):
            steps = self.executor.run_workflow(self._context(), run, prior=prior, offset=len(self._steps))
        self._steps.extend(steps)
        last = self._steps[-1] if self._steps else None
        self._round(
            text,
            workflow=format_workflow(workflow),
            steps=[s.index for s in steps],
            answer=self._answer_so_far(),
            recurse=recurse,
        )
        if not recurse:
            return self._end_workflow(workflow)
        self._depth += 1
        self._followup = Followup(
            parent=format_workflow(workflow),
            answer=(last.completion.text[-FOLLOWUP_ANSWER_CHARS:] if last else "(no answer yet)"),
            agent=last.agent_name if last else "-",
            depth=self._depth,
            max_depth=self.config.max_depth,
        )
        self._rewards.append(0.0)
        return (
            self._obs(),
            0.0,
            False,
            False,
            self._info(round=self._rounds[-1], depth=self._depth, steps=steps),
        )

    def _step_cost(self, step: Step) -> float:
        """F of one activation under the configured cost model."""
        return self._cost(step.completion, self._models[step.agent_id])

    def _end_workflow(self, workflow: Workflow | None):
        answer, choice = self._workflow_final()
        correct = self._grade(answer)
        spent = self._conductor_cost()
        cost = sum(self._step_cost(s) for s in self._steps) + spent
        reward = conductor_reward(True, correct, cost, self._lam)
        traj = self._trajectory(answer, correct, reward, workflow=workflow, final_choice=choice)
        return self._finish(
            reward,
            trajectory=traj,
            correct=correct,
            final_answer=answer,
            parse_error=None,
            cost=cost,
            conductor_cost=spent,
            rounds=list(self._rounds),
            depth=self._depth,
        )

    def abort(self, error: str):
        """End the running episode on a failure outside the policy's action (e.g. a backend call
        that raised): graded as wrong, with the cost of the steps that completed; ``info["error"]``."""
        if self._task is None or self._done:
            raise ResetNeeded("the episode has ended (or never started): call reset()")
        t = len(self._steps)
        if self.config.mode == "workflow":
            cost = sum(self._step_cost(s) for s in self._steps) + self._conductor_cost()
            reward = conductor_reward(True, False, cost, self._lam)
            returns = [reward]
        else:
            cost = 0.0
            reward = self._reward.final_reward(False, 0.0, max(t, 1))
            returns = discounted_returns([*self._rewards, reward], self.config.gamma)
        traj = self._trajectory(None, False, returns[0])
        return self._finish(
            reward,
            trajectory=traj,
            correct=False,
            final_answer=None,
            terminated_by="error",
            error=error,
            returns=returns,
            cost=cost,
        )

    def _render_lines(self) -> list[str]:
        lines = [f"Task {self.task.id}: {self.task.question[:300]}"]
        lines += [
            f"  [{s.index + 1}] {s.agent_name}: answer={s.answer!r} tokens={s.completion.total_tokens}"
            for s in self._steps
        ]
        if self._result is not None:
            r = self._result
            verdict = "correct" if r.correct else "wrong"
            if r.parse_error:
                verdict = f"parse error: {r.parse_error}"
            lines.append(f"  final answer={r.final_answer!r} ({verdict}) reward={r.reward:.3f}")
        return lines

    def render(self) -> str | None:
        """``ansi``: the episode so far as text. ``human``: writes the lines not yet shown to stdout.

        In ``human`` mode ``reset`` and ``step`` call this themselves (gymnasium's convention).
        """
        if self._task is None:
            return None
        lines = self._render_lines()
        if self.render_mode == "human":
            import sys

            new, self._rendered = lines[self._rendered :], len(lines)
            if new:
                sys.stdout.write("\n".join(new) + "\n")
                sys.stdout.flush()
            return None
        return "\n".join(lines)
