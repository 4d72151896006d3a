"""What a router could learn from a pool's per-item outcomes: the ceilings a trained one is measured by.

A one-step router picks one agent per item. Given every single agent's outcome on the same items
(from the per-agent baseline runs), three reference routers bound what learning can buy:

- :func:`oracle_route`: the per-item oracle (knows which agents are right): the ceiling.
- :func:`domain_route`: the best agent per domain, chosen on training items: what a router that only
  tells the domains apart can reach.
- :func:`probe_route`: one logistic regression per agent (scikit-learn), fit on the training items'
  features (the router's own frozen question embeddings) to predict that agent's correctness, then
  route to ``argmax P(correct) - penalty``. Supervised, with every agent's label on every training
  item: more information than REINFORCE ever sees, so when the probe cannot beat the best single
  agent, the policy-gradient router on the same features cannot be expected to either.

Every router trades accuracy against a per-call ``penalty`` (the reward's ``lambda * C``), so they can
be compared with trained runs at the same lambda.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.linear_model import LogisticRegression


@dataclass(frozen=True)
class Outcomes:
    """Every agent's outcome on the same items: ``correct[i, a]`` and ``model_s[i, a]``."""

    task_ids: tuple[str, ...]
    agents: tuple[str, ...]
    correct: np.ndarray  # (items, agents) bool
    model_s: np.ndarray  # (items, agents) float, single-stream model seconds

    def __post_init__(self) -> None:
        shape = (len(self.task_ids), len(self.agents))
        if self.correct.shape != shape or self.model_s.shape != shape:
            raise ValueError(
                f"outcomes must be {shape} (items x agents), got {self.correct.shape}, {self.model_s.shape}"
            )

    @property
    def domains(self) -> np.ndarray:
        """Each item's domain: the task id's prefix (``gsm8k/12`` -> ``gsm8k``)."""
        return np.asarray([t.split("/")[0] for t in self.task_ids])

    @classmethod
    def from_runs(cls, runs: Mapping[str, Mapping[str, tuple[bool, float]]]) -> Outcomes:
        """From ``{agent: {task_id: (correct, model_s)}}``, on the items every agent ran."""
        if not runs:
            raise ValueError("no agents' runs given")
        agents = tuple(runs)
        shared = sorted(set.intersection(*(set(r) for r in runs.values())))
        if not shared:
            raise ValueError("the agents' runs share no items")
        correct = np.array([[runs[a][t][0] for a in agents] for t in shared], dtype=bool)
        model_s = np.array([[runs[a][t][1] for a in agents] for t in shared], dtype=float)
        return cls(tuple(shared), agents, correct, model_s)

    def restrict(self, task_ids: Sequence[str]) -> Outcomes:
        index = {t: i for i, t in enumerate(self.task_ids)}
        rows = [index[t] for t in task_ids]
        return Outcomes(tuple(task_ids), self.agents, self.correct[rows], self.model_s[rows])


@dataclass(frozen=True)
class Routing:
    """One agent per item, and what that routing scores on the items."""

    name: str
    choice: np.ndarray  # (items,) agent index

    def _chosen(self, table: np.ndarray) -> np.ndarray:
        """The chosen agent's cell of an (items, agents) table, item by item."""
        return table[np.arange(len(self.choice)), self.choice]

    def correct(self, o: Outcomes) -> np.ndarray:
        """Whether the chosen agent is right, item by item."""
        return self._chosen(o.correct)

    def accuracy(self, o: Outcomes) -> float:
        return float(self.correct(o).mean())

    def model_s(self, o: Outcomes) -> float:
        return float(self._chosen(o.model_s).mean())

    def shares(self, o: Outcomes) -> dict[str, float]:
        """The share of items sent to each agent that gets any."""
        counts = np.bincount(self.choice, minlength=len(o.agents))
        return {o.agents[a]: counts[a] / len(self.choice) for a in np.argsort(-counts) if counts[a]}


def best_index(utility: np.ndarray, model_s: np.ndarray) -> int:
    """The agent of highest utility, the cheaper one on a tie (an exact tie of 0/1 counts is common)."""
    order = np.lexsort((model_s, -utility))
    return int(order[0])


def single_route(o: Outcomes, agent: str) -> Routing:
    return Routing(f"single:{agent}", np.full(len(o.task_ids), o.agents.index(agent)))


