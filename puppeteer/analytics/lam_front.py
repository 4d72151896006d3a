"""The quality/cost front of one lambda-conditioned policy, the analysis side.

A *front file* (``front.json``, written by :mod:`puppeteer.jobs.lam_front`) holds, on one held-out
split: the conditioned policy's greedy results at every lambda of a fine grid (one row per seed and
lambda), the separately trained fixed-lambda policies' results at a few of those lambdas, where the
pool is simulated the per-item optimum's (:func:`puppeteer.analytics.optimum.visible_optimum`) at
every lambda of the grid, and each run's training time. :func:`front_table` sets them side by side
per lambda; :func:`write_front_report` writes ``front.csv``, ``front.md`` and ``front.png``.

Every figure names the backend that produced its numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from puppeteer.analytics.plots import _title, save

FRONT_FILE = "front.json"


def _by_lam(rows: Sequence[Mapping[str, Any]]) -> dict[float, list[Mapping[str, Any]]]:
    out: dict[float, list[Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault(round(float(r["lam"]), 10), []).append(r)
    return out


def front_table(front: Mapping[str, Any]) -> pd.DataFrame:
    """One row per lambda of the grid: the conditioned policy (mean, min and max over seeds), the fixed
    policies where trained (mean over seeds) and the ratio of the two returns, the optimum."""
    conditioned = _by_lam(front["conditioned"])
    fixed = _by_lam(front.get("fixed", ()))
    optimum = _by_lam(front.get("optimum", ()))
    rows = []
    for lam in sorted(conditioned):
        c = conditioned[lam]
        ret = np.array([r["return"] for r in c])
        row: dict[str, Any] = {
            "lam": lam,
            "seeds": len(c),
            "cond_return": float(ret.mean()),
            "cond_return_min": float(ret.min()),
            "cond_return_max": float(ret.max()),
            "cond_accuracy": float(np.mean([r["accuracy"] for r in c])),
            "cond_cost": float(np.mean([r["cost"] for r in c])),
        }
        if lam in fixed:
            f = fixed[lam]
            row.update(
                fixed_seeds=len(f),
                fixed_return=float(np.mean([r["return"] for r in f])),
                fixed_accuracy=float(np.mean([r["accuracy"] for r in f])),
                fixed_cost=float(np.mean([r["cost"] for r in f])),
            )
            # per seed where both exist (the same seed's runs), else the means
            paired = {r["seed"]: r["return"] for r in f}
            ratios = [r["return"] / paired[r["seed"]] for r in c if paired.get(r["seed"], 0) > 0]
            row["ratio"] = float(np.mean(ratios)) if ratios else row["cond_return"] / row["fixed_return"]
            row["ratio_min"] = float(min(ratios)) if ratios else row["ratio"]
        if lam in optimum:
            o = optimum[lam][0]
            row.update(opt_return=o["return"], opt_accuracy=o["accuracy"], opt_cost=o["cost"])
        rows.append(row)
    return pd.DataFrame(rows)


def training_times(front: Mapping[str, Any]) -> dict[str, float]:
    """Mean training seconds of one conditioned run and of one fixed-lambda run, and their ratio."""
    cond = [float(s) for s in front.get("train_s", {}).get("conditioned", []) if s is not None]
    fixed = [float(s) for s in front.get("train_s", {}).get("fixed", []) if s is not None]
    out: dict[str, float] = {}
    if cond:
        out["conditioned_s"] = float(np.mean(cond))
    if fixed:
        out["fixed_s"] = float(np.mean(fixed))
    if cond and fixed:
        out["ratio"] = out["conditioned_s"] / out["fixed_s"]
    return out


def _f(x: Any, digits: int = 3) -> str:
    return "" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def markdown(front: Mapping[str, Any]) -> str:
    """The table and the training times as Markdown."""
    df = front_table(front)
    cost = front.get("cost_label", "cost")
    relabel = f", lam_relabel {front['lam_relabel']}" if front.get("lam_relabel") else ""
    lines = [
        f"One policy trained over lambda in [{front['lam_range'][0]:g}, {front['lam_range'][1]:g}] "
        f"on `{front['pool']}` / `{front['suite']}`, greedy on {front['n_eval']} held-out items "
        f"({front['split']} split), {int(df['seeds'].max()) if len(df) else 0} seed(s){relabel} "
        f"[backend: {front['backend']}]. Return = accuracy - lambda x cost; cost: {cost}.",
        "",
        "| lambda | conditioned return (min-max) | conditioned acc / cost | fixed-lambda return | "
        "conditioned / fixed (min) | fixed acc / cost | optimum return | optimum acc / cost |",
        "|---:|---|---|---:|---|---|---:|---|",
    ]
    for r in df.to_dict("records"):
        fixed, ratio, fixed_ac, opt, opt_ac = "", "", "", "", ""
        if not np.isnan(r.get("fixed_return", np.nan)):
            fixed = _f(r["fixed_return"])
            ratio = f"{r['ratio']:.1%} ({r['ratio_min']:.1%})"
            fixed_ac = f"{_f(r['fixed_accuracy'])} / {_f(r['fixed_cost'], 4)}"
        if not np.isnan(r.get("opt_return", np.nan)):
            opt = _f(r["opt_return"])
            opt_ac = f"{_f(r['opt_accuracy'])} / {_f(r['opt_cost'], 4)}"
        spread = f"{_f(r['cond_return_min'])}-{_f(r['cond_return_max'])}"
        cond_ac = f"{_f(r['cond_accuracy'])} / {_f(r['cond_cost'], 4)}"
        lines.append(
            f"| {r['lam']:.4g} | {_f(r['cond_return'])} ({spread}) | {cond_ac} | {fixed} | {ratio} "
            f"| {fixed_ac} | {opt} | {opt_ac} |"
        )
    times = training_times(front)
    if "ratio" in times:
        lines += [
            "",
            f"Training time: one conditioned run {times['conditioned_s']:.0f} s, one fixed-lambda run "
            f"{times['fixed_s']:.0f} s (means over runs): the whole front costs {times['ratio']:.2f}x one "
            "fixed-lambda run.",
        ]
    return "\n".join(lines) + "\n"


def _label_lams(
    ax: Any,
    lams: Sequence[float],
    xs: Sequence[float],
    ys: Sequence[float],
    color: str,
    offset: tuple[int, int],
) -> None:
    """Each point's lambda beside it; points at the same place share one label (``0.01-0.5``)."""
    places: dict[tuple[float, float], list[float]] = {}
    for lam, x, y in zip(lams, xs, ys, strict=True):
        places.setdefault((float(f"{x:.3g}"), round(float(y), 3)), []).append(float(lam))
    for (x, y), at in places.items():
        text = f"{at[0]:.3g}" if len(at) == 1 else f"{min(at):.3g}-{max(at):.3g}"
        ax.annotate(text, (x, y), textcoords="offset points", xytext=offset, fontsize=7, color=color)


