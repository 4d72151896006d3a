"""Qwen2.5's native tool-call format: the parser, on hand-made cases and on recorded real outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from puppeteer.tools import make_tool, native_calculator, parse_tool_calls, tool_prompt
from puppeteer.tools.calculator import Calculator
from puppeteer.tools.loop import find_tool_call, run_with_tools
from puppeteer.types import Completion, CompletionRequest, Message, ModelSpec

RECORDED = Path(__file__).parents[1] / "data" / "tool_call_outputs.jsonl"


def _records() -> list[dict[str, object]]:
    return [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2*3"}}\n</tool_call>',
            [("calculator", {"expression": "2*3"})],
        ),
        (
            'x <tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}</tool_call>',
            [("calculator", {"expression": "1+1"})],
        ),  # arguments written as a JSON string
        (
            '<tool_call>\n{"name": "calculator", "arguments": {"expression": "7-2"}}',
            [("calculator", {"expression": "7-2"})],
        ),
        ('<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>', []),  # malformed JSON
        ("<calc>2*3</calc>", []),
        # llama.cpp drops the special <tool_call> tokens: the bare object, or one in a json fence
        (
            '{"name": "calculator", "arguments": {"expression": "9*2"}}\n',
            [("calculator", {"expression": "9*2"})],
        ),
        (
            '```json\n{\n  "name": "calculator",\n  "arguments": {\n    "expression": "1/4"\n  }\n}\n```',
            [("calculator", {"expression": "1/4"})],
        ),
        ('{"name": "calculator"', []),
        (
            '<tool_call>{"name": "a", "arguments": {}}</tool_call> '
            '<tool_call>{"name": "b", "arguments": {}}</tool_call>',
            [("a", {}), ("b", {})],
        ),
    ],
)
def test_parse_tool_calls(text: str, expected: list[tuple[str, dict[str, str]]]) -> None:
    assert [(name, dict(args)) for name, args in parse_tool_calls(text)] == expected


def test_native_calculator_runs_the_call_and_answers_like_the_chat_template() -> None:
    tool = native_calculator()
    assert tool.name == "calculator-native" and tool.function == "calculator"
    call = tool.find_call(
        'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": '
        '{"expression": "(16 - 3 - 4) * 2"}}\n</tool_call>'
    )
    assert call is not None
    result = tool.run(call)
    assert result.ok and result.output == "<tool_response>\n18\n</tool_response>"
    assert tool.find_call('<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>') is None
    # the first call runs: later ones are the model running on without a response
    first = tool.find_call(
        '{"name": "calculator", "arguments": {"expression": "1+1"}}\n'
        '{"name": "calculator", "arguments": {"expression": "5*5"}}'
    )
    assert first is not None and tool.run(first).output == "<tool_response>\n2\n</tool_response>"
    assert not tool.run('{"name": "calculator"}').ok


def test_native_prompt_lists_the_schema_like_the_chat_template() -> None:
    text = tool_prompt(["calculator-native"])
    assert "<tools>" in text and '"name": "calculator"' in text and '"required": ["expression"]' in text
    assert "<tool_call></tool_call> XML tags" in text
    assert "<calc>" not in text
    assert "<calc>" in tool_prompt(["calculator"])  # the old format is unchanged


class Scripted:
    name = "scripted"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.requests: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        return Completion(self.texts[len(self.requests) - 1], 1, 1, 0.0, 0.0, 0.0, "m")

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return self.complete(request)


def test_tool_loop_feeds_the_native_response_back() -> None:
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*7+5"}}\n</tool_call>'
    backend = Scripted([call, "Answer: 89"])
    request = CompletionRequest(ModelSpec("m", "sim", "m", 1.0), (Message("user", "q"),))
    result = run_with_tools(backend, request, {"calculator-native": make_tool("calculator-native")})
    assert result.tool_calls == 1 and result.completion.text == "Answer: 89"
    feedback = backend.requests[1].messages[-1].content
    assert feedback.startswith("Tool output (calculator-native):\n<tool_response>\n89")


def _id(record: dict[str, object]) -> str:
    return f"{record['format']}:{record['completion_tokens']}:{str(record['expected_call'])[:20]}"


@pytest.mark.parametrize("record", _records(), ids=_id)
def test_parser_on_recorded_real_outputs(record: dict[str, object]) -> None:
    """Completions recorded from the local models; ``expected_call`` is a human reading of the text."""
    text = str(record["text"])
    tools = {"calculator-native": native_calculator(), "calculator": Calculator()}
    found = find_tool_call(text, tools)
    expected = record["expected_call"]
    if expected is None:
        assert found is None
    else:
        assert found is not None
        tool, payload = found
        assert tool.name == record["format_tool"]
        assert dict(parse_tool_calls(payload)[0][1]) == {"expression": expected}
        assert tool.run(payload).output.strip().removeprefix("<tool_response>").removesuffix(
            "</tool_response>"
        ).strip() == str(record["expected_output"])
