"""What a verifier's flag could add to the best rule: per kind, the rule space plus flag escalations.

A *flag escalation* ``F>V>B@flag`` calls F, then the verifier V on F's work (a chain the table
recorded); when V states an answer other than F's (it *flags*:
:func:`puppeteer.analytics.second_steps.same_answer`), B answers alone and its answer stands, else F's
answer stands. With B = V the verifier's own answer stands on a flag, which is the recorded chain
``F>V@always`` (already a rule). A rule of :mod:`puppeteer.policies.rules` cannot express the others:
its triggers read the first answer only, and this reads the second step's verdict, the signal a
step-wise policy sees and a rule does not.

:func:`choose_per_kind` picks the best candidate of a space per kind on one item set (value =
accuracy - lambda x mean cost, ties to the cheaper, then by name) and :func:`valued` scores the picks
on another, so the same two calls give the out-of-sample value (choose on train, value on held-out)
and the in-sample bound (choose and value on held-out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from puppeteer.analytics.second_steps import same_answer
from puppeteer.policies.rule_fit import Chains, Singles, outcome, rule_space
from puppeteer.types import Task

Got = tuple[bool, float] | None  # (correct, cost) on one item; None: an answer it needs is missing
Play = Callable[[str, Singles, Chains], Got]


@dataclass(frozen=True)
class FlagEscalation:
    """``first``, then ``verifier`` on its answer; on a flag, ``backup`` alone (its answer stands)."""

    first: str
    verifier: str
    backup: str

    @property
    def text(self) -> str:
        return f"{self.first}>{self.verifier}>{self.backup}@flag"

    def play(self, task_id: str, singles: Singles, chains: Chains) -> Got:
        row = singles.get(task_id, {})
        check = chains.get((self.first, self.verifier), {}).get(task_id)
        if self.first not in row or check is None:
            return None
        a = row[self.first]
        cost = a.cost + check.cost
        if check.answer is None or same_answer(check.answer, a.answer):
            return a.correct, cost
        if self.backup == self.verifier:
            return check.correct, cost
        b = row.get(self.backup)
        if b is None:
            return None
        return (b.correct if b.answer is not None else a.correct), cost + b.cost


def flag_escalations(solvers: Sequence[str], chains: Iterable[tuple[str, str]]) -> list[FlagEscalation]:
    """For each recorded chain (F, V): V's own answer on a flag, and every other solver on a flag."""
    out = []
    for first, verifier in chains:
        out.append(FlagEscalation(first, verifier, verifier))
        out += [FlagEscalation(first, verifier, b) for b in solvers if b != first]
    return out


def space(solvers: Sequence[str], chains: Iterable[tuple[str, str]], flags: bool) -> dict[str, Play]:
    """The rule space of :func:`puppeteer.policies.rule_fit.rule_space` (with the recorded chains),
    plus the flag escalations when ``flags``: candidate text -> how it plays an item."""
    pairs = list(chains)
    out: dict[str, Play] = {}
    for rule in rule_space(solvers, pairs):
        out[rule.text] = lambda t, s, c, rule=rule: outcome(rule, t, s, c)
    if flags:
        for f in flag_escalations(solvers, pairs):
            out[f.text] = f.play
    return out


def _by_kind(tasks: Sequence[Task]) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for t in tasks:
        kinds.setdefault(t.domain, []).append(t.id)
    return kinds


def choose_per_kind(
    candidates: Mapping[str, Play], tasks: Sequence[Task], singles: Singles, chains: Chains, lam: float
) -> dict[str, str]:
    """Kind -> the text of its best candidate on ``tasks`` (skipping any that lacks an answer there)."""
    chosen = {}
    for kind, items in sorted(_by_kind(tasks).items()):
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


@dataclass(frozen=True)
class Valued:
    accuracy: float
    cost: float
    correct: tuple[bool, ...]  # per valued item, in order
    picks: Mapping[str, str]  # kind -> candidate text

    def value(self, lam: float) -> float:
        return self.accuracy - lam * self.cost


def valued(
    picks: Mapping[str, str],
    candidates: Mapping[str, Play],
    tasks: Sequence[Task],
    singles: Singles,
    chains: Chains,
) -> Valued:
    """Each item played by its kind's pick."""
    got = []
    for t in tasks:
        g = candidates[picks[t.domain]](t.id, singles, chains)
        if g is None:
            raise ValueError(f"{picks[t.domain]!r} lacks an answer on {t.id!r}")
        got.append(g)
    if not got:
        raise ValueError("no items to value")
    n = len(got)
    return Valued(
        accuracy=sum(c for c, _ in got) / n,
        cost=sum(x for _, x in got) / n,
        correct=tuple(c for c, _ in got),
        picks=dict(picks),
    )
