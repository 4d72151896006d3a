"""More than two arms on the same items: each arm against the first, and all of them on one plot.

``puppeteer ab A B C ...`` answers "prompted conductor vs trained puppeteer vs the best baseline"
in one command. Every arm is a policy spec or a finished eval run directory (as in
:mod:`puppeteer.analytics.ab`). The first arm is the reference: each other arm gets the paired
A/B of :func:`puppeteer.analytics.ab.compare_runs` against it (exact McNemar on accuracy,
paired bootstrap on cost, tokens, calls, reward). The summary table and the plot use the items
every arm has, so their numbers are comparable across rows. With m comparisons against the
reference, the report names the Bonferroni threshold 0.05 / m beside the raw p-values.

Writes ``OUT/arms.md`` (summary, then one paired table per arm), ``OUT/arms.json`` and
``OUT/arms.png`` (accuracy with 95% Wilson intervals against tokens, single-stream model seconds
where the pool declares its models' speeds, and USD where any arm spent some, per item; the Pareto
front dashed), and each pair's own ``ab.md`` / ``ab.json`` / ``ab.png`` in ``OUT/A_vs_<label>/``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.analytics.ab import (
    LABELS,
    METRIC_LABELS,
    ABResult,
    Arm,
    clear_earlier,
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


@dataclass(frozen=True)
class ArmSummary:
    """One arm on the items every arm has: its accuracy and metadata (``arm``), and its mean costs."""

    arm: Arm
    policy: str  # the policy the run's results.json names (``arm.spec`` is what was given)
    usd: float
    tokens: float
    calls: float
    model_s: float | None = None  # single-stream model seconds at the pool's declared speeds

    def point(self, cost: str, label: str) -> CostPoint:
        """Accuracy with its interval against the mean ``cost`` ("tokens", "model_s" or "usd")."""
        return CostPoint(label, getattr(self, cost), self.arm.accuracy, self.arm.ci_low, self.arm.ci_high)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self.arm),
            "policy": self.policy,
            "usd": self.usd,
            "tokens": self.tokens,
            "calls": self.calls,
            "model_s": self.model_s,
        }


@dataclass(frozen=True)
class ArmsResult:
    pool: str
    suite: str
    n_common: int
    arms: tuple[ArmSummary, ...]
    pairs: tuple[ABResult, ...]  # arm i (i >= 1) against arm 0

    @property
    def costs(self) -> list[tuple[str, str]]:
        """(cost, label) the arms are shown against: model seconds where every arm was priced, tokens,
        and USD where any arm spent some. The first is the one the Pareto column uses."""
        out = [("model_s", METRIC_LABELS["model_s"])] if self.priced else []
        out.append(("tokens", METRIC_LABELS["tokens"]))
        if any(a.usd > 0 for a in self.arms):  # local models cost no USD
            out.append(("usd", METRIC_LABELS["cost_usd"]))
        return out

    @property
    def priced(self) -> bool:
        return all(a.model_s is not None for a in self.arms)

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
                float(d["model_s"].mean()) if "model_s" in d.columns else None,
            )
        )
    return len(common), tuple(out)


def _check_count(n: int) -> None:
    if n < 2:
        raise ValueError("need at least two arms")
    if n > len(LABELS):
        raise ValueError(f"at most {len(LABELS)} arms")


def compare_arms(
    runs: Sequence[str | Path], specs: Sequence[str] | None = None, speeds: Pool | None = None
) -> ArmsResult:
    """Compare finished eval runs: each against the first, and all on their common items
    (``speeds``: a pool whose declared speeds price model seconds, :func:`episodes_of`)."""
    _check_count(len(runs))
    paths = [Path(r) for r in runs]
    names = list(specs) if specs else [str(r) for r in runs]
    episodes = [episodes_of(p, speeds) for p in paths]  # each run read once
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
    """Run (or read) every arm on the same items and write the reports (``overwrite`` among
    ``eval_kwargs``: also remove what an earlier A/B wrote in ``out``, :func:`.ab.clear_earlier`)."""
    _check_count(len(sources))
    out = Path(out)
    if eval_kwargs.get("overwrite"):
        clear_earlier(out, sources)
    out.mkdir(parents=True, exist_ok=True)
    runs = [run_arm(s, LABELS[i], out, pool, suite, **eval_kwargs) for i, s in enumerate(sources)]
    result = compare_arms(runs, sources, speeds=load_pool(pool))
    write_arms_report(result, out)
    return result


# --------------------------------------------------------------------------- reporting


def _front_labels(arms: Sequence[ArmSummary], cost: str) -> set[str]:
    return {p.label for p in pareto_front([a.point(cost, a.arm.label) for a in arms])}


def _cell(summary: ArmSummary, cost: str) -> str:
    value = getattr(summary, cost)
    return {"tokens": f"{value:,.0f}", "model_s": f"{value:.1f}"}.get(cost, f"{value:.4g}")


def arms_markdown(result: ArmsResult) -> str:
    backends = sorted({a.arm.backend for a in result.arms})
    costs = result.costs
    pareto_on = costs[0][0]
    front = _front_labels(result.arms, pareto_on)
    cost_headers = " | ".join(label for _, label in costs)
    pareto_name = "model s" if pareto_on == "model_s" else "tokens"
    lines = [
        f"Pool {result.pool}, suite {result.suite}: {len(result.arms)} arms on the {result.n_common} items "
        f"they all have; backend: {' / '.join(backends)}. Reference: arm A. "
        f"{len(result.pairs)} comparisons with A: Bonferroni threshold p < {result.bonferroni:.3g}.",
        *(
            ["Model s: the workers' calls priced at the pool's declared single-stream speeds."]
            if result.priced
            else []
        ),
        "",
        f"| arm | policy | accuracy (95% Wilson) | {cost_headers} | calls per item | "
        f"vs A: exact McNemar p (A only / arm only) | Pareto ({pareto_name}) |",
        f"|---|---|---|{'---:|' * len(costs)}---:|---|:-:|",
    ]
    for i, summary in enumerate(result.arms):
        a = summary.arm
        mc = result.pairs[i - 1].accuracy if i else None
        versus = "-" if mc is None else f"{mc.p_value:.3g} ({mc.only_a} / {mc.only_b})"
        cells = " | ".join(_cell(summary, cost) for cost, _ in costs)
        lines.append(
            f"| {a.label} | `{summary.policy}` | {a.accuracy:.3f} [{a.ci_low:.3f}, {a.ci_high:.3f}] | "
            f"{cells} | {summary.calls:.2f} | {versus} | {'*' if a.label in front else ''} |"
        )
    for label, pair in zip(LABELS[1:], result.pairs, strict=False):
        lines += ["", f"### A vs {label}", "", markdown(pair).rstrip()]
    return "\n".join(lines) + "\n"


def arms_plot(result: ArmsResult, path: str | Path) -> Path:
    panels = {
        title: [a.point(cost, f"{a.arm.label}: {a.policy}") for a in result.arms]
        for cost, title in result.costs
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
