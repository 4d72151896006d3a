"""The field's cost-quality metrics against curves computed by hand."""

from __future__ import annotations

import pytest

from puppeteer.analytics import router_metrics as rm

# points (cost, quality): (2, 0.6) lies below the chord from (1, 0.5) to (3, 0.9); (4, 0.8) is worse
# than a cheaper point. The hull is (1, 0.5) -> (3, 0.9), flat after, 0 before cost 1.
COSTS, QUALITIES = [1.0, 2.0, 3.0, 4.0], [0.5, 0.6, 0.9, 0.8]


def test_hull_drops_points_under_the_chord_and_worse_costlier_points():
    h = rm.hull(COSTS, QUALITIES)
    assert h.cost == (1.0, 3.0) and h.quality == (0.5, 0.9)
    assert h(2.0) == pytest.approx(0.7)
    assert h(5.0) == pytest.approx(0.9)  # flat to the right
    assert h(0.5) == 0.0  # the router cannot spend less than its cheapest point


def test_aiq_is_the_normalised_area():
    h = rm.hull(COSTS, QUALITIES)
    # [0, 1]: 0; [1, 3]: (0.5 + 0.9) / 2 * 2 = 1.4; [3, 4]: 0.9 -> 2.3 / 4
    assert rm.aiq(h, 0.0, 4.0) == pytest.approx(0.575)
    assert rm.aiq(rm.hull([0.0], [0.7]), 0.0, 4.0) == pytest.approx(0.7)  # q everywhere scores q


def test_apgr_of_mixing_weak_and_strong_is_one_half():
    # the hull through the weak (1, 0.5) and strong (3, 0.9) points is what mixing them at random gives
    h = rm.hull(COSTS, QUALITIES)
    assert rm.apgr(h, (1.0, 0.5), (3.0, 0.9)) == pytest.approx(0.5)
    # a router at the strong quality from the weak cost on recovers the whole gap
    assert rm.apgr(rm.hull([1.0], [0.9]), (1.0, 0.5), (3.0, 0.9)) == pytest.approx(1.0)


def test_cost_to_reach_interpolates_on_the_hull():
    h = rm.hull(COSTS, QUALITIES)
    assert rm.cost_to_reach(h, 0.5 + 0.5 * 0.4) == pytest.approx(2.0)  # 50% of the gap
    assert rm.cost_to_reach(h, 0.4) == pytest.approx(1.0)
    assert rm.cost_to_reach(h, 0.95) is None


def test_gap_closed_at_the_best_single_cost():
    h = rm.hull([1.0, 2.0], [0.6, 0.8])
    # best single (2, 0.7), oracle 0.9: the router gives 0.8 at cost 2 -> (0.8 - 0.7) / (0.9 - 0.7)
    assert rm.gap_closed(h, (2.0, 0.7), 0.9) == pytest.approx(0.5)
