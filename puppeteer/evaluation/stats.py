"""Paired statistics for comparing two policies on the same items (scipy underneath).

- :func:`wilson_interval`: a binomial proportion's Wilson score interval.
- :func:`mcnemar_exact`: the exact McNemar test, a two-sided binomial test on the discordant pairs.
- :func:`paired_bootstrap`: a bootstrap confidence interval for the mean of paired differences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

Z95 = 1.959963984540054


def confidence_from_z(z: float) -> float:
    """The two-sided confidence level of a normal quantile (1.96 -> 0.95)."""
    return float(2.0 * stats.norm.cdf(z) - 1.0)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; ``(0, 1)`` when ``n == 0``."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in 0..{n}, got {successes}")
    ci = stats.binomtest(int(successes), int(n)).proportion_ci(
        confidence_level=confidence_from_z(z), method="wilson"
    )
    low = 0.0 if successes == 0 else max(0.0, float(ci.low))  # the bounds are exact at 0 and n
    high = 1.0 if successes == n else min(1.0, float(ci.high))
    return low, high


@dataclass(frozen=True)
class McNemar:
    """Paired accuracy comparison of A and B on the same items."""

    n: int
    both: int  # both correct
    only_a: int  # A correct, B wrong (discordant)
    only_b: int  # B correct, A wrong (discordant)
    neither: int
    p_value: float

    @property
    def diff(self) -> float:
        """Accuracy of B minus accuracy of A."""
        return (self.only_b - self.only_a) / self.n if self.n else 0.0


def mcnemar_exact(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> McNemar:
    """Exact McNemar test: under H0 a discordant pair favours A or B with probability 1/2."""
    a = np.asarray(a_correct, dtype=bool)
    b = np.asarray(b_correct, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.shape} vs {b.shape}")
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    discordant = only_a + only_b
    p = 1.0 if discordant == 0 else float(stats.binomtest(only_b, discordant, 0.5).pvalue)
    return McNemar(
        n=int(a.size),
        both=int((a & b).sum()),
        only_a=only_a,
        only_b=only_b,
        neither=int((~a & ~b).sum()),
        p_value=p,
    )


@dataclass(frozen=True)
class PairedDiff:
    """Mean of B - A over items with a bootstrap confidence interval."""

    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    confidence: float


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> PairedDiff:
    """Bootstrap (BCa where defined, else percentile) interval of mean(b - a), resampling items."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired samples differ in length: {x.shape} vs {y.shape}")
    d = y - x
    if d.size == 0:
        raise ValueError("no pairs")
    if d.size == 1 or np.ptp(d) == 0:  # no spread: every resample has the same mean
        m = float(d.mean())
        return PairedDiff(float(x.mean()), float(y.mean()), m, m, m, confidence)
    rng = np.random.default_rng(seed)
    try:
        res = stats.bootstrap(
            (d,),
            np.mean,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method="BCa",
            random_state=rng,
        )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (np.isfinite(low) and np.isfinite(high)):
            raise ValueError("BCa undefined")
    except ValueError:
        res = stats.bootstrap(
            (d,),
            np.mean,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method="percentile",
            random_state=rng,
        )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return PairedDiff(float(x.mean()), float(y.mean()), float(d.mean()), low, high, confidence)
