"""What a tool is: a way to find its call in a completion, and a way to run that call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ToolResult:
    """``output`` is what the model gets back; ``status`` is tool-specific ("ok", "error", "timeout", ...)."""

    output: str
    ok: bool
    status: str


@runtime_checkable
class Tool(Protocol):
    """A tool the model calls by writing a call in its text.

    ``description`` is one line for prompts, including how to write a call.
    ``find_call`` returns the LAST call in a completion (its payload), or None.
    ``run`` never raises for anything inside the call; problems come back as a failed result.
    """

    name: str
    description: str

    def find_call(self, text: str) -> str | None: ...

    def run(self, call: str) -> ToolResult: ...


def clip(text: str, limit: int) -> str:
    """Keep at most ``limit`` characters: the head and the tail, with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    marker = f"\n...[{len(text) - limit} characters cut]...\n"
    keep = max(limit - len(marker), 0)
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head) :] if keep else marker.strip()
