"""The policy contract shared by learned policies and baselines in step mode."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class StepPolicy(Protocol):
    """Chooses the next action (agent id or the Terminator) from a step-mode observation."""

    name: str

    def reset(self, task_id: str) -> None:
        """Called at the start of each episode."""
        ...

    def act(self, obs: dict[str, Any], rng: np.random.Generator) -> int: ...
