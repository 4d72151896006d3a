"""Fit a simulator pool to a shipped outcome table: one simulated agent per real one, same items' world.

Read from a pool's table (:mod:`puppeteer.backends.replay`): every solver alone on every item
(``outcomes.jsonl.gz``) and the recorded two-step chains (``steps.jsonl.gz``). The fit writes what the
simulator (:mod:`puppeteer.backends.sim`) can express:

- **marginals**, per agent and kind (the table's domains): accuracy (the skill), mean completion
  tokens, and the real model's declared speeds (so model seconds follow the same cost model). Each
  real agent becomes its own simulated model, whose ``group`` is the real model it runs on.
- **correlation**: the simulator's latent ``sqrt(rho_k) z_i + sqrt(g) v_i,group + sqrt(1 - rho_k - g) e``
  with ``z_i = sqrt(w_k) d_i + sqrt(1 - w_k) u_i`` (``d_i`` the question's visible score). ``rho_k`` (per
  kind: the difficulty every agent shares), ``g`` (one for all kinds: what agents on the same weights
  share beyond it) and ``w_k`` (the part of the item's difficulty its question shows) are fitted by
  maximum likelihood of the whole items x agents correctness table, each agent's threshold fixed at
  its observed accuracy (so the marginals are kept exactly), the item and group latents integrated
  out by nested Gauss-Hermite quadrature. The likelihood of the joint table weighs every pair (and
  every larger set) of agents by the information it carries, which a match of mean pairwise
  correlations would not; experiments/sim-calibrated/sim_check.py then compares the pairwise error
  correlations it implies with the table's.
- **repeats**: ``repeat_corr`` 1 (a greedy model asked again answers the same).
- **verifiers** (second agents that read a first answer): their own attempt's skill per kind is set so
  that the simulated *fix* rate, P(own attempt right | first answer wrong) under the fitted latent
  correlation, is the table's pooled fix rate; ``keep_slip`` so that the simulated *break* rate
  (``keep_slip * (1 - p)``) is the table's; ``switch_prob`` so that the simulated *detection* rate (fix
  plus switching to another wrong answer) is the table's. A verifier with no recorded chains is left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np
from scipy.optimize import brentq, minimize
from scipy.special import log_ndtr, logsumexp
from scipy.stats import multivariate_normal

from puppeteer.analytics.second_steps import flagged
from puppeteer.backends.replay import Outcome, StepOutcome
from puppeteer.backends.sim.difficulty import DifficultyModel
from puppeteer.tasks.signals import is_integer

_N = NormalDist()
MAX_SHARED = 0.97  # rho_k + g stays below this (a call keeps some noise of its own)


# --------------------------------------------------------------------------- the table, per kind


@dataclass(frozen=True)
class KindTable:
    """One kind of a table: items x agents correctness (every agent on every item) and visible scores."""

    kind: str
    agents: tuple[str, ...]
    items: tuple[str, ...]
    correct: np.ndarray  # (items, agents) bool
    d: np.ndarray | None  # (items,) visible score, standard normal over the kind; None: not known

    @property
    def accuracy(self) -> np.ndarray:
        return self.correct.mean(axis=0)


def kind_tables(
    outcomes: Sequence[Outcome],
    agents: Sequence[str],
    scores: Mapping[str, float] | None = None,
) -> dict[str, KindTable]:
    """Per kind (domain), the items every agent answered; ``scores``: task id -> visible score."""
    rows: dict[str, dict[tuple[str, str], dict[str, bool]]] = {}
    for o in outcomes:
        if o.agent in agents and o.error is None:
            rows.setdefault(o.domain, {}).setdefault((o.split, o.task_id), {})[o.agent] = bool(o.correct)
    out = {}
    for kind, items in sorted(rows.items()):
        full = sorted(k for k, row in items.items() if len(row) == len(agents))
        if not full:
            continue
        d = None
        if scores is not None and all(t in scores for _, t in full):
            d = np.array([scores[t] for _, t in full], dtype=float)
        out[kind] = KindTable(
            kind,
            tuple(agents),
            tuple(f"{s}/{t}" for s, t in full),
            np.array([[items[k][a] for a in agents] for k in full], dtype=bool),
            d,
        )
    return out


def thresholds(accuracy: np.ndarray, n_items: int) -> np.ndarray:
    """Phi^-1 of each accuracy; an agent right (or wrong) on every item is shrunk by half an item."""
    p = np.clip(accuracy, 0.5 / n_items, 1.0 - 0.5 / n_items)
    return np.array([_N.inv_cdf(float(x)) for x in p])


# --------------------------------------------------------------------------- the latent fit


def kind_loglik(
    table: KindTable, groups: Sequence[int], rho: float, g: float, w: float, nodes: int = 16
) -> float:
    """Log-likelihood of one kind's table under (rho, g, w); ``groups[a]``: agent a's model group."""
    x, wx = np.polynomial.hermite_e.hermegauss(nodes)  # weight exp(-x^2 / 2)
    wx = np.log(wx / wx.sum())
    tau = thresholds(table.accuracy, len(table.items))
    d = table.d if table.d is not None else np.zeros(len(table.items))
    w = w if table.d is not None else 0.0
    z = math.sqrt(w) * d[:, None] + math.sqrt(1.0 - w) * x[None, :]  # (I, Q)
    own = math.sqrt(1.0 - rho - g)
    sign = np.where(table.correct, 1.0, -1.0)  # (I, A)
    total = np.zeros((len(table.items), nodes))
    group_ids = np.asarray(groups)
    for gid in np.unique(group_ids):
        cols = np.flatnonzero(group_ids == gid)
        # (I, Q, R, A): the agents of the group given the item's z and the group's v
        arg = (
            tau[None, None, None, cols]
            - math.sqrt(rho) * z[:, :, None, None]
            - math.sqrt(g) * x[None, None, :, None]
        ) / own
        lp = log_ndtr(sign[:, None, None, cols] * arg).sum(axis=3)  # (I, Q, R)
        total += logsumexp(lp + wx[None, None, :], axis=2)
    return float(logsumexp(total + wx[None, :], axis=1).sum())


@dataclass(frozen=True)
class LatentFit:
    rho: Mapping[str, float]  # per kind
    group_corr: float
    visible: Mapping[str, float]  # per kind (0 where the kind has no visible scores)
    loglik: float
    loglik_no_group: float  # the best fit with group_corr 0 (the likelihood-ratio check of g)
    n_items: int


def _unpack(theta: np.ndarray, kinds: Sequence[str]) -> tuple[float, dict[str, float], dict[str, float]]:
    g = float(theta[0])
    k = len(kinds)
    rho = {kind: float(t) * (MAX_SHARED - g) for kind, t in zip(kinds, theta[1 : 1 + k], strict=True)}
    w = {kind: float(v) for kind, v in zip(kinds, theta[1 + k :], strict=True)}
    return g, rho, w


def _fit(
    tables: Mapping[str, KindTable], groups: Sequence[int], fit_group: bool, fit_visible: bool, nodes: int
) -> tuple[float, dict[str, float], dict[str, float], float]:
    kinds = sorted(tables)
    k = len(kinds)

    def nll(theta: np.ndarray) -> float:
        g, rho, w = _unpack(theta, kinds)
        return -sum(kind_loglik(tables[c], groups, rho[c], g, w[c], nodes) for c in kinds)

    theta0 = np.array([0.1 if fit_group else 0.0] + [0.4] * k + [0.1 if fit_visible else 0.0] * k)
    bounds = [(0.0, 0.6 if fit_group else 0.0)] + [(0.0, 1.0)] * k + [(0.0, 0.95 if fit_visible else 0.0)] * k
    res = minimize(nll, theta0, method="L-BFGS-B", bounds=bounds, options={"eps": 1e-4})
    g, rho, w = _unpack(res.x, kinds)
    return g, rho, w, -float(res.fun)


def fit_latent(
    tables: Mapping[str, KindTable],
    groups: Sequence[int],
    fit_group: bool = True,
    fit_visible: bool = True,
    nodes: int = 16,
) -> LatentFit:
    """Maximum likelihood (rho per kind, one group_corr, visible share per kind) over every kind."""
    has_d = fit_visible and all(t.d is not None for t in tables.values())
    g, rho, w, ll = _fit(tables, groups, fit_group, has_d, nodes)
    ll0 = ll if not fit_group else _fit(tables, groups, False, has_d, nodes)[3]
    return LatentFit(
        {k: round(v, 3) for k, v in rho.items()},
        round(g, 3),
        {k: round(v, 3) for k, v in w.items()},
        ll,
        ll0,
        sum(len(t.items) for t in tables.values()),
    )


# --------------------------------------------------------------------------- verifiers


@dataclass(frozen=True)
class VerifierFit:
    agent: str
    skills: Mapping[str, float]  # its own attempt's accuracy per kind
    tokens_mean: Mapping[str, float]
    fix: float  # pooled rates the fit matched (wrong first answers fixed, right ones broken, flags)
    breaks: float
    detection: float
    keep_slip: float
    switch_prob: float
    n: int


def _p_right_given_wrong(p_v: float, p_f: float, r: float) -> float:
    """P(V right | F wrong) for two probit calls of marginals p_v, p_f whose latents correlate r."""
    if p_f >= 1.0:
        return p_v
    t_v, t_f = _N.inv_cdf(p_v), _N.inv_cdf(p_f)
    both = float(multivariate_normal.cdf([t_v, t_f], mean=[0.0, 0.0], cov=[[1.0, r], [r, 1.0]]))
    return max(p_v - both, 0.0) / (1.0 - p_f)


def _solve_skill(fix: float, p_first: float, r: float) -> float:
    """The own-attempt accuracy whose P(right | first wrong) is ``fix``."""
    return float(brentq(lambda p: _p_right_given_wrong(p, p_first, r) - fix, 1e-9, 1.0 - 1e-9))


def fit_verifier(
    agent: str,
    steps: Sequence[StepOutcome],
    first_accuracy: Mapping[tuple[str, str], float],
    correlation: Mapping[tuple[str, str], float],
) -> VerifierFit:
    """A verifier's own skill per kind, and the keep_slip / switch_prob that give its recorded rates.

    ``first_accuracy[(first agent, kind)]``: the first agent's accuracy; ``correlation[(first, kind)]``:
    the latent correlation of the first agent's and the verifier's calls (rho_k, plus g when they run
    on the same model)."""
    rows = [s for s in steps if s.agent == agent and s.error is None]
    wrong = [s for s in rows if not s.first_correct]
    right = [s for s in rows if s.first_correct]
    fix = sum(s.correct for s in wrong) / max(len(wrong), 1)
    breaks = sum(not s.correct for s in right) / max(len(right), 1)
    detection = sum(flagged(s) for s in wrong) / max(len(wrong), 1)
    skills: dict[str, float] = {}
    for kind in sorted({s.domain for s in rows}):
        firsts = sorted({s.first for s in rows if s.domain == kind})
        f = firsts[0]  # one first agent per kind in a recorded table
        p_f, r = first_accuracy[(f, kind)], correlation[(f, kind)]
        target = min(fix, 1.0 - 1e-6)
        if _p_right_given_wrong(1.0 - 1e-9, p_f, r) <= target:
            skills[kind] = 1.0
        elif target <= 0.0:
            skills[kind] = 0.0
        else:
            skills[kind] = _solve_skill(target, p_f, r)
    mean_miss = np.mean([1.0 - skills[s.domain] for s in right]) if right else 1.0
    keep_slip = float(min(breaks / mean_miss, 1.0)) if mean_miss > 0 else 0.0
    switch = (detection - fix) / (1.0 - fix) if fix < 1.0 else 0.0
    tokens = {
        kind: float(np.mean([s.completion_tokens for s in rows if s.domain == kind]))
        for kind in sorted({s.domain for s in rows})
    }
    return VerifierFit(
        agent,
        {k: round(v, 4) for k, v in skills.items()},
        {k: round(v, 1) for k, v in tokens.items()},
        fix,
        breaks,
        detection,
        round(keep_slip, 4),
        round(min(max(switch, 0.0), 1.0), 4),
        len(rows),
    )


# --------------------------------------------------------------------------- the whole fit


@dataclass(frozen=True)
class AgentFit:
    name: str
    model: str  # the real model key (the simulated model's group)
    pattern: str
    tools: tuple[str, ...]
    max_tokens: int
    skills: Mapping[str, float]
    tokens_mean: Mapping[str, float]
    n: Mapping[str, int]
    nonint_wrong: Mapping[str, float] = field(default_factory=dict)  # numeric kinds only


@dataclass(frozen=True)
class SimFit:
    """Everything the simulated pool declares (see :func:`pool_document`)."""

    agents: tuple[AgentFit, ...]
    latent: LatentFit
    verifiers: tuple[VerifierFit, ...]
    tokens_sigma: float
    quantiles: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


def agent_marginals(
    outcomes: Sequence[Outcome], agent: str
) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """Accuracy, mean completion tokens and items per kind of one agent alone."""
    mine = [o for o in outcomes if o.agent == agent and o.error is None]
    acc, tok, n = {}, {}, {}
    for kind in sorted({o.domain for o in mine}):
        rows = [o for o in mine if o.domain == kind]
        acc[kind] = round(sum(o.correct for o in rows) / len(rows), 4)
        tok[kind] = round(float(np.mean([o.completion_tokens for o in rows])), 1)
        n[kind] = len(rows)
    return acc, tok, n


def nonint_wrong(outcomes: Sequence[Outcome], agent: str) -> dict[str, float]:
    """Per whole-number kind (whose right answers are all whole numbers), the share of the agent's wrong
    answers that are not a whole number or no answer: where the ``not-integer`` signal fires."""
    whole = {}
    for kind in sorted({o.domain for o in outcomes}):
        right = [o.answer for o in outcomes if o.domain == kind and o.correct and o.answer is not None]
        whole[kind] = bool(right) and all(is_integer(a) for a in right)
    out = {}
    for kind, ok in whole.items():
        wrong = [o for o in outcomes if o.agent == agent and o.domain == kind and not o.correct]
        if ok and wrong:
            share = sum(o.answer is None or not is_integer(o.answer) for o in wrong) / len(wrong)
            if share > 0:
                out[kind] = round(share, 4)
    return out


def tokens_sigma(outcomes: Sequence[Outcome]) -> float:
    """The pooled within-(agent, kind) standard deviation of log completion tokens."""
    cells: dict[tuple[str, str], list[float]] = {}
    for o in outcomes:
        if o.error is None:
            cells.setdefault((o.agent, o.domain), []).append(math.log(max(o.completion_tokens, 1)))
    num = sum(float(np.sum((np.array(v) - np.mean(v)) ** 2)) for v in cells.values())
    den = sum(len(v) - 1 for v in cells.values() if len(v) > 1)
    return round(math.sqrt(num / den), 3) if den else 0.35


@dataclass(frozen=True)
class AgentSpec:
    """What the fit needs to know about a real agent: its model key, pattern, tools, token budget."""

    name: str
    model: str
    pattern: str
    tools: tuple[str, ...] = ()
    max_tokens: int = 512
    reads_context: bool = False


def fit_table(
    outcomes: Sequence[Outcome],
    steps: Sequence[StepOutcome],
    agents: Sequence[AgentSpec],
    features: Mapping[str, float] | None = None,
    fit_group: bool = True,
    nodes: int = 16,
) -> SimFit:
    """The fit of a table. ``features``: task id -> the question's visible feature (ln chars)."""
    solvers = [a for a in agents if not a.reads_context and any(o.agent == a.name for o in outcomes)]
    names = [a.name for a in solvers]
    quantiles: dict[str, tuple[float, ...]] = {}
    scores = None
    if features is not None:
        by_kind: dict[str, list[float]] = {}
        seen: set[str] = set()
        for o in outcomes:
            if o.task_id in features and o.task_id not in seen:
                seen.add(o.task_id)
                by_kind.setdefault(o.domain, []).append(features[o.task_id])
        quantiles = DifficultyModel.fit_quantiles(by_kind)
        model = DifficultyModel(quantiles)
        kind_of = {o.task_id: o.domain for o in outcomes}
        scores = {
            t: s
            for t, x in features.items()
            if t in kind_of and (s := model.score(kind_of[t], x)) is not None
        }
    tables = kind_tables(outcomes, names, scores)
    group_keys = sorted({a.model for a in solvers})
    groups = [group_keys.index(a.model) for a in solvers]
    latent = fit_latent(tables, groups, fit_group=fit_group, fit_visible=features is not None, nodes=nodes)
    fits = []
    for a in solvers:
        acc, tok, n = agent_marginals(outcomes, a.name)
        fits.append(
            AgentFit(
                a.name, a.model, a.pattern, a.tools, a.max_tokens, acc, tok, n, nonint_wrong(outcomes, a.name)
            )
        )
    verifiers = []
    model_of = {a.name: a.model for a in agents}
    accuracy = {(f.name, k): v for f in fits for k, v in f.skills.items()}
    for a in agents:
        if not a.reads_context or not any(s.agent == a.name for s in steps):
            continue
        corr = {
            (f, k): latent.rho[k] + (latent.group_corr if model_of[f] == a.model else 0.0)
            for (f, k) in accuracy
        }
        verifiers.append(fit_verifier(a.name, steps, accuracy, corr))
    return SimFit(tuple(fits), latent, tuple(verifiers), tokens_sigma(outcomes), quantiles)


__all__ = [
    "AgentFit",
    "AgentSpec",
    "KindTable",
    "LatentFit",
    "SimFit",
    "VerifierFit",
    "agent_marginals",
    "fit_latent",
    "fit_table",
    "fit_verifier",
    "kind_loglik",
    "kind_tables",
    "nonint_wrong",
    "thresholds",
    "tokens_sigma",
]
