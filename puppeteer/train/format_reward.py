"""A graded format score for conductor completions: partial credit on the way to a parsable workflow.

The conductor reward is 0 for every unparsable workflow, so a small conductor whose samples
all fail to parse gives GRPO groups with identical rewards and no gradient. This score grades
how close a completion is to the three-list format, in quarters: one for each of
``model_id``, ``subtasks``, ``access_list`` present as a closed Python literal list, and one
when the three have the same length, between 1 and ``max_steps``. Added to the conductor
reward with a small weight (``format_reward_weight``), it gives such groups a gradient toward
the format; the held-out numbers (parse rate, accuracy) stay those of the conductor reward alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from puppeteer.envs.workflow import NAMES, _candidates
from puppeteer.integrations.trl import completion_text
from puppeteer.utils.pyparse import literal_python


def _length(src: str) -> int | None:
    try:
        value = literal_python(src)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return len(value) if isinstance(value, list) else None


def format_score(text: str, max_steps: int = 5) -> float:
    """0, 0.25, 0.5, 0.75 or 1: the three lists present as literals (a quarter each) and of one length."""
    found: dict[str, int | None] = {}
    for _, name, src in _candidates(text):
        if name not in found or found[name] is None:
            found[name] = _length(src)
    lengths = [found.get(n) for n in NAMES]
    score = sum(n is not None for n in lengths) / 4
    if all(n is not None for n in lengths) and len(set(lengths)) == 1 and 1 <= (lengths[0] or 0) <= max_steps:
        score += 0.25
    return score


class FormatReward:
    """A ``reward_funcs`` entry for trl: :func:`format_score` of ``answer_prefix`` + each completion."""

    __name__ = "format"

    def __init__(self, answer_prefix: str = "", max_steps: int = 5) -> None:
        self.answer_prefix = answer_prefix
        self.max_steps = max_steps

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str | Sequence[Mapping[str, Any]]], **kwargs: Any
    ) -> list[float]:
        return [format_score(self.answer_prefix + completion_text(c), self.max_steps) for c in completions]
