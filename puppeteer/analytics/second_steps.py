"""What a second step does to a first answer, and how agents' errors go together, from an outcome table.

Read from a shipped table (:mod:`puppeteer.backends.replay`): the two-step chains of
``steps.jsonl.gz`` and the single calls of ``outcomes.jsonl.gz``.

- A second agent *flags* a first answer when it states an answer that is not the first one
  (:func:`same_answer`: numbers equal as numbers, option letters equal in any case, programs equal as
  Python syntax trees, so layout and comments do not count). A second step that states no answer does
  not flag (the chain's final answer is then the first one); those are counted apart.
- As a verifier, an agent's *detection rate* is its flag rate on wrong first answers and its *false
  alarm rate* its flag rate on right ones. As a reviser, its *fix rate* is the share of wrong first
  answers whose chain ends right and its *break rate* the share of right ones whose chain ends wrong.
- Error correlation between two agents: the phi coefficient of their error indicators over the items
  they both answered alone, after centring each indicator on its kind's mean (so two agents that are
  both weak on one kind do not correlate for that alone), with a bootstrap interval over items.

Every rate carries a Wilson 95% interval.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from puppeteer.backends.replay import Outcome, StepOutcome
from puppeteer.evaluation.stats import wilson_interval
from puppeteer.utils.pyparse import parse_python


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def _tree(text: str) -> str | None:
    try:
        return ast.dump(parse_python(text))
    except (SyntaxError, ValueError):
        return None


def same_answer(a: str | None, b: str | None) -> bool:
    """Whether two extracted answers say the same thing (see the module docstring)."""
    if a is None or b is None:
        return a is b
    x, y = a.strip(), b.strip()
    if x == y:
        return True
    nx, ny = _number(x), _number(y)
    if nx is not None and ny is not None:
        return nx == ny
    if len(x) == len(y) == 1:
        return x.lower() == y.lower()
    if "\n" in x or "\n" in y or x.startswith("def ") or y.startswith("def "):
        tx, ty = _tree(x), _tree(y)
        return tx is not None and tx == ty
    return " ".join(x.lower().split()) == " ".join(y.lower().split())


def flagged(o: StepOutcome) -> bool:
    """The second step stated an answer other than the first one."""
    return o.answer is not None and not same_answer(o.answer, o.first_answer)


@dataclass(frozen=True)
class Rate:
    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.k, self.n)

    def text(self) -> str:
        if not self.n:
            return "—"
        lo, hi = self.interval
        return f"{self.value:.2f} [{lo:.2f}, {hi:.2f}] ({self.k}/{self.n})"


@dataclass(frozen=True)
class SecondStepRates:
    """One second agent after one group of first answers (a kind, a first agent, or all)."""

    agent: str
    group: str
    n: int
    first_accuracy: Rate
    chain_accuracy: Rate
    detection: Rate  # flags on wrong first answers
    false_alarm: Rate  # flags on right first answers
    fix: Rate  # wrong first answers whose chain ends right
    breaks: Rate  # right first answers whose chain ends wrong
    silent: Rate  # second steps that stated no answer
    model_s: float  # mean single-stream seconds of the second call


def second_step_rates(rows: Sequence[StepOutcome], agent: str, group: str) -> SecondStepRates:
    wrong = [o for o in rows if not o.first_correct]
    right = [o for o in rows if o.first_correct]
    return SecondStepRates(
        agent=agent,
        group=group,
        n=len(rows),
        first_accuracy=Rate(len(right), len(rows)),
        chain_accuracy=Rate(sum(o.correct for o in rows), len(rows)),
        detection=Rate(sum(flagged(o) for o in wrong), len(wrong)),
        false_alarm=Rate(sum(flagged(o) for o in right), len(right)),
        fix=Rate(sum(o.correct for o in wrong), len(wrong)),
        breaks=Rate(sum(not o.correct for o in right), len(right)),
        silent=Rate(sum(o.answer is None for o in rows), len(rows)),
        model_s=float(np.mean([o.model_s for o in rows])) if rows else 0.0,
    )


def rates_by(
    rows: Iterable[StepOutcome], by: str = "domain", splits: Sequence[str] = ("train", "test")
) -> list[SecondStepRates]:
    """Per second agent: one line per value of ``by`` (``domain`` or ``first``), then all pooled."""
    chosen = [o for o in rows if o.split in splits and o.error is None]
    out = []
    for agent in sorted({o.agent for o in chosen}):
        mine = [o for o in chosen if o.agent == agent]
        for value in sorted({getattr(o, by) for o in mine}):
            out.append(second_step_rates([o for o in mine if getattr(o, by) == value], agent, value))
        out.append(second_step_rates(mine, agent, "all"))
    return out


@dataclass(frozen=True)
class PairCorrelation:
    a: str
    b: str
    relation: str  # "same model", "same family", "different family"
    n: int
    phi: float  # within-kind phi of the error indicators
    low: float
    high: float
    both_wrong: float  # P(both wrong)
    b_wrong_given_a_wrong: float
    b_wrong: float


def _phi(x: np.ndarray, y: np.ndarray) -> float:
    sx, sy = x.std(), y.std()
    return float(((x - x.mean()) * (y - y.mean())).mean() / (sx * sy)) if sx > 0 and sy > 0 else float("nan")


def within_kind_phi(a_wrong: np.ndarray, b_wrong: np.ndarray, kinds: np.ndarray) -> float:
    """Phi of two error indicators after subtracting each kind's mean from each."""
    x, y = a_wrong.astype(float).copy(), b_wrong.astype(float).copy()
    for k in np.unique(kinds):
        m = kinds == k
        x[m] -= x[m].mean()
        y[m] -= y[m].mean()
    return _phi(x, y)


