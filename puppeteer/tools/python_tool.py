"""The ``python`` tool: fenced Python blocks run in the sandbox; the model sees what they print."""

from __future__ import annotations

import re
from dataclasses import dataclass

from puppeteer.tools.base import ToolResult, clip
from puppeteer.tools.sandbox import DEFAULT_LIMITS, SandboxLimits, run_python_patiently

_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class PythonTool:
    """Runs the last ```python ...``` block of a completion with ``run_python_patiently``.

    The output is the program's stdout; on failure a short tail of stderr and the status
    follow. Everything is clipped to ``max_output_chars`` (head and tail kept).
    """

    limits: SandboxLimits = DEFAULT_LIMITS
    max_output_chars: int = 2000
    max_error_chars: int = 600
    name: str = "python"
    description: str = (
        "run Python 3 code: write a ```python ... ``` block; what it print()s comes back "
        "(no network, no files outside its own directory; numpy and sympy if installed)"
    )

    def find_call(self, text: str) -> str | None:
        blocks = _BLOCK.findall(text)
        return blocks[-1] if blocks else None

    def run(self, call: str) -> ToolResult:
        # patiently: what the model reads next must not depend on the machine's load
        result = run_python_patiently(call, limits=self.limits)
        parts = [result.stdout.rstrip("\n")] if result.stdout.strip() else []
        if result.status == "timeout":
            limits = self.limits
            parts.append(f"[timeout: stopped after {limits.timeout_s:g}s wall / {limits.cpu_s}s CPU]")
        elif result.status == "memory":
            parts.append(f"[memory: exceeded {self.limits.memory_mb} MB]")
        elif result.status == "output_limit":
            parts.append("[output limit: the program printed too much and was stopped]")
        elif not result.ok:
            err = result.stderr.strip()
            tail = err if len(err) <= self.max_error_chars else "..." + err[-self.max_error_chars :]
            parts.append(f"[{result.status}, exit code {result.returncode}]" + (f"\n{tail}" if tail else ""))
        elif not parts:
            parts.append("(no output; print() what you want to see)")
        output = clip("\n".join(parts), self.max_output_chars)
        return ToolResult(output=output, ok=result.ok, status=result.status)
