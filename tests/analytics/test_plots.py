"""The report plots: learning curves smoothed with their spread, usage bars that fit the axes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import puppeteer.analytics.plots as plots


def test_rolling_mean_and_spread_are_trailing_windows() -> None:
    means, spreads = plots.rolling([1.0, 3.0, 5.0, 7.0], 2)
    assert means == [1.0, 2.0, 4.0, 6.0]
    assert spreads == pytest.approx([0.0, 1.0, 1.0, 1.0])
    assert plots.smoothing_window(5) == 1 and plots.smoothing_window(130) == 13
    assert plots.smoothing_window(10_000) == 50


def _captured(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    figures: list[Any] = []

    def keep(fig: Any, path: str | Path) -> Path:
        figures.append(fig)
        return Path(path)

    monkeypatch.setattr(plots, "save", keep)
    return figures


def test_the_learning_curve_follows_the_policys_own_return_smoothed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With every first action tried, the batch's mean return is flat by construction (it weighs every
    agent alike); the curve follows the policy's own return, as a rolling mean with a band."""
    figures = _captured(monkeypatch)
    history = [
        {"episodes": 100 * (i + 1), "train/return": 0.2, "train/policy_return": 0.2 + 0.004 * i}
        for i in range(100)
    ]
    plots.learning_curve(history, tmp_path / "c.png", "Router training", note="what the curves measure")
    (ax,) = figures[0].axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[0] == "batch mean return (every action)"
    assert "policy's return (train), rolling mean of 10" in labels
    smooth = ax.get_lines()[labels.index("policy's return (train), rolling mean of 10")]
    assert smooth.get_ydata()[-1] == pytest.approx(0.2 + 0.004 * 94.5)  # the mean of the last 10
    assert ax.collections, "no band of the rolling spread"
    assert "what the curves measure" in ax.get_xlabel()
    plots.learning_curve(history[:3], tmp_path / "d.png", "few batches")  # too few to smooth: drawn as is
    assert len(figures[1].axes[0].get_lines()) == 2


def test_agent_usage_leaves_room_above_the_tallest_bar(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    figures = _captured(monkeypatch)
    step = SimpleNamespace(index=0, agent_id=1)  # what the plot reads of a trajectory's steps
    trajectories: Any = [SimpleNamespace(steps=(step,)) for _ in range(4)]
    plots.agent_usage(trajectories, ["a", "b", "c"], tmp_path / "u.png", "usage")
    (ax,) = figures[0].axes
    tallest = max(bar.get_height() for bar in ax.patches)
    assert tallest == 1.0 and ax.get_ylim()[1] >= 1.2 * tallest
