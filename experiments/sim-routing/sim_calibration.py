"""Fit the simulator's difficulty parameters on real outcomes, and compare real with simulated.

The simulator's correctness model (:mod:`puppeteer.backends.sim`, :mod:`~puppeteer.backends.sim.difficulty`)
is a random-effects probit: agent ``a`` answers item ``i`` correctly iff

    sqrt(rho) * z_i + sqrt(1 - rho) * e_ia < Phi^-1(p_a),   z_i = sqrt(w) * d_i + sqrt(1 - w) * u_i

with ``d_i`` the item's visible score (from its question's length), ``u_i`` and ``e_ia`` standard
normal. Given a shipped outcome table (every agent on the same items), :func:`fit_domain` finds
``rho`` (how much of an item's difficulty every agent shares) and ``w`` (how much of that the
question shows) by maximum likelihood on a grid, integrating ``u_i`` out by Gauss-Hermite
quadrature, with ``p_a`` fixed at each agent's observed accuracy; :func:`bootstrap` resamples items
for intervals. :func:`statistics` gives what a router's world depends on (pairwise agreement of
correctness, the per-item oracle, the majority vote's gain over its best member, accuracy by
difficulty tercile) so that a table and a simulation of it can be set side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

_N = NormalDist()
GRID = tuple(round(x, 2) for x in np.arange(0.0, 0.951, 0.05))


@dataclass(frozen=True)
class DomainOutcomes:
    """One domain of a table: items x agents correctness (every agent on every item) and visible scores."""

    domain: str
    agents: tuple[str, ...]
    items: tuple[str, ...]
    d: np.ndarray  # (items,) visible difficulty score, standard normal over the domain
    correct: np.ndarray  # (items, agents) bool

    @property
    def accuracy(self) -> np.ndarray:
        return self.correct.mean(axis=0)


@dataclass(frozen=True)
class Fit:
    domain: str
    rho: float
    w: float
    loglik: float
    n_items: int


def _thresholds(acc: np.ndarray, n_items: int) -> np.ndarray:
    # an agent right (or wrong) on every item would have an infinite threshold: shrink by half an item
    p = np.clip(acc, 0.5 / n_items, 1.0 - 0.5 / n_items)
    return np.array([_N.inv_cdf(float(x)) for x in p])


def loglik(rho: float, w: float, data: DomainOutcomes, nodes: int = 24) -> float:
    """Log-likelihood of the domain's table under (rho, w), each agent's threshold at its accuracy."""
    x, wts = np.polynomial.hermite_e.hermegauss(nodes)  # probabilists' Hermite: weight exp(-x^2/2)
    wts = wts / wts.sum()
    tau = _thresholds(data.accuracy, len(data.items))  # (A,)
    z = np.sqrt(w) * data.d[:, None] + np.sqrt(1.0 - w) * x[None, :]  # (I, Q)
    # P(correct | z) for each agent: Phi((tau - sqrt(rho) z) / sqrt(1 - rho))
    arg = (tau[None, None, :] - np.sqrt(rho) * z[:, :, None]) / np.sqrt(1.0 - rho)
    from scipy.special import log_ndtr

    c = data.correct[:, None, :]
    lp = np.where(c, log_ndtr(arg), log_ndtr(-arg)).sum(axis=2)  # (I, Q)
    m = lp.max(axis=1, keepdims=True)
    return float((m[:, 0] + np.log((np.exp(lp - m) * wts[None, :]).sum(axis=1))).sum())


def fit_domain(data: DomainOutcomes, grid: Sequence[float] = GRID) -> Fit:
    """Maximum likelihood (rho, w) on the grid."""
    best = max(((loglik(r, w, data), r, w) for r in grid for w in grid), key=lambda t: t[0])
    return Fit(data.domain, best[1], best[2], best[0], len(data.items))


def fit_pooled(tables: Sequence[DomainOutcomes], grid: Sequence[float] = GRID) -> Fit:
    """One (rho, w) for several domains (each agent keeps its own threshold per domain)."""
    best = max(((sum(loglik(r, w, t) for t in tables), r, w) for r in grid for w in grid), key=lambda t: t[0])
    return Fit("pooled", best[1], best[2], best[0], sum(len(t.items) for t in tables))


def resample(data: DomainOutcomes, rng: np.random.Generator) -> DomainOutcomes:
    idx = rng.integers(len(data.items), size=len(data.items))
    return DomainOutcomes(
        data.domain, data.agents, tuple(data.items[i] for i in idx), data.d[idx], data.correct[idx]
    )


def bootstrap(
    data: DomainOutcomes, n: int = 100, seed: int = 0, grid: Sequence[float] = GRID
) -> tuple[tuple[float, float], tuple[float, float]]:
    """95% percentile intervals of rho and w over item resamples."""
    rng = np.random.default_rng(seed)
    fits = [fit_domain(resample(data, rng), grid) for _ in range(n)]
    rhos, ws = np.array([f.rho for f in fits]), np.array([f.w for f in fits])
    return (
        (float(np.quantile(rhos, 0.025)), float(np.quantile(rhos, 0.975))),
        (float(np.quantile(ws, 0.025)), float(np.quantile(ws, 0.975))),
    )


def statistics(data: DomainOutcomes) -> dict[str, float]:
    """What routing depends on, from an items x agents correctness matrix."""
    c = data.correct.astype(float)
    n_agents = c.shape[1]
    pairs = [(i, j) for i in range(n_agents) for j in range(i + 1, n_agents)]
    agree = float(np.mean([np.mean(c[:, i] == c[:, j]) for i, j in pairs])) if pairs else float("nan")
    best = float(c.mean(axis=0).max())
    oracle = float(c.max(axis=1).mean())
    order = np.argsort(data.d)
    thirds = np.array_split(order, 3)
    by_bin = [float(c[idx].mean()) if len(idx) else float("nan") for idx in thirds]
    top3 = np.argsort(-c.mean(axis=0))[:3]
    vote = float((c[:, top3].sum(axis=1) >= 2).mean())  # a vote of the three best is right if 2 of 3 are
    return {
        "pairwise_agreement": agree,
        "best_agent": best,
        "oracle": oracle,
        "oracle_headroom": oracle - best,
        "vote_gain": vote - float(c[:, top3].mean(axis=0).max()),
        "acc_easy_third": by_bin[0],
        "acc_mid_third": by_bin[1],
        "acc_hard_third": by_bin[2],
    }


def simulate(
    data: DomainOutcomes, rho: float, w: float, draws: int = 200, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """The same statistics on tables drawn from the model (same items' d, agents' accuracies):
    per statistic, the mean and the 2.5% / 97.5% quantiles over ``draws`` simulated tables."""
    rng = np.random.default_rng(seed)
    tau = _thresholds(data.accuracy, len(data.items))
    rows = []
    n_items, n_agents = data.correct.shape
    for _ in range(draws):
        z = np.sqrt(w) * data.d + np.sqrt(1.0 - w) * rng.standard_normal(n_items)
        e = rng.standard_normal((n_items, n_agents))
        sim = np.sqrt(rho) * z[:, None] + np.sqrt(1.0 - rho) * e < tau[None, :]
        rows.append(statistics(DomainOutcomes(data.domain, data.agents, data.items, data.d, sim)))
    return {
        k: (
            float(np.mean([r[k] for r in rows])),
            *(float(q) for q in np.quantile([r[k] for r in rows], [0.025, 0.975])),
        )
        for k in rows[0]
    }


def domain_tables(
    outcomes: Sequence[object], scores: Mapping[str, float], agents: Sequence[str] | None = None
) -> dict[str, DomainOutcomes]:
    """Per domain, the items every given agent answered (``outcomes``:
    :class:`puppeteer.backends.replay.Outcome` rows; ``scores``: each task id's visible score)."""
    by: dict[str, dict[str, dict[str, bool]]] = {}
    names = set(agents) if agents else {o.agent for o in outcomes}  # type: ignore[attr-defined]
    for o in outcomes:
        if o.agent in names and o.error is None:  # type: ignore[attr-defined]
            by.setdefault(o.domain, {}).setdefault(o.task_id, {})[o.agent] = bool(o.correct)  # type: ignore[attr-defined]
    out = {}
    order = sorted(names)
    for domain, items in sorted(by.items()):
        full = sorted(t for t, row in items.items() if len(row) == len(order) and t in scores)
        if not full:
            continue
        out[domain] = DomainOutcomes(
            domain,
            tuple(order),
            tuple(full),
            np.array([scores[t] for t in full]),
            np.array([[items[t][a] for a in order] for t in full], dtype=bool),
        )
    return out


__all__ = [
    "DomainOutcomes",
    "Fit",
    "bootstrap",
    "domain_tables",
    "fit_domain",
    "fit_pooled",
    "loglik",
    "resample",
    "simulate",
    "statistics",
]
