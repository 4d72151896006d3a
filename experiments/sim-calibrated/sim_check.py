"""Real against simulated: every figure a fitted simulator pool (:mod:`puppeteer.analytics.sim_fit`)
was calibrated on, measured on the real table and on simulated draws of the same items.

The simulator is run through :meth:`puppeteer.backends.sim.SimBackend.decide` (each call's answer and
grade, no text), once per seed: each seed is another draw of every item's latent and every call.
Real figures carry a 95% interval (Wilson for rates, a bootstrap over items for correlations); the
simulated figure is the mean over seeds, with the 2.5% / 97.5% quantiles of its per-seed value
beside it (the spread of a world of this size). A figure is *inside* when the simulated mean falls in
the real interval.

- accuracy per agent and kind;
- error correlation: the within-kind phi of two agents' error indicators
  (:func:`puppeteer.analytics.second_steps.within_kind_phi`), averaged over the pairs of one relation
  (same model, other size);
- per kind, the oracle (some solver right) and the gain of a majority vote of the three best solvers
  over the best of them (what a router's headroom depends on);
- verifiers on the recorded chains: detection, false alarm, fix, break;
- repeats: the share of items where an agent asked twice in one episode answers the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from puppeteer.agents.pool import Pool
from puppeteer.analytics.second_steps import within_kind_phi
from puppeteer.backends.replay import Outcome, StepOutcome
from puppeteer.backends.sim import SimBackend, SimOutcome
from puppeteer.backends.sim.answers import normalize_answer
from puppeteer.envs.build import backend_options
from puppeteer.evaluation.stats import wilson_interval
from puppeteer.types import Agent, CallContext, CompletionRequest, Message, Task

_PROMPT = (Message("user", "(simulated)"),)


@dataclass(frozen=True)
class Figure:
    """One calibrated figure, real against simulated."""

    name: str
    real: float
    low: float
    high: float
    sim: float
    sim_low: float  # 2.5% quantile of the per-seed value
    sim_high: float
    n: int  # the real figure's items (or chains)

    @property
    def inside(self) -> bool:
        return self.low - 1e-9 <= self.sim <= self.high + 1e-9


def backend(pool: Pool, tasks: Sequence[Task], seed: int) -> SimBackend:
    options = backend_options(pool, tasks)["sim"]
    return SimBackend(**{**options, "seed": seed})


def call(sim: SimBackend, agent: Agent, key: str, step: int = 0, visible: Sequence[str] = ()) -> SimOutcome:
    request = CompletionRequest(
        model=agent.model,
        messages=_PROMPT,
        max_tokens=agent.max_tokens,
        context=CallContext(
            item_key=key,
            pattern=agent.pattern,
            step_index=step,
            tools=tuple(agent.tools),
            visible_answers=tuple(visible),
        ),
    )
    return sim.decide(request)


# --------------------------------------------------------------------------- the correctness matrix


@dataclass(frozen=True)
class Matrix:
    """Items x agents correctness, with each item's kind (real or one simulated draw)."""

    agents: tuple[str, ...]
    items: tuple[str, ...]  # task ids
    kinds: np.ndarray  # (items,) str
    correct: np.ndarray  # (items, agents) bool


def real_matrix(outcomes: Sequence[Outcome], agents: Sequence[str]) -> Matrix:
    rows: dict[str, dict[str, Outcome]] = {}
    for o in outcomes:
        if o.agent in agents and o.error is None:
            rows.setdefault(o.task_id, {})[o.agent] = o
    items = sorted(t for t, r in rows.items() if len(r) == len(agents))
    return Matrix(
        tuple(agents),
        tuple(items),
        np.array([rows[t][agents[0]].domain for t in items]),
        np.array([[rows[t][a].correct for a in agents] for t in items], dtype=bool),
    )


