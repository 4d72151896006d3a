"""Tools called in Qwen2.5's native format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Qwen2.5(-Coder)-Instruct models were tuned on this format (their chat template writes the
tool signatures into the system prompt inside ``<tools></tools>`` and tool results come
back inside ``<tool_response></tool_response>``); the small local models ignore the
project's ``<calc>`` syntax. ``NativeTool`` wraps any ``Tool``: it finds the first call
naming that tool, hands the argument to the wrapped tool and wraps the output the way
the chat template does. ``native_system_prompt`` writes the tools block the template
would write.

``<tool_call>`` and ``</tool_call>`` are special tokens of the Qwen2.5 vocabulary, and
llama.cpp's chat completion leaves special tokens out of the text: what arrives is the
bare JSON object (``{"name": ..., "arguments": ...}``), sometimes in a ```json fence. The
parser therefore reads any JSON object with a ``name`` and ``arguments``, tagged or not.
The model's turn should end after its first call; small models run on and write more
calls they have no response for, so the FIRST call is the one that runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from puppeteer.tools.base import Tool, ToolResult

# where a call object may start: '{' then "name" (tags, if the text kept them, are ignored)
_START = re.compile(r'\{\s*"name"\s*:')
_DECODER = json.JSONDecoder()


def _calls_with_spans(text: str) -> list[tuple[str, Mapping[str, Any], str]]:
    """(name, arguments, raw JSON text) of every well-formed call object, in order."""
    calls: list[tuple[str, Mapping[str, Any], str]] = []
    position = 0
    while (match := _START.search(text, position)) is not None:
        try:
            data, end = _DECODER.raw_decode(text, match.start())
        except json.JSONDecodeError:
            position = match.end()
            continue
        position = end
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            continue
        args = data.get("arguments", {})
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                continue
        if isinstance(args, dict):
            calls.append((data["name"], MappingProxyType(dict(args)), text[match.start() : end]))
    return calls


def parse_tool_calls(text: str) -> tuple[tuple[str, Mapping[str, Any]], ...]:
    """Every well-formed call object in ``text`` as (name, arguments); malformed ones are skipped."""
    return tuple((name, args) for name, args, _ in _calls_with_spans(text))


@dataclass(frozen=True)
class NativeTool:
    """``inner`` called through ``<tool_call>`` JSON; ``argument`` names the one string parameter."""

    inner: Tool
    argument: str
    parameter_description: str
    function_description: str
    name: str = ""
    description: str = field(init=False, default="")
    ends_turn: bool = field(init=False, default=True)  # text after a call is run-on: the call still runs

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.name or f"{self.inner.name}-native")
        object.__setattr__(self, "description", self.function_description)

    @property
    def function(self) -> str:
        """The function name the model writes (the wrapped tool's name)."""
        return self.inner.name

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.function,
                "description": self.function_description,
                "parameters": {
                    "type": "object",
                    "properties": {
                        self.argument: {"type": "string", "description": self.parameter_description}
                    },
                    "required": [self.argument],
                },
            },
        }

    def call_text(self, value: str) -> str:
        return (
            "<tool_call>\n"
            + json.dumps({"name": self.function, "arguments": {self.argument: value}})
            + "\n</tool_call>"
        )

    def find_call(self, text: str) -> str | None:
        """The first call (its raw JSON text) that names this tool with its string argument."""
        for name, args, raw in _calls_with_spans(text):
            if name == self.function and isinstance(args.get(self.argument), str):
                return raw
        return None

    def run(self, call: str) -> ToolResult:
        calls = parse_tool_calls(call)
        if not calls or not isinstance(calls[0][1].get(self.argument), str):
            return ToolResult(
                output="<tool_response>\nerror: malformed tool call\n</tool_response>",
                ok=False,
                status="error",
            )
        result = self.inner.run(str(calls[0][1][self.argument]))
        return ToolResult(
            output=f"<tool_response>\n{result.output}\n</tool_response>", ok=result.ok, status=result.status
        )


def native_system_prompt(tools: Sequence[NativeTool]) -> str:
    """The tools block of Qwen2.5's chat template (no worked example: with one in the system
    prompt, the 0.5B model copied its final 'Answer:' line and called no tool;
    experiments/local-pool-v2/README.md)."""
    schemas = "\n".join(json.dumps(t.schema()) for t in tools)
    text = (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{schemas}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )
    return text
