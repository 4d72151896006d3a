"""Graders: turn model output into a normalized answer and decide whether it is correct.

A grader knows the task (gold answer, choices, tests) and nothing about agents. ``extract``
returns a string usable for majority voting (equal strings are the same answer);
``grade`` judges such a string against the task.
"""

from __future__ import annotations

import logging
import math
import re
import textwrap
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

from puppeteer.tasks.extract import (
    extract_code,
    extract_final_text,
    extract_letter,
    extract_math,
    extract_number,
    normalize_math,
    number_value,
    tail,
)
from puppeteer.types import Task

log = logging.getLogger(__name__)

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@runtime_checkable
class Grader(Protocol):
    name: str

    def extract(self, text: str, task: Task, *, truncated: bool = False) -> str | None:
        """A normalized answer usable for majority voting (equal strings = same answer), or None.

        ``truncated``: the generation hit its token budget; only an explicitly stated answer counts.
        """
        ...

    def grade(self, answer: str | None, task: Task) -> bool:
        """Whether an answer returned by :meth:`extract` is correct for ``task``."""
        ...


def numbers_equal(a: Fraction, b: Fraction, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Exact equality, or closeness within tolerance when either side is not an integer."""
    if a == b:
        return True
    if a.denominator == 1 and b.denominator == 1:
        return False
    return abs(float(a) - float(b)) <= max(abs_tol, rel_tol * max(abs(float(a)), abs(float(b))))


# --------------------------------------------------------------------------- numeric / exact


@dataclass(frozen=True)
class NumericGrader:
    name: str = "numeric"
    rel_tol: float = 1e-6

    def extract(self, text: str, task: Task, *, truncated: bool = False) -> str | None:
        return extract_number(text, committed_only=truncated)

    def grade(self, answer: str | None, task: Task) -> bool:
        if answer is None:
            return False
        got, gold = number_value(answer), number_value(task.answer)
        if got is None or gold is None:
            return False
        return numbers_equal(got, gold, rel_tol=self.rel_tol)


def normalize_text(text: str) -> str:
    """Case-folded, whitespace-collapsed, without surrounding quotes or a final period."""
    s = re.sub(r"\s+", " ", text).strip().strip("\"'`").rstrip(".").strip()
    return s.casefold()


@dataclass(frozen=True)
class ExactGrader:
    name: str = "exact"

    def extract(self, text: str, task: Task, *, truncated: bool = False) -> str | None:
        found = extract_final_text(text, committed_only=truncated)
        return normalize_text(found) if found else None

    def grade(self, answer: str | None, task: Task) -> bool:
        return answer is not None and normalize_text(answer) == normalize_text(task.answer)


# --------------------------------------------------------------------------- math


def _wrap(expr: str) -> str:
    return expr if "\\boxed" in expr else f"$\\boxed{{{expr}}}$"


@dataclass(frozen=True)
class MathGrader:
    """Symbolic equivalence with math-verify (``\\frac{1}{2}`` == ``0.5``); numeric comparison without it."""

    name: str = "math"
    timeout_s: int = 5

    def extract(self, text: str, task: Task, *, truncated: bool = False) -> str | None:
        found = extract_math(text, committed_only=truncated)
        return normalize_math(found) if found else None

    def grade(self, answer: str | None, task: Task) -> bool:
        if answer is None or not answer.strip():
            return False
        got, gold = number_value(answer), number_value(task.answer)
        if got is not None and gold is not None:
            return numbers_equal(got, gold)
        if normalize_math(answer) == normalize_math(task.answer):
            return True
        verdict = self._verify(answer, task.answer)
        return bool(verdict)

    def _verify(self, answer: str, gold: str) -> bool | None:
        try:
            from math_verify import parse, verify
        except ImportError:
            log.debug("math-verify not installed; math grading falls back to numeric/string equality")
            return None
        # math-verify's timeouts use SIGALRM, which exists only in the main thread.
        timeout = self.timeout_s if threading.current_thread() is threading.main_thread() else None
        try:
            gold_parsed = parse(_wrap(gold), parsing_timeout=timeout)
            got_parsed = parse(_wrap(answer), parsing_timeout=timeout)
            if not gold_parsed or not got_parsed:
                return None
            return bool(verify(gold_parsed, got_parsed, timeout_seconds=timeout))
        except Exception as exc:  # math-verify raises on odd LaTeX and on timeouts
            log.debug("math-verify failed on %r vs %r: %s", answer, gold, exc)
            return None


# --------------------------------------------------------------------------- multiple choice


def _choice_by_text(text: str, choices: tuple[str, ...], committed_only: bool = False) -> str | None:
    """Letter of the one choice whose text the final line restates verbatim, if exactly one does."""
    final = extract_final_text(text, committed_only=committed_only)
    if not final:
        return None
    said = normalize_text(final)
    hits = [i for i, c in enumerate(choices) if (nc := normalize_text(str(c))) and nc == said]
    if not hits:
        hits = [i for i, c in enumerate(choices) if len(nc := normalize_text(str(c))) >= 3 and nc in said]
    return LETTERS[hits[0]] if len(hits) == 1 else None


@dataclass(frozen=True)
class LetterGrader:
    """Multiple choice: the answer is a letter; ``task.meta['choices']`` gives their number."""

    name: str = "letter"

    def extract(self, text: str, task: Task, *, truncated: bool = False) -> str | None:
        choices = tuple(task.meta.get("choices", ()))
        n = len(choices) if len(choices) >= 2 else 4
        letter = extract_letter(text, n_choices=n, committed_only=truncated)
        if letter is None and choices:
            letter = _choice_by_text(text, choices, committed_only=truncated)
        return letter

    def grade(self, answer: str | None, task: Task) -> bool:
        return answer is not None and answer.strip().upper() == task.answer.strip().upper()


# --------------------------------------------------------------------------- code


def humaneval_program(completion: str, task: Task) -> str:
    """The check program: prompt + completion (or completion re-defining the function) + tests + check()."""
    entry = str(task.meta["entry_point"])
    test = str(task.meta["test"])
    return f"{humaneval_body(completion, task)}\n\n{test}\n\ncheck({entry})\n"


def humaneval_body(completion: str, task: Task) -> str:
    """The program that defines the item's function: the prompt and the completion, which either
    re-defines the function in full or continues the prompt's stub with its body."""
    prompt = str(task.meta.get("prompt", ""))
    entry = str(task.meta["entry_point"])
    if re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(entry)}\s*\(", completion, re.MULTILINE):
        body = (
            prompt + "\n\n" + completion
        )  # a full definition replaces the stub; prompt keeps imports/helpers
    else:
        first = next((line for line in completion.splitlines() if line.strip()), "")
        if first and not first[0].isspace():
            completion = textwrap.indent(completion, "    ")
        body = prompt + completion
    return body


@dataclass(frozen=True)
class CodeGrader:
    """HumanEval-style: run prompt + completion + tests in the sandbox; pass iff it exits cleanly."""

    name: str = "code"
    timeout_s: float = 10.0
    site_packages: bool = False  # HumanEval needs only the standard library

    def extract(self, text: str, task: Task, *, truncated: bool = False) -> str | None:
        # a cut-off program is still extracted: its tests decide (it usually fails them)
        entry = task.meta.get("entry_point")
        return extract_code(text, entry_point=str(entry) if entry else None)

    def grade(self, answer: str | None, task: Task) -> bool:
        if not answer or not answer.strip() or "test" not in task.meta:
            return False
        from puppeteer.tools.sandbox import run_python_patiently

        # patiently: a grade must not depend on the machine's load
        result = run_python_patiently(humaneval_program(answer, task), limits=self._limits())
        return result.status == "ok"

    def _limits(self) -> Any:
        from puppeteer.tools.sandbox import SandboxLimits

        return SandboxLimits(
            timeout_s=self.timeout_s,
            cpu_s=max(1, math.ceil(self.timeout_s)),
            site_packages=self.site_packages,
        )


# --------------------------------------------------------------------------- reasoning-gym


def knights_answer(
    text: str, names: tuple[str, ...] = (), roles: tuple[str, str] = ("knight", "knave")
) -> str | None:
    """Canonical 'alice is a knave, bob is a knight' from the last statement about each person.

    ``roles`` are the puzzle's two words (reasoning-gym varies them: hero/villain, angel/devil...).
    """
    words = "|".join(re.escape(r.lower()) for r in roles)
    who = "(?i:" + "|".join(re.escape(n) for n in names) + ")" if names else "[A-Z][a-z]+"
    assign = re.compile(
        rf"\b({who})\s+(?:is|was|must\s+be|would\s+be|has\s+to\s+be)\s+(?:an?\s+)?((?i:{words}))s?\b"
    )
    final = extract_final_text(text) or ""
    pairs = assign.findall(final)
    if not pairs or (names and len({p[0].lower() for p in pairs}) < len(names)):
        pairs = assign.findall(tail(text))
    if names:
        known = {n.lower() for n in names}
        pairs = [p for p in pairs if p[0].lower() in known]
    last: dict[str, str] = {}
    for name, role in pairs:
        last[name.lower()] = role.lower()
    if not last or (names and len(last) != len(names)):
        return None
    return ", ".join(f"{n} is a {last[n]}" for n in sorted(last))


def _rg_extract_number(text: str, task: Task, truncated: bool = False) -> str | None:
    return extract_number(text, committed_only=truncated)


def _rg_extract_knights(text: str, task: Task, truncated: bool = False) -> str | None:
    meta = task.meta.get("rg_entry", {}).get("metadata", {})
    terms = meta.get("knight_knave_terms", {})
    roles = (str(terms.get("knight", "knight")), str(terms.get("knave", "knave")))
    if truncated:  # only an explicitly stated conclusion, not statements made along the way
        text = extract_final_text(text, committed_only=True) or ""
    return knights_answer(text, tuple(meta.get("names", ())), roles)


def _rg_extract_text(text: str, task: Task, truncated: bool = False) -> str | None:
    found = extract_final_text(text, committed_only=truncated)
    return found.strip() if found else None


RG_EXTRACTORS = {"number": _rg_extract_number, "knights": _rg_extract_knights, "text": _rg_extract_text}


@dataclass(frozen=True)
class ReasoningGymGrader:
    """Scores with the reasoning-gym dataset's own ``score_answer``; correct iff score >= ``threshold``.

    ``task.meta`` carries ``rg_dataset`` (name), ``rg_entry`` (the generated entry dict) and
    ``rg_answer`` (how to extract: ``number``, ``knights`` or ``text``).
    """

    name: str = "rg"
    threshold: float = 0.99
    _scorers: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def extract(self, text: str, task: Task, *, truncated: bool = False) -> str | None:
        kind = str(task.meta.get("rg_answer", "text"))
        return RG_EXTRACTORS.get(kind, _rg_extract_text)(text, task, truncated)

    def grade(self, answer: str | None, task: Task) -> bool:
        if answer is None:
            return False
        return self.score(answer, task) >= self.threshold

    def score(self, answer: str | None, task: Task) -> float:
        entry = task.meta["rg_entry"]
        return float(self._scorer(str(task.meta["rg_dataset"])).score_answer(answer, dict(entry)))

    def _scorer(self, dataset: str) -> Any:
        if dataset not in self._scorers:
            from puppeteer.tasks.packages import import_rg

            self._scorers[dataset] = import_rg().create_dataset(dataset, size=1, seed=0)
        return self._scorers[dataset]


# --------------------------------------------------------------------------- registry


def default_graders() -> dict[str, Grader]:
    """A fresh name -> grader mapping with every built-in grader."""
    graders: tuple[Grader, ...] = (
        NumericGrader(),
        MathGrader(),
        LetterGrader(),
        CodeGrader(),
        ReasoningGymGrader(),
        ExactGrader(),
    )
    return {g.name: g for g in graders}


def grade_text(task: Task, text: str, graders: Mapping[str, Grader] | None = None) -> tuple[str | None, bool]:
    """Extract the answer from ``text`` with the task's grader and grade it."""
    table = graders if graders is not None else default_graders()
    try:
        grader = table[task.grader]
    except KeyError:
        raise KeyError(f"unknown grader {task.grader!r}; known: {', '.join(sorted(table))}") from None
    answer = grader.extract(text, task)
    return answer, grader.grade(answer, task)
