"""Which agents an episode may use: a fixed subset by name/id, or a random k of n."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from puppeteer.pool import Pool


def resolve_available(pool: Pool, refs: Sequence[str | int]) -> np.ndarray:
    """Boolean mask over the pool's agents (no Terminator) from agent names or ids."""
    mask = np.zeros(len(pool), dtype=bool)
    for ref in refs:
        if isinstance(ref, str) and not ref.strip().isdigit():
            i = pool.index(ref.strip())
            if i == pool.terminator_id:
                raise ValueError("the terminator is always available; list agents only")
        else:
            i = int(ref)
            if not 0 <= i < len(pool):
                raise ValueError(f"agent id {i} is not in pool {pool.name!r} (ids 0..{len(pool) - 1})")
        mask[i] = True
    if not mask.any():
        raise ValueError("an episode needs at least one available agent")
    return mask


def draw_subset(rng: np.random.Generator, allowed: np.ndarray, k: int) -> np.ndarray:
    """A boolean mask of ``k`` agents drawn without replacement from the ``allowed`` ones."""
    candidates = np.flatnonzero(allowed)
    if not 1 <= k <= len(candidates):
        raise ValueError(f"k must be in 1..{len(candidates)} (the allowed agents), got {k}")
    mask = np.zeros(len(allowed), dtype=bool)
    mask[rng.choice(candidates, size=k, replace=False)] = True
    return mask
