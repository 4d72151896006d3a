"""Program of thought: run the program a ``pot`` worker wrote; what it prints is the answer.

The model writes one Python program (``reasoning.PATTERNS["pot"]``); ``run_program`` takes
the last fenced code block of the completion (``python``/``py`` or an unlabelled fence),
runs it in the sandbox (``puppeteer.tools.sandbox.run_python_patiently``) and appends the output and an
``Answer: <last printed line>`` line to the completion text, so every grader's extractor
reads the program's result. A completion without a code block, or a program that fails
or prints nothing, gets no ``Answer:`` line (the failure is appended instead).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from puppeteer.tools.base import clip
from puppeteer.tools.sandbox import DEFAULT_LIMITS, SandboxLimits, SandboxResult, run_python_patiently
from puppeteer.types import Completion
from puppeteer.utils.memo import BoundedMemo

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class ProgramRun:
    """What running a ``pot`` completion produced: the new completion and the raw tool result."""

    completion: Completion
    program: str | None
    result: SandboxResult | None
    answer: str | None


def find_program(text: str) -> str | None:
    """The last fenced code block of ``text`` (labelled python/py or unlabelled), or None."""
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else None


def printed_answer(stdout: str) -> str | None:
    """The last non-empty line a program printed."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else None


def _shown(result: SandboxResult, max_chars: int) -> str:
    if result.ok:
        return clip(result.stdout.strip(), max_chars) if result.stdout.strip() else "(no output)"
    tail = result.stderr.strip()[-max_chars // 2 :]
    return clip(f"{result.stdout.strip()}\n[{result.status}]\n{tail}".strip(), max_chars)


class ProgramMemo(BoundedMemo[tuple[str, SandboxLimits], SandboxResult]):
    """Sandbox results keyed by (program, limits). A program is run once per memo: a program that
    prints something different on each run (random numbers, the clock) keeps its first output, as a
    response cache keeps a model's first completion."""

    def run(self, program: str, limits: SandboxLimits) -> SandboxResult:
        return self.get((program, limits), lambda: run_python_patiently(program, limits=limits))


def run_program(
    completion: Completion,
    limits: SandboxLimits = DEFAULT_LIMITS,
    max_output_chars: int = 2000,
    memo: ProgramMemo | None = None,
) -> ProgramRun:
    """Run the completion's program in the sandbox (once per ``memo``) and write its printed result
    as the answer."""
    program = find_program(completion.text)
    if program is None:
        note = "\n\n[no program found]"
        noted = replace(completion, text=completion.text + note, answer_text=None)
        return ProgramRun(noted, None, None, None)
    # patiently: the answer (and, replayed, the next request) must not depend on the machine's load
    result = memo.run(program, limits) if memo is not None else run_python_patiently(program, limits=limits)
    answer = printed_answer(result.stdout) if result.ok else None
    text = f"{completion.text}\n\nProgram output:\n{_shown(result, max_output_chars)}"
    if answer is not None:
        text += f"\nAnswer: {answer}"
    # ``truncated`` stays the model's own flag; "Answer:" is a committed answer for the extractor; the
    # backend's answer_text vouched for the program, not for this text
    return ProgramRun(replace(completion, text=text, answer_text=None), program, result, answer)
