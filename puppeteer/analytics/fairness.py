"""The terms of a fair A/B, and the warnings ``puppeteer ab`` gives where two arms differ in them.

Two arms compare fairly when they choose the final answer the same way (last step, vote, or the
plan's choice), count cost the same way (a conductor LM's own tokens in its cost, or no conductor
LM at all), were trained (or fitted) on the same items, and are evaluated on the same items. Each
eval run's ``results.json`` records the first three (:class:`puppeteer.evaluation.results.EvalResult`:
``final_answer``, ``conductor_cost``, ``train_items``); the items come from its trajectories.
A run written before these were recorded reads as ``unrecorded`` (its conductor's tokens, where it
had one, as not counted: they never were).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from puppeteer.types import TrainItems

UNRECORDED = "unrecorded"
UNTRAINED = "none (untrained, or not recorded)"
NOT_COUNTED = "not counted"


@dataclass(frozen=True)
class ArmTerms:
    """What one arm's results say about how it was run and scored."""

    final_answer: str  # last | vote | plan | unrecorded
    conductor_cost: str  # counted | not counted | none (no conductor LM)
    train_items: str  # "suite/split (first n)" or UNTRAINED


def arm_terms(results: Mapping[str, Any]) -> ArmTerms:
    """An arm's terms from its ``results.json`` (older runs: as far as they tell)."""
    cost = results.get("conductor_cost")
    if cost is None:  # before it was recorded, a conductor's own tokens were never in the cost
        cost = NOT_COUNTED if results.get("mean_conductor_calls") else "none"
    items = results.get("train_items")
    train = str(TrainItems(**items)) if isinstance(items, Mapping) else UNTRAINED
    return ArmTerms(str(results.get("final_answer") or UNRECORDED), str(cost), train)


def run_terms(run_dir: str | Path) -> ArmTerms:
    """:func:`arm_terms` of an eval run directory's ``results.json`` (missing or unreadable: unrecorded)."""
    try:
        results = json.loads((Path(run_dir) / "results.json").read_text())
    except (OSError, ValueError):
        results = {}
    return arm_terms(results if isinstance(results, Mapping) else {})


def fairness_warnings(
    a: ArmTerms,
    b: ArmTerms,
    items_a: Collection[str],
    items_b: Collection[str],
    labels: tuple[str, str] = ("A", "B"),
) -> tuple[str, ...]:
    """One line per term the two arms differ in (empty: a fair A/B as far as the records tell).
    ``items_a`` / ``items_b``: the task ids each arm was evaluated on."""
    la, lb = labels
    out = []
    if a.final_answer != b.final_answer:
        out.append(
            f"the arms choose the final answer differently: {la} {a.final_answer}, {lb} {b.final_answer}"
        )
    if a.conductor_cost != b.conductor_cost and NOT_COUNTED in (a.conductor_cost, b.conductor_cost):
        out.append(
            "the arms count cost differently: the conductor's own tokens are "
            f"{a.conductor_cost} in {la}, {b.conductor_cost} in {lb}"
        )
    if a.train_items != b.train_items:
        out.append(f"the arms were trained on different items: {la} {a.train_items}, {lb} {b.train_items}")
    set_a, set_b = set(items_a), set(items_b)
    if set_a != set_b:
        out.append(
            f"the arms were evaluated on different items: {len(set_a - set_b)} only in {la}, "
            f"{len(set_b - set_a)} only in {lb}; the {len(set_a & set_b)} shared items are compared"
        )
    return tuple(out)


__all__ = ["UNRECORDED", "UNTRAINED", "ArmTerms", "arm_terms", "fairness_warnings", "run_terms"]
