"""A declared space of fixed plans (workflows a conductor could write) and the best of it on outcomes.

:func:`plan_specs` lists the plans as policy specs (:data:`~puppeteer.policies.baselines.SPEC_FORMS`):
every agent alone (``single:A``); every ordered pair of distinct agents whose second step sees the first
and gives the final answer (``chain:A,B``); every vote of ``k`` distinct agents answering independently
(``vote:A,B,C``, the first listed winning ties). Each plan runs through the ordinary workflow-mode
evaluation; what it did on each item, ``(correct, cost)``, is an :data:`Outcomes` row. The functions
below choose on those rows at a lambda, as :mod:`puppeteer.policies.rule_fit` chooses rules: value =
accuracy - lambda x mean cost per item, ties to the cheaper plan, then to the first spec by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from puppeteer.policies.plan_space import plan_form, plan_specs

Outcome = tuple[bool, float]  # (correct, cost in the run's cost model)
Outcomes = Mapping[str, Mapping[str, Outcome]]  # plan spec -> item key -> its outcome there


@dataclass(frozen=True)
class PlanValue:
    """A plan's accuracy, mean cost per item and value (accuracy - lambda x cost) over some items."""

    accuracy: float
    cost: float
    value: float
    n: int


def value_of(rows: Iterable[Outcome], lam: float) -> PlanValue:
    got = list(rows)
    if not got:
        raise ValueError("no items to value")
    acc = sum(c for c, _ in got) / len(got)
    cost = sum(x for _, x in got) / len(got)
    return PlanValue(acc, cost, acc - lam * cost, len(got))


def _covers(outcomes: Outcomes, plan: str, items: Iterable[str]) -> bool:
    row = outcomes.get(plan, {})
    return all(i in row for i in items)


def choose_plan(
    outcomes: Outcomes, items: Sequence[str], lam: float, plans: Iterable[str] | None = None
) -> str:
    """The plan of highest value on ``items`` among ``plans`` (default: all) that cover every item."""
    scored = []
    for plan in plans if plans is not None else outcomes:
        if _covers(outcomes, plan, items):
            v = value_of((outcomes[plan][i] for i in items), lam)
            scored.append((-v.value, v.cost, plan))
    if not scored:
        raise ValueError("no plan has an outcome on every item")
    return min(scored)[2]


def choose_by_kind(
    outcomes: Outcomes, kinds: Mapping[str, str], lam: float, plans: Iterable[str] | None = None
) -> dict[str, str]:
    """Per kind (``kinds``: item key -> its kind), the plan of highest value on that kind's items."""
    by_kind: dict[str, list[str]] = {}
    for item, kind in kinds.items():
        by_kind.setdefault(kind, []).append(item)
    pool = list(plans) if plans is not None else list(outcomes)
    return {k: choose_plan(outcomes, items, lam, pool) for k, items in sorted(by_kind.items())}


def routed(outcomes: Outcomes, choice: Mapping[str, str], kinds: Mapping[str, str]) -> dict[str, Outcome]:
    """Each item's outcome under the plan ``choice`` names for its kind (``*``: any other kind)."""
    return {i: outcomes[choice.get(k, choice.get("*", ""))][i] for i, k in kinds.items()}


def oracle(
    outcomes: Outcomes, items: Sequence[str], lam: float, plans: Iterable[str] | None = None
) -> dict[str, Outcome]:
    """Per item, the outcome of the plan that did best there in hindsight (correct - lambda x cost;
    unattainable: it needs each call's luck before calling)."""
    pool = [p for p in (plans if plans is not None else outcomes) if _covers(outcomes, p, items)]
    if not pool:
        raise ValueError("no plan has an outcome on every item")
    return {i: max((outcomes[p][i] for p in pool), key=lambda o: (o[0] - lam * o[1], -o[1])) for i in items}


__all__ = [
    "Outcome",
    "Outcomes",
    "PlanValue",
    "choose_by_kind",
    "choose_plan",
    "oracle",
    "plan_form",
    "plan_specs",
    "routed",
    "value_of",
]
