"""Gymnasium registration (gymnasium >= 1.0 ignores entry-point plugins, so we register on import)."""

from __future__ import annotations

import gymnasium as gym

ENV_ID = "Conductor-v0"


def register_envs() -> None:
    """Register ``Conductor-v0``; idempotent."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="puppeteer.envs.env:ConductorEnv", disable_env_checker=False)
