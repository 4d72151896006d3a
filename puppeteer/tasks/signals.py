"""What the answers so far say, as numbers a step-wise router can condition on.

A cascade (call a cheap agent, stop when its answer looks trustworthy, escalate otherwise) needs to
know more about the earlier steps than a sentence embedding of their text conveys: whether an answer
was extracted at all (a program that crashed prints nothing), whether it is a whole number (what
GSM8K-style word problems expect), whether independent agents agree, and whether the latest answer
passes what the question itself shows (a HumanEval function run on its docstring's examples:
:mod:`puppeteer.tasks.visible`). :func:`answer_signals` turns the extracted answers of an episode's
steps (and those checks' verdicts) into a fixed vector in ``[0, 1]``, which the env puts in every
step-mode observation (``obs["signals"]``) and the puppeteer policy can read (``PolicyConfig.signals``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

import numpy as np

SIGNAL_NAMES: tuple[str, ...] = (
    "last_answered",  # the latest step's answer was extracted
    "last_silent",  # the latest step gave no answer (0 before any step: a state of its own)
    "last_integer",  # the latest step's answer is a whole number
    "answered_share",  # steps with an answer / steps so far
    "top_share",  # votes of the majority answer / steps so far
    "agreement",  # two or more steps gave the majority answer
    "last_passed_check",  # the latest answer passes the question's visible examples (code items)
    "last_failed_check",  # it fails them, or gave no answer where there were some to run
)
N_SIGNALS = len(SIGNAL_NAMES)
LAST_ANSWERED = SIGNAL_NAMES.index("last_answered")


@functools.lru_cache(maxsize=65_536)  # answers repeat: a few per item, read at every env step
def is_integer(answer: str) -> bool:
    """Whether an extracted answer is a whole number (``"7"``, ``"-3"``, ``"1,200"``, ``"9.0"``)."""
    try:
        value = float(answer.replace(",", "").strip())
    except ValueError:
        return False
    return math.isfinite(value) and value == int(value)


def answer_signals(answers: Sequence[str | None], checks: Sequence[bool | None] = ()) -> np.ndarray:
    """The :data:`SIGNAL_NAMES` of the steps' extracted answers (``None``: no answer) and of the
    visible checks' verdicts on them (aligned with ``answers``; ``None`` or missing: nothing to
    check), float32."""
    if not answers:
        return np.zeros(N_SIGNALS, dtype=np.float32)
    last = answers[-1]
    check = checks[len(answers) - 1] if len(checks) >= len(answers) else None
    counts: dict[str, int] = {}  # a plain dict: a handful of answers, counted at every env step
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    given = sum(counts.values())
    top = max(counts.values()) if counts else 0
    n = len(answers)
    signals = (
        last is not None,
        last is None,
        last is not None and is_integer(last),
        given / n,
        top / n,
        top >= 2,
        check is True,
        check is False,
    )
    return np.array(signals, dtype=np.float32)


class AnswerTally:
    """:func:`answer_signals` of a growing list of answers, kept up to date in O(1) per answer (the env
    adds each step's answer once instead of recounting every answer at every step)."""

    __slots__ = ("_check", "_counts", "_given", "_last", "_n", "_top", "_vectors")

    def __init__(self, vectors: dict[tuple[int, ...], np.ndarray] | None = None) -> None:
        self._counts: dict[str, int] = {}
        self._n = self._given = self._top = 0
        self._last: str | None = None
        self._check: bool | None = None
        # the vectors made so far, by what they are made of (a few hundred at most: n <= max_steps);
        # pass one dict to every tally of an env and each vector is built once
        self._vectors = vectors if vectors is not None else {}

    @property
    def n(self) -> int:
        """How many answers (``None`` included) were added."""
        return self._n

    def add(self, answer: str | None, check: bool | None = None) -> None:
        """One more step's answer, and the visible check's verdict on it (None: nothing to check)."""
        self._n += 1
        self._last = answer
        self._check = check
        if answer is not None:
            count = self._counts.get(answer, 0) + 1
            self._counts[answer] = count
            self._given += 1
            if count > self._top:
                self._top = count

    def signals(self) -> np.ndarray:
        """``answer_signals`` of the answers added so far."""
        n, last, top = self._n, self._last, self._top
        integer = last is not None and is_integer(last)
        check = self._check
        key = (n, last is not None, integer, self._given, top, -1 if check is None else int(check))
        vector = self._vectors.get(key)
        if vector is None:
            if not n:
                vector = np.zeros(N_SIGNALS, dtype=np.float32)
            else:
                answered = last is not None
                signals = (
                    answered,
                    not answered,
                    integer,
                    self._given / n,
                    top / n,
                    top >= 2,
                    check is True,
                    check is False,
                )
                vector = np.array(signals, dtype=np.float32)
            self._vectors[key] = vector
        return vector.copy()


_SILENT, _INTEGER, _FAILED = (
    SIGNAL_NAMES.index(n) for n in ("last_silent", "last_integer", "last_failed_check")
)

TRIGGERS: Mapping[str, Callable[[np.ndarray], bool]] = MappingProxyType(
    {
        "always": lambda s: True,
        "silent": lambda s: s[_SILENT] > 0.5,
        "not-integer": lambda s: s[_INTEGER] < 0.5,
        "failed-check": lambda s: s[_FAILED] > 0.5,
    }
)
"""Escalation conditions on the answer signals after a call: ``silent`` (no answer extracted),
``not-integer`` (not a whole number), ``failed-check`` (it fails what the question shows), ``always``."""


def fires(trigger: str, answer: str | None, check: bool | None = None) -> bool:
    """Whether ``trigger`` fires on one answer (and the visible check's verdict on it)."""
    return TRIGGERS[trigger](answer_signals([answer], [check]))
