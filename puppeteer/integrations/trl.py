"""``Conductor-v0`` for ``trl.GRPOTrainer``: the conductor dataset, the reward function, a tool environment.

The reward function parses and executes every sampled workflow in a workflow-mode
:class:`~puppeteer.envs.env.ConductorEnv` (0 unparsable, 0.5 parsed but wrong, 1 correct,
minus ``workflow_lam`` x cost when the env sets it; the cost counts the conductor's own tokens:
its completion's, trl's ``completion_ids``, and, given a ``prompt_tokens`` counter, its prompt's).
The workflows of one batch run concurrently, each in its own clone of the env (clones share
the backend, so models are loaded once)::

    from trl import GRPOConfig, GRPOTrainer
    from puppeteer.envs.env import ConductorEnv
    from puppeteer.integrations.trl import ConductorReward, conductor_dataset

    env = ConductorEnv(mode="workflow", pool="sim-paper", suite="arith", split="train", n_tasks=64)
    trainer = GRPOTrainer(model="HuggingFaceTB/SmolLM2-135M-Instruct", reward_funcs=ConductorReward(env),
                          train_dataset=conductor_dataset(env), args=GRPOConfig(output_dir="runs/grpo"))

The dataset carries a ``task_id`` column; trl passes it to the reward function, which
finds the item (and its gold answer) in the env's tasks. It also carries ``available``, the
agent ids the row's prompt offers: with ``EnvConfig(k_available=k)`` every row gets its own
k-of-n subset (seeded by its task id), and the reward env resets with that subset, so the
plan is executed with the agents its prompt listed. The ``lam`` column is the row's price of
cost: with ``EnvConfig(lam_range=(low, high))`` every row draws its own, its prompt states it
(the prompt config's price line) and the reward env prices the workflow at it.
:class:`ConductorToolEnv` is the same conductor as a multi-turn tool for
``GRPOTrainer(environment_factory=...)``.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from puppeteer.envs.conductor_prompt import ConductorPrompt
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import conductor_record
from puppeteer.types import Completion, ConductorAction, Task, Trajectory
from puppeteer.utils.seeding import item_seed

if TYPE_CHECKING:
    import datasets

MetricLog = Callable[[str, float], None]
METRIC_PREFIX = "conductor"


@dataclass(frozen=True)
class WorkflowOutcome:
    """What executing one sampled workflow gave: the reward and its components."""

    task_id: str
    parsed: bool
    correct: bool
    reward: float
    cost: float
    steps: int
    calls: int
    final_answer: str | None = None
    parse_error: str | None = None
    tokens: int = 0  # the workers' prompt + completion tokens
    usd: float = 0.0  # the workers' price
    conductor_tokens: int = 0  # the conductor's own tokens counted in ``cost`` (0: none came with it)


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """The text of a trl completion: a string (standard format) or a list of messages (conversational)."""
    if isinstance(completion, str):
        return completion
    parts = [str(m.get("content") or "") for m in completion if m.get("role", "assistant") == "assistant"]
    return "\n".join(parts)


@dataclass(frozen=True)
class PlannedItem:
    """One item as the conductor is asked about it: the task, its prompt, and the agents on offer."""

    task: Task
    prompt: ConductorPrompt
    available: tuple[int, ...]  # agent ids the prompt lists (the episode's subset)
    lam: float = 0.0  # the episode's price of cost (the reward's lambda; stated in the prompt when priced)


def conductor_prompts(
    env: ConductorEnv, tasks: Sequence[Task] | None = None, seed: int = 0
) -> list[PlannedItem]:
    """The env's conductor prompt for each task (default: all of the env's tasks), with its agents.

    ``prompt.text`` is ``obs["prompt"]``; ``prompt.messages`` is its chat layout (instructions,
    then the few-shot examples as earlier user/assistant turns, then the question). Each item is
    reset with the seed ``item_seed(seed, task.id)``, so an env that draws a k-of-n subset per
    episode (``k_available``) offers every item a subset of its own, the same on every call; the
    subset is ``available``, for the reward env to reset with (the prompt and the reward agree);
    the same holds for the episode's price of cost ``lam`` (drawn per item with ``lam_range``).
    """
    if env.config.mode != "workflow":
        raise ValueError("the conductor needs a workflow-mode env (ConductorEnv(mode='workflow', ...))")
    probe = env.clone()
    out = []
    for task in tasks if tasks is not None else env.tasks:
        probe.reset(seed=item_seed(seed, task.id), options={"task": task})
        offered = tuple(int(i) for i in np.flatnonzero(probe.available()))
        out.append(PlannedItem(task, probe.prompt(), offered, probe.lam))
    return out


def conductor_rows(
    env: ConductorEnv, tasks: Sequence[Task] | None = None, chat: bool = False, seed: int = 0
) -> list[dict[str, Any]]:
    """Dataset rows: ``prompt`` (flat text, or the chat messages when ``chat``), ``task_id``,
    ``suite``, ``available`` (the agent ids the prompt offers) and ``lam`` (the price of cost the
    reward uses; :func:`conductor_prompts`).

    The chat layout puts the few-shot workflows in earlier assistant turns: measured with
    Qwen2.5-Coder-0.5B (docs/conductor.md), 7 of 8 plans parsed that way against 0 of 8 from the
    same content as one message.
    """
    rows = []
    for item in conductor_prompts(env, tasks, seed):
        rows.append(
            {
                "prompt": [m.as_dict() for m in item.prompt.messages] if chat else item.prompt.text,
                "task_id": item.task.id,
                "suite": item.task.suite,
                "available": list(item.available),
                "lam": item.lam,
            }
        )
    return rows


def prefixed_rows(
    rows: Sequence[Mapping[str, Any]], tokenizer: Any, answer_prefix: str
) -> list[dict[str, Any]]:
    """Chat rows as text prompts whose assistant turn is already opened with ``answer_prefix``.

    The prompt is the tokenizer's chat template applied with the generation prompt, then the
    prefix (for example ``"model_id = ["``): the model continues the workflow from there, so a
    small conductor cannot wander off before its first list. The reward must put the prefix back
    in front of the completion (``ConductorReward(..., answer_prefix=...)``).
    """
    out = []
    for row in rows:
        messages = row["prompt"]
        if isinstance(messages, str):
            raise ValueError("prefixed_rows needs chat rows (conductor_rows(env, chat=True))")
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        out.append({**row, "prompt": text + answer_prefix})
    return out


def conductor_dataset(
    env: ConductorEnv, tasks: Sequence[Task] | None = None, chat: bool = False, seed: int = 0
) -> datasets.Dataset:
    """A ``datasets.Dataset`` of conductor prompts for ``GRPOTrainer(train_dataset=...)``.

    ``chat=False`` gives the flat text of ``obs["prompt"]``; ``chat=True`` the env's chat layout
    (few-shot examples as earlier turns), applied with the model's chat template by trl.
    """
    import datasets

    return datasets.Dataset.from_list(conductor_rows(env, tasks, chat=chat, seed=seed))


def outcome_from(task_id: str, reward: float, info: Mapping[str, Any]) -> WorkflowOutcome:
    traj: Trajectory = info["trajectory"]
    parse_error = info.get("parse_error")
    return WorkflowOutcome(
        task_id=task_id,
        parsed=parse_error is None,
        correct=bool(info.get("correct", False)),
        reward=float(reward),
        cost=float(info.get("cost", 0.0)),
        steps=len(traj.steps),
        calls=sum(1 + s.tool_calls for s in traj.steps),
        final_answer=traj.final_answer,
        parse_error=parse_error,
        tokens=traj.prompt_tokens + traj.completion_tokens,
        usd=traj.cost_usd,
        conductor_tokens=traj.conductor_tokens or 0,
    )


def summarize(outcomes: Sequence[WorkflowOutcome]) -> dict[str, float]:
    """Mean reward and its components over a batch (``nan``-free: an empty batch gives zeros)."""
    n = max(len(outcomes), 1)
    parsed = [o for o in outcomes if o.parsed]
    return {
        "reward": sum(o.reward for o in outcomes) / n,
        "parse_rate": len(parsed) / n,
        "accuracy": sum(o.correct for o in outcomes) / n,
        "cost": sum(o.cost for o in outcomes) / n,
        "steps": sum(o.steps for o in outcomes) / n,
        "calls": sum(o.calls for o in outcomes) / n,
        "tokens": sum(o.tokens for o in outcomes) / n,
        "usd": sum(o.usd for o in outcomes) / n,
        "conductor_tokens": sum(o.conductor_tokens for o in outcomes) / n,
        "steps_parsed": sum(o.steps for o in parsed) / max(len(parsed), 1),
    }


class WorkflowScorer:
    """Executes conductor completions in ``Conductor-v0``, the workflows of a batch concurrently.

    Each worker thread takes its own clone of ``env`` (same tasks, pool and backend); an item is
    reset with the evaluation seed of its task id (:func:`puppeteer.evaluation.evaluate.item_seed`), so a
    group of completions for one question faces the same workers' draws and only the workflows differ.
    """

    def __init__(
        self, env: ConductorEnv, max_workers: int = 16, seed: int = 0, answer_prefix: str = ""
    ) -> None:
        if env.config.mode != "workflow":
            raise ValueError("WorkflowScorer needs a workflow-mode env (ConductorEnv(mode='workflow', ...))")
        self.answer_prefix = answer_prefix  # the start of the answer that the prompt already wrote
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        self.env = env
        self.seed = seed
        self.max_workers = max_workers
        self._tasks: dict[str, Task] = {t.id: t for t in env.tasks}
        self._idle: queue.SimpleQueue[ConductorEnv] = queue.SimpleQueue()

    def task(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise KeyError(f"task {task_id!r} is not among the reward env's tasks") from None

    @contextmanager
    def _env(self) -> Iterator[ConductorEnv]:
        try:
            env = self._idle.get_nowait()
        except queue.Empty:
            env = self.env.clone()
        try:
            yield env
        finally:
            self._idle.put(env)

    def score_one(
        self,
        task_id: str,
        completion: str | Sequence[Mapping[str, Any]],
        available: Sequence[int] | None = None,
        lam: float | None = None,
        conductor: Completion | None = None,
    ) -> WorkflowOutcome:
        return self.episode(task_id, completion, available, lam, conductor)[0]

    def episode(
        self,
        task_id: str,
        completion: str | Sequence[Mapping[str, Any]],
        available: Sequence[int] | None = None,
        lam: float | None = None,
        conductor: Completion | None = None,
    ) -> tuple[WorkflowOutcome, Trajectory, dict[str, Any]]:
        """The outcome, the trajectory and the eval line's conductor record (rounds, available agents;
        no conductor calls: the caller generated the completion) of one completion. ``available``:
        the agent ids the completion's prompt offered (a dataset row's ``available``); ``lam``: the
        price of cost its prompt stated (a row's ``lam``); None: the env's own draw for the item.
        ``conductor``: the generation's tokens (and seconds), counted in the episode's cost."""
        task = self.task(task_id)
        options: dict[str, Any] = {"task": task}
        if available is not None:
            options["available"] = [int(i) for i in available]
        if lam is not None:
            options["lam"] = float(lam)
        with self._env() as env:
            env.reset(seed=item_seed(self.seed, task_id), options=options)
            text = self.answer_prefix + completion_text(completion)
            action = ConductorAction(text, replace(conductor, text=text)) if conductor is not None else text
            _, reward, _, _, info = env.step(action)
            record = conductor_record(env, info, [])
        return outcome_from(task_id, float(reward), info), info["trajectory"], record

    def episodes(
        self,
        task_ids: Sequence[str],
        completions: Sequence[str | Sequence[Mapping[str, Any]]],
        available: Sequence[Sequence[int] | None] | None = None,
        lam: Sequence[float | None] | None = None,
        conductor: Sequence[Completion | None] | None = None,
    ) -> list[tuple[WorkflowOutcome, Trajectory, dict[str, Any]]]:
        """:meth:`episode` of every (task id, completion[, available, lam, conductor]), in order;
        executed concurrently."""
        if len(task_ids) != len(completions):
            raise ValueError(f"{len(task_ids)} task ids for {len(completions)} completions")
        offered = list(available) if available is not None else [None] * len(task_ids)
        if len(offered) != len(task_ids):
            raise ValueError(f"{len(offered)} available lists for {len(task_ids)} task ids")
        prices = list(lam) if lam is not None else [None] * len(task_ids)
        if len(prices) != len(task_ids):
            raise ValueError(f"{len(prices)} lam values for {len(task_ids)} task ids")
        calls = list(conductor) if conductor is not None else [None] * len(task_ids)
        if len(calls) != len(task_ids):
            raise ValueError(f"{len(calls)} conductor completions for {len(task_ids)} task ids")
        args = list(zip(task_ids, completions, offered, prices, calls, strict=True))
        if len(task_ids) <= 1 or self.max_workers == 1:
            return [self.episode(*a) for a in args]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(task_ids))) as pool:
            return list(pool.map(lambda a: self.episode(*a), args))

    def score(
        self,
        task_ids: Sequence[str],
        completions: Sequence[str | Sequence[Mapping[str, Any]]],
        available: Sequence[Sequence[int] | None] | None = None,
        lam: Sequence[float | None] | None = None,
        conductor: Sequence[Completion | None] | None = None,
    ) -> list[WorkflowOutcome]:
        """One outcome per (task id, completion), in order; executed concurrently."""
        return [outcome for outcome, _, _ in self.episodes(task_ids, completions, available, lam, conductor)]


class ConductorReward:
    """A ``reward_funcs`` entry for ``trl.GRPOTrainer``: runs each sampled workflow, returns its reward.

    trl calls it with the batch's prompts, completions and dataset columns (``task_id`` among them)
    and a ``log_metric`` hook, through which the reward's components are logged per step as
    ``conductor/parse_rate``, ``conductor/accuracy``, ``conductor/cost``, ``conductor/steps``.
    The last batch's outcomes stay in :attr:`last` for inspection. With ``record``, every sampled
    completion and its outcome is appended to that JSON-lines file, with the GRPO step it was
    sampled for (``trainer_state.global_step + 1``), so a run shows what the policy wrote.

    The conductor's tokens are in each workflow's cost: the completion's (trl's ``completion_ids``)
    and, with ``prompt_tokens`` (a prompt -> token count function, e.g. :func:`prompt_token_counter`),
    the prompt's.
    """

    __name__ = "conductor"

    def __init__(
        self,
        env: ConductorEnv | WorkflowScorer,
        max_workers: int = 16,
        seed: int = 0,
        answer_prefix: str = "",
        record: str | Path | None = None,
        prompt_tokens: Callable[[Any], int] | None = None,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.scorer = (
            env if isinstance(env, WorkflowScorer) else WorkflowScorer(env, max_workers, seed, answer_prefix)
        )
        self.answer_prefix = answer_prefix
        self.record = Path(record) if record is not None else None
        self.last: tuple[WorkflowOutcome, ...] = ()

    def _write(self, completions: Sequence[Any], outcomes: Sequence[WorkflowOutcome], state: Any) -> None:
        if self.record is None:
            return
        step = int(state.global_step) + 1 if state is not None else None
        with self.record.open("a") as f:
            for c, o in zip(completions, outcomes, strict=True):
                row = {"step": step, **asdict(o), "completion": self.answer_prefix + completion_text(c)}
                f.write(json.dumps(row) + "\n")

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[str | Sequence[Mapping[str, Any]]],
        task_id: Sequence[str] | None = None,
        log_metric: MetricLog | None = None,
        available: Sequence[Sequence[int]] | None = None,
        lam: Sequence[float] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        if task_id is None:
            raise ValueError("the conductor reward needs a 'task_id' dataset column (see conductor_dataset)")
        # the row's agents (its prompt's subset) and price of cost: the reward env resets with them
        calls = self._conductor_calls(prompts, kwargs.get("completion_ids"), len(completions))
        outcomes = self.scorer.score(list(task_id), list(completions), available, lam, calls)
        self.last = tuple(outcomes)
        self._write(completions, outcomes, kwargs.get("trainer_state"))
        if log_metric is not None:
            for name, value in summarize(outcomes).items():
                if name != "reward":
                    log_metric(f"{METRIC_PREFIX}/{name}", value)
        return [o.reward for o in outcomes]

    def _conductor_calls(
        self, prompts: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None, n: int
    ) -> list[Completion | None] | None:
        """Each completion's tokens (trl's ``completion_ids``; the prompt's counted once per distinct
        prompt), for the reward env to count; None when trl gave no ids."""
        if completion_ids is None:
            return None
        counted: dict[str, int] = {}

        def prompt_tokens(prompt: Any) -> int:
            if self.prompt_tokens is None:
                return 0
            key = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
            if key not in counted:
                counted[key] = int(self.prompt_tokens(prompt))
            return counted[key]

        prompt_list = list(prompts) if prompts is not None else [""] * n
        return [
            Completion("", prompt_tokens(p), len(ids), None, 0.0, 0.0, "conductor")
            for p, ids in zip(prompt_list, completion_ids, strict=True)
        ]


def prompt_token_counter(tokenizer: Any) -> Callable[[Any], int]:
    """Tokens of a conductor prompt: flat text, or chat messages under the tokenizer's chat template
    with the generation prompt (what the model was given)."""

    def count(prompt: Any) -> int:
        if not isinstance(prompt, str):
            prompt = tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
        return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])

    return count


class ConductorToolEnv:
    """The conductor as a multi-turn tool environment for ``GRPOTrainer(environment_factory=...)``.

    trl calls :meth:`reset` with the dataset row (``task_id`` selects the item), exposes
    :meth:`run_workflow` to the model as a tool (it may call it, read the answer, and call it
    again), and scores the rollout with :meth:`get_reward`: the reward of the last workflow run,
    0 when none was run. Needs a conductor model whose chat template supports tools.
    """

    def __init__(self, env: ConductorEnv, seed: int = 0) -> None:
        if env.config.mode != "workflow":
            raise ValueError("ConductorToolEnv needs a workflow-mode env")
        self._env = env
        self._seed = seed
        self._tasks = {t.id: t for t in env.tasks}
        self._task: Task | None = None
        self._available: list[int] | None = None
        self._lam: float | None = None
        self.outcome: WorkflowOutcome | None = None

    def reset(
        self,
        task_id: str | None = None,
        available: Sequence[int] | None = None,
        lam: float | None = None,
        **kwargs: Any,
    ) -> str | None:
        """Start a rollout on the row's item (with the row's agents and price of cost, when it has
        them); the prompt holds the question: nothing is appended."""
        if task_id is None:
            raise ValueError("ConductorToolEnv.reset needs the row's task_id")
        self._task = self._tasks[task_id]
        self._available = [int(i) for i in available] if available is not None else None
        self._lam = float(lam) if lam is not None else None
        self.outcome = None
        return None

    def run_workflow(self, model_id: list[int], subtasks: list[str], access_list: list[Any]) -> str:
        """Run a workflow of agents on the current question and return the final answer.

        Args:
            model_id: The agent id of each step, in order.
            subtasks: The instruction given to each step's agent.
            access_list: For each step, "all" (it sees every earlier step) or a list of earlier step indices.

        Returns:
            The last step's answer, or why the workflow was rejected.
        """
        if self._task is None:
            raise RuntimeError("call reset() first")
        text = f"model_id = {model_id!r}\nsubtasks = {subtasks!r}\naccess_list = {access_list!r}"
        options: dict[str, Any] = {"task": self._task}
        if self._available is not None:
            options["available"] = self._available
        if self._lam is not None:
            options["lam"] = self._lam
        self._env.reset(seed=item_seed(self._seed, self._task.id), options=options)
        _, reward, _, _, info = self._env.step(text)
        self.outcome = outcome_from(self._task.id, float(reward), info)
        if not self.outcome.parsed:
            return f"invalid workflow: {self.outcome.parse_error}"
        return f"final answer: {self.outcome.final_answer}"

    def get_reward(self) -> float:
        return self.outcome.reward if self.outcome is not None else 0.0


class ConductorToolEnvFactory:
    """``environment_factory``: one :class:`ConductorToolEnv` per rollout, each on a clone of ``env``."""

    def __init__(self, env: ConductorEnv, seed: int = 0) -> None:
        self.env = env
        self.seed = seed

    def __call__(self) -> ConductorToolEnv:
        return ConductorToolEnv(self.env.clone(), seed=self.seed)


__all__ = [
    "ConductorReward",
    "ConductorToolEnv",
    "ConductorToolEnvFactory",
    "PlannedItem",
    "WorkflowOutcome",
    "WorkflowScorer",
    "completion_text",
    "conductor_dataset",
    "conductor_prompts",
    "conductor_rows",
    "prefixed_rows",
    "prompt_token_counter",
    "summarize",
]
