"""Runs agents: one activation (shared by both modes) and whole workflows as a DAG.

A workflow step starts as soon as the steps it can see have finished, so
independent steps run concurrently; the final output is the last step's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from puppeteer.agents.pool import Pool
from puppeteer.agents.pot import ProgramMemo, run_program
from puppeteer.agents.reasoning import DEFAULT_FORMAT, Turn, pattern, worker_messages
from puppeteer.backends.base import Backend
from puppeteer.envs.workflow import visible_steps
from puppeteer.tools import PythonTool, Tool, tool_prompt
from puppeteer.tools.loop import arun_with_tools, run_with_tools
from puppeteer.tools.sandbox import DEFAULT_LIMITS
from puppeteer.types import Agent, CallContext, Completion, CompletionRequest, Step, Workflow

T = TypeVar("T")
Extractor = Callable[[str, bool], str | None]  # (text, truncated) -> answer


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, also when an event loop is already running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


@dataclass(frozen=True)
class EpisodeContext:
    """What every call of one episode shares."""

    question: str
    item_key: str
    extract: Extractor
    answer_format: str = DEFAULT_FORMAT
    sample_index: int = 0
    temperature: float = 0.0
    # extracts from a completion's vouched ``answer_text`` instead of its whole text (the caller's
    # promise that ``extract`` would give the same there, e.g. memoised); None: always the text
    extract_vouched: Extractor | None = None
    # each earlier step as a later call sees it, made once per step: id -> (step, turn)
    _turns: dict[int, tuple[Step, Turn]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def turn(self, step: Step) -> Turn:
        """``step`` as the workers that see it are shown it (made once per step of the episode)."""
        entry = self._turns.get(id(step))
        if entry is None or entry[0] is not step:
            entry = (step, Turn(step.agent_name, step.subtask, step.completion.text, step.answer))
            self._turns[id(step)] = entry
        return entry[1]


def _answer(ctx: EpisodeContext, completion: Completion) -> str | None:
    """The step's answer: from the part of the text its backend vouches for, where the episode takes
    that (and the part is the text's end), else from the whole text."""
    vouched = completion.answer_text
    if vouched is not None and ctx.extract_vouched is not None and completion.text.endswith(vouched):
        return ctx.extract_vouched(vouched, completion.truncated)
    return ctx.extract(completion.text, completion.truncated)


@dataclass(frozen=True)
class _Setup:
    """What every call of one agent shares: the agent, its tools and their instructions."""

    agent: Agent
    tools: Mapping[str, Tool]
    tool_help: str
    runs_program: bool


@dataclass(frozen=True)
class Executor:
    """Runs the agents of ``pool`` on ``backend`` with ``tools`` (the pool and tools are fixed once
    it has run: what each agent gets is worked out on its first call)."""

    backend: Backend
    pool: Pool
    tools: Mapping[str, Tool] = field(default_factory=dict)
    max_tool_rounds: int = 3
    show_question: bool = True
    programs: ProgramMemo | None = None  # program-of-thought runs shared across envs (None: run each)
    _setups: dict[int, _Setup] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _setup(self, agent_id: int) -> _Setup:
        setup = self._setups.get(agent_id)
        if setup is None:
            agent = self.pool.agent(agent_id)
            agent_tools = {name: self.tools[name] for name in agent.tools if name in self.tools}
            setup = _Setup(
                agent,
                agent_tools,
                tool_prompt(tuple(agent_tools)) if agent_tools else "",
                pattern(agent.pattern).runs_program,
            )
            self._setups[agent_id] = setup
        return setup

    def _request(
        self, ctx: EpisodeContext, index: int, agent_id: int, subtask: str, visible: Sequence[Step]
    ) -> tuple[Mapping[str, Tool], CompletionRequest]:
        setup = self._setup(agent_id)
        agent, agent_tools = setup.agent, setup.tools
        turns = [ctx.turn(s) for s in visible]
        # positional (answer_format, tool_help, show_question, layout): made at every call
        messages = worker_messages(
            agent,
            ctx.question,
            subtask,
            turns,
            ctx.answer_format,
            setup.tool_help,
            self.show_question,
            self.pool.context_layout,
        )
        answers = tuple([s.answer for s in visible if s.answer is not None])
        # positional (made at every call; keywords cost a third of it): CallContext(item_key, pattern,
        # step_index, tools, visible_answers), CompletionRequest(model, messages, max_tokens,
        # temperature, sample_index, stop, context)
        context = CallContext(ctx.item_key, agent.pattern, index, agent.tools, answers)
        request = CompletionRequest(
            agent.model, messages, agent.max_tokens, ctx.temperature, ctx.sample_index, (), context
        )
        return agent_tools, request

    def _step(
        self,
        ctx: EpisodeContext,
        index: int,
        agent_id: int,
        subtask: str,
        visible: Sequence[Step],
        completion: Completion,
        tool_calls: int,
    ) -> Step:
        setup = self._setup(agent_id)
        if setup.runs_program:  # program of thought: run it
            python = self.tools.get("python")
            limits = python.limits if isinstance(python, PythonTool) else DEFAULT_LIMITS
            completion = run_program(completion, limits, memo=self.programs).completion
            tool_calls += 1
        visible_ids = tuple([s.index for s in visible])
        answer = _answer(ctx, completion)
        # positional: made at every step, and keywords cost a third of the call
        return Step(index, agent_id, setup.agent.name, subtask, visible_ids, completion, answer, tool_calls)

    async def arun_step(
        self, ctx: EpisodeContext, index: int, agent_id: int, subtask: str, visible: Sequence[Step]
    ) -> Step:
        tools, request = self._request(ctx, index, agent_id, subtask, visible)
        if tools:
            result = await arun_with_tools(self.backend, request, tools, max_rounds=self.max_tool_rounds)
            completion, calls = result.completion, result.tool_calls
        else:
            completion, calls = await self.backend.acomplete(request), 0
        return self._step(ctx, index, agent_id, subtask, visible, completion, calls)

    def run_step(
        self, ctx: EpisodeContext, index: int, agent_id: int, subtask: str, visible: Sequence[Step]
    ) -> Step:
        """One activation from sync code, without an event loop (step mode's hot path)."""
        tools, request = self._request(ctx, index, agent_id, subtask, visible)
        if tools:
            result = run_with_tools(self.backend, request, tools, max_rounds=self.max_tool_rounds)
            completion, calls = result.completion, result.tool_calls
        else:
            completion, calls = self.backend.complete(request), 0
        return self._step(ctx, index, agent_id, subtask, visible, completion, calls)

    async def arun_workflow(
        self,
        ctx: EpisodeContext,
        workflow: Workflow,
        prior: Sequence[Step] = (),
        offset: int = 0,
        stop: Callable[[Step], bool] | None = None,
    ) -> tuple[Step, ...]:
        """Run ``workflow``; its steps get indices ``offset + i``. Steps with access ``'all'`` also
        see the ``prior`` steps (a recursive round sees its parent's last step). With ``stop`` (a
        cascade) the steps run one after another and end after the first step for which it is true.

        On a pool with an outcome table (``Pool.replay``) every step sends the request step mode sends
        for its agent: the question as its subtask (the plan's subtask line is not sent) and, where the
        pool's solvers answer alone (``independent_solvers``), a solver sees no earlier step; so a plan
        of recorded calls replays (a verifier after a recorded first agent, a cascade, a vote)."""
        futures: dict[int, Awaitable[Step]] = {}
        recorded = self.pool.replay is not None

        async def run(i: int) -> Step:
            agent_id, subtask = workflow.model_id[i], workflow.subtasks[i]
            deps = [await futures[j] for j in visible_steps(workflow, i)]
            if workflow.access_list[i] == "all":
                deps = [*prior, *deps]
            if recorded:  # the request step mode sends, which the pool's outcome table recorded
                subtask = ctx.question.strip()
                deps = deps if self.pool.sees_earlier_work(agent_id) else []
            return await self.arun_step(ctx, offset + i, agent_id, subtask, deps)

        last = len(workflow) - 1
        for i in range(len(workflow)):
            futures[i] = asyncio.ensure_future(run(i))
            if stop is not None and i < last and stop(await futures[i]):  # a cascade waits for each step
                break
        return tuple(await asyncio.gather(*futures.values()))

    def run_workflow(
        self,
        ctx: EpisodeContext,
        workflow: Workflow,
        prior: Sequence[Step] = (),
        offset: int = 0,
        stop: Callable[[Step], bool] | None = None,
    ) -> tuple[Step, ...]:
        return run_sync(self.arun_workflow(ctx, workflow, prior, offset, stop))