def error_correlations(
    outcomes: Iterable[Outcome],
    relation: Mapping[tuple[str, str], str],
    splits: Sequence[str] = ("train", "test"),
    n_boot: int = 2000,
    seed: int = 0,
) -> list[PairCorrelation]:
    """Every pair of agents named in ``relation`` ((a, b) with a < b -> its relation), over shared items."""
    by_item: dict[tuple[str, str], dict[str, Outcome]] = {}
    for o in outcomes:
        if o.split in splits and o.error is None:
            by_item.setdefault((o.split, o.task_id), {})[o.agent] = o
    agents = sorted({a for row in by_item.values() for a in row})
    rng = np.random.default_rng(seed)
    out = []
    for a, b in combinations(agents, 2):
        if (a, b) not in relation:
            continue
        rows = [r for r in by_item.values() if a in r and b in r]
        if len(rows) < 2:
            continue
        aw = np.array([not r[a].correct for r in rows])
        bw = np.array([not r[b].correct for r in rows])
        kinds = np.array([r[a].domain for r in rows])
        phi = within_kind_phi(aw, bw, kinds)
        boots = []
        for _ in range(n_boot):
            i = rng.integers(0, len(rows), len(rows))
            boots.append(within_kind_phi(aw[i], bw[i], kinds[i]))
        lo, hi = np.nanpercentile(boots, [2.5, 97.5])
        out.append(
            PairCorrelation(
                a=a,
                b=b,
                relation=relation[(a, b)],
                n=len(rows),
                phi=phi,
                low=float(lo),
                high=float(hi),
                both_wrong=float((aw & bw).mean()),
                b_wrong_given_a_wrong=float(bw[aw].mean()) if aw.any() else float("nan"),
                b_wrong=float(bw.mean()),
            )
        )
    return out


def relations(models: Mapping[str, str], families: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """``(a, b) -> relation`` for every pair of agents (a < b): ``models`` maps agent -> model key,
    ``families`` model key -> family name."""
    out = {}
    for a, b in combinations(sorted(models), 2):
        if models[a] == models[b]:
            out[(a, b)] = "same model"
        elif families[models[a]] == families[models[b]]:
            out[(a, b)] = "same family"
        else:
            out[(a, b)] = "different family"
    return out
