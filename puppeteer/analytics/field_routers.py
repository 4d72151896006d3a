"""The field's routers, as baselines for a learned router on one table of logged outcomes.

Each router is fitted on the training split only (every choice it makes, its k included) and then
predicts, for each held-out query and model, a quality and a cost; at cost knob ``lam`` it sends the
query to ``argmax(quality - lam * cost)``. Sweeping ``lam`` draws its cost-quality curve.

- ``random``: a uniformly random model per query (one point, whatever ``lam``);
- ``best-single``: the model of best mean training quality less ``lam`` times its mean cost;
- ``per-task``: the same per task label (the overall choice for a label unseen in training);
- ``knn``: the mean outcome of each model on the k nearest training queries (cosine on the embedding);
- ``logistic``: one logistic regression per model on the embedding, predicting its score (RouteLLM's
  per-model correctness predictor; a fractional score is fitted as that share of a right answer);
- ``cluster``: k-means on the embedding, each model's mean outcome per cluster (LLMRouterBench's
  clustering baseline);
- ``oracle``: the logged outcomes themselves (the best any router could do on these queries).

The learned routers use the mean training cost of each model as its predicted cost; the oracle uses
the logged cost. ``k`` (neighbours, clusters) is chosen on a fifth of the training split held out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

import numpy as np


@dataclass(frozen=True, eq=False)
class RouterData:
    """One split: query embeddings, task labels, and each model's logged score and cost per query."""

    x: np.ndarray  # (n, d), L2-normalised
    tasks: tuple[str, ...]
    score: np.ndarray  # (n, m)
    cost: np.ndarray  # (n, m)

    def __len__(self) -> int:
        return len(self.tasks)

    def rows(self, idx: np.ndarray) -> RouterData:
        return RouterData(self.x[idx], tuple(self.tasks[i] for i in idx), self.score[idx], self.cost[idx])


@dataclass(frozen=True, eq=False)
class Prediction:
    """Predicted quality and cost of every model on every query of a split."""

    quality: np.ndarray  # (n, m)
    cost: np.ndarray  # (n, m)

    def route(self, lam: float) -> np.ndarray:
        """The chosen model per query at cost knob ``lam`` (ties: the cheaper, then the earlier)."""
        utility = self.quality - lam * self.cost
        best = utility.max(axis=1, keepdims=True)
        tied = np.isclose(utility, best, rtol=0.0, atol=1e-12)
        return np.where(tied, self.cost, np.inf).argmin(axis=1)


class FieldRouter(Protocol):
    """Fitted on a training split, predicts on a held-out one."""

    def __call__(self, train: RouterData, test: RouterData, seed: int) -> Prediction: ...


def _mean_cost(train: RouterData, n: int) -> np.ndarray:
    return np.broadcast_to(train.cost.mean(axis=0), (n, train.cost.shape[1])).copy()


def best_single(train: RouterData, test: RouterData, seed: int = 0) -> Prediction:
    q = np.broadcast_to(train.score.mean(axis=0), (len(test), train.score.shape[1])).copy()
    return Prediction(q, _mean_cost(train, len(test)))


def per_task(train: RouterData, test: RouterData, seed: int = 0) -> Prediction:
    overall = train.score.mean(axis=0)
    labels = np.array(train.tasks)
    by_task = {t: train.score[labels == t].mean(axis=0) for t in set(train.tasks)}
    q = np.stack([by_task.get(t, overall) for t in test.tasks]) if len(test) else np.zeros((0, len(overall)))
    return Prediction(q, _mean_cost(train, len(test)))


def oracle(train: RouterData, test: RouterData, seed: int = 0) -> Prediction:
    return Prediction(test.score.copy(), test.cost.copy())


