"""Analytics over runs: the trajectory store (:func:`load`), A/B tests, sweeps, emergent graphs."""

from puppeteer.analytics.store import TrajectoryStore, load

__all__ = ["TrajectoryStore", "load"]
