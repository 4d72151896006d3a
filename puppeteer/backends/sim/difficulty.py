"""Item difficulty that the question shows: the simulator's visible part of an item's latent.

The simulator draws an item's latent difficulty ``z`` (standard normal, shared by every worker).
With a :class:`DifficultyModel`, part of ``z`` is a score ``d`` computed from what a router can read,
the question's length (:func:`visible_feature`)::

    z = sqrt(w) * d + sqrt(1 - w) * u,   d = Phi^-1(F_domain(log chars)),   u ~ N(0, 1) (hash)

``F_domain`` is the feature's empirical distribution on the domain's items (reference quantiles
stored in the pool file; ``rho`` may also be set per domain), so ``d`` is standard normal over the
domain and every worker's marginal accuracy stays its declared skill. ``w`` (the visible share,
per domain) is fitted on real outcomes
(experiments/sim-routing/sim_calibration.py). Given ``d``, a worker whose marginal accuracy is ``p``
answers correctly with probability (:func:`conditional_accuracy`)::

    Phi((Phi^-1(p) - sqrt(rho * w) * d) / sqrt(1 - rho * w))

which is what the per-item optimum (:mod:`puppeteer.analytics.optimum`) reads. Items without a
visible score (a domain the model has no quantiles for) keep the hidden latent alone.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from types import MappingProxyType
from typing import Any

import numpy as np

_STD_NORMAL = NormalDist()


def visible_feature(question: str) -> float:
    """The visible difficulty feature of a question: the natural log of its length in characters."""
    return math.log(max(len(question), 1))


@dataclass(frozen=True)
class DifficultyModel:
    """Per domain: the visible feature's reference quantiles and the share of the latent it explains."""

    quantiles: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: MappingProxyType({}))
    visible: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    rho: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # per-domain rho
    _grids: Mapping[str, tuple[np.ndarray, np.ndarray]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, values in (("visible", self.visible), ("rho", self.rho)):
            for domain, v in values.items():
                if not 0.0 <= float(v) < 1.0:
                    raise ValueError(f"difficulty.{name}[{domain!r}] must be in [0, 1), got {v}")
        for domain, q in self.quantiles.items():
            if len(q) < 2 or any(b < a for a, b in itertools.pairwise(q)):
                raise ValueError(f"difficulty.quantiles[{domain!r}] must be at least 2 non-decreasing values")
        # each domain's CDF on its unique quantile values (ties take their mean probability), computed
        # once: score() runs for every item and agent
        object.__setattr__(self, "_grids", {d: _cdf_grid(q) for d, q in self.quantiles.items()})

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> DifficultyModel | None:
        """From a pool file's ``backend_options.sim.difficulty`` mapping (None: no visible difficulty)."""
        if not options:
            return None
        unknown = sorted(set(options) - {"quantiles", "visible", "rho"})
        if unknown:
            raise ValueError(
                f"unknown difficulty option(s) {', '.join(unknown)}; known: quantiles, visible, rho"
            )
        quantiles = {
            str(k): tuple(float(x) for x in v) for k, v in dict(options.get("quantiles") or {}).items()
        }
        visible = {str(k): float(v) for k, v in dict(options.get("visible") or {}).items()}
        missing = sorted(set(visible) - set(quantiles))
        if missing:
            raise ValueError(
                f"difficulty: domain(s) {', '.join(missing)} have a visible share but no quantiles"
            )
        rho = {str(k): float(v) for k, v in dict(options.get("rho") or {}).items()}
        return cls(MappingProxyType(quantiles), MappingProxyType(visible), MappingProxyType(rho))

    @classmethod
    def fit_quantiles(
        cls, features: Mapping[str, Sequence[float]], n: int = 21
    ) -> dict[str, tuple[float, ...]]:
        """Reference quantiles (``n`` equally spaced probabilities, 0 to 1) of each domain's features."""
        probs = np.linspace(0.0, 1.0, n)
        return {
            d: tuple(round(float(x), 4) for x in np.quantile(np.asarray(v, float), probs))
            for d, v in features.items()
        }

    def rho_for(self, domain: str, default: float) -> float:
        """The domain's share of the correctness latent that is item difficulty (else ``default``)."""
        return float(self.rho.get(domain, default))

    def share(self, domain: str) -> float:
        return float(self.visible.get(domain, 0.0)) if domain in self.quantiles else 0.0

    def score(self, domain: str, x: float | None) -> float | None:
        """The visible score ``d`` (standard normal over the domain), None when it cannot be computed."""
        grid = self._grids.get(domain)
        if grid is None or x is None:
            return None
        xs, ps = grid
        if len(xs) == 1:
            return 0.0
        f = float(np.interp(x, xs, ps))
        eps = 0.5 / len(self.quantiles[domain])
        return _STD_NORMAL.inv_cdf(min(max(f, eps), 1.0 - eps))

    def latent(self, domain: str, x: float | None, hidden: float) -> tuple[float, float | None]:
        """The item's latent ``z`` from its visible feature and its hidden standard-normal draw; and ``d``."""
        d = self.score(domain, x)
        w = self.share(domain)
        if d is None or w == 0.0:
            return hidden, d
        return math.sqrt(w) * d + math.sqrt(1.0 - w) * hidden, d


def _cdf_grid(q: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The unique quantile values and the mean probability each stands for (equally spaced, 0 to 1)."""
    probs = np.linspace(0.0, 1.0, len(q))
    xs, inverse = np.unique(np.asarray(q, dtype=float), return_inverse=True)
    return xs, np.array([probs[inverse == i].mean() for i in range(len(xs))])


def conditional_accuracy(p: float, rho: float, w: float, d: float | None) -> float:
    """P(correct | visible score d) for a worker of marginal accuracy ``p`` (see the module docstring)."""
    if d is None or w == 0.0 or rho == 0.0 or p <= 0.0 or p >= 1.0:
        return p
    s2 = rho * w
    return _STD_NORMAL.cdf((_STD_NORMAL.inv_cdf(p) - math.sqrt(s2) * d) / math.sqrt(1.0 - s2))


__all__ = ["DifficultyModel", "conditional_accuracy", "visible_feature"]
