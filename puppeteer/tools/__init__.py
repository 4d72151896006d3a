"""Tools agents can call from their text: ``python`` (sandboxed code) and ``calculator``.

``TOOLS`` maps each name to a factory; ``default_tools()`` builds fresh instances and
``tool_prompt(names)`` tells a model how to call them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from puppeteer.tools.base import Tool, ToolResult, clip
from puppeteer.tools.calculator import Calculator
from puppeteer.tools.native import NativeTool, native_system_prompt, parse_tool_calls
from puppeteer.tools.python_tool import PythonTool

ToolFactory = Callable[[], Tool]


def native_calculator() -> NativeTool:
    """The calculator in Qwen2.5's native tool-call format."""
    return NativeTool(
        Calculator(),
        argument="expression",
        # no example expression here: the 0.5B model copied "(17*23 + 4) / 3" into its calls
        parameter_description="an arithmetic expression written with the numbers of the problem",
        function_description="Evaluate an arithmetic expression (+ - * / // % **, sqrt, round, min, max) "
        "and return its value.",
    )


def native_python() -> NativeTool:
    """The python sandbox in Qwen2.5's native tool-call format."""
    return NativeTool(
        PythonTool(),
        argument="code",
        parameter_description="a complete Python 3 program that print()s what you want to see",
        function_description="Run a Python 3 program in a sandbox and return what it prints.",
    )


TOOLS: Mapping[str, ToolFactory] = MappingProxyType(
    {
        "python": PythonTool,
        "calculator": Calculator,
        "calculator-native": native_calculator,
        "python-native": native_python,
    }
)


def make_tool(name: str) -> Tool:
    try:
        factory = TOOLS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r}; known: {', '.join(sorted(TOOLS))}") from None
    return factory()


def default_tools() -> dict[str, Tool]:
    """Fresh instances of every registered tool, by name."""
    return {name: make_tool(name) for name in TOOLS}


def tool_prompt(names: Iterable[str]) -> str:
    """Instructions for calling the named tools (empty when there are none)."""
    tools = [make_tool(name) for name in dict.fromkeys(names)]
    if not tools:
        return ""
    native = [t for t in tools if isinstance(t, NativeTool)]
    if native and len(native) == len(tools):
        return native_system_prompt(native)
    lines = [f"- {t.name}: {t.description}" for t in tools]
    return (
        "You may use tools. Write one call, then stop and wait; its output comes back to you.\n"
        + "\n".join(lines)
        + "\nWhen you are done, finish with 'Answer: <answer>' and no further tool call."
    )


__all__ = [
    "TOOLS",
    "Calculator",
    "NativeTool",
    "PythonTool",
    "Tool",
    "ToolFactory",
    "ToolResult",
    "clip",
    "default_tools",
    "make_tool",
    "native_calculator",
    "native_python",
    "native_system_prompt",
    "parse_tool_calls",
    "tool_prompt",
]
