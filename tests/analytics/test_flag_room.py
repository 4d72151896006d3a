"""Flag escalations on a hand-built table (puppeteer.analytics.flag_room)."""

from __future__ import annotations

import pytest

from puppeteer.analytics.flag_room import FlagEscalation, choose_per_kind, space, valued
from puppeteer.policies.rule_fit import Answer
from puppeteer.types import Task

IDS = ["k/0", "k/1", "k/2", "k/3"]
# F right on 0 and 1; B right on 1 and 2; every answer a whole number, so no trigger of a rule fires
SINGLES = {
    "k/0": {"F": Answer(True, "1", 1.0), "B": Answer(False, "0", 2.0)},
    "k/1": {"F": Answer(True, "2", 1.0), "B": Answer(True, "2", 2.0)},
    "k/2": {"F": Answer(False, "3", 1.0), "B": Answer(True, "5", 2.0)},
    "k/3": {"F": Answer(False, "4", 1.0), "B": Answer(False, "0", 2.0)},
}
# the verifier after F: repeats a right answer (0), flags a right one (1), flags a wrong one with the
# right answer (2), repeats a wrong one (3, written "4.0": the same number, so no flag)
CHAINS = {
    ("F", "V"): {
        "k/0": Answer(True, "1", 0.5),
        "k/1": Answer(False, "9", 0.5),
        "k/2": Answer(True, "5", 0.5),
        "k/3": Answer(False, "4.0", 0.5),
    }
}
TASKS = [Task(id=i, suite="toy", domain="k", question="?", answer="", grader="numeric") for i in IDS]


def test_a_flag_escalation_calls_the_backup_only_where_the_verifier_disagrees() -> None:
    got = [FlagEscalation("F", "V", "B").play(t, SINGLES, CHAINS) for t in IDS]
    assert got == [(True, 1.5), (True, 3.5), (True, 3.5), (False, 1.5)]
    # the backup is the verifier itself: its answer stands on a flag (the recorded chain's grade)
    got = [FlagEscalation("F", "V", "V").play(t, SINGLES, CHAINS) for t in IDS]
    assert got == [(True, 1.5), (False, 1.5), (True, 1.5), (False, 1.5)]
    # a first agent whose chain was not recorded has no outcome
    assert FlagEscalation("B", "V", "F").play("k/0", SINGLES, CHAINS) is None


def test_the_flag_pays_at_lambda_zero_and_loses_to_the_cheap_agent_once_its_calls_are_priced() -> None:
    rules = space(["F", "B"], CHAINS, flags=False)
    both = space(["F", "B"], CHAINS, flags=True)
    assert "F>V>B@flag" in both and "F>V>B@flag" not in rules
    # lambda 0: no rule beats 0.5 (F, B and the chain all score 2 of 4): F, the cheapest of them
    assert choose_per_kind(rules, TASKS, SINGLES, CHAINS, 0.0) == {"k": "F"}
    assert choose_per_kind(both, TASKS, SINGLES, CHAINS, 0.0) == {"k": "F>V>B@flag"}
    v = valued({"k": "F>V>B@flag"}, both, TASKS, SINGLES, CHAINS)
    assert (v.accuracy, v.cost, v.correct) == (0.75, 2.5, (True, True, True, False))
    # lambda 0.2: 0.75 - 0.2 x 2.5 = 0.25 < F's 0.5 - 0.2 x 1 = 0.3
    assert choose_per_kind(both, TASKS, SINGLES, CHAINS, 0.2) == {"k": "F"}
    assert v.value(0.2) == pytest.approx(0.25)


def test_valuing_a_pick_on_items_without_its_chain_is_an_error() -> None:
    both = space(["F", "B"], CHAINS, flags=True)
    other = [Task(id="k/9", suite="toy", domain="k", question="?", answer="", grader="numeric")]
    singles = {"k/9": {"F": Answer(True, "1", 1.0), "B": Answer(True, "1", 2.0)}}
    with pytest.raises(ValueError, match="lacks an answer"):
        valued({"k": "F>V>B@flag"}, both, other, singles, CHAINS)
