"""The learning curve of a conductor GRPO run (``learning_curve.png``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


# trl's own names for the headline numbers, and ours for the reward's components
CURVE_KEYS = ("reward", "conductor/parse_rate", "conductor/accuracy")


def conductor_curve(
    history: Sequence[Mapping[str, Any]],
    path: str | Path,
    title: str,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
) -> Path:
    """Train reward, parse rate and accuracy per GRPO step; held-out accuracy and parse rate before/after.

    The train reward is trl's sum over the reward functions (with a format score it can pass 1), so
    the y axis grows to show it whole; the held-out points carry 95% Wilson intervals.
    """
    from puppeteer.analytics.plots import _title, plt, save

    rows = [h for h in history if "reward" in h and "step" in h]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    labels = {
        "reward": "train reward (mean, all reward functions)",
        "conductor/parse_rate": "train parse rate",
        "conductor/accuracy": "train accuracy",
    }
    top = 1.0
    for key in CURVE_KEYS:
        pts = [(h["step"], h[key]) for h in rows if key in h]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker=".", alpha=0.8, label=labels[key])
            top = max(top, *(y for _, y in pts))
    last = max((h["step"] for h in rows), default=1)
    held = (
        ("accuracy", "s", "black", "held-out accuracy"),
        ("parse_rate", "D", "tab:red", "held-out parse rate"),
    )
    for key, marker, color, label in held:
        for x, res in ((0, before), (last, after)):
            if res and key in res:
                lo, hi = res[f"{key}_ci95"]
                y = res[key]
                ax.errorbar(
                    [x + (0.3 if key == "parse_rate" else 0.0)],
                    [y],
                    yerr=[[y - lo], [hi - y]],
                    fmt=marker,
                    color=color,
                    capsize=4,
                    label=f"{label}, greedy (95% CI)" if x == 0 or before is None else None,
                )
    ax.set_xlabel("GRPO step")
    ax.set_ylim(-0.05, top + 0.05)
    ax.set_title(_title(title), fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    return save(fig, path)
