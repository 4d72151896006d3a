"""The declared plan space and the choices over recorded plan outcomes (experiments/plan-space)."""

from __future__ import annotations

import pytest

from tests.experiment_modules import experiment_module

_plans = experiment_module("plan-space", "plan_space")
choose_by_kind, choose_plan, oracle = _plans.choose_by_kind, _plans.choose_plan, _plans.oracle
plan_form, plan_specs, routed, value_of = _plans.plan_form, _plans.plan_specs, _plans.routed, _plans.value_of


def test_plan_specs_counts_and_order() -> None:
    specs = plan_specs(["a", "b", "c", "d"], revisers=["v"])
    forms = [plan_form(s) for s in specs]
    assert forms.count("single") == 5  # four solvers and the reviser alone
    assert forms.count("chain") == 4 * 3 + 4  # ordered solver pairs, then each solver -> the reviser
    assert forms.count("vote") == 4  # C(4, 3)
    assert specs[:2] == ["single:a", "single:b"]
    assert "chain:b,a" in specs and "chain:a,v" in specs and "chain:v,a" not in specs
    assert "vote:a,b,c" in specs and "vote:b,a,c" not in specs  # members in the order given
    small = plan_specs(["a", "b", "c"], pair_agents=["a", "b"], vote_agents=["a", "b"])
    assert [s for s in small if s.startswith("chain")] == ["chain:a,b", "chain:b,a"]
    assert not [s for s in small if s.startswith("vote")]  # fewer voters than k
    cascades = plan_specs(["a", "b", "c"], cascades=("silent", "failed-check"))
    escalations = [s for s in cascades if plan_form(s) == "escalate"]
    assert len(escalations) == 2 * 3 * 2  # every ordered pair on each trigger
    assert "escalate:b,a@failed-check" in escalations
    assert [s for s in cascades if s not in escalations] == plan_specs(["a", "b", "c"])  # added, last


def test_plan_specs_build_as_policies() -> None:
    from puppeteer.agents.pool import load_pool
    from puppeteer.policies.registry import make_policy

    pool = load_pool("sim-routing")
    names = [a.name for a in pool.agents][:3]
    for spec in plan_specs(names, cascades=("not-integer",)):
        policy = make_policy(spec, pool, 3)
        want = {"vote": "vote", "escalate": "cascade"}.get(plan_form(spec), "last")
        assert policy.aggregate == want


# two kinds, three plans, four items: x1, x2 of kind X; y1, y2 of kind Y
OUT = {
    "single:a": {"x1": (True, 1.0), "x2": (True, 1.0), "y1": (False, 1.0), "y2": (False, 1.0)},
    "single:b": {"x1": (False, 0.2), "x2": (True, 0.2), "y1": (True, 0.2), "y2": (True, 0.2)},
    "vote:a,b,c": {"x1": (True, 3.0), "x2": (True, 3.0), "y1": (True, 3.0), "y2": (False, 3.0)},
}
KINDS = {"x1": "X", "x2": "X", "y1": "Y", "y2": "Y"}


def test_values_and_choices_on_a_toy_table() -> None:
    items = list(KINDS)
    v = value_of((OUT["single:b"][i] for i in items), lam=0.5)
    assert (v.accuracy, v.cost, v.value, v.n) == (0.75, pytest.approx(0.2), pytest.approx(0.65), 4)
    assert choose_plan(OUT, items, lam=0.0) == "single:b"  # 0.75 against 0.5 and 0.75 at cost 3
    assert choose_plan(OUT, items, lam=0.0, plans=["single:a", "vote:a,b,c"]) == "vote:a,b,c"
    # per kind at lambda 0.1: X: a 1 - 0.1 = 0.9, b 0.5 - 0.02, vote 1 - 0.3 -> a; Y: b 1 - 0.02 -> b
    choice = choose_by_kind(OUT, KINDS, lam=0.1)
    assert choice == {"X": "single:a", "Y": "single:b"}
    got = routed(OUT, choice, KINDS)
    assert value_of(got.values(), 0.1).accuracy == 1.0
    assert value_of(got.values(), 0.1).cost == pytest.approx(0.6)


def test_oracle_takes_the_cheapest_right_plan_per_item() -> None:
    best = oracle(OUT, list(KINDS), lam=0.1)
    assert best == {"x1": (True, 1.0), "x2": (True, 0.2), "y1": (True, 0.2), "y2": (True, 0.2)}
    assert value_of(best.values(), 0.1).value == pytest.approx(1.0 - 0.1 * 0.4)
    # an item no plan gets right: the cheapest wrong outcome
    assert oracle({"p": {"i": (False, 2.0)}, "q": {"i": (False, 1.0)}}, ["i"], lam=1.0) == {"i": (False, 1.0)}


def test_plans_missing_an_item_are_not_chosen() -> None:
    partial = {**OUT, "chain:a,b": {"x1": (True, 0.0)}}
    assert choose_plan(partial, ["x1"], lam=1.0) == "chain:a,b"
    assert choose_plan(partial, ["x1", "x2"], lam=1.0) != "chain:a,b"
    with pytest.raises(ValueError):
        choose_plan(partial, ["zz"], lam=0.0)
