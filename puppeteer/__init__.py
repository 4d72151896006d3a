"""puppeteer: learned orchestration of LLM agents.

Importing the package registers the Gymnasium environment ``Conductor-v0``
(also reachable as ``gym.make("puppeteer:Conductor-v0")``).
"""

from __future__ import annotations

from puppeteer.envs.registration import register_envs

__version__ = "0.1.0"
__all__ = ["__version__", "register_envs"]

register_envs()
