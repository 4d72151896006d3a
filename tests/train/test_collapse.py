"""The collapse watch: one line when a run settles on one agent early, silence otherwise."""

from __future__ import annotations

import pytest

from puppeteer.train.collapse import CollapseWatch

COLLAPSED = {"train/top_first_share": 1.0, "train/entropy": 0.009}


def test_collapse_before_half_the_budget_is_told_with_its_numbers() -> None:
    line = CollapseWatch().check(COLLAPSED, episodes=1344, budget=3000)
    assert line is not None
    assert "episode 1,344 of 3,000" in line
    assert "100%" in line and "0.009" in line


@pytest.mark.parametrize(
    ("metrics", "episodes"),
    [
        (COLLAPSED, 1501),  # past half the budget: settling late is what training is for
        ({"train/top_first_share": 0.6, "train/entropy": 0.009}, 100),  # routes to several agents
        ({"train/top_first_share": 1.0, "train/entropy": 0.4}, 100),  # still exploring
        ({"train/entropy": 0.0}, 100),  # no top share reported
    ],
)
def test_no_collapse_is_told_when_a_threshold_is_not_met(metrics: dict[str, float], episodes: int) -> None:
    assert CollapseWatch().check(metrics, episodes=episodes, budget=3000) is None
