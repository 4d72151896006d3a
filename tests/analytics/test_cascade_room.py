"""Cascades on agreement and on a verifier's flag, on a hand-built table (analytics.cascade_room)."""

from __future__ import annotations

import pytest

from puppeteer.analytics.cascade_room import Cascade, choose_per_kind, space, valued
from puppeteer.policies.rule_fit import Answer
from puppeteer.types import Task

IDS = ["k/0", "k/1", "k/2", "k/3"]  # right answers: 1, 2, 5, 6
# every answer a whole number, so no trigger of a rule fires
SINGLES = {
    "k/0": {"F": Answer(True, "1", 1.0), "B": Answer(False, "0", 2.0), "C": Answer(True, "1", 0.25)},
    "k/1": {"F": Answer(True, "2", 1.0), "B": Answer(True, "2", 2.0), "C": Answer(False, "7", 0.25)},
    "k/2": {"F": Answer(False, "3", 1.0), "B": Answer(True, "5", 2.0), "C": Answer(False, "3", 0.25)},
    "k/3": {"F": Answer(False, "4", 1.0), "B": Answer(False, "0", 2.0), "C": Answer(True, "6", 0.25)},
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


def test_a_flag_calls_the_third_agent_only_where_the_verifier_disagrees_and_the_majority_stands() -> None:
    flag = Cascade("F", "V", "B", chain=True)
    assert flag.text == "F>V>B@flag"
    # 1: F 2, V 9, B 2 -> 2 (right); 2: F 3, V 5, B 5 -> 5 (right)
    assert [flag.play(t, SINGLES, CHAINS) for t in IDS] == [
        (True, 1.5),
        (True, 3.5),
        (True, 3.5),
        (False, 1.5),
    ]
    # 1: F 2, V 9, C 7 -> all differ, the latest (C) stands; 2: F 3, V 5, C 3 -> 3
    flag_c = Cascade("F", "V", "C", chain=True)
    assert [g[0] for g in (flag_c.play(t, SINGLES, CHAINS) for t in IDS) if g] == [True, False, False, False]
    # a first agent whose chain was not recorded has no outcome
    assert Cascade("B", "V", "F", chain=True).play("k/0", SINGLES, CHAINS) is None


def test_agreement_stops_after_two_and_otherwise_takes_the_vote_of_three() -> None:
    agree = Cascade("F", "B", "C", chain=False)
    assert agree.text == "agree(F,B)>C"
    # 0: 1, 0, then C 1 -> 1 (right); 1: both 2, stop; 2: 3, 5, then C 3 -> 3 (wrong); 3: 4, 0, 6 -> 6
    got = [agree.play(t, SINGLES, CHAINS) for t in IDS]
    assert got == [(True, 3.25), (True, 3.0), (False, 3.25), (True, 3.25)]


def test_a_silent_answer_is_no_agreement_but_a_silent_verifier_is_no_flag() -> None:
    singles = {
        "k/0": {"F": Answer(False, None, 1.0), "B": Answer(False, None, 2.0), "C": Answer(True, "1", 0.25)}
    }
    assert Cascade("F", "B", "C", chain=False).play("k/0", singles, {}) == (True, 3.25)
    chains = {("F", "V"): {"k/0": Answer(False, None, 0.5)}}
    assert Cascade("F", "V", "C", chain=True).play("k/0", singles, chains) == (False, 1.5)


def test_each_family_is_chosen_only_where_it_pays_at_the_price() -> None:
    rules = space(["F", "B", "C"], CHAINS)
    flags = space(["F", "B", "C"], CHAINS, ["flag"])
    agreement = space(["F", "B", "C"], CHAINS, ["agreement"])
    assert "F>V>B@flag" in flags and "F>V>B@flag" not in rules and "agree(F,B)>C" in agreement
    # lambda 0: every rule scores 2 of 4 (singles, the vote of three, the chain): C, the cheapest
    assert choose_per_kind(rules, TASKS, SINGLES, CHAINS, 0.0) == {"k": "C"}
    assert choose_per_kind(flags, TASKS, SINGLES, CHAINS, 0.0) == {"k": "F>V>B@flag"}
    # agree(B,F)>C plays as agree(F,B)>C here (3 of 4 at 3.25): the tie goes by name
    assert choose_per_kind(agreement, TASKS, SINGLES, CHAINS, 0.0) == {"k": "agree(B,F)>C"}
    v = valued({"k": "F>V>B@flag"}, flags, TASKS, SINGLES, CHAINS)
    assert (v.accuracy, v.cost, v.correct) == (0.75, 2.5, (True, True, True, False))
    # lambda 0.2: 0.75 - 0.2 x 2.5 = 0.25 < C's 0.5 - 0.2 x 0.25 = 0.45
    assert choose_per_kind(flags, TASKS, SINGLES, CHAINS, 0.2) == {"k": "C"}
    assert v.value(0.2) == pytest.approx(0.25)


def test_bad_input_is_an_error() -> None:
    flags = space(["F", "B"], CHAINS, ["flag"])
    other = [Task(id="k/9", suite="toy", domain="k", question="?", answer="", grader="numeric")]
    singles = {"k/9": {"F": Answer(True, "1", 1.0), "B": Answer(True, "1", 2.0)}}
    with pytest.raises(ValueError, match="lacks an answer"):
        valued({"k": "F>V>B@flag"}, flags, other, singles, CHAINS)
    with pytest.raises(ValueError, match="unknown cascade family"):
        space(["F", "B"], CHAINS, ["telepathy"])
