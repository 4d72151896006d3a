"""Rules as baselines: parsing, what each rule does step by step on a scripted pool, and the best rule
of the declared space, chosen on training items at the run's lambda (hand-computed on a toy pool)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.policies.registry import load_policy, make_policy
from puppeteer.policies.rule_fit import (
    Answer,
    choose,
    choose_and_value,
    fit_from_answers,
    outcome,
    rule_space,
    rule_value,
)
from puppeteer.policies.rules import Rule, RulePolicy
from puppeteer.types import Task
from tests.policies.test_cascade import TASKS, Scripted, _pool


def test_rule_text_round_trips_and_bad_rules_fail() -> None:
    for text in ("a", "a>b@silent", "a>b@failed-check", "vote(a+b+c)"):
        assert Rule.parse(text).text == text
    assert Rule.parse("vote(a+b+c)").calls() == ("c", "b", "a")  # the first listed answers last: wins ties
    for bad in ("a>b", "a>b@sometimes", "vote(a+a)", "vote(a)", "", "a@b"):
        with pytest.raises(ValueError):
            Rule.parse(bad)


# ----------------------------------------------------------------------------- composed on answers

# kind x: three items; kind y: two. cost in the run's units (tokens / 1000 here)
ANSWERS = {
    "x/1": {"a": Answer(True, "1", 0.1), "b": Answer(True, "1", 1.0), "c": Answer(True, "1", 2.0)},
    "x/2": {"a": Answer(False, None, 0.1), "b": Answer(True, "2", 1.0), "c": Answer(False, "9", 2.0)},
    "x/3": {"a": Answer(False, "7.5", 0.1), "b": Answer(False, "8", 1.0), "c": Answer(True, "3", 2.0)},
    "y/1": {"a": Answer(True, "A", 0.1), "b": Answer(False, "B", 1.0), "c": Answer(True, "A", 2.0)},
    "y/2": {"a": Answer(False, "C", 0.1), "b": Answer(True, "D", 1.0), "c": Answer(True, "D", 2.0)},
}
X, Y = ["x/1", "x/2", "x/3"], ["y/1", "y/2"]
TOY = tuple(Task(t, "q", "", "toy", t[0], "numeric") for t in (*X, *Y))


def test_each_rule_form_composed_by_hand() -> None:
    esc = Rule.parse("a>b@silent")
    # x/2: a silent -> b (right), 1.1; x/3: a answered 7.5 -> a stands (wrong), 0.1
    assert outcome(esc, "x/2", ANSWERS, {}) == (True, 1.1)
    assert outcome(esc, "x/3", ANSWERS, {}) == (False, 0.1)
    nonint = Rule.parse("a>c@not-integer")  # x/3: 7.5 is not whole -> c (right)
    assert outcome(nonint, "x/3", ANSWERS, {}) == (True, 2.1)
    vote = Rule.parse("vote(b+a+c)")
    # x/2: b 2, a none, c 9: a tie of 2 and 9 goes to b, the first listed; y/1: a and c say A (right)
    assert outcome(vote, "x/2", ANSWERS, {}) == (True, 3.1)
    assert outcome(vote, "y/1", ANSWERS, {}) == (True, 3.1)
    # a recorded chain: a then a verifier v that fixes x/3 (its own cost 0.5)
    chains = {("a", "v"): {"x/3": Answer(True, "3", 0.5)}}
    assert outcome(Rule.parse("a>v@always"), "x/3", ANSWERS, chains) == (True, 0.6)
    assert outcome(Rule.parse("a>v@always"), "x/1", ANSWERS, chains) is None  # not recorded there


def test_the_best_rule_per_kind_at_a_price_by_hand() -> None:
    # kind x, lam 0: no rule is right on all three (x/2 needs b or a's silence escalated, x/3 needs c,
    # and no trigger fires on b's 8 or a's 7.5 toward c but not-integer, which sends x/2's silence to
    # c's wrong 9), so the cheapest 2/3 wins: a>b@silent at (0.1 + 1.1 + 0.1) / 3, not b alone at 1.0
    space = rule_space(["a", "b", "c"], forms="rule")
    best, value = choose(space, X, ANSWERS, {}, lam=0.0)
    assert (best.text, value) == ("a>b@silent", pytest.approx(2 / 3))
    assert rule_value(best, X, ANSWERS, {}, 0.0) == (pytest.approx(2 / 3), pytest.approx(1.3 / 3))
    # lam 0.5 per unit: a>b@silent 2/3 - 0.217 = 0.450 beats a alone 1/3 - 0.05 and b 2/3 - 0.5
    best, value = choose(space, X, ANSWERS, {}, lam=0.5)
    assert (best.text, value) == ("a>b@silent", pytest.approx(2 / 3 - 0.5 * 1.3 / 3))
    # lam 1: a>b@silent 2/3 - 0.433 ties a alone 1/3 - 0.1 at 0.233: the cheaper, a, wins
    assert choose(space, X, ANSWERS, {}, lam=1.0)[0].text == "a"
    # kind y at lam 0: c is right on both (2.0 each); a>c on a trigger never fires (A, C are answers, not
    # whole numbers: not-integer fires on both -> c, right on both at 2.1): c alone is cheaper
    assert choose(rule_space(["a", "b", "c"]), Y, ANSWERS, {}, 0.0)[0].text == "c"
    routes = fit_from_answers(TOY, ANSWERS, {}, ["a", "b", "c"], 0.0, "kind")
    assert [(k, r.text) for k, r in routes] == [("x", "b"), ("y", "c")]
    # one agent for everything: b 3/5 = c 4/5? c: x 2/3 + y 2/2 = 4/5 beats b 3/5
    assert [(k, r.text) for k, r in fit_from_answers(TOY, ANSWERS, {}, ["a", "b", "c"], 0.0, "single")] == [
        ("*", "c")
    ]


# two held-out items with other answers: x/4 (a and c right), x/5 (b and c right)
HELD = {
    "x/4": {"a": Answer(True, "4", 0.1), "b": Answer(False, "5", 1.0), "c": Answer(True, "4", 2.0)},
    "x/5": {"a": Answer(False, "6", 0.1), "b": Answer(True, "5", 1.0), "c": Answer(True, "5", 2.0)},
}
HELD_TASKS = tuple(Task(t, "q", "", "toy", "x", "numeric") for t in HELD)


def test_rules_chosen_on_one_item_set_and_valued_on_another_by_hand() -> None:
    solvers = ["a", "b", "c"]
    # in-sample, per kind at lam 0: x -> b (right on x/1, x/2), y -> c (right on both): 4/5 at cost 7/5
    ins = choose_and_value(TOY, ANSWERS, TOY, ANSWERS, solvers, 0.0, "kind")
    assert [(k, r.text) for k, r in ins.routes] == [("x", "b"), ("y", "c")]
    assert ins.correct == (True, True, False, True, True)
    assert (ins.accuracy, ins.cost) == (pytest.approx(4 / 5), pytest.approx(7 / 5))
    assert ins.value(0.5) == pytest.approx(4 / 5 - 0.5 * 7 / 5)
    # chosen on TOY, valued on HELD: x's b is wrong on x/4 (1.0), right on x/5 (1.0): 1/2 at 1.0
    out = choose_and_value(TOY, ANSWERS, HELD_TASKS, HELD, solvers, 0.0, "kind")
    assert out.outcomes == ((False, 1.0), (True, 1.0))
    # HELD's own in-sample choice: on x, a and b are right once each, c twice: c, 2/2 at 2.0
    assert choose_and_value(HELD_TASKS, HELD, HELD_TASKS, HELD, solvers, 0.0, "kind").outcomes == (
        (True, 2.0),
        (True, 2.0),
    )
    # per bin: x:easy (x/1, all right) -> a, the cheapest; x:hard (x/2 needs b, x/3 needs c) -> b, 1/2
    # at 1.0 beats c's 1/2 at 2.0; y:mid -> c. x/4's bin x:mid is not among the choosing items: its
    # kind's rule b (wrong, 1.0); x/5 is x:easy -> a (wrong, 0.1)
    bins = {"x/1": "x:easy", "x/2": "x:hard", "x/3": "x:hard", "y/1": "y:mid", "y/2": "y:mid"}
    bins |= {"x/4": "x:mid", "x/5": "x:easy"}
    binned = choose_and_value(TOY, ANSWERS, HELD_TASKS, HELD, solvers, 0.0, "kind", bins=bins)
    assert [(k, r.text) for k, r in binned.routes] == [("x:easy", "a"), ("x:hard", "b"), ("y:mid", "c")]
    assert binned.outcomes == ((False, 1.0), (False, 0.1))
    assert binned.accuracy == 0.0 and binned.cost == pytest.approx(0.55)
    # one agent for everything: c (4/5), through the "*" route
    single = choose_and_value(TOY, ANSWERS, TOY, ANSWERS, solvers, 0.0, "single")
    assert [(k, r.text) for k, r in single.routes] == [("*", "c")] and single.accuracy == pytest.approx(4 / 5)
    with pytest.raises(ValueError):
        choose_and_value(TOY, ANSWERS, (), HELD, solvers, 0.0, "kind")


# ----------------------------------------------------------------------------- run step by step


def test_rules_run_step_by_step_and_escalate_only_when_the_trigger_fires(tmp_path: Path) -> None:
    """The scripted pool of tests/policies/test_cascade.py: `cheap` gives no answer on t/0 and 4 on t/1,
    `strong` is always right (1000 tokens). cheap>strong@silent escalates t/0 only; @always would be a
    chain."""
    backend = Scripted({"t/0": "No idea.", "t/1": "Answer: 4"})
    pool = _pool(True)
    policy = load_policy("rules:math=cheap>strong@silent", pool)
    assert isinstance(policy, RulePolicy)
    res = evaluate_policy(
        policy, pool, "t", tasks=TASKS, backend=backend, out_dir=tmp_path / "r", progress=False
    )
    assert res.correct == 2 and res.mean_calls == 1.5
    lines = [json.loads(x) for x in (tmp_path / "r" / "trajectories.jsonl").read_text().splitlines()]
    calls = {d["task_id"]: [s["agent_name"] for s in d["steps"]] for d in lines}
    assert calls == {"t/0": ["cheap", "strong"], "t/1": ["cheap"]}
    vote = make_policy("rules:*=vote(strong+cheap)", pool)
    two = Scripted({"t/0": "Answer: 1", "t/1": "Answer: 4"})
    res = evaluate_policy(vote, pool, "t", tasks=TASKS, backend=two, progress=False)
    assert res.correct == 2 and res.mean_calls == 2.0  # t/0: 1 against 7, a tie the first listed wins
    with pytest.raises(ValueError, match="names no rule"):
        evaluate_policy(make_policy("rules:other=cheap", pool), pool, "t", tasks=TASKS, backend=backend)


def test_the_fitted_rules_choose_on_the_training_items_of_the_sim(tmp_path: Path) -> None:
    """best-kind on a simulated pool: the rule it runs per kind is what choose() gives on the solvers'
    training answers, whatever the held-out items say; its eval lines name the rule."""
    from puppeteer.agents.pool import load_pool
    from puppeteer.policies.rule_fit import fit_rules
    from puppeteer.tasks import load_suite

    pool = load_pool("sim-paper").subset(["gpt5-cot", "gemma3-27b-cot", "qwen3-32b-cot"])
    train = load_suite("mix-paper", "train", n=30)
    expected = dict(fit_rules(pool, train, 0.1, "kind"))
    res = evaluate_policy("best-kind:30", pool, "mix-paper", split="test", n=12, lam=0.1,
                          out_dir=tmp_path / "b", progress=False)  # fmt: skip
    assert res.n == 12 and res.n_errors == 0
    lines = [json.loads(x) for x in (tmp_path / "b" / "trajectories.jsonl").read_text().splitlines()]
    tasks = {t.id: t for t in load_suite("mix-paper", "test", n=12)}
    for d in lines:
        assert d["rule"] == expected[tasks[d["task_id"]].domain].text


def test_ab_with_rules_compares_the_first_arm_with_the_best_rule_and_the_best_single_agent(
    tmp_path: Path,
) -> None:
    from puppeteer.cli.analytics import rule_arms
    from puppeteer.cli.app import main

    assert rule_arms(200, "minutes") == ["best-rule:200:minutes", "best-single:200:minutes"]
    assert rule_arms(50, None) == ["best-rule:50", "best-single:50"]
    out = tmp_path / "ab"
    argv = ["ab", "single:gemma3-27b-cot", "--rules", "--rule-items", "20", "--pool", "sim-paper"]
    assert main([*argv, "--suite", "mix-paper", "--n", "8", "--out", str(out)]) == 0
    report = (out / "arms.md").read_text()
    assert "best-rule:20" in report and "best-single:20" in report
    assert {p.name for p in out.glob("A_vs_*")} == {"A_vs_B", "A_vs_C"}


def test_a_pool_sharing_a_table_fits_only_its_own_agents_chains() -> None:
    """`local-mix` and `local-mix-steps` share one table; its two-step chains end on verifiers that only
    `local-mix-steps` has, so `local-mix`'s rules see none of them (it had raised a KeyError)."""
    from puppeteer.agents.pool import load_pool
    from puppeteer.policies.rule_fit import recorded_chains
    from puppeteer.tasks import load_suite

    train = load_suite("mix-local", "train", n=40)
    steps = recorded_chains(load_pool("local-mix-steps"), train, "train", "minutes")
    assert steps and all(second.endswith("-verify") for _, second in steps)
    assert recorded_chains(load_pool("local-mix"), train, "train", "minutes") == {}
