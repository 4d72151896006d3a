"""The field's cost-quality metrics for a router swept over its cost knob.

A router's sweep is a set of points (mean cost per query, mean quality) on one held-out split.

- :func:`hull`: the non-decreasing concave upper envelope of the points (any point between two is
  reached by routing a share of queries by each setting); to the right of its best point it is flat,
  to the left of its cheapest point it is 0 (the router cannot spend less).
- :func:`aiq`: RouterBench's average improvement in quality (arXiv 2403.12031): the area under that
  hull over the cost range ``[c_lo, c_hi]``, with cost normalised to [0, 1] (so a router at quality q
  everywhere scores q).
- :func:`apgr`: RouteLLM's average performance gap recovered (arXiv 2406.18665) with cost in place of
  the share of strong-model calls: the mean over ``[c_weak, c_strong]`` of
  ``(hull(c) - q_weak) / (q_strong - q_weak)``.
- :func:`cost_to_reach`: the least cost on the hull at which the router recovers a share ``x`` of the
  weak-to-strong gap (RouteLLM's CPT(50%), CPT(80%), ...); None if it never does.
- :func:`gap_closed`: the share of the gap from the best single model to the per-query oracle that the
  router closes at the best single model's cost.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Hull:
    """Vertices (increasing cost, non-decreasing quality) of a concave upper envelope."""

    cost: tuple[float, ...]
    quality: tuple[float, ...]

    def __call__(self, c: float | np.ndarray) -> np.ndarray:
        c = np.asarray(c, dtype=float)
        q = np.interp(c, self.cost, self.quality, left=0.0, right=self.quality[-1])
        return np.where(c < self.cost[0] - 1e-15, 0.0, q)


def hull(costs: Sequence[float], qualities: Sequence[float]) -> Hull:
    """The non-decreasing concave upper envelope of the points ``(costs[i], qualities[i])``."""
    if not len(costs):
        raise ValueError("a hull needs at least one point")
    pts = sorted(zip(map(float, costs), map(float, qualities), strict=True), key=lambda p: (p[0], -p[1]))
    # non-decreasing: drop every point that a cheaper point matches or beats
    kept: list[tuple[float, float]] = []
    for c, q in pts:
        if not kept or q > kept[-1][1]:
            kept.append((c, q))
    upper: list[tuple[float, float]] = []
    for p in kept:  # monotone chain, upper half
        while len(upper) >= 2:
            (c1, q1), (c2, q2) = upper[-2], upper[-1]
            if (c2 - c1) * (p[1] - q1) - (q2 - q1) * (p[0] - c1) >= 0:  # upper[-1] on or below the chord
                upper.pop()
            else:
                break
        upper.append(p)
    return Hull(tuple(c for c, _ in upper), tuple(q for _, q in upper))


def _mean_over(h: Hull, lo: float, hi: float) -> float:
    """The hull's mean over ``[lo, hi]``, exactly (it is linear between vertices, 0 left of the first)."""
    if hi <= lo:
        return float(h(lo))
    xs = sorted({lo, hi, *(c for c in h.cost if lo < c < hi)})
    area = 0.0
    for a, b in itertools.pairwise(xs):
        if b <= h.cost[0]:
            continue  # left of the router's cheapest point: 0
        area += (float(h(a)) + float(h(b))) / 2 * (b - a)
    return area / (hi - lo)


def aiq(h: Hull, c_lo: float, c_hi: float) -> float:
    """Area under the hull over ``[c_lo, c_hi]``, cost normalised to [0, 1]."""
    return _mean_over(h, c_lo, c_hi)


def apgr(h: Hull, weak: tuple[float, float], strong: tuple[float, float]) -> float:
    """Mean performance gap recovered over costs from the weak model's to the strong model's;
    ``weak`` and ``strong`` are (cost, quality)."""
    (cw, qw), (cs, qs) = weak, strong
    if qs <= qw:
        raise ValueError(f"the strong model ({qs:.4f}) must beat the weak one ({qw:.4f})")
    lo, hi = min(cw, cs), max(cw, cs)
    return (_mean_over(h, lo, hi) - qw) / (qs - qw)


def cost_to_reach(h: Hull, target: float) -> float | None:
    """The least cost at which the hull reaches quality ``target`` (None if it never does)."""
    cs, qs = np.array(h.cost), np.array(h.quality)
    if qs[-1] < target - 1e-12:
        return None
    k = int(np.argmax(qs >= target - 1e-12))
    if k == 0:
        return float(cs[0])
    c0, c1, q0, q1 = cs[k - 1], cs[k], qs[k - 1], qs[k]
    return float(c0 + (target - q0) * (c1 - c0) / (q1 - q0))


def gap_closed(h: Hull, best: tuple[float, float], oracle_quality: float) -> float:
    """(hull at the best single model's cost - its quality) / (oracle quality - its quality)."""
    cb, qb = best
    if oracle_quality <= qb:
        return 0.0
    return float((h(cb) - qb) / (oracle_quality - qb))
