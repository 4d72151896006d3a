"""Tools called in Qwen2.5's native format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Qwen2.5(-Coder)-Instruct models were tuned on this format (their chat template writes the
tool signatures into the system prompt inside ``<tools></tools>`` and tool results come
back inside ``<tool_response></tool_response>``); the small local models ignore the
project's ``<calc>`` syntax. ``NativeTool`` wraps any ``Tool``: it finds the last
``<tool_call>`` naming that tool, hands the argument to the wrapped tool and wraps the
output the way the chat template does. ``native_system_prompt`` writes the tools block
the template would write, plus one worked example (the models follow an example far more
often than a description).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from puppeteer.tools.base import Tool, ToolResult

# a closing tag is optional at the very end: generation may stop right after the JSON
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)


def parse_tool_calls(text: str) -> tuple[tuple[str, Mapping[str, Any]], ...]:
    """Every well-formed ``<tool_call>`` in ``text`` as (name, arguments); malformed ones are skipped."""
    calls = []
    for payload in _CALL.findall(text):
        try:
            data = json.loads(payload)
        except json.JSONDecodeError:
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            continue
        args = data.get("arguments", {})
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                continue
        if isinstance(args, dict):
            calls.append((data["name"], MappingProxyType(dict(args))))
    return tuple(calls)


@dataclass(frozen=True)
class NativeTool:
    """``inner`` called through ``<tool_call>`` JSON; ``argument`` names the one string parameter."""

    inner: Tool
    argument: str
    parameter_description: str
    function_description: str
    name: str = ""
    example: tuple[str, str, str] = ("", "", "")  # (question, argument value, tool output)
    description: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.name or f"{self.inner.name}-native")
        object.__setattr__(self, "description", self.function_description)

    @property
    def function(self) -> str:
        """The function name the model writes (the wrapped tool's name)."""
        return self.inner.name

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.function, "description": self.function_description,
            "parameters": {"type": "object",
                           "properties": {self.argument: {"type": "string",
                                                          "description": self.parameter_description}},
                           "required": [self.argument]}}}

    def call_text(self, value: str) -> str:
        return ("<tool_call>\n" + json.dumps({"name": self.function, "arguments": {self.argument: value}})
                + "\n</tool_call>")

    def find_call(self, text: str) -> str | None:
        """The last ``<tool_call>`` payload (raw JSON text) that names this tool with its argument."""
        for payload in reversed(_CALL.findall(text)):
            calls = parse_tool_calls(f"<tool_call>{payload}</tool_call>")
            if calls and calls[0][0] == self.function and isinstance(calls[0][1].get(self.argument), str):
                return payload
        return None

    def run(self, call: str) -> ToolResult:
        calls = parse_tool_calls(f"<tool_call>{call}</tool_call>")
        if not calls or not isinstance(calls[0][1].get(self.argument), str):
            return ToolResult(output="<tool_response>\nerror: malformed tool call\n</tool_response>",
                              ok=False, status="error")
        result = self.inner.run(str(calls[0][1][self.argument]))
        return ToolResult(output=f"<tool_response>\n{result.output}\n</tool_response>", ok=result.ok,
                          status=result.status)


def native_system_prompt(tools: Sequence[NativeTool]) -> str:
    """The tools block of Qwen2.5's chat template, followed by one worked example per tool."""
    schemas = "\n".join(json.dumps(t.schema()) for t in tools)
    text = ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{schemas}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
    examples = [t for t in tools if t.example[0]]
    for t in examples:
        question, value, output = t.example
        text += (f"\n\nExample.\nUser: {question}\nAssistant: {t.call_text(value)}\n"
                 f"User: <tool_response>\n{output}\n</tool_response>\nAssistant: Answer: {output}")
    text += ("\n\nCall a tool for every calculation, then stop and wait for its <tool_response>. "
             "When you have the result, finish with 'Answer: <answer>'.")
    return text
