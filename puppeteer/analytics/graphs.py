"""Emergent collaboration graphs: trajectories folded into weighted directed graphs (networkx).

Agents are nodes. In step mode an edge ``u -> v`` is one consecutive activation (``v`` acted
right after ``u``; ``u -> u`` is a self-loop: the same agent twice in a row). In workflow mode
an edge ``u -> v`` means step ``v`` was given step ``u``'s output (its access list). Edge
weights count occurrences. Works on the steps table of :func:`puppeteer.analytics.load`.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx
import pandas as pd

log = logging.getLogger(__name__)

MAX_CYCLE_LENGTH = 5


def episode_edges(agents: Sequence[str], access: Sequence[Sequence[int]], mode: str) -> list[tuple[str, str]]:
    """The edges of one episode: consecutive activations (step) or access (workflow)."""
    if mode == "workflow":
        return [(agents[i], agents[j]) for j, seen in enumerate(access) for i in seen if 0 <= i < len(agents)]
    return list(itertools.pairwise(agents))


def _episodes(steps: pd.DataFrame) -> Iterable[tuple[list[str], list[list[int]], str]]:
    for _, g in steps.sort_values(["run_id", "episode", "step"]).groupby(["run_id", "episode"], sort=False):
        yield list(g["agent_name"]), [list(a) for a in g["access"]], str(g["mode"].iloc[0])


def fold(steps: pd.DataFrame) -> nx.DiGraph:
    """One weighted graph from many episodes; node attribute ``activations`` counts each agent's steps."""
    g = nx.DiGraph()
    for agents, access, mode in _episodes(steps):
        for a in agents:
            if a not in g:
                g.add_node(a, activations=0)
            g.nodes[a]["activations"] += 1
        for u, v in episode_edges(agents, access, mode):
            w = g.edges[u, v]["weight"] + 1 if g.has_edge(u, v) else 1
            g.add_edge(u, v, weight=w)
    return g


def cycles_by_length(g: nx.DiGraph, max_length: int = MAX_CYCLE_LENGTH) -> dict[int, int]:
    """Number of simple cycles of each length up to ``max_length`` (length 1: self-loops)."""
    counts: Counter[int] = Counter(len(c) for c in nx.simple_cycles(g, length_bound=max_length))
    return {k: counts.get(k, 0) for k in range(1, max_length + 1)}


@dataclass(frozen=True)
class GraphMetrics:
    episodes: int
    nodes: int
    edges: int
    density: float  # edges / (n * (n - 1)); self-loops count as edges, as in networkx
    cycles: dict[int, int]
    mean_steps: float  # path length: agent activations per episode
    episode_density: float  # mean density of each episode's own graph
    cyclic_fraction: float  # fraction of episodes whose own graph has a cycle (an agent came back)
    accuracy: float
    degree: dict[str, float] = field(default_factory=dict)  # weighted in + out degree
    pagerank: dict[str, float] = field(default_factory=dict)
    distribution: dict[str, float] = field(default_factory=dict)  # share of activations per agent

    @property
    def hub(self) -> str:
        return max(self.pagerank, key=self.pagerank.__getitem__) if self.pagerank else "-"

    def row(self) -> dict[str, object]:
        """A flat table row (cycles as ``cycles_len1`` ...)."""
        return {
            "episodes": self.episodes,
            "nodes": self.nodes,
            "edges": self.edges,
            "density": round(self.density, 4),
            **{f"cycles_len{k}": v for k, v in self.cycles.items()},
            "mean_steps": round(self.mean_steps, 3),
            "episode_density": round(self.episode_density, 4),
            "cyclic_fraction": round(self.cyclic_fraction, 4),
            "accuracy": round(self.accuracy, 4),
            "hub (PageRank)": self.hub,
        }


def _episode_graph_stats(agents: list[str], access: list[list[int]], mode: str) -> tuple[float, bool]:
    g = nx.DiGraph()
    g.add_nodes_from(agents)
    g.add_edges_from(episode_edges(agents, access, mode))
    density = nx.density(g) if len(g) > 1 else float(g.number_of_edges() > 0)
    cyclic = any(True for _ in nx.simple_cycles(g, length_bound=MAX_CYCLE_LENGTH))
    return density, cyclic


