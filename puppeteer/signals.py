"""What the answers so far say, as numbers a step-wise router can condition on.

A cascade (call a cheap agent, stop when its answer looks trustworthy, escalate otherwise) needs to
know more about the earlier steps than a sentence embedding of their text conveys: whether an answer
was extracted at all (a program that crashed prints nothing), whether it is a whole number (what
GSM8K-style word problems expect), and whether independent agents agree. :func:`answer_signals`
turns the extracted answers of an episode's steps into a fixed vector in ``[0, 1]``, which the env
puts in every step-mode observation (``obs["signals"]``) and the puppeteer policy can read
(``PolicyConfig.signals``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

SIGNAL_NAMES: tuple[str, ...] = (
    "last_answered",  # the latest step's answer was extracted
    "last_silent",  # the latest step gave no answer (0 before any step: a state of its own)
    "last_integer",  # the latest step's answer is a whole number
    "answered_share",  # steps with an answer / steps so far
    "top_share",  # votes of the majority answer / steps so far
    "agreement",  # two or more steps gave the majority answer
)
N_SIGNALS = len(SIGNAL_NAMES)
LAST_ANSWERED = SIGNAL_NAMES.index("last_answered")


def is_integer(answer: str) -> bool:
    """Whether an extracted answer is a whole number (``"7"``, ``"-3"``, ``"1,200"``, ``"9.0"``)."""
    try:
        value = float(answer.replace(",", "").strip())
    except ValueError:
        return False
    return math.isfinite(value) and value == int(value)


def answer_signals(answers: Sequence[str | None]) -> np.ndarray:
    """The :data:`SIGNAL_NAMES` of the steps' extracted answers (``None``: no answer), float32."""
    if not answers:
        return np.zeros(N_SIGNALS, dtype=np.float32)
    last = answers[-1]
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
    )
    return np.array(signals, dtype=np.float32)
