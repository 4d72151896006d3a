"""More than two arms on the same items: each arm against the first, and all of them on one plot.

``puppeteer ab A B C ...`` answers "prompted conductor vs trained puppeteer vs the best baseline"
in one command. Every arm is a policy spec or a finished eval run directory (as in
:mod:`puppeteer.analytics.ab`). The first arm is the reference: each other arm gets the paired
A/B of :func:`puppeteer.analytics.ab.compare_runs` against it (exact McNemar on accuracy,
paired bootstrap on cost, tokens, calls, reward). The summary table and the plot use the items
every arm has, so their numbers are comparable across rows. With m comparisons against the
reference, the report names the Bonferroni threshold 0.05 / m beside the raw p-values.

Writes ``OUT/arms.md`` (summary, then one paired table per arm), ``OUT/arms.json`` and
``OUT/arms.png`` (accuracy with 95% Wilson intervals against tokens and USD per item, the Pareto
front dashed), and each pair's own ``ab.md`` / ``ab.json`` / ``ab.png`` in ``OUT/A_vs_<label>/``.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from puppeteer.analytics.ab import (
    ABResult,
    Arm,
    compare_episodes,
    episodes_of,
    make_arm,
    markdown,
    run_arm,
    write_report,
)
from puppeteer.analytics.plots import CostPoint, accuracy_vs_cost, pareto_front
from puppeteer.analytics.store import run_metadata

ALPHA = 0.05
LABELS = string.ascii_uppercase


@dataclass(frozen=True)
class ArmSummary:
    """One arm on the items every arm has: its accuracy and metadata (``arm``), and its mean costs."""

    arm: Arm
    policy: str  # the policy the run's results.json names (``arm.spec`` is what was given)
    usd: float
    tokens: float
    calls: float

    def point(self, cost: str, label: str) -> CostPoint:
        """Accuracy with its interval against the mean ``cost`` ("tokens" or "usd")."""
        return CostPoint(label, getattr(self, cost), self.arm.accuracy, self.arm.ci_low, self.arm.ci_high)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self.arm),
            "policy": self.policy,
            "usd": self.usd,
            "tokens": self.tokens,
            "calls": self.calls,
        }


@dataclass(frozen=True)
class ArmsResult:
    pool: str
    suite: str
    n_common: int
    arms: tuple[ArmSummary, ...]
    pairs: tuple[ABResult, ...]  # arm i (i >= 1) against arm 0

    @property
    def bonferroni(self) -> float:
        return ALPHA / max(len(self.pairs), 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "suite": self.suite,
            "n_common": self.n_common,
            "bonferroni_threshold": self.bonferroni,
            "arms": [a.to_dict() for a in self.arms],
            "pairs": [p.to_dict() for p in self.pairs],
        }


def _summaries(
    runs: Sequence[Path], specs: Sequence[str], episodes: Sequence[pd.DataFrame]
) -> tuple[int, tuple[ArmSummary, ...]]:
    frames = [e.set_index("task_id") for e in episodes]
    common = frames[0].index
    for f in frames[1:]:
        common = common.intersection(f.index)
    if common.empty:
        raise ValueError("the arms share no items")
    out = []
    for label, spec, run, df in zip(LABELS, specs, runs, frames, strict=False):
        d: pd.DataFrame = df.loc[common]
        out.append(
            ArmSummary(
                make_arm(label, spec, run, d),
                str(run_metadata(run).get("policy") or spec),
                float(d["cost_usd"].fillna(0).mean()),
                float(d["tokens"].fillna(0).mean()),
                float(d["calls"].fillna(0).mean()),
            )
        )
    return len(common), tuple(out)


def _check_count(n: int) -> None:
    if n < 2:
        raise ValueError("need at least two arms")
    if n > len(LABELS):
        raise ValueError(f"at most {len(LABELS)} arms")


def compare_arms(runs: Sequence[str | Path], specs: Sequence[str] | None = None) -> ArmsResult:
    """Compare finished eval runs: each against the first, and all on their common items."""
    _check_count(len(runs))
    paths = [Path(r) for r in runs]
    names = list(specs) if specs else [str(r) for r in runs]
    episodes = [episodes_of(p) for p in paths]  # each run read once
    pairs = tuple(
        compare_episodes(paths[0], p, episodes[0], e, names[0], s)
        for p, e, s in zip(paths[1:], episodes[1:], names[1:], strict=True)
    )
    n_common, arms = _summaries(paths, names, episodes)
    meta = run_metadata(paths[0])
    return ArmsResult(str(meta.get("pool")), str(meta.get("suite")), n_common, arms, pairs)


def run_arms(
    sources: Sequence[str],
    pool: str,
    suite: str,
    out: str | Path,
    **eval_kwargs: Any,
) -> ArmsResult:
    """Run (or read) every arm on the same items and write the reports."""
    _check_count(len(sources))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [run_arm(s, LABELS[i], out, pool, suite, **eval_kwargs) for i, s in enumerate(sources)]
    result = compare_arms(runs, sources)
    write_arms_report(result, out)
    return result


# --------------------------------------------------------------------------- reporting


def _front_labels(arms: Sequence[ArmSummary], cost: str) -> set[str]:
    return {p.label for p in pareto_front([a.point(cost, a.arm.label) for a in arms])}


def arms_markdown(result: ArmsResult) -> str:
    backends = sorted({a.arm.backend for a in result.arms})
    front = _front_labels(result.arms, "tokens")
    lines = [
        f"Pool {result.pool}, suite {result.suite}: {len(result.arms)} arms on the {result.n_common} items "
        f"they all have; backend: {' / '.join(backends)}. Reference: arm A. "
        f"{len(result.pairs)} comparisons with A: Bonferroni threshold p < {result.bonferroni:.3g}.",
        "",
        "| arm | policy | accuracy (95% Wilson) | USD per item | tokens per item | calls per item | "
        "vs A: exact McNemar p (A only / arm only) | Pareto (tokens) |",
        "|---|---|---|---:|---:|---:|---|:-:|",
    ]
    for i, summary in enumerate(result.arms):
        a = summary.arm
        mc = result.pairs[i - 1].accuracy if i else None
        versus = "-" if mc is None else f"{mc.p_value:.3g} ({mc.only_a} / {mc.only_b})"
        lines.append(
            f"| {a.label} | `{summary.policy}` | {a.accuracy:.3f} [{a.ci_low:.3f}, {a.ci_high:.3f}] | "
            f"{summary.usd:.4g} | {summary.tokens:,.0f} | {summary.calls:.2f} | {versus} | "
            f"{'*' if a.label in front else ''} |"
        )
    for label, pair in zip(LABELS[1:], result.pairs, strict=False):
        lines += ["", f"### A vs {label}", "", markdown(pair).rstrip()]
    return "\n".join(lines) + "\n"


def arms_plot(result: ArmsResult, path: str | Path) -> Path:
    panels = {
        title: [a.point(cost, f"{a.arm.label}: {a.policy}") for a in result.arms]
        for cost, title in (("tokens", "tokens per item"), ("usd", "USD per item"))
        if cost == "tokens" or any(a.usd > 0 for a in result.arms)  # local models cost no USD
    }
    backends = " / ".join(sorted({a.arm.backend for a in result.arms}))
    return accuracy_vs_cost(
        panels,
        path,
        f"{result.suite}, {result.n_common} items every arm has (backend {backends})",
        "cost per item",
    )


def write_arms_report(result: ArmsResult, out: str | Path) -> tuple[Path, Path, Path]:
    out = Path(out)
    for label, pair in zip(LABELS[1:], result.pairs, strict=False):
        d = out / f"A_vs_{label}"
        d.mkdir(parents=True, exist_ok=True)
        write_report(pair, d)
    md, js, png = out / "arms.md", out / "arms.json", out / "arms.png"
    md.write_text(arms_markdown(result))
    js.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    arms_plot(result, png)
    return md, js, png


__all__ = ["ArmSummary", "ArmsResult", "arms_markdown", "compare_arms", "run_arms", "write_arms_report"]