def plot_front(front: Mapping[str, Any], path: str | Path) -> Path:
    """Left: accuracy against cost along the grid (conditioned line, fixed-lambda markers, optimum
    dashed). Right: return against lambda (log axis)."""
    df = front_table(front)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    left.plot(
        df["cond_cost"], df["cond_accuracy"], "o-", color="C0", label="conditioned (one policy)", zorder=3
    )
    _label_lams(left, df["lam"], df["cond_cost"], df["cond_accuracy"], "C0", (4, -10))
    right.plot(df["lam"], df["cond_return"], "o-", color="C0", label="conditioned (one policy)")
    right.fill_between(df["lam"], df["cond_return_min"], df["cond_return_max"], color="C0", alpha=0.15)
    if "fixed_return" in df:
        f = df.dropna(subset=["fixed_return"])
        style = dict(color="C3", markersize=9, alpha=0.6, label="fixed-lambda policies")
        left.plot(f["fixed_cost"], f["fixed_accuracy"], "s", **style)
        right.plot(f["lam"], f["fixed_return"], "s", **style)
        _label_lams(left, f["lam"], f["fixed_cost"], f["fixed_accuracy"], "C3", (4, 6))
    if "opt_return" in df:
        o = df.dropna(subset=["opt_return"])
        by_cost = o.sort_values("opt_cost")  # its points along the grid, drawn as a front
        left.plot(
            by_cost["opt_cost"],
            by_cost["opt_accuracy"],
            "kx--",
            linewidth=1,
            label="per-item optimum (visible)",
        )
        right.plot(o["lam"], o["opt_return"], "k--", linewidth=1, label="per-item optimum (visible)")
    costs = [df["cond_cost"], *(df[c].dropna() for c in ("fixed_cost", "opt_cost") if c in df)]
    if min(float(c.min()) for c in costs if len(c)) > 0:
        left.set_xscale("log")
    left.set_xlabel(f"mean cost per item ({front.get('cost_label', 'cost')})")
    left.set_ylabel("accuracy")
    if df["lam"].min() > 0:
        right.set_xscale("log")
    else:  # a range from 0: linear near 0, logarithmic above a hundredth of the top
        right.set_xscale("symlog", linthresh=float(df["lam"].max()) / 100)
    right.set_xlabel("lambda")
    right.set_ylabel("mean return (accuracy - lambda x cost)")
    for ax in (left, right):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    title = (
        f"one policy for every lambda in [{front['lam_range'][0]:g}, {front['lam_range'][1]:g}]: "
        f"{front['pool']} / {front['suite']}, {front['n_eval']} held-out items [backend: {front['backend']}]"
    )
    fig.suptitle(_title(title), fontsize=10)
    return save(fig, path)


def write_front_report(front: Mapping[str, Any], out: str | Path) -> pd.DataFrame:
    """``front.json`` (as given), ``front.csv``, ``front.md`` and ``front.png`` under ``out``."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    (d / FRONT_FILE).write_text(json.dumps(front, indent=1) + "\n")
    df = front_table(front)
    df.to_csv(d / "front.csv", index=False)
    (d / "front.md").write_text(markdown(front))
    plot_front(front, d / "front.png")
    return df


__all__ = ["FRONT_FILE", "front_table", "markdown", "plot_front", "training_times", "write_front_report"]
