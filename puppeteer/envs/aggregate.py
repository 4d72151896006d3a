"""Turning the answers of several steps into one final answer.

One notion for both modes: the final answer is the ``last`` step's answer, the majority ``vote``
over the steps' answers, or (workflow mode) a step the plan names. ``FINAL_CHOICES`` are the env's
settings (``EnvConfig.aggregate``): ``plan`` lets the conductor's plan say (its optional ``final``
line), the last step's answer where it says nothing; ``cascade`` also lets it say
``final = 'cascade:TRIGGER'``: each step after the first runs only when the trigger
(:data:`puppeteer.tasks.signals.TRIGGERS`) fires on the answer before it, and the last step run answers.
"""

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


FINAL_CHOICES = ("last", "vote", "plan", "cascade")
PLAN_CHOICES = ("plan", "cascade")  # the settings under which a plan may name its final answer
PLAN_DEFAULT = "last"  # the final answer of a plan that names none under ``aggregate="plan"``
CASCADE = "cascade:"  # a plan's ``final = 'cascade:TRIGGER'``


def cascade_trigger(choice: str | int | None) -> str | None:
    """The trigger of a plan's ``cascade:TRIGGER`` final choice (None for any other choice)."""
    if isinstance(choice, str) and choice.startswith(CASCADE):
        return choice.removeprefix(CASCADE)
    return None


def final_answer(answers: Sequence[str | None], choice: str | int) -> str | None:
    """The final answer of steps whose answers are ``answers``: ``"last"``, ``"vote"``, or the answer
    of step ``choice`` (an index into ``answers``; None when that step extracted none); a cascade's
    answer is the last answer of the steps it ran."""
    if cascade_trigger(choice) is not None:
        choice = "last"
    if isinstance(choice, int):
        if not 0 <= choice < len(answers):
            raise IndexError(f"final step {choice} is not one of the {len(answers)} steps")
        return answers[choice]
    return aggregator(choice)(answers)


def choice_label(choice: str | int) -> str:
    """How a final answer was chosen, as recorded: ``last``, ``vote`` or ``step k``."""
    return f"step {choice}" if isinstance(choice, int) else choice


def aggregator(name: str) -> Aggregator:
    try:
        return AGGREGATORS[name]
    except KeyError:
        raise KeyError(f"unknown aggregator {name!r}; known: {', '.join(AGGREGATORS)}") from None
