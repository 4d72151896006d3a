"""The collapse watch: says, once, when a training run has settled on one agent for (nearly) every item.

A REINFORCE router that sends every item to one agent with near-zero entropy before half of its budget
has stopped exploring: whatever the rest of the run does, it can only refine that one choice. The watch
reads the trainer's own metrics (``train/top_first_share``, ``train/entropy``) and returns one line for
the log, so a user sees it without opening ``metrics.jsonl``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class CollapseWatch:
    """Thresholds of a collapse: the first action's top share, the entropy, the share of the budget."""

    top_share: float = 0.98
    entropy: float = 0.05
    before: float = 0.5

    def check(self, metrics: Mapping[str, float], episodes: int, budget: int) -> str | None:
        """One line if ``metrics`` (one update's) show a collapse before ``before`` of ``budget``."""
        share = metrics.get("train/top_first_share")
        entropy = metrics.get("train/entropy")
        if share is None or entropy is None or budget <= 0 or episodes > self.before * budget:
            return None
        if share < self.top_share or entropy > self.entropy:
            return None
        return (
            f"training collapsed onto one agent at episode {episodes:,} of {budget:,}: "
            f"{share:.0%} of first actions go to one agent, policy entropy {entropy:.3f}; "
            "raise trainer.entropy_coef or use trainer.first_step=all (docs/train-router.md)"
        )
