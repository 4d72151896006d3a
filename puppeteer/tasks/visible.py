"""Checks of an answer against what the question itself shows, never against the gold answer.

A HumanEval prompt shows a few calls of its function and what they return (``>>> f(3)`` followed by
``7``, or ``f(3) ==> 7`` in the docstring). Running an answer's code on those calls, in the sandbox,
tells a router something the question embedding cannot: whether this particular answer is plausible.
It uses nothing a user would not have (the hidden tests stay with the grader), the same way a
programmer runs the examples of a docstring before shipping (CodeT, AlphaCode's filtering).

A :class:`VisibleCheck` maps (answer, task) to True (passes what the question shows), False (fails
it, or no answer) or None (the question shows nothing to check). :data:`VISIBLE_CHECKS` keys them
by grader name; the env runs the one of a task's grader on each step's answer and puts the verdict
in the step-mode observation (:mod:`puppeteer.tasks.signals`).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from puppeteer.tasks.graders import humaneval_body
from puppeteer.types import Task
from puppeteer.utils.pyparse import literal_python, parse_python

# how a docstring states a call's result after the call, longest first ("==>" before "=")
_SEPARATORS = ("==>", "=>", "==", "->", "\u279e", "=", "should return", "returns", "return")


@dataclass(frozen=True)
class Example:
    """One call the question shows, and the Python literal it says the call returns."""

    call: str
    expected: str


@runtime_checkable
class VisibleCheck(Protocol):
    def check(self, answer: str | None, task: Task) -> bool | None:
        """True: the answer passes what the question shows; False: it fails (or there is no answer);
        None: the question shows nothing this check can run."""
        ...


def _call_end(text: str, open_at: int) -> int | None:
    """Index just past the parenthesis that closes the one at ``open_at`` (quotes respected)."""
    depth, quote, i = 0, "", open_at
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _literal(text: str) -> str | None:
    """``text`` (a trailing full stop dropped) if it is a Python literal, else None."""
    text = text.strip().rstrip(".").strip()
    try:
        literal_python(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return text


def _is_call(text: str, entry_point: str) -> bool:
    """Whether ``text`` is one call of ``entry_point`` on literals (no other names: ``f(abc)`` in a
    docstring means the string, and would only raise NameError)."""
    try:
        tree = parse_python(text, mode="eval")
    except SyntaxError:
        return False
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return isinstance(tree.body, ast.Call) and names == {entry_point}


def visible_examples(prompt: str, entry_point: str) -> tuple[Example, ...]:
    """The calls of ``entry_point`` that ``prompt`` shows with their results, in order, each once:
    doctest lines (``>>> f(x)`` then the result on the next line) and inline forms (``f(x) ==> y``,
    ``f(x) == y``, ``f(x) -> y``, ``f(x) => y``, ``f(x) = y``, ``f(x) \u279e y``). Results that are not Python
    literals (prose, a printed object) are skipped."""
    lines = prompt.splitlines()
    found: dict[str, str] = {}
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith(">>>"):
            call = text[3:].strip()
            result = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if call.startswith(entry_point + "(") and result and not result.startswith(">>>"):
                expected = _literal(result)
                if expected is not None and _is_call(call, entry_point):
                    found.setdefault(call, expected)
            continue
        at = text.find(entry_point + "(")
        if at < 0 or text.startswith("def ") or (at > 0 and (text[at - 1].isalnum() or text[at - 1] == "_")):
            continue
        end = _call_end(text, at + len(entry_point))
        if end is None:
            continue
        call, rest = text[at:end], text[end:].strip()
        sep = next((s for s in _SEPARATORS if rest.startswith(s)), None)
        if sep is None:
            continue
        expected = _literal(rest[len(sep) :])
        if expected is not None and _is_call(call, entry_point):
            found.setdefault(call, expected)
    return tuple(Example(c, e) for c, e in found.items())


_SAME = """
def __visible_same(got, want):
    if got == want:
        return True
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        return list(got) == list(want)
    if isinstance(got, (list, tuple)) and len(got) == 1:
        return got[0] == want
    if isinstance(got, float) or isinstance(want, float):
        try:
            return abs(got - want) < 1e-6
        except TypeError:
            return False
    return False


__visible_failed = 0
"""


def examples_program(body: str, examples: tuple[Example, ...]) -> str:
    """``body`` (the code that defines the function), then each example called and compared with its
    stated result (a list equals a tuple, a 1-tuple its element, floats within 1e-6: docstrings are
    loose about these); exits non-zero if any call fails or raises."""
    checks = [
        f"try:\n    __visible_failed += not __visible_same({e.call}, {e.expected})\n"
        f"except Exception:\n    __visible_failed += 1\n"
        for e in examples
    ]
    return body + "\n\n" + _SAME + "".join(checks) + "assert __visible_failed == 0, __visible_failed\n"


@dataclass(frozen=True)
class CodeExamplesCheck:
    """HumanEval-style items: the answer's function run on the calls its prompt shows, in the sandbox."""

    timeout_s: float = 5.0

    def check(self, answer: str | None, task: Task) -> bool | None:
        entry = task.meta.get("entry_point")
        if not entry:
            return None
        examples = visible_examples(str(task.meta.get("prompt", task.question)), str(entry))
        if not examples:
            return None
        if not answer or not answer.strip():
            return False
        from puppeteer.tools.sandbox import SandboxLimits, run_python_patiently

        limits = SandboxLimits(
            timeout_s=self.timeout_s, cpu_s=max(1, int(self.timeout_s)), site_packages=False
        )
        program = examples_program(humaneval_body(answer, task), examples)
        result = run_python_patiently(program, limits=limits)  # a signal must not depend on the load
        return result.status == "ok"


VISIBLE_CHECKS: Mapping[str, VisibleCheck] = MappingProxyType({"code": CodeExamplesCheck()})