def metrics(
    steps: pd.DataFrame, episodes: pd.DataFrame | None = None, max_cycle_length: int = MAX_CYCLE_LENGTH
) -> GraphMetrics:
    """Graph metrics of the episodes in ``steps``; ``episodes`` (for accuracy, zero-step episodes)."""
    g = fold(steps)
    per_episode = [_episode_graph_stats(*e) for e in _episodes(steps)]
    n_eps = len(episodes) if episodes is not None else len(per_episode)
    if episodes is not None and len(episodes):
        mean_steps = float(episodes["calls"].mean())
        accuracy = float(episodes["correct"].mean())
    else:
        mean_steps = float(steps.groupby(["run_id", "episode"]).size().mean()) if len(steps) else 0.0
        accuracy = (
            float(steps.groupby(["run_id", "episode"])["correct"].first().mean()) if len(steps) else 0.0
        )
    acts = {n: float(d["activations"]) for n, d in g.nodes(data=True)}
    total = sum(acts.values()) or 1.0
    return GraphMetrics(
        episodes=n_eps,
        nodes=g.number_of_nodes(),
        edges=g.number_of_edges(),
        density=nx.density(g) if len(g) > 1 else float(g.number_of_edges() > 0),
        cycles=cycles_by_length(g, max_cycle_length),
        mean_steps=mean_steps,
        episode_density=float(sum(d for d, _ in per_episode) / len(per_episode)) if per_episode else 0.0,
        cyclic_fraction=float(sum(c for _, c in per_episode) / len(per_episode)) if per_episode else 0.0,
        accuracy=accuracy,
        degree={n: float(d) for n, d in g.degree(weight="weight")},
        pagerank=nx.pagerank(g, weight="weight") if g.number_of_edges() else {n: 1 / len(g) for n in g},
        distribution={n: a / total for n, a in sorted(acts.items(), key=lambda x: -x[1])},
    )


def by_group(steps: pd.DataFrame, episodes: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One metrics row per group of episodes (e.g. ``["suite"]``, ``["suite", "difficulty"]``)."""
    rows = []
    for key, eg in episodes.groupby(list(keys), dropna=False):
        sel = steps.merge(eg[["run_id", "episode"]], on=["run_id", "episode"])
        names = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, names, strict=True)), **metrics(sel, eg).row()})
    return pd.DataFrame(rows)


def checkpoint_bins(updates: pd.Series, n_bins: int = 6) -> pd.Series:
    """Training episodes in ``n_bins`` equal ranges of update index, each labelled by its last update."""
    hi = int(updates.max())
    edges = sorted({round(hi * k / n_bins) for k in range(n_bins + 1)})
    if len(edges) < 2:
        return pd.Series([hi] * len(updates), index=updates.index)
    return pd.cut(updates, bins=[edges[0] - 1, *edges[1:]], labels=edges[1:]).astype(int)


def evolution(steps: pd.DataFrame, episodes: pd.DataFrame, n_bins: int = 6) -> pd.DataFrame:
    """Metrics of training episodes per stretch of updates (checkpoints), in training order."""
    train = episodes[episodes["update_index"].notna()].copy()
    if train.empty:
        return pd.DataFrame()
    train["checkpoint"] = checkpoint_bins(train["update_index"].astype(int), n_bins)
    return by_group(steps, train, ["checkpoint"]).sort_values("checkpoint").reset_index(drop=True)


def attach_difficulty(
    episodes: pd.DataFrame, meta_keys: Sequence[str] = ("difficulty", "level")
) -> pd.DataFrame:
    """Add a ``difficulty`` column from each item's metadata (``level``/``difficulty``), else its domain."""
    from puppeteer.tasks import load_suite

    lookup: dict[tuple[str, str], object] = {}
    for (suite, split), _ in episodes.groupby(["suite", "split"], dropna=True):
        try:
            tasks = load_suite(str(suite), str(split))
        except Exception as e:  # suites whose data package is missing: fall back to the domain
            log.info("no item metadata for %s/%s: %s", suite, split, e)
            continue
        for t in tasks:
            value = next((t.meta[k] for k in meta_keys if k in t.meta), None)
            if value is not None:
                lookup[(str(suite), t.id)] = value
    out = episodes.copy()
    out["difficulty"] = [
        str(lookup.get((str(s), str(tid)), d))
        for s, tid, d in zip(out["suite"], out["task_id"], out["domain"], strict=True)
    ]
    return out


def distribution_table(steps: pd.DataFrame, keys: Sequence[str] = ("run",)) -> pd.DataFrame:
    """Share of activations per agent (columns) for each group (rows)."""
    counts = steps.groupby([*keys, "agent_name"]).size().unstack(fill_value=0)
    return counts.div(counts.sum(axis=1), axis=0).round(3)


def top(mapping: Mapping[str, float], k: int = 3) -> str:
    return ", ".join(f"{n} ({v:.2f})" for n, v in sorted(mapping.items(), key=lambda x: -x[1])[:k])
