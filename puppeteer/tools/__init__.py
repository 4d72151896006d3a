"""Tools agents can call from their text: ``python`` (sandboxed code) and ``calculator``.

``TOOLS`` maps each name to a factory; ``default_tools()`` builds fresh instances and
``tool_prompt(names)`` tells a model how to call them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from puppeteer.tools.base import Tool, ToolResult, clip
from puppeteer.tools.calculator import Calculator
from puppeteer.tools.python_tool import PythonTool

ToolFactory = Callable[[], Tool]

TOOLS: Mapping[str, ToolFactory] = MappingProxyType({"python": PythonTool, "calculator": Calculator})


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
    lines = [f"- {t.name}: {t.description}" for t in tools]
    return ("You may use tools. Write one call, then stop and wait; its output comes back to you.\n"
            + "\n".join(lines)
            + "\nWhen you are done, finish with 'Answer: <answer>' and no further tool call.")


__all__ = ["TOOLS", "Calculator", "PythonTool", "Tool", "ToolFactory", "ToolResult", "clip", "default_tools",
           "make_tool", "tool_prompt"]