def sim_matrix(sim: SimBackend, pool: Pool, like: Matrix) -> Matrix:
    agents = [pool.agent(pool.index(a)) for a in like.agents]
    correct = np.array([[call(sim, a, t).correct for a in agents] for t in like.items], dtype=bool)
    return Matrix(like.agents, like.items, like.kinds, correct)


# --------------------------------------------------------------------------- statistics of a matrix


def accuracies(m: Matrix) -> dict[tuple[str, str], tuple[int, int]]:
    """(agent, kind) -> (right, items)."""
    out = {}
    for kind in sorted(set(m.kinds.tolist())):
        rows = m.kinds == kind
        for j, a in enumerate(m.agents):
            out[(a, str(kind))] = (int(m.correct[rows, j].sum()), int(rows.sum()))
    return out


def relation_phis(m: Matrix, relation: Mapping[tuple[str, str], str]) -> dict[str, float]:
    """Per relation, the mean within-kind error phi of its pairs."""
    wrong = ~m.correct
    by: dict[str, list[float]] = {}
    for i, j in combinations(range(len(m.agents)), 2):
        rel = relation.get(tuple(sorted((m.agents[i], m.agents[j]))))  # type: ignore[arg-type]
        if rel is None:
            continue
        phi = within_kind_phi(wrong[:, i], wrong[:, j], m.kinds)
        if not np.isnan(phi):
            by.setdefault(rel, []).append(phi)
    return {rel: float(np.mean(v)) for rel, v in sorted(by.items())}


def pair_phis(m: Matrix) -> dict[tuple[str, str], float]:
    wrong = ~m.correct
    return {
        (m.agents[i], m.agents[j]): within_kind_phi(wrong[:, i], wrong[:, j], m.kinds)
        for i, j in combinations(range(len(m.agents)), 2)
    }


def headroom(m: Matrix) -> dict[str, float]:
    """Per kind: ``oracle:KIND`` (some agent right) and ``vote:KIND`` (a vote of the kind's three best
    agents, right when two of three are, minus the best of them)."""
    out = {}
    for kind in sorted(set(m.kinds.tolist())):
        c = m.correct[m.kinds == kind].astype(float)
        out[f"oracle:{kind}"] = float(c.max(axis=1).mean())
        top3 = np.argsort(-c.mean(axis=0), kind="stable")[:3]
        out[f"vote:{kind}"] = float((c[:, top3].sum(axis=1) >= 2).mean() - c[:, top3].mean(axis=0).max())
    return out


