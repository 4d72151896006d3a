"""Reference routers on hand-built per-item outcomes (puppeteer.analytics.headroom)."""

from __future__ import annotations

import numpy as np
import pytest

from puppeteer.analytics.headroom import (
    Outcomes,
    domain_route,
    oracle_route,
    probe_cross_fit,
    probe_route,
    single_route,
)


def _outcomes(ids: list[str], correct: list[list[int]], model_s: list[float]) -> Outcomes:
    c = np.asarray(correct, dtype=bool)
    return Outcomes(tuple(ids), ("slow", "fast"), c, np.tile(np.asarray(model_s, dtype=float), (len(ids), 1)))


def test_the_oracle_takes_a_right_agent_the_cheaper_on_a_tie_and_pays_for_a_penalty() -> None:
    o = _outcomes(["a/0", "a/1", "a/2"], [[1, 0], [0, 1], [1, 1]], [10.0, 1.0])
    r = oracle_route(o)
    assert r.choice.tolist() == [0, 1, 1]
    assert r.accuracy(o) == 1.0
    assert r.model_s(o) == pytest.approx(4.0)
    # a penalty of 2 on the slow agent outweighs being right: everything goes to the fast one
    r = oracle_route(o, np.array([2.0, 0.0]))
    assert r.choice.tolist() == [1, 1, 1]
    assert r.accuracy(o) == pytest.approx(2 / 3)
    assert r.shares(o) == {"fast": 1.0}


def test_the_domain_router_learns_each_domains_agent_on_train_and_falls_back_for_an_unseen_domain() -> None:
    train = _outcomes(
        ["gsm8k/0", "gsm8k/1", "mmlu/0", "mmlu/1", "mmlu/2"],
        [[1, 0], [1, 0], [0, 1], [0, 1], [1, 1]],
        [10.0, 1.0],
    )
    test = _outcomes(["gsm8k/5", "mmlu/5", "arc/0"], [[1, 0], [0, 1], [0, 1]], [10.0, 1.0])
    r = domain_route(train, test)
    # gsm8k -> slow, mmlu -> fast; arc is unseen: the best overall on train (slow 3/5 = fast 3/5: the cheaper)
    assert r.choice.tolist() == [0, 1, 1]
    assert r.accuracy(test) == 1.0


def test_the_probe_learns_a_feature_that_tells_which_agent_is_right() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 8))
    right_slow = x[:, 0] > 0  # the slow agent is right exactly when feature 0 is positive
    correct = np.stack([right_slow, ~right_slow], axis=1)
    o = Outcomes(
        tuple(f"d/{i}" for i in range(120)), ("slow", "fast"), correct, np.tile([10.0, 1.0], (120, 1))
    )
    train, test = o.restrict(o.task_ids[:80]), o.restrict(o.task_ids[80:])
    assert max(single_route(test, a).accuracy(test) for a in o.agents) < 0.65
    r = probe_route(x[:80], train, x[80:], test)
    assert r.accuracy(test) >= 0.9
    # cross-fitting (more labels, none its own) does at least as well here
    assert probe_cross_fit(x[:80], train, x[80:], test, folds=4).accuracy(test) >= 0.9
    # a penalty above any probability gap sends everything to the agent without one
    assert probe_route(x[:80], train, x[80:], test, np.array([1.5, 0.0])).shares(test) == {"fast": 1.0}


def test_the_probe_cannot_beat_the_best_agent_when_the_features_say_nothing() -> None:
    rng = np.random.default_rng(1)
    n = 400
    x = rng.normal(size=(n, 8))
    correct = np.stack([rng.random(n) < 0.7, rng.random(n) < 0.4], axis=1)  # independent of x
    o = Outcomes(tuple(f"d/{i}" for i in range(n)), ("a", "b"), correct, np.ones((n, 2)))
    train, test = o.restrict(o.task_ids[:200]), o.restrict(o.task_ids[200:])
    r = probe_route(x[:200], train, x[200:], test)
    assert r.accuracy(test) <= single_route(test, "a").accuracy(test) + 0.03
    assert oracle_route(test).accuracy(test) > 0.75  # the headroom is there, the features do not show it


def test_an_agent_right_on_every_training_item_or_none_gets_that_constant() -> None:
    train = _outcomes(["d/0", "d/1", "d/2"], [[1, 0], [1, 0], [1, 0]], [10.0, 1.0])
    test = _outcomes(["d/3", "d/4"], [[1, 0], [0, 1]], [10.0, 1.0])
    x = np.eye(3, 4)
    assert probe_route(x, train, np.eye(2, 4), test).choice.tolist() == [0, 0]


def test_outcomes_keep_the_items_every_agent_ran_and_reject_bad_shapes() -> None:
    o = Outcomes.from_runs({"a": {"d/0": (True, 1.0), "d/1": (False, 2.0)}, "b": {"d/1": (True, 3.0)}})
    assert o.task_ids == ("d/1",)
    assert o.correct.tolist() == [[False, True]]
    assert o.model_s.tolist() == [[2.0, 3.0]]
    with pytest.raises(ValueError, match="share no items"):
        Outcomes.from_runs({"a": {"d/0": (True, 1.0)}, "b": {"d/1": (True, 1.0)}})
    with pytest.raises(ValueError, match="items x agents"):
        Outcomes(("d/0",), ("a", "b"), np.zeros((1, 3), dtype=bool), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="folds"):
        probe_cross_fit(np.zeros((1, 2)), o, np.zeros((1, 2)), o, folds=5)
