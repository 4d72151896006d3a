"""``puppeteer graph RUN_DIR...``: PNG plots and one self-contained HTML report of emergent graphs.

The HTML inlines every image as a ``data:`` URI and carries its own CSS, so it opens offline
and fetches nothing at view time.
"""

from __future__ import annotations

import base64
import html
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from puppeteer.analytics import graphs
from puppeteer.analytics.plots import _title, plain, save
from puppeteer.analytics.store import find_runs, load

log = logging.getLogger(__name__)

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
.wide{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #bbb;padding:3px 8px;text-align:right}th{background:#eee}
img{max-width:100%;border:1px solid #ddd;margin:0.3em 0}h2{border-bottom:1px solid #ccc}
.note{color:#555;font-size:13px}"""


@dataclass(frozen=True)
class GraphReport:
    html: Path
    images: tuple[Path, ...]
    metrics: pd.DataFrame


def run_label(run_path: str, policy: str | None) -> str:
    """A short row label: the run directory's name, and the policy kind for eval runs."""
    name = Path(run_path).name
    name = name if len(name) <= 32 else name[:29] + "..."
    kind = (policy or "").split(":", 1)[0]
    return f"{name} ({kind})" if kind and kind not in name else name


LABEL_GAP = 4.0  # points between a node's circle and its label, which sits outside the circle of nodes


def graph_figure(g: nx.DiGraph, title: str) -> Figure:
    """Agents as nodes sized by activations, edges as wide as their share of all transitions.

    Nodes lie on a circle; each label sits on the same ray just outside it, aligned away from the
    centre (left of a node on the left, right on the right, above the top, below the bottom), so
    long agent names of a large pool neither cover the nodes nor run into each other."""
    fig, ax = plt.subplots(figsize=(7, 6))
    if len(g):
        pos = nx.circular_layout(g)
        acts = [g.nodes[n].get("activations", 1) for n in g]
        top = max(acts) or 1
        sizes = [300 + 1500 * a / top for a in acts]  # marker areas, points^2
        nx.draw_networkx_nodes(g, pos, ax=ax, node_size=sizes, node_color="#8ecae6", edgecolors="#023047")
        for (n, (x, y)), size in zip(pos.items(), sizes, strict=True):
            # on the node's ray, LABEL_GAP points beyond its circle's edge, aligned away from the centre
            ux, uy = np.array([x, y]) / (float(np.hypot(x, y)) or 1.0)
            off = float(np.sqrt(size / np.pi)) + LABEL_GAP
            ha = "center" if abs(ux) < 0.15 else ("left" if ux > 0 else "right")
            va = ("bottom" if uy > 0 else "top") if ha == "center" else "center"
            ax.annotate(
                plain(str(n)),
                (x, y),
                xytext=(off * ux, off * uy),
                textcoords="offset points",
                ha=ha,
                va=va,
                fontsize=8,
                gid=f"label:{n}",
            )
        weights = [d["weight"] for *_, d in g.edges(data=True)]
        wmax = max(weights, default=1)
        nx.draw_networkx_edges(
            g,
            pos,
            ax=ax,
            width=[0.5 + 5 * w / wmax for w in weights],
            arrowsize=12,
            edge_color="#fb8500",
            connectionstyle="arc3,rad=0.1",
            node_size=1200,
        )
        ax.set_xlim(-2.0, 2.0)  # room beside the circle for the labels
        ax.set_ylim(-1.45, 1.45)
    else:
        ax.text(0.5, 0.5, "no agent activations", ha="center")
    ax.set_axis_off()
    ax.set_title(_title(title), fontsize=9)
    fig.tight_layout()
    return fig


def draw_graph(g: nx.DiGraph, path: Path, title: str) -> Path:
    """The graph's figure (``graph_figure``) as a PNG."""
    return save(graph_figure(g, title), path)


def plot_distribution(table: pd.DataFrame, path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * max(len(table), 2)))
    table.rename(columns=lambda c: plain(str(c)), index=lambda i: plain(str(i))).plot.barh(
        stacked=True, ax=ax, colormap="tab20"
    )
    ax.set_xlabel("share of activations")
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.set_title(_title(title), fontsize=9)
    return save(fig, path)


def plot_evolution(evo: pd.DataFrame, path: Path, title: str) -> Path:
    cols = ["density", "cyclic_fraction", "episode_density", "mean_steps", "accuracy"]
    fig, axes = plt.subplots(1, len(cols), figsize=(3.0 * len(cols), 3.2))
    for ax, col in zip(axes, cols, strict=True):
        for run, g in evo.groupby("run"):
            ax.plot(g["checkpoint"], g[col], marker="o", label=str(run))
        ax.set_title(col, fontsize=9)
        ax.set_xlabel("update (end of stretch)")
    axes[0].legend(fontsize=6)
    fig.suptitle(_title(title), fontsize=9)
    return save(fig, path)


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _table(df: pd.DataFrame, table_id: str) -> str:
    # a table wider than the page (many metrics, long run labels) scrolls in its own box instead of
    # pushing the whole page sideways
    table = df.to_html(index=False, table_id=table_id, border=0, float_format=lambda x: f"{x:.3f}")
    return f'<div class="wide">{table}</div>'


def build_report(
    runs: Sequence[str | Path], out: str | Path, n_bins: int = 6, title: str = "Emergent collaboration graphs"
) -> GraphReport:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    episodes = load(*runs)
    steps = load(*runs, level="steps")
    if episodes.empty:
        raise ValueError(f"no episodes in {', '.join(map(str, runs))}")
    order = {str(r.resolve()): i for i, r in enumerate(find_runs(runs))}  # runs in the order given
    episodes = episodes.sort_values(
        ["run_id", "episode"], key=lambda c: c.map(order) if c.name == "run_id" else c, kind="stable"
    ).reset_index(drop=True)
    episodes["run"] = [
        run_label(p, pol) for p, pol in zip(episodes["run_path"], episodes["policy"], strict=True)
    ]
    steps = steps.merge(episodes[["run_id", "episode", "run"]], on=["run_id", "episode"])
    episodes = graphs.attach_difficulty(episodes)
    backends = ", ".join(sorted({str(b) for b in episodes["backend"].dropna()})) or "unknown"
    images: list[Path] = []
    sections: list[str] = []

    per_run = []
    graph_imgs = []
    for i, (run, eg) in enumerate(episodes.groupby("run", sort=False)):
        sg = steps[steps["run"] == run]
        m = graphs.metrics(sg, eg)
        per_run.append(
            {
                "run": run,
                "mode": eg["mode"].iloc[0],
                **m.row(),
                "top degree": graphs.top(m.degree),
                "top PageRank": graphs.top(m.pagerank),
            }
        )
        p = draw_graph(
            graphs.fold(sg), out / f"graph_{i}.png", f"{run}: {m.episodes} episodes [backend: {backends}]"
        )
        images.append(p)
        graph_imgs.append(_img(p, f"graph of {run}"))
    metrics_df = pd.DataFrame(per_run)
    sections.append(
        "<h2>Graph metrics per run</h2><p class='note'>Edges: consecutive activations (step mode) "
        "or access (workflow mode), weighted by count. cycles_lenK: simple cycles of length K in the "
        "folded graph (len1 = self-loops); cyclic_fraction: episodes whose own graph has a cycle.</p>"
        + _table(metrics_df, "metrics")
    )
    sections.append("<h2>Graphs</h2>" + "".join(graph_imgs))

    path_df = graphs.by_group(steps, episodes, ["run", "suite", "difficulty"])[
        ["run", "suite", "difficulty", "episodes", "mean_steps", "accuracy", "density", "cyclic_fraction"]
    ]
    sections.append("<h2>Path length per suite and difficulty</h2>" + _table(path_df, "paths"))

    dist = graphs.distribution_table(steps, ["run"])
    p = plot_distribution(dist, out / "agent_distribution.png", f"agent distribution [backend: {backends}]")
    images.append(p)
    sections.append(
        "<h2>Agent distribution</h2>" + _table(dist.reset_index(), "distribution") + _img(p, "agents")
    )

    evo_parts = []
    for run, eg in episodes[episodes["update_index"].notna()].groupby("run", sort=False):
        evo = graphs.evolution(steps[steps["run"] == run], eg, n_bins)
        evo.insert(0, "run", run)
        evo_parts.append(evo)
    if evo_parts:
        evo_df = pd.concat(evo_parts, ignore_index=True)
        evo_df.to_csv(out / "evolution.csv", index=False)  # the numbers behind evolution.png
        p = plot_evolution(
            evo_df, out / "evolution.png", f"graph metrics across training [backend: {backends}]"
        )
        images.append(p)
        sections.append(
            "<h2>Evolution across training checkpoints</h2><p class='note'>Training episodes grouped "
            "into stretches of updates; checkpoint = last update of the stretch.</p>"
            + _table(evo_df, "evolution")
            + _img(p, "evolution")
        )
    else:
        sections.append(
            "<h2>Evolution across training checkpoints</h2><p class='note'>No training runs given "
            "(pass a training run directory to see how the graphs change).</p>"
        )

    body = "\n".join(sections)
    run_list = "".join(f"<li><code>{html.escape(str(r))}</code></li>" for r in runs)
    doc = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>Backend: <b>{html.escape(backends)}</b>. Runs:</p><ul>{run_list}</ul>{body}</body></html>\n"
    )
    report = out / "report.html"
    report.write_text(doc)
    metrics_df.to_csv(out / "metrics.csv", index=False)
    return GraphReport(report, tuple(images), metrics_df)
