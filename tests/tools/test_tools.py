"""Tools (python sandbox tool, calculator), their registry, and the bounded tool loop."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from puppeteer.backends.base import Backend
from puppeteer.tools import TOOLS, Calculator, PythonTool, Tool, clip, default_tools, make_tool, tool_prompt
from puppeteer.tools.calculator import Evaluator
from puppeteer.tools.loop import ToolLoopResult, arun_with_tools, find_tool_call, run_with_tools
from puppeteer.tools.sandbox import SandboxLimits
from puppeteer.types import Completion, CompletionRequest, Message, ModelSpec

FAST = SandboxLimits(timeout_s=3.0, cpu_s=2, memory_mb=256)
MODEL = ModelSpec(name="scripted", backend="scripted", target="scripted", params_b=1.0)


class ScriptedBackend:
    """TEST FIXTURE, not a model: a real ``Backend`` that answers with queued texts.

    It records every request; tokens are deterministic (prompt = 10 per message,
    completion = words in the reply) and costs come from a queue (None = unpriced).
    """

    name = "scripted"

    def __init__(self, replies: list[str], costs: list[float | None] | None = None) -> None:
        self.replies = list(replies)
        self.costs = list(costs) if costs is not None else [0.001] * len(replies)
        self.requests: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        index = min(len(self.requests), len(self.replies)) - 1
        text = self.replies[index]
        cost = self.costs[min(index, len(self.costs) - 1)]
        tokens = len(text.split())
        return Completion(
            text=text,
            prompt_tokens=10 * len(request.messages),
            completion_tokens=tokens,
            cost_usd=cost,
            flops=100.0,
            latency_s=0.25,
            model=request.model.name,
        )

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return self.complete(request)


def request(question: str = "What is 6*7?") -> CompletionRequest:
    return CompletionRequest(model=MODEL, messages=(Message("system", "Solve."), Message("user", question)))


def tools() -> dict[str, Tool]:
    return {"python": PythonTool(limits=FAST), "calculator": Calculator()}


# -------------------------------------------------------------------------- calculator


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("6*7", "42"),
        ("2^10", "1024"),
        ("2**0.5", "1.41421356237"),
        ("(17*23 + 4) / 3", "131.666666667"),
        ("-3 + +5", "2"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("sqrt(16)", "4"),
        ("log(8, 2)", "3"),
        ("exp(0)", "1"),
        ("sin(pi/2)", "1"),
        ("abs(-2.5)", "2.5"),
        ("round(2.675, 2)", "2.67"),
        ("min(4, 2, 8)", "2"),
        ("max(4, 2, 8)", "8"),
        ("factorial(20)", "2432902008176640000"),
        ("0.1 + 0.2", "0.3"),
        (" 12 * 3 = ", "36"),
        ("2**200", str(2**200)),
        ("1e300 * 10", "1e+301"),
    ],
)
def test_calculator_arithmetic(expression: str, expected: str) -> None:
    result = Calculator().run(expression)
    assert result.ok and result.status == "ok"
    assert result.output == expected


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "().__class__.__bases__",
        "open('/etc/passwd')",
        "x + 1",
        "[1, 2]",
        "lambda: 1",
        "'a' * 3",
        "1 if 1 else 2",
        "True + 1",
        "sqrt(x=4)",
        "(1).real",
        "eval('1')",
    ],
)
def test_calculator_refuses_anything_but_arithmetic(expression: str) -> None:
    result = Calculator().run(expression)
    assert not result.ok and result.status == "error"
    assert result.output.startswith("error:")


@pytest.mark.parametrize(
    "expression",
    [
        "9**9**9",
        "10**10**10",
        "2**5000",
        "factorial(10**6)",
        "(10**1000)*(10**1000)",
        "comb(10**9, 10**5)",
        "1e308 * 10",
        "1/0",
        "sqrt(-1)",
        "(-8)**(1/3)",
    ],
)
def test_calculator_guards_huge_and_invalid_values(expression: str) -> None:
    start = time.perf_counter()
    result = Calculator().run(expression)
    assert time.perf_counter() - start < 0.1
    assert not result.ok and result.output.startswith("error:")


def test_calculator_bounds_are_configurable() -> None:
    assert Calculator(evaluator=Evaluator(max_int_bits=100_000)).run("2**5000").ok
    assert not Calculator(evaluator=Evaluator(max_chars=10)).run("1+1+1+1+1+1+1").ok


def test_calculator_finds_the_last_call() -> None:
    calc = Calculator()
    assert calc.find_call("first <calc>1+1</calc> then <CALC>2*3</CALC> done") == "2*3"
    assert calc.find_call("no call here, just 2*3") is None
    assert calc.find_call("<calc>unclosed 1+1") is None


# ------------------------------------------------------------------------- python tool


def test_python_tool_finds_the_last_python_block() -> None:
    tool = PythonTool(limits=FAST)
    text = "```python\nprint(1)\n```\nsome text\n```bash\nls\n```\n```py\nprint(2)\n```\n```python\nunclosed"
    assert tool.find_call(text) == "print(2)\n"
    assert tool.find_call("```bash\nls\n```") is None
    assert tool.find_call("no code") is None


def test_python_tool_runs_code_and_reports_failures() -> None:
    tool = PythonTool(limits=FAST)
    ok = tool.run("print(6*7)")
    assert (ok.output, ok.ok, ok.status) == ("42", True, "ok")
    assert "no output" in tool.run("x = 1").output
    failed = tool.run("print('partial')\nraise ValueError('bad input')")
    assert not failed.ok and failed.status == "error"
    assert failed.output.startswith("partial\n[error, exit code 1]")
    assert "ValueError: bad input" in failed.output


def test_python_tool_output_is_bounded() -> None:
    tool = PythonTool(limits=FAST, max_output_chars=500)
    result = tool.run("for i in range(10000):\n    print(i)")
    assert result.ok and len(result.output) <= 500
    assert "characters cut" in result.output
    assert result.output.startswith("0\n1\n") and result.output.endswith("9999")


def test_python_tool_reports_limits() -> None:
    tool = PythonTool(limits=SandboxLimits(timeout_s=1.0, cpu_s=1, memory_mb=256))
    slow = tool.run("import time\ntime.sleep(30)")
    assert slow.status == "timeout" and "[timeout" in slow.output
    assert tool.run("x = bytearray(10**10)").status == "memory"


def test_clip_keeps_head_and_tail() -> None:
    text = "".join(str(i % 10) for i in range(1000))
    clipped = clip(text, 100)
    assert len(clipped) <= 100 and clipped.startswith(text[:20]) and clipped.endswith(text[-10:])
    assert clip("short", 100) == "short"


# --------------------------------------------------------------------------- registry


def test_registry_builds_fresh_tools_that_satisfy_the_protocol() -> None:
    first, second = default_tools(), default_tools()
    assert set(first) == set(TOOLS) == {"python", "calculator", "python-native", "calculator-native"}
    assert all(first[name] is not second[name] for name in first)
    for name, tool in first.items():
        assert isinstance(tool, Tool) and tool.name == name and "\n" not in tool.description
    with pytest.raises(KeyError, match="unknown tool"):
        make_tool("browser")


def test_tool_prompt_explains_each_named_tool() -> None:
    prompt = tool_prompt(["calculator", "python", "calculator"])
    assert prompt.count("- calculator:") == 1 and "- python:" in prompt
    assert "<calc>" in prompt and "```python" in prompt and "Answer: <answer>" in prompt
    assert tool_prompt([]) == ""
    assert "python" not in tool_prompt(["calculator"])


# ------------------------------------------------------------------------------- loop


def test_loop_runs_python_and_feeds_the_output_back() -> None:
    replies = ["Let me compute.\n```python\nprint(6*7)\n```", "The tool says 42.\nAnswer: 42"]
    backend = ScriptedBackend(replies, costs=[0.002, 0.003])
    result = run_with_tools(backend, request(), tools())
    assert isinstance(result, ToolLoopResult)
    assert result.tool_calls == 1 and result.rounds == 2 and len(backend.requests) == 2
    assert result.completion.text == "The tool says 42.\nAnswer: 42"
    feedback = "Tool output (python):\n42\nContinue; finish with 'Answer: <answer>'."
    assert [m.role for m in result.transcript] == ["assistant", "user", "assistant"]
    assert result.transcript[1].content == feedback
    second = backend.requests[1].messages
    assert second[:2] == request().messages and second[2].content.startswith("Let me compute.")
    assert second[3] == Message("user", feedback)
    assert result.tool_results[0].output == "42"
    # Tokens and costs are summed over both rounds (prompt: 2 then 4 messages).
    assert result.completion.prompt_tokens == 20 + 40
    assert result.completion.completion_tokens == len(replies[0].split()) + len(replies[1].split())
    assert result.completion.cost_usd == pytest.approx(0.005)
    assert result.completion.flops == 200.0 and result.completion.latency_s == pytest.approx(0.5)


def test_loop_stops_after_max_rounds() -> None:
    backend = ScriptedBackend(["again <calc>1+1</calc>"])
    result = run_with_tools(backend, request(), tools(), max_rounds=2)
    assert result.tool_calls == 2 and len(backend.requests) == 3 and result.rounds == 3
    assert [r.output for r in result.tool_results] == ["2", "2"]
    assert result.transcript[-1].role == "assistant"
    single = run_with_tools(ScriptedBackend(["<calc>1+1</calc>"]), request(), tools(), max_rounds=0)
    assert single.tool_calls == 0 and single.rounds == 1


def test_loop_without_a_call_is_a_single_round() -> None:
    backend = ScriptedBackend(["Answer: 42"], costs=[None])
    result = run_with_tools(backend, request(), tools())
    assert result.tool_calls == 0 and result.transcript == (Message("assistant", "Answer: 42"),)
    assert result.completion.cost_usd is None


def test_cost_is_none_only_when_every_round_is_unpriced() -> None:
    backend = ScriptedBackend(["<calc>2*3</calc>", "Answer: 6"], costs=[None, 0.25])
    assert run_with_tools(backend, request(), tools()).completion.cost_usd == 0.25
    unpriced = ScriptedBackend(["<calc>2*3</calc>", "Answer: 6"], costs=[None, None])
    assert run_with_tools(unpriced, request(), tools()).completion.cost_usd is None


def test_answer_after_a_call_ends_the_loop_and_the_last_call_wins() -> None:
    text = "```python\nprint(1)\n```\nAnswer: 1"
    assert find_tool_call(text, tools()) is None
    tool_and_call = find_tool_call("```python\nprint(1)\n```\nthen <calc>2+2</calc>", tools())
    assert tool_and_call is not None and tool_and_call[0].name == "calculator" and tool_and_call[1] == "2+2"
    inside = find_tool_call("```python\nprint('Answer: 3')\n```", tools())
    assert inside is not None and inside[0].name == "python"


def test_async_loop_contains_hostile_code() -> None:
    hostile = (
        "```python\n"
        "import os\n"
        f"for attempt in (lambda: os.kill({os.getpid()}, 9), lambda: open('/tmp/pwned-by-sandbox', 'w'),\n"
        "                lambda: os.fork()):\n"
        "    try:\n"
        "        attempt()\n"
        "        print('ESCAPED')\n"
        "    except OSError as exc:\n"
        "        print('blocked', type(exc).__name__)\n"
        "```"
    )
    backend = ScriptedBackend([hostile, "Answer: contained"])
    backend_protocol: Backend = backend
    result = asyncio.run(arun_with_tools(backend_protocol, request(), tools()))
    assert result.tool_calls == 1 and result.completion.text == "Answer: contained"
    output = result.tool_results[0].output
    assert "ESCAPED" not in output and output.count("blocked") == 3
    assert not os.path.exists("/tmp/pwned-by-sandbox")
    assert "Tool output (python):\nblocked" in backend.requests[1].messages[-1].content


def test_async_tool_runs_do_not_block_the_event_loop() -> None:
    sleeper = "```python\nimport time\ntime.sleep(0.8)\nprint('slept')\n```"

    async def many() -> list[ToolLoopResult]:
        backends = [ScriptedBackend([sleeper, "Answer: ok"]) for _ in range(3)]
        runs = [arun_with_tools(backend, request(), tools()) for backend in backends]
        return await asyncio.gather(*runs)

    start = time.monotonic()
    results = asyncio.run(many())
    elapsed = time.monotonic() - start
    assert [r.tool_results[0].output for r in results] == ["slept"] * 3
    assert elapsed < 2.0, f"three 0.8 s tool runs took {elapsed:.2f} s: they did not overlap"
