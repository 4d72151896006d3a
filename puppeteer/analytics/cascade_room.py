"""What the answers of earlier steps could add to the best rule: cascades on agreement and on a flag.

A rule of :mod:`puppeteer.policies.rules` reads the first answer only (its triggers: no answer, not a
whole number, a failed visible check) or calls a fixed set. A step-wise policy also sees what a
*second* step said. Two cascades use that:

- ``agree(A,B)>C``: A and B answer alone; when B says what A said, stop; else (one of them silent
  too) C answers alone;
- ``A>V>C@flag``: A answers, then the verifier V is shown A's work (a chain the table recorded); when
  V states A's answer (or none), stop; when it *flags* (states another), C answers alone too.

"Says the same" is :func:`puppeteer.analytics.second_steps.same_answer`. With three answers the final
one is the step-mode aggregation's: the majority, ties to the latest
(:func:`puppeteer.envs.aggregate.majority_vote`). A cascade's cost is the calls it made.

:func:`choose_per_kind` picks the best candidate of a space per kind on one item set (value =
accuracy - lambda x mean cost, ties to the cheaper, then by name) and :func:`valued` plays the picks
on another, so the same two calls give the out-of-sample value (choose on train, value on held-out)
and the in-sample bound (choose and value on held-out).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from puppeteer.analytics.second_steps import same_answer
from puppeteer.envs.aggregate import majority_vote
from puppeteer.policies.rule_fit import Answer, Chains, Chosen, Singles, outcome, rule_space
from puppeteer.types import Task

Got = tuple[bool, float] | None  # (correct, cost) on one item; None: an answer it needs is missing
Play = Callable[[str, Singles, Chains], Got]


@dataclass(frozen=True)
class Cascade:
    """``first`` and ``second`` (``chain``: the second reads the first's work, a recorded chain);
    ``third`` only where the second says something else."""

    first: str
    second: str
    third: str
    chain: bool

    @property
    def text(self) -> str:
        if self.chain:
            return f"{self.first}>{self.second}>{self.third}@flag"
        return f"agree({self.first},{self.second})>{self.third}"

    def _second(self, task_id: str, singles: Singles, chains: Chains) -> Answer | None:
        if self.chain:
            return chains.get((self.first, self.second), {}).get(task_id)
        return singles.get(task_id, {}).get(self.second)

    def play(self, task_id: str, singles: Singles, chains: Chains) -> Got:
        row = singles.get(task_id, {})
        a, b = row.get(self.first), self._second(task_id, singles, chains)
        if a is None or b is None:
            return None
        silent_check = self.chain and b.answer is None  # a verifier that states nothing flags nothing
        if silent_check or (a.answer is not None and same_answer(a.answer, b.answer)):
            return a.correct, a.cost + b.cost
        c = row.get(self.third)
        if c is None:
            return None
        said = [a, b, c]
        winner = majority_vote([m.answer for m in said])
        correct = any(m.correct for m in said if winner is not None and m.answer == winner)
        return correct, a.cost + b.cost + c.cost


def _agreements(solvers: Sequence[str], chains: Sequence[tuple[str, str]]) -> list[Cascade]:
    return [
        Cascade(a, b, c, chain=False)
        for a, b in itertools.permutations(solvers, 2)
        for c in solvers
        if c not in (a, b)
    ]


def _flags(solvers: Sequence[str], chains: Sequence[tuple[str, str]]) -> list[Cascade]:
    return [Cascade(f, v, c, chain=True) for f, v in chains for c in solvers if c != f]


CASCADES: Mapping[str, Callable[[Sequence[str], Sequence[tuple[str, str]]], list[Cascade]]] = (
    MappingProxyType({"agreement": _agreements, "flag": _flags})
)
"""The cascade families a space can add to the rules: name -> (solvers, recorded chains) -> cascades."""


def space(
    solvers: Sequence[str], chains: Iterable[tuple[str, str]], cascades: Sequence[str] = ()
) -> dict[str, Play]:
    """The rule space of :func:`puppeteer.policies.rule_fit.rule_space` (with the recorded chains),
    plus the :data:`CASCADES` families named: candidate text -> how it plays an item."""
    pairs = list(chains)
    out: dict[str, Play] = {}
    for rule in rule_space(solvers, pairs):
        out[rule.text] = lambda t, s, c, rule=rule: outcome(rule, t, s, c)
    for family in cascades:
        if family not in CASCADES:
            raise ValueError(f"unknown cascade family {family!r}; known: {', '.join(CASCADES)}")
        for cascade in CASCADES[family](solvers, pairs):
            out[cascade.text] = cascade.play
    return out


def choose_per_kind(
    candidates: Mapping[str, Play], tasks: Sequence[Task], singles: Singles, chains: Chains, lam: float
) -> dict[str, str]:
    """Kind -> the text of its best candidate on ``tasks`` (skipping any that lacks an answer there)."""
    kinds: dict[str, list[str]] = {}
    for t in tasks:
        kinds.setdefault(t.domain, []).append(t.id)
    chosen = {}
    for kind, items in sorted(kinds.items()):
        scored = []
        for text, play in candidates.items():
            got = [play(t, singles, chains) for t in items]
            if any(g is None for g in got):
                continue
            acc = sum(g[0] for g in got if g is not None) / len(items)
            cost = sum(g[1] for g in got if g is not None) / len(items)
            scored.append((-(acc - lam * cost), cost, text))
        if not scored:
            raise ValueError(f"no candidate has an answer on every {kind!r} item")
        chosen[kind] = min(scored)[2]
    return chosen


def valued(
    picks: Mapping[str, str],
    candidates: Mapping[str, Play],
    tasks: Sequence[Task],
    singles: Singles,
    chains: Chains,
) -> Chosen[str]:
    """Each item played by its kind's pick (the routes: kind -> the pick's text)."""
    got = []
    for t in tasks:
        g = candidates[picks[t.domain]](t.id, singles, chains)
        if g is None:
            raise ValueError(f"{picks[t.domain]!r} lacks an answer on {t.id!r}")
        got.append(g)
    if not got:
        raise ValueError("no items to value")
    return Chosen(tuple(sorted(picks.items())), tuple(got))
