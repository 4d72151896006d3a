"""The simulated backend (``sim``): seeded workers whose correctness, tokens and price follow a declared
skill table (docs/sim.md).

- :mod:`~puppeteer.backends.sim.backend`: :class:`SimBackend`, who is right on which item, and what
  a call costs;
- :mod:`~puppeteer.backends.sim.answers`: items, canonical answers, distractors and the text of a
  simulated completion;
- :mod:`~puppeteer.backends.sim.difficulty`: the part of an item's difficulty that its question shows.

The public names of the three are re-exported here.
"""

from __future__ import annotations

from puppeteer.backends.sim.answers import SimItem, display_answer, distractors, normalize_answer
from puppeteer.backends.sim.backend import (
    DEFAULT_PATTERN_EFFECTS,
    DEFAULT_TOKEN_MULTIPLIERS,
    DEFAULT_TOOL_EFFECTS,
    KINDS,
    SimBackend,
    SimOutcome,
    SimParams,
    SkillError,
    expected_accuracy,
    expected_call_cost,
    oracle_agent,
    shifted,
    skill,
    tokens_mean,
)
from puppeteer.backends.sim.difficulty import DifficultyModel, conditional_accuracy, visible_feature

__all__ = [
    "DEFAULT_PATTERN_EFFECTS",
    "DEFAULT_TOKEN_MULTIPLIERS",
    "DEFAULT_TOOL_EFFECTS",
    "KINDS",
    "DifficultyModel",
    "SimBackend",
    "SimItem",
    "SimOutcome",
    "SimParams",
    "SkillError",
    "conditional_accuracy",
    "display_answer",
    "distractors",
    "expected_accuracy",
    "expected_call_cost",
    "normalize_answer",
    "oracle_agent",
    "shifted",
    "skill",
    "tokens_mean",
    "visible_feature",
]
