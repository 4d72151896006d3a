"""The range of prices of cost (lambda) that one conditioned step policy is trained over.

A policy trained with ``lam_range=[LOW, HIGH]`` sees each episode's lambda as an input and is
used at any lambda in the range. :class:`LamRange` is the one definition of how lambda
is drawn for training, where an evaluation grid lies, how a lambda outside the range is clamped and
how lambda enters a network.

The draw is **log-uniform on lambda + s**, with the shift ``s = 0`` when ``LOW > 0`` (plain
log-uniform) and ``s = HIGH / 100`` when ``LOW = 0``:

* The decisions that change with lambda sit where ``lambda = (gain in expected correctness) /
  (extra cost)`` for some pair of agents. With prices that differ by orders of magnitude those
  thresholds are spread over orders of magnitude too, so every factor of lambda deserves the same
  number of episodes; a uniform draw on [0.01, 0.5] would put 80% of them above 0.1.
* ``log 0`` does not exist. The shift keeps one formula for ``LOW = 0``: ``[0, HIGH/100]`` then
  gets the mass of one more factor of two (about 15% of the draws for any HIGH), so the policy still
  learns the zero-price end, and below ``HIGH/100`` the cost term is too small to change a choice.

The network input (:meth:`LamRange.features`) is two numbers: ``lambda / HIGH`` (the return is
linear in lambda) and the position on the draw's log scale mapped to [-1, 1] (where the draws and
the decision thresholds lie). Both stay in [-1, 1] inside the range.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from puppeteer.utils.checks import number

log = logging.getLogger(__name__)

N_LAM_FEATURES = 2
ZERO_SHIFT = 0.01  # with LOW = 0 the log scale is that of lambda + ZERO_SHIFT * HIGH


@dataclass(frozen=True)
class LamRange:
    """Lambdas ``low`` to ``high`` (``0 <= low < high``), drawn log-uniformly (shifted when ``low = 0``)."""

    low: float
    high: float

    def __post_init__(self) -> None:
        low = number("lam_range[0]", self.low, low=0.0)
        high = number("lam_range[1]", self.high, low=0.0)
        if not low < high:
            raise ValueError(f"lam_range=[{low:g}, {high:g}]: needs low < high")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @classmethod
    def of(cls, value: LamRange | Sequence[float] | None) -> LamRange | None:
        """A range from ``[low, high]`` (a list from Hydra, a tuple); None stays None."""
        if value is None or isinstance(value, LamRange):
            return value
        if isinstance(value, str | bytes) or not hasattr(value, "__len__") or len(value) != 2:
            raise ValueError(f"lam_range={value!r}: give two numbers [low, high]")
        return cls(value[0], value[1])

    @property
    def bounds(self) -> tuple[float, float]:
        return (self.low, self.high)

    @property
    def shift(self) -> float:
        """``s`` of the log scale ``log(lambda + s)``: 0, or ``ZERO_SHIFT * high`` when ``low`` is 0."""
        return 0.0 if self.low > 0 else ZERO_SHIFT * self.high

    def _log(self, lam: float) -> float:
        return math.log(lam + self.shift)

    def _unlog(self, y: float) -> float:
        return min(max(math.exp(y) - self.shift, self.low), self.high)

    def position(self, lam: float) -> float:
        """Where ``lam`` (clamped) lies on the log scale: 0 at ``low``, 1 at ``high``."""
        lo, hi = self._log(self.low), self._log(self.high)
        return (self._log(min(max(lam, self.low), self.high)) - lo) / (hi - lo)

    def sample(self, rng: np.random.Generator) -> float:
        """One lambda, log-uniform on ``lambda + shift`` (one uniform draw from ``rng``)."""
        lo, hi = self._log(self.low), self._log(self.high)
        return self._unlog(lo + (hi - lo) * float(rng.random()))

    def grid(self, n: int) -> tuple[float, ...]:
        """``n`` lambdas evenly spaced on the draw's log scale, both ends included."""
        if n < 1:
            raise ValueError(f"a lambda grid needs at least one point, got {n}")
        if n == 1:
            return (self._unlog((self._log(self.low) + self._log(self.high)) / 2),)
        lo, hi = self._log(self.low), self._log(self.high)
        inner = (self._unlog(lo + (hi - lo) * k / (n - 1)) for k in range(1, n - 1))
        return (self.low, *inner, self.high)  # the ends exactly, not through exp(log(.))

    def contains(self, lam: float) -> bool:
        return self.low <= lam <= self.high

    def clamp(self, lam: float, *, warn: bool = True) -> float:
        """``lam`` moved into the range; a warning is logged when it had to move."""
        clamped = min(max(float(lam), self.low), self.high)
        if warn and clamped != lam:
            log.warning(
                "lambda %g is outside the policy's trained range [%g, %g]: using %g",
                lam,
                self.low,
                self.high,
                clamped,
            )
        return clamped

    def features(self, lam: float) -> np.ndarray:
        """The network's view of ``lam`` (clamped, no warning): ``[lam / high, 2 * position - 1]``."""
        x = min(max(float(lam), self.low), self.high)
        return np.array([x / self.high, 2.0 * self.position(x) - 1.0], dtype=np.float32)


__all__ = ["N_LAM_FEATURES", "ZERO_SHIFT", "LamRange"]
