"""Which agents an episode may use: a fixed subset by name/id, or a random k of n."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from puppeteer.agents.pool import Pool


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


def draw_subset(
    rng: np.random.Generator,
    allowed: np.ndarray,
    k: int,
    excluded: frozenset[frozenset[int]] = frozenset(),
) -> np.ndarray:
    """A boolean mask of ``k`` agents drawn without replacement from the ``allowed`` ones, never one
    of the ``excluded`` subsets (agent ids): held out of training, each drawn subset is uniform over
    the rest."""
    candidates = np.flatnonzero(allowed)
    if not 1 <= k <= len(candidates):
        raise ValueError(f"k must be in 1..{len(candidates)} (the allowed agents), got {k}")
    possible = math.comb(len(candidates), k)
    allowed_ids = frozenset(candidates.tolist())
    blocked = sum(1 for s in excluded if len(s) == k and s <= allowed_ids)
    if blocked >= possible:
        raise ValueError(f"every {k}-of-{len(candidates)} subset is held out: nothing left to draw")
    while True:  # rejection: at least one subset in C(n, k) is left
        chosen = rng.choice(candidates, size=k, replace=False)
        if frozenset(int(i) for i in chosen) not in excluded:
            break
    mask = np.zeros(len(allowed), dtype=bool)
    mask[chosen] = True
    return mask


def holdout_subsets(n_agents: int, k: int, count: int, seed: int = 0) -> tuple[tuple[int, ...], ...]:
    """``count`` distinct k-of-n subsets (sorted agent ids), chosen by ``seed``: the subsets to keep
    out of training (``EnvConfig.holdout_subsets``) and to evaluate on afterwards."""
    if not 1 <= k <= n_agents:
        raise ValueError(f"k must be in 1..{n_agents}, got {k}")
    everything = list(itertools.combinations(range(n_agents), k))
    if not 0 <= count < len(everything):
        raise ValueError(f"count must be in 0..{len(everything) - 1} (leave some {k}-subsets to train on)")
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(everything), size=count, replace=False)
    return tuple(everything[int(i)] for i in sorted(picks))
