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
answer), or ``"cascade"``: the line may also say ``'cascade:TRIGGER'`` (each later step runs only when
the trigger fires on the answer before it; the last step run answers). The trajectory's
``final_choice`` records what was used (``last``, ``vote``, ``step k`` or ``cascade:TRIGGER``).

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
rolled out by :mod:`puppeteer.envs.rollout`. The class is assembled from parts of one job each: the
step mode's actions (:mod:`puppeteer.envs.step_mode`), the workflow mode's
(:mod:`puppeteer.envs.workflow_mode`) and the observation (:mod:`puppeteer.envs.observation`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from puppeteer.agents.availability import draw_subset, resolve_available
from puppeteer.agents.reasoning import ANSWER_FORMATS, DEFAULT_FORMAT
from puppeteer.envs.aggregate import PLAN_CHOICES, PLAN_DEFAULT, aggregator
from puppeteer.envs.conductor_prompt import Followup, load_prompt_config
from puppeteer.envs.executor import EpisodeContext, Executor, Extractor
from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.observation import MAX_OBS_CHARS, Observation
from puppeteer.envs.parts import BackendSpec, EnvConfig, EnvParts, env_parts
from puppeteer.envs.reward import PuppeteerReward, check_cost_model, conductor_reward, discounted_returns
from puppeteer.envs.spaces import UnicodeText
from puppeteer.envs.step_mode import StepMode
from puppeteer.envs.workflow import MAX_TEXT_CHARS
from puppeteer.envs.workflow_mode import WorkflowMode
from puppeteer.tasks import Grader, default_graders
from puppeteer.tasks.signals import N_SIGNALS, AnswerTally
from puppeteer.tools import default_tools
from puppeteer.types import Completion, ModelSpec, Step, Task, Trajectory, Workflow
from puppeteer.utils.checks import number
from puppeteer.utils.textsafe import encodable

# graders whose extraction from a simulated completion's vouched answer_text equals their extraction
# from its whole text (tests/envs/test_sim_fast_path.py); any other grader always reads the whole text
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


class ConductorEnv(StepMode, WorkflowMode, Observation, gym.Env[dict[str, Any], Any]):
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
        self._offer = self._mask
        self._recorded = parts.recorded
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
        self._final_default = PLAN_DEFAULT if config.final_answer in PLAN_CHOICES else config.final_answer
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

    def available(self) -> np.ndarray:
        """Boolean mask over the agents available in this episode (no Terminator)."""
        return self._mask[: len(self.pool)].astype(bool)

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
        self._offer = self._episode_mask(options)  # this episode's agents; the mask adds the table's
        self._mask = self._recorded_mask()
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

    def _recorded_mask(self) -> np.ndarray:
        """The episode's mask, less the agents whose next call the pool's table lacks (``recorded_only``)."""
        if self._recorded is None:
            return self._offer
        n = len(self.pool)
        mask = self._offer.copy()
        acted = [s.agent_id for s in self._steps]
        mask[:n] &= self._recorded.agents(self.pool, self.task.id, acted).astype(mask.dtype)
        if not self._steps and not mask[:n].any():
            raise ValueError(
                f"item {self.task.id!r} has no call in pool {self.pool.name!r}'s replay table "
                "(recorded_only offers only recorded calls)"
            )
        return mask

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

    def _step_cost(self, step: Step) -> float:
        """F of one activation under the configured cost model."""
        return self._cost(step.completion, self._models[step.agent_id])

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