def oracle_route(o: Outcomes, penalty: np.ndarray | float = 0.0) -> Routing:
    """Per item, the agent maximising ``correct - penalty`` (``penalty``: scalar, per agent or per item
    and agent)."""
    utility = o.correct.astype(float) - np.broadcast_to(penalty, o.correct.shape)
    choice = np.array([best_index(utility[i], o.model_s[i]) for i in range(len(o.task_ids))])
    return Routing("oracle (per item)", choice)


def domain_route(train: Outcomes, test: Outcomes, penalty: np.ndarray | float = 0.0) -> Routing:
    """Per domain, the agent of highest mean ``correct - penalty`` on the training items; a domain the
    training items lack gets the best agent overall."""
    pen = np.broadcast_to(penalty, train.correct.shape)

    def pick(rows: np.ndarray) -> int:
        return best_index((train.correct[rows] - pen[rows]).mean(axis=0), train.model_s[rows].mean(axis=0))

    overall = pick(np.ones(len(train.task_ids), dtype=bool))
    by_domain = {d: pick(train.domains == d) for d in set(train.domains)}
    return Routing(
        "best agent per domain (chosen on train)", np.array([by_domain.get(d, overall) for d in test.domains])
    )


def probe_probabilities(
    x_train: np.ndarray, train: Outcomes, x_test: np.ndarray, c: float = 1.0, seed: int = 0
) -> np.ndarray:
    """``P(agent a is right | features)`` for each test item: one L2 logistic regression per agent.

    An agent right on all or none of the training items gets that constant.
    """
    if len(x_train) != len(train.task_ids):
        raise ValueError(f"{len(x_train)} training feature rows for {len(train.task_ids)} items")
    probs = np.empty((len(x_test), len(train.agents)))
    for a in range(len(train.agents)):
        y = train.correct[:, a]
        if y.all() or not y.any():
            probs[:, a] = float(y[0])
            continue
        model = LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(x_train, y)
        probs[:, a] = model.predict_proba(x_test)[:, 1]
    return probs


def probe_route(
    x_train: np.ndarray,
    train: Outcomes,
    x_test: np.ndarray,
    test: Outcomes,
    penalty: np.ndarray | float = 0.0,
    c: float = 1.0,
) -> Routing:
    """Route each test item to ``argmax_a P(a right | x) - penalty``.

    The router cannot know a test item's cost before the call: pass the penalty per agent (shape
    ``(agents,)``, from training costs); ties go to the agent cheaper on the training items.
    """
    if len(x_test) != len(test.task_ids):
        raise ValueError(f"{len(x_test)} test feature rows for {len(test.task_ids)} items")
    utility = probe_probabilities(x_train, train, x_test, c=c) - np.broadcast_to(penalty, test.correct.shape)
    cost = train.model_s.mean(axis=0)
    choice = np.array([best_index(utility[i], cost) for i in range(len(test.task_ids))])
    return Routing(f"supervised probe (logistic, C={c:g})", choice)


def probe_cross_fit(
    x_train: np.ndarray,
    train: Outcomes,
    x_test: np.ndarray,
    test: Outcomes,
    penalty: np.ndarray | float = 0.0,
    folds: int = 5,
    c: float = 1.0,
    seed: int = 0,
) -> Routing:
    """The probe with more labels: each of ``folds`` parts of the test items is routed by a probe fit on
    the training items plus the other parts (no item is routed by a probe that saw its label)."""
    if folds < 2 or folds > len(test.task_ids):
        raise ValueError(f"folds must be in 2..{len(test.task_ids)}, got {folds}")
    part = np.random.default_rng(seed).permutation(len(test.task_ids)) % folds
    choice = np.empty(len(test.task_ids), dtype=int)
    for k in range(folds):
        held, rest = np.flatnonzero(part == k), np.flatnonzero(part != k)
        fit = Outcomes(
            train.task_ids + tuple(test.task_ids[i] for i in rest),
            train.agents,
            np.concatenate([train.correct, test.correct[rest]]),
            np.concatenate([train.model_s, test.model_s[rest]]),
        )
        sub = test.restrict([test.task_ids[i] for i in held])
        choice[held] = probe_route(
            np.concatenate([x_train, x_test[rest]]), fit, x_test[held], sub, penalty, c
        ).choice
    return Routing(f"supervised probe, {folds}-fold cross-fit on train + test (C={c:g})", choice)
