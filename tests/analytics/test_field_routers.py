"""The field's baseline routers on a toy table, each checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from puppeteer.analytics import field_routers as fr

# two models: "cheap" (cost 1) and "big" (cost 3); queries of task "a" sit near x = (1, 0) and only
# the big model gets them; queries of task "b" sit near x = (0, 1) and both get them
X_TRAIN = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0], [0.14, 0.99]])
X_TRAIN = X_TRAIN / np.linalg.norm(X_TRAIN, axis=1, keepdims=True)
TRAIN = fr.RouterData(
    x=X_TRAIN,
    tasks=("a", "a", "b", "b"),
    score=np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]]),
    cost=np.array([[1.0, 3.0]] * 4),
)
TEST = fr.RouterData(
    x=np.array([[1.0, 0.0], [0.0, 1.0]]),
    tasks=("a", "b"),
    score=np.array([[0.0, 1.0], [1.0, 0.5]]),
    cost=np.array([[1.0, 3.0], [2.0, 3.0]]),
)


def test_best_single_is_the_train_mean_less_lambda_times_cost():
    p = fr.best_single(TRAIN, TEST)
    # train means: cheap 0.5, big 0.75; costs 1, 3 -> big at lam 0, cheap once 0.25 < 2 lam
    np.testing.assert_allclose(p.quality, [[0.5, 0.75]] * 2)
    assert p.route(0.0).tolist() == [1, 1]
    assert p.route(0.13).tolist() == [0, 0]
    assert p.route(0.12).tolist() == [1, 1]


def test_per_task_uses_each_label_train_mean():
    p = fr.per_task(TRAIN, TEST)
    np.testing.assert_allclose(p.quality, [[0.0, 1.0], [1.0, 0.5]])
    assert p.route(0.0).tolist() == [1, 0]
    unseen = fr.RouterData(TEST.x[:1], ("zzz",), TEST.score[:1], TEST.cost[:1])
    np.testing.assert_allclose(fr.per_task(TRAIN, unseen).quality, [[0.5, 0.75]])  # overall means


def test_oracle_routes_on_the_logged_outcome_and_cost():
    p = fr.oracle(TRAIN, TEST)
    assert p.route(0.0).tolist() == [1, 0]
    # at lam 1 the second query: cheap 1 - 2 = -1, big 0.5 - 3 = -2.5 -> cheap; first: -1 vs -2 -> cheap
    assert p.route(1.0).tolist() == [0, 0]


def test_ties_go_to_the_cheaper_model():
    tie = fr.Prediction(np.array([[0.5, 0.5]]), np.array([[3.0, 1.0]]))
    assert tie.route(0.0).tolist() == [1]


def test_knn_averages_the_nearest_training_queries():
    q = fr._knn_quality(TRAIN, TEST, k=2)
    # the first test query's two neighbours are the two "a" queries; the second's the two "b" ones
    np.testing.assert_allclose(q, [[0.0, 1.0], [1.0, 0.5]])


def test_cluster_router_uses_cluster_means():
    q = fr._cluster_quality(TRAIN, TEST, k=2, seed=0)
    np.testing.assert_allclose(q, [[0.0, 1.0], [1.0, 0.5]])


def test_logistic_learns_which_region_each_model_gets():
    q = fr._logistic_quality(TRAIN, TEST, c=100.0)
    assert q[0, 1] > q[0, 0] and q[1, 0] > q[1, 1]
    # a model right everywhere in training is predicted right everywhere
    flat = fr.RouterData(TRAIN.x, TRAIN.tasks, np.ones((4, 2)), TRAIN.cost)
    np.testing.assert_allclose(fr._logistic_quality(flat, TEST), 1.0)


def test_logistic_fits_a_fractional_score_as_that_share():
    x = np.array([[1.0, 0.0]] * 4)
    data = fr.RouterData(x, ("a",) * 4, np.array([[0.25, 1.0]] * 4), np.ones((4, 2)))
    q = fr._logistic_quality(data, fr.RouterData(x[:1], ("a",), data.score[:1], data.cost[:1]), c=1e6)
    assert q[0, 0] == pytest.approx(0.25, abs=1e-3)


def test_random_router_picks_one_model_per_query_uniformly():
    big = fr.RouterData(np.zeros((4000, 2)), ("a",) * 4000, np.zeros((4000, 3)), np.ones((4000, 3)))
    picks = fr.random_router(TRAIN, big, seed=1).route(5.0)
    shares = np.bincount(picks, minlength=3) / len(picks)
    np.testing.assert_allclose(shares, [1 / 3] * 3, atol=0.03)