def bootstrap_interval(
    m: Matrix, stat: Callable[[Matrix], Mapping[str, float]], n: int = 400, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """95% percentile intervals of each figure of ``stat`` over item resamples."""
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {}
    for _ in range(n):
        idx = rng.integers(0, len(m.items), len(m.items))
        sub = Matrix(m.agents, tuple(m.items[i] for i in idx), m.kinds[idx], m.correct[idx])
        for k, v in stat(sub).items():
            draws.setdefault(k, []).append(v)
    return {k: (float(np.nanpercentile(v, 2.5)), float(np.nanpercentile(v, 97.5))) for k, v in draws.items()}


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    a = np.asarray(values, dtype=float)
    return float(np.nanmean(a)), float(np.nanpercentile(a, 2.5)), float(np.nanpercentile(a, 97.5))


# --------------------------------------------------------------------------- the figures


def single_call_figures(
    real: Matrix, sims: Sequence[Matrix], relation: Mapping[tuple[str, str], str], n_boot: int = 400
) -> list[Figure]:
    """Accuracy per agent and kind, mean error phi per relation, oracle and vote gain per kind."""
    figures = []
    real_acc = accuracies(real)
    sim_acc = [accuracies(s) for s in sims]
    for key, (k, n) in real_acc.items():
        lo, hi = wilson_interval(k, n)
        mean, s_lo, s_hi = _spread([a[key][0] / a[key][1] for a in sim_acc])
        figures.append(Figure(f"accuracy {key[0]} {key[1]}", k / n, lo, hi, mean, s_lo, s_hi, n))

    def joint(m: Matrix) -> dict[str, float]:
        return {f"phi {rel}": v for rel, v in relation_phis(m, relation).items()} | headroom(m)

    real_joint = joint(real)
    intervals = bootstrap_interval(real, joint, n_boot)
    sim_joint = [joint(s) for s in sims]
    for name, value in real_joint.items():
        lo, hi = intervals[name]
        if name.startswith("oracle:"):  # a proportion: Wilson (a bootstrap collapses at 0 or 1)
            n = int((real.kinds == name.split(":", 1)[1]).sum())
            lo, hi = wilson_interval(round(value * n), n)
        mean, s_lo, s_hi = _spread([s[name] for s in sim_joint])
        figures.append(Figure(name, value, lo, hi, mean, s_lo, s_hi, len(real.items)))
    return figures


def pair_figures(real: Matrix, sims: Sequence[Matrix], n_boot: int = 400) -> list[Figure]:
    """Every pair's within-kind error phi, real (bootstrap interval) against simulated."""
    intervals = bootstrap_interval(
        real, lambda m: {f"phi {a} / {b}": v for (a, b), v in pair_phis(m).items()}, n_boot
    )
    sim = [pair_phis(s) for s in sims]
    figures = []
    for (a, b), value in pair_phis(real).items():
        name = f"phi {a} / {b}"
        mean, s_lo, s_hi = _spread([s[(a, b)] for s in sim])
        figures.append(Figure(name, value, *intervals[name], mean, s_lo, s_hi, len(real.items)))
    return figures


def flags(answer: str | None, first: str | None, kind: str) -> bool:
    if answer is None:
        return False
    return first is None or normalize_answer(answer, kind) != normalize_answer(first, kind)


def verifier_figures(
    steps: Sequence[StepOutcome],
    sims: Sequence[SimBackend],
    pool: Pool,
    is_flag: Callable[[StepOutcome], bool],
) -> list[Figure]:
    """Each verifier's detection, false alarm, fix and break on its recorded chains, real and simulated
    (the first agent's call, then the verifier's shown its answer, in one simulated episode). A verifier
    the simulated pool does not have (the table may record more than the fit took) has no figures."""
    figures = []
    simulated = {a.name for a in pool.agents}
    for agent in sorted({s.agent for s in steps} & simulated):
        rows = [s for s in steps if s.agent == agent and s.error is None]
        verifier = pool.agent(pool.index(agent))
        real = {
            "detection": [is_flag(s) for s in rows if not s.first_correct],
            "false alarm": [is_flag(s) for s in rows if s.first_correct],
            "fix": [s.correct for s in rows if not s.first_correct],
            "break": [not s.correct for s in rows if s.first_correct],
        }
        per_seed: dict[str, list[float]] = {k: [] for k in real}
        for sim in sims:
            got: dict[str, list[bool]] = {k: [] for k in real}
            for s in rows:
                first = call(sim, pool.agent(pool.index(s.first)), s.task_id)
                second = call(sim, verifier, s.task_id, step=1, visible=(first.answer,))
                kind = sim.answer_key[s.task_id].kind
                flag = flags(second.answer, first.answer, kind)
                if first.correct:
                    got["false alarm"].append(flag)
                    got["break"].append(not second.correct)
                else:
                    got["detection"].append(flag)
                    got["fix"].append(second.correct)
            for k, v in got.items():
                if v:
                    per_seed[k].append(float(np.mean(v)))
        for k, v in real.items():
            lo, hi = wilson_interval(sum(v), len(v))
            mean, s_lo, s_hi = _spread(per_seed[k]) if per_seed[k] else (float("nan"),) * 3
            figures.append(Figure(f"{k} {agent}", sum(v) / max(len(v), 1), lo, hi, mean, s_lo, s_hi, len(v)))
    return figures


SIGNAL_TRIGGERS = ("not-integer", "failed-check")


def signal_figures(
    outcomes: Sequence[Outcome],
    sims: Sequence[SimBackend],
    pool: Pool,
    tasks: Sequence[Task],
    agents: Sequence[str],
) -> list[Figure]:
    """How often each escalation trigger of the rules (:data:`puppeteer.policies.rules.TRIGGERS`) fires
    on a solver's wrong and on its right answers, per kind (all solvers pooled), where it fires on the
    real table at all: what a cascade rule, or a policy reading the answer signals, can act on."""
    from puppeteer.policies.rule_fit import Answer, fires
    from puppeteer.tasks.visible import VISIBLE_CHECKS

    by_id = {t.id: t for t in tasks}
    memo: dict[tuple[str, str | None], bool | None] = {}

    def verdict(task_id: str, answer: str | None) -> bool | None:
        task = by_id[task_id]
        check = VISIBLE_CHECKS.get(task.grader)
        if check is None:
            return None
        if (task_id, answer) not in memo:
            memo[(task_id, answer)] = check.check(answer, task)
        return memo[(task_id, answer)]

    def rates(rows: Sequence[tuple[str, str, bool, str | None]]) -> dict[tuple[str, str, bool], list[bool]]:
        out: dict[tuple[str, str, bool], list[bool]] = {}
        for task_id, kind, correct, answer in rows:
            a = Answer(correct, answer, 0.0, verdict(task_id, answer))
            for trigger in SIGNAL_TRIGGERS:
                out.setdefault((trigger, kind, correct), []).append(fires(trigger, a))
        return out

    real_rows = [
        (o.task_id, o.domain, o.correct, o.answer)
        for o in outcomes
        if o.agent in agents and o.error is None and o.task_id in by_id
    ]
    real = rates(real_rows)
    solvers = [pool.agent(pool.index(a)) for a in agents]
    per_sim = []
    for sim in sims:
        rows = []
        for task_id, kind, _, _ in {(r[0], r[1], True, None) for r in real_rows}:
            for a in solvers:
                o = call(sim, a, task_id)
                rows.append((task_id, kind, o.correct, o.answer))
        per_sim.append(rates(rows))
    figures = []
    for (trigger, kind, correct), fired in sorted(real.items()):
        if not any(f for (t, k, _), v in real.items() if t == trigger and k == kind for f in v):
            continue  # the trigger never fires on this kind's real answers
        lo, hi = wilson_interval(sum(fired), len(fired))
        values = [
            float(np.mean(r[(trigger, kind, correct)])) for r in per_sim if r.get((trigger, kind, correct))
        ]
        mean, s_lo, s_hi = _spread(values) if values else (float("nan"),) * 3
        name = f"{trigger} fires on {'right' if correct else 'wrong'} answers, {kind}"
        figures.append(Figure(name, sum(fired) / len(fired), lo, hi, mean, s_lo, s_hi, len(fired)))
    return figures


def repeat_figure(
    sims: Sequence[SimBackend], pool: Pool, agents: Sequence[str], items: Sequence[str]
) -> Figure:
    """The share of (agent, item) where a second call in the same episode answers as the first did.

    The real table's calls are greedy: a repeat is the same request and answers the same (1 by
    construction; no interval to estimate)."""
    values = []
    for sim in sims:
        same = []
        for name in agents:
            a = pool.agent(pool.index(name))
            for t in items:
                same.append(call(sim, a, t, step=0).answer == call(sim, a, t, step=1).answer)
        values.append(float(np.mean(same)))
    mean, lo, hi = _spread(values)
    return Figure("repeat agreement (all solvers)", 1.0, 1.0, 1.0, mean, lo, hi, len(items) * len(agents))


__all__ = [
    "Figure",
    "Matrix",
    "accuracies",
    "backend",
    "bootstrap_interval",
    "call",
    "flags",
    "headroom",
    "pair_figures",
    "pair_phis",
    "real_matrix",
    "relation_phis",
    "repeat_figure",
    "signal_figures",
    "sim_matrix",
    "single_call_figures",
    "verifier_figures",
]
