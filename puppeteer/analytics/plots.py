"""Plots people would rather look at than read. Every figure names the backend that produced it."""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from puppeteer.types import Trajectory


def plain(text: str) -> str:
    """``text`` shown as written: a ``$`` (an agent named ``a$b``) would start matplotlib's math mode."""
    return str(text).replace("$", r"\$")


def _title(title: str) -> str:
    """Long titles (pool names list their agents) wrap instead of running off the figure."""
    return plain(textwrap.fill(title, 80))


def save(fig: Figure, path: str | Path) -> Path:
    """Write a figure as PNG and free it."""
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def rolling(values: Sequence[float], window: int) -> tuple[list[float], list[float]]:
    """The trailing mean and standard deviation of ``values`` over ``window`` points (fewer at the start)."""
    means: list[float] = []
    spreads: list[float] = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1) : i + 1]
        mean = sum(part) / len(part)
        means.append(mean)
        spreads.append((sum((v - mean) ** 2 for v in part) / len(part)) ** 0.5)
    return means, spreads


NOTE_WIDTH = 80  # characters a line under a 7-inch axis holds at the label's font size


def smoothing_window(n: int) -> int:
    """Points a rolling mean takes over a curve of ``n`` batches: a tenth of them, 1 to 50."""
    return max(1, min(50, n // 10))


def learning_curve(
    history: Sequence[Mapping[str, float]],
    path: str | Path,
    title: str,
    references: Mapping[str, float] | None = None,
    note: str | None = None,
) -> Path:
    """Train (per batch) and held-out (per evaluation) mean return against episodes. The batches' noise
    hides a trend, so the train curve is drawn faint and, over it, its rolling mean with a band of one
    rolling standard deviation. Where every batch holds ``train/policy_return`` (the policy's own
    expected return, logged when a batch tries every first action) that is the train curve, and the
    batch's mean return, which weighs every action alike, is drawn thin and grey. ``note`` (a line under
    the axis) says what the curves measure."""
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [h["episodes"] for h in history]
    own = bool(history) and all("train/policy_return" in h for h in history)
    key, label = (
        ("train/policy_return", "policy's return (train)") if own else ("train/return", "train return")
    )
    ys = [h[key] for h in history]
    if own:
        batch = [h["train/return"] for h in history]
        ax.plot(xs, batch, color="grey", alpha=0.5, linewidth=0.8, label="batch mean return (every action)")
    window = smoothing_window(len(ys))
    if window > 1:
        means, spreads = rolling(ys, window)
        ax.plot(xs, ys, alpha=0.25, linewidth=0.8, color="tab:blue", label=f"{label}, per batch")
        ax.plot(xs, means, color="tab:blue", label=f"{label}, rolling mean of {window}")
        lows = [m - d for m, d in zip(means, spreads, strict=True)]
        highs = [m + d for m, d in zip(means, spreads, strict=True)]
        ax.fill_between(xs, lows, highs, color="tab:blue", alpha=0.15, label="rolling mean ± 1 sd")
    else:
        ax.plot(xs, ys, alpha=0.6, color="tab:blue", label=f"{label}, per batch")
    ev = [(h["episodes"], h["eval/return"]) for h in history if "eval/return" in h]
    if ev:
        ax.plot(*zip(*ev, strict=True), marker="o", color="tab:orange", label="held-out return (greedy)")
    for name, value in (references or {}).items():
        ax.axhline(value, linestyle="--", linewidth=1, label=name)
    ax.set_xlabel("episodes" if note is None else f"episodes\n{plain(textwrap.fill(note, NOTE_WIDTH))}")
    ax.set_ylabel("mean return")
    ax.set_title(_title(title), fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, path)


def agent_usage(
    trajectories: Sequence[Trajectory], agent_names: Sequence[str], path: str | Path, title: str
) -> Path:
    """How often each agent is activated, per step position; the axis leaves room above the tallest bar
    for the legend."""
    by_pos: dict[int, Counter[int]] = {}
    for t in trajectories:
        for s in t.steps:
            by_pos.setdefault(s.index, Counter())[s.agent_id] += 1
    fig, ax = plt.subplots(figsize=(8, 4))
    names = [plain(n) for n in agent_names]
    bottom = [0.0] * len(agent_names)
    for pos in sorted(by_pos):
        vals = [by_pos[pos][i] / max(len(trajectories), 1) for i in range(len(agent_names))]
        ax.bar(names, vals, bottom=bottom, label=f"step {pos + 1}")
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylim(0, max(max(bottom, default=0.0), 1e-9) * 1.25)  # the tallest bar ends below the legend
    ax.set_ylabel("activations per episode")
    ax.set_title(_title(title), fontsize=10)
    ax.tick_params(axis="x", rotation=45)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
    if by_pos:
        ax.legend(fontsize=8, loc="upper right", ncol=len(by_pos))
    return save(fig, path)


@dataclass(frozen=True)
class CostPoint:
    """One policy on one suite: accuracy with its interval against a cost per item."""

    label: str
    cost: float
    accuracy: float
    ci_low: float
    ci_high: float


def pareto_front(points: Sequence[CostPoint]) -> list[CostPoint]:
    """Points no other point beats on both cost (lower) and accuracy (higher), by cost."""
    front: list[CostPoint] = []
    for p in sorted(points, key=lambda p: (p.cost, -p.accuracy)):
        if not front or p.accuracy > front[-1].accuracy:
            front.append(p)
    return front


DODGE = 0.05  # a coincident point moves this share of the cost (log axis) or of the axis (linear) right


def dodged(points: Sequence[CostPoint], log: bool) -> list[tuple[float, str]]:
    """Where to draw each point on the cost axis, and its legend label: a point at the same accuracy and
    (within 1%) the same cost as an earlier one moves right by ``DODGE`` per earlier twin (multiplied on
    a log axis, added on a linear one) and its label names the point it coincides with, so a trained
    router that ties with an agent stays visible instead of hiding under its marker."""
    span = max((p.cost for p in points), default=0.0) - min((p.cost for p in points), default=0.0)
    out: list[tuple[float, str]] = []
    for i, p in enumerate(points):
        twins = [
            q
            for q in points[:i]
            if abs(q.accuracy - p.accuracy) < 1e-9 and abs(q.cost - p.cost) <= 0.01 * max(abs(q.cost), 1e-12)
        ]
        if not twins:
            out.append((p.cost, p.label))
            continue
        shift = len(twins)
        x = p.cost * (1 + DODGE) ** shift if log else p.cost + DODGE * shift * (span or 1.0)
        out.append((x, f"{p.label} (same point as {twins[0].label}; drawn right of it)"))
    return out


def accuracy_vs_cost(
    panels: Mapping[str, Sequence[CostPoint]], path: str | Path, title: str, cost_label: str
) -> Path:
    """One panel per suite: accuracy (95% interval) against cost per item (log axis); Pareto front dashed.
    Coincident points are drawn side by side (:func:`dodged`)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 6.5), squeeze=False)
    markers = "osD^vP*Xhp<>"
    for ax, (suite, points) in zip(axes[0], panels.items(), strict=True):
        log = all(p.cost > 0 for p in points)
        for i, (p, (x, label)) in enumerate(zip(points, dodged(points, log), strict=True)):
            ax.errorbar(
                x,
                p.accuracy,
                yerr=[[p.accuracy - p.ci_low], [p.ci_high - p.accuracy]],
                fmt=markers[i % len(markers)],
                color=plt.get_cmap("tab20")(i % 20),
                capsize=3,
                label=label,
            )
        front = pareto_front(points)
        ax.plot(
            [p.cost for p in front], [p.accuracy for p in front], "k--", linewidth=0.8, label="Pareto front"
        )
        if log:
            ax.set_xscale("log")
        ax.set_xlabel(cost_label)
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1.05)
        ax.set_title(suite, fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.suptitle(_title(title), fontsize=10)
    return save(fig, path)
