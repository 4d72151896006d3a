"""A bounded tool loop: let the model call tools, feed the outputs back, stop at an answer.

Round by round: call the model; if its text holds a tool call (the latest one across the
given tools) and no 'Answer:' after it, run that call, append the assistant text and a
user message with the tool output, and call the model again. After ``max_rounds`` tool
runs the model gets one last call whose tool calls are not run, so it can use the last
output; at most ``max_rounds + 1`` model calls and ``max_rounds`` tool runs happen.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from puppeteer.backends.base import Backend
from puppeteer.tools.base import Tool, ToolResult
from puppeteer.types import Completion, CompletionRequest, Message

_ANSWER = re.compile(r"answer\s*:", re.IGNORECASE)


@dataclass(frozen=True)
class ToolLoopResult:
    """``completion``: text of the final round; tokens, cost, FLOPs and latency summed over all rounds.

    ``transcript`` holds the messages the loop added after ``request.messages`` (assistant
    turns and tool feedback, in order); ``tool_results`` the output of each tool run.
    """

    completion: Completion
    tool_calls: int
    transcript: tuple[Message, ...]
    tool_results: tuple[ToolResult, ...] = ()
    rounds: int = 1


def feedback(name: str, result: ToolResult) -> str:
    return f"Tool output ({name}):\n{result.output}\nContinue; finish with 'Answer: <answer>'."


def find_tool_call(text: str, tools: Mapping[str, Tool]) -> tuple[Tool, str] | None:
    """The call that appears last in ``text`` across all tools, unless an 'Answer:' follows it.

    A tool whose calls end the model's turn (``ends_turn = True``, the native format) runs even
    when an 'Answer:' follows: that text is the model running on without the tool's response.
    """
    best: tuple[int, Tool, str] | None = None
    for tool in tools.values():
        call = tool.find_call(text)
        if call is None:
            continue
        position = text.rfind(call)
        if best is None or position > best[0]:
            best = (position, tool, call)
    if best is None:
        return None
    position, tool, call = best
    if not getattr(tool, "ends_turn", False) and _ANSWER.search(text, position + len(call)):
        return None
    return tool, call


def merge(completions: list[Completion]) -> Completion:
    """One completion for the whole loop: the last text (with what its backend vouched for), everything
    else summed."""
    last = completions[-1]
    if len(completions) == 1:  # no tool was called: the one completion as it is
        return last
    costs = [c.cost_usd for c in completions if c.cost_usd is not None]
    return Completion(
        text=last.text,
        prompt_tokens=sum(c.prompt_tokens for c in completions),
        completion_tokens=sum(c.completion_tokens for c in completions),
        cost_usd=sum(costs) if costs else None,
        flops=sum(c.flops for c in completions),
        latency_s=sum(c.latency_s for c in completions),
        queue_s=sum(c.queue_s for c in completions),
        model=last.model,
        cached=all(c.cached for c in completions),
        truncated=last.truncated,
        answer_text=last.answer_text,
    )


@dataclass
class _Loop:
    """The loop's state, shared by the sync and async drivers."""

    request: CompletionRequest
    tools: Mapping[str, Tool]
    max_rounds: int
    added: list[Message] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)

    def next_request(self) -> CompletionRequest:
        if not self.added:  # the first round: the request as given
            return self.request
        return replace(self.request, messages=(*self.request.messages, *self.added))

    def observe(self, completion: Completion) -> tuple[Tool, str] | None:
        """Record a model turn; return the tool call to run next, if any."""
        self.completions.append(completion)
        self.added.append(Message("assistant", completion.text))
        if len(self.results) >= self.max_rounds:
            return None
        return find_tool_call(completion.text, self.tools)

    def record(self, tool: Tool, result: ToolResult) -> None:
        self.results.append(result)
        self.added.append(Message("user", feedback(tool.name, result)))

    def result(self) -> ToolLoopResult:
        return ToolLoopResult(
            merge(self.completions),
            len(self.results),
            tuple(self.added),
            tuple(self.results),
            rounds=len(self.completions),
        )


def run_with_tools(
    backend: Backend, request: CompletionRequest, tools: Mapping[str, Tool], max_rounds: int = 3
) -> ToolLoopResult:
    loop = _Loop(request, tools, max_rounds)
    while (call := loop.observe(backend.complete(loop.next_request()))) is not None:
        tool, payload = call
        loop.record(tool, tool.run(payload))
    return loop.result()


async def arun_with_tools(
    backend: Backend, request: CompletionRequest, tools: Mapping[str, Tool], max_rounds: int = 3
) -> ToolLoopResult:
    """Like ``run_with_tools``; tools run in a worker thread so the event loop stays free."""
    loop = _Loop(request, tools, max_rounds)
    while (call := loop.observe(await backend.acomplete(loop.next_request()))) is not None:
        tool, payload = call
        loop.record(tool, await asyncio.to_thread(tool.run, payload))
    return loop.result()