def random_router(train: RouterData, test: RouterData, seed: int = 0) -> Prediction:
    """A random model per query: its one chosen model gets quality 1, the others 0, and no cost."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, test.score.shape[1], size=len(test))
    q = np.zeros_like(test.score)
    q[np.arange(len(test)), pick] = 1.0
    return Prediction(q, np.zeros_like(test.cost))


# --------------------------------------------------------------------------- embedding routers


def _holdout(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    cut = max(1, n // 5)
    return order[cut:], order[:cut]


def _pick_k(
    train: RouterData,
    seed: int,
    ks: Sequence[int],
    fit: Callable[[RouterData, RouterData, int, int], np.ndarray],
) -> int:
    """The k whose λ=0 routes score best on a held-out fifth of the training split (the smaller on a tie)."""
    fit_idx, val_idx = _holdout(len(train), seed)
    part, val = train.rows(fit_idx), train.rows(val_idx)
    best_k, best_q = ks[0], -np.inf
    for k in ks:
        if k > len(part):
            continue
        q = fit(part, val, k, seed)
        chosen = q.argmax(axis=1)
        got = float(val.score[np.arange(len(val)), chosen].mean())
        if got > best_q + 1e-12:
            best_k, best_q = k, got
    return best_k


def _knn_quality(train: RouterData, test: RouterData, k: int, seed: int = 0) -> np.ndarray:
    from sklearn.neighbors import NearestNeighbors

    nn = NearestNeighbors(n_neighbors=min(k, len(train)), metric="cosine").fit(train.x)
    idx = nn.kneighbors(test.x, return_distance=False)
    return train.score[idx].mean(axis=1)


def _cluster_quality(train: RouterData, test: RouterData, k: int, seed: int = 0) -> np.ndarray:
    from sklearn.cluster import KMeans

    km = KMeans(n_clusters=min(k, len(train)), n_init=4, random_state=seed).fit(train.x)
    overall = train.score.mean(axis=0)
    means = np.stack(
        [
            train.score[km.labels_ == c].mean(axis=0) if (km.labels_ == c).any() else overall
            for c in range(km.n_clusters)
        ]
    )
    return means[km.predict(test.x)]


def _logistic_quality(train: RouterData, test: RouterData, c: float = 1.0, seed: int = 0) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression

    n = len(train)
    x2 = np.vstack([train.x, train.x])
    out = np.empty((len(test), train.score.shape[1]))
    for j in range(train.score.shape[1]):
        s = train.score[:, j]
        if np.all(s == s[0]):
            out[:, j] = s[0]
            continue
        y = np.r_[np.ones(n), np.zeros(n)]
        w = np.r_[s, 1.0 - s]
        keep = w > 0
        model = LogisticRegression(C=c, max_iter=1000, random_state=seed)
        model.fit(x2[keep], y[keep], sample_weight=w[keep])
        out[:, j] = model.predict_proba(test.x)[:, 1]
    return out


KNN_KS = (5, 10, 20, 50, 100)
CLUSTER_KS = (4, 8, 16, 32, 64)


def knn(train: RouterData, test: RouterData, seed: int = 0) -> Prediction:
    k = _pick_k(train, seed, KNN_KS, _knn_quality)
    return Prediction(_knn_quality(train, test, k), _mean_cost(train, len(test)))


def cluster(train: RouterData, test: RouterData, seed: int = 0) -> Prediction:
    k = _pick_k(train, seed, CLUSTER_KS, _cluster_quality)
    return Prediction(_cluster_quality(train, test, k, seed), _mean_cost(train, len(test)))


def logistic(train: RouterData, test: RouterData, seed: int = 0) -> Prediction:
    return Prediction(_logistic_quality(train, test, 1.0, seed), _mean_cost(train, len(test)))


FIELD_ROUTERS: Mapping[str, FieldRouter] = MappingProxyType(
    {
        "random": random_router,
        "best-single": best_single,
        "per-task": per_task,
        "knn": knn,
        "logistic": logistic,
        "cluster": cluster,
        "oracle": oracle,
    }
)
"""Name -> router, in the order the reports list them."""
