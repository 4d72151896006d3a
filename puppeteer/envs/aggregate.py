"""Turning the answers of several steps into one final answer."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

Aggregator = Callable[[Sequence[str | None]], str | None]


def majority_vote(answers: Sequence[str | None]) -> str | None:
    """The most frequent extracted answer; ``None`` answers do not vote.

    Tie-break: among equally frequent answers, the one given most recently wins
    (later agents have seen more of the discussion).
    """
    counts: dict[str, int] = {}  # a plain dict: a handful of answers, counted once per env step
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    for answer in reversed(answers):
        if answer is not None and counts[answer] == best:
            return answer
    raise AssertionError("unreachable")


def last_answer(answers: Sequence[str | None]) -> str | None:
    """The last extracted answer (the final step's output, skipping steps with none)."""
    for answer in reversed(answers):
        if answer is not None:
            return answer
    return None


AGGREGATORS: Mapping[str, Aggregator] = MappingProxyType({"vote": majority_vote, "last": last_answer})


def aggregator(name: str) -> Aggregator:
    try:
        return AGGREGATORS[name]
    except KeyError:
        raise KeyError(f"unknown aggregator {name!r}; known: {', '.join(AGGREGATORS)}") from None
