"""The router benchmark's report: a markdown table (mean and worst seed) and a cost-quality plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from puppeteer.analytics.plots import save


def _agg(values: Sequence[float | None], worst: str) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "never"
    if len(vals) < len(values):
        return f"{np.mean(vals):.4g} ({len(values) - len(vals)} seeds never)"
    w = min(vals) if worst == "min" else max(vals)
    return f"{np.mean(vals):.3f} ({w:.3f})" if len(values) > 1 else f"{vals[0]:.3f}"


def _usd_k(values: Sequence[float | None]) -> str:
    """Cost per 1,000 queries in USD, mean (worst) over seeds."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "never"
    text = f"{1000 * np.mean(vals):.3f}"
    if len(vals) < len(values):
        return f"{text} ({len(values) - len(vals)} never)"
    return f"{text} ({1000 * max(vals):.3f})" if len(values) > 1 else text


def markdown(results: dict[str, Any]) -> str:
    ref = results["references"]
    runs = results["runs"]
    n_seeds = max(len(v) for v in runs.values())
    lines = [
        f"Held-out split: {results['n_test']} queries; fitted on {results['n_train']} training queries; "
        f"{len(results['models'])} models; {n_seeds} seeds (mean, worst seed in brackets).",
        "",
        f"Strong model (best on train): `{ref['strong']}` ({ref['strong_point'][1]:.3f} at "
        f"${1000 * ref['strong_point'][0]:.3f} per 1k queries); weak (cheapest on train): `{ref['weak']}` "
        f"({ref['weak_point'][1]:.3f} at ${1000 * ref['weak_point'][0]:.3f}); "
        f"oracle {ref['oracle_quality']:.3f} "
        f"(any model fully right: {ref['oracle_accuracy']:.3f}). Cost range for AIQ: "
        f"${1000 * ref['c_lo']:.3f} to ${1000 * ref['c_hi']:.3f} per 1k queries.",
        "",
        "| router | AIQ | APGR | gap closed | best quality | best accuracy | $/1k to 50% PGR | 80% | 95% "
        "| +acc vs strong at <= its cost (McNemar p) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, entries in runs.items():
        reach = {k: [e["cost_to_reach"][k] for e in entries] for k in ("50%", "80%", "95%")}
        gains = [e["vs_strong"] for e in entries if e["vs_strong"] is not None]

        def col(key: str, entries: list[dict[str, Any]] = entries) -> str:
            return _agg([e[key] for e in entries], "min")

        if gains:
            g = min(gains, key=lambda x: x["gain"])
            vs = f"{np.mean([x['gain'] for x in gains]):+.3f} (worst {g['gain']:+.3f}, p={g['p']:.2g})"
        else:
            vs = "no point"
        lines.append(
            f"| {name} | {col('aiq')} | {col('apgr')} | {col('gap_closed')} | {col('top_quality')} "
            f"| {col('top_accuracy')} | {_usd_k(reach['50%'])} | {_usd_k(reach['80%'])} "
            f"| {_usd_k(reach['95%'])} | {vs} |"
        )
    lines += [
        "",
        "Single models on the held-out split:",
        "",
        "| model | quality | accuracy | $/1k queries |",
        "|---|---:|---:|---:|",
    ]
    for m, s in sorted(ref["singles"].items(), key=lambda kv: -kv[1]["quality"]):
        lines.append(f"| `{m}` | {s['quality']:.3f} | {s['accuracy']:.3f} | {1000 * s['cost']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for name, entries in results["runs"].items():
        pts = sorted(entries[0]["points"], key=lambda p: p["cost"])
        style = "--" if name == "oracle" else "-"
        ax.plot([1000 * p["cost"] for p in pts], [p["quality"] for p in pts], style, marker=".", label=name)
    for m, s in results["references"]["singles"].items():
        ax.scatter([1000 * s["cost"]], [s["quality"]], marker="x", color="black", s=20)
        ax.annotate(
            m, (1000 * s["cost"], s["quality"]), fontsize=6, xytext=(3, 2), textcoords="offset points"
        )
    ax.set_xlabel("USD per 1,000 queries (held-out split)")
    ax.set_ylabel("mean score")
    ax.set_title("Cost-quality curves, seed " + str(next(iter(results["runs"].values()))[0]["seed"]))
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    return save(fig, path)
