"""The README's results rows that the main job produced state what their committed run wrote: the
learned routers' mean and worst seed, their model seconds, the best rule's and the best single agent's
accuracy and model seconds (experiments/*/results/**/results.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (how the README row starts, the committed run it reports)
ROWS = (
    ("| mixed traffic on real models", "experiments/quickstart/results/seeds101-105/results.json"),
    ("| the same traffic on the simulator", "experiments/sim-local-learner/results/lam1/results.json"),
    ("| the same traffic with real second steps (", "experiments/steps-learner/results/lam1/results.json"),
    (
        "| the same traffic with real second steps, the router reading",
        "experiments/steps-learner/results/by-kind/results.json",
    ),
)


def _row(start: str) -> list[str]:
    line = next(ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith(start))
    return [cell.strip() for cell in line.strip("|").split("|")]


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+\.\d+", cell)]


@pytest.mark.parametrize(("start", "path"), ROWS, ids=["/".join(p.split("/")[1:4:2]) for _, p in ROWS])
def test_a_readme_row_states_its_committed_run(start: str, path: str) -> None:
    results = {r["policy"]: r for r in json.loads((ROOT / path).read_text())["results"]}
    trained = [r for name, r in results.items() if name.startswith("puppeteer (trained) seed ")]
    rule = next(r for name, r in results.items() if name.startswith("best-rule"))
    single = next(r for name, r in results.items() if name.startswith("best-single"))
    _, learned, best_rule, best_single, _ = _row(start)
    accuracies = [r["accuracy"] for r in trained]
    mean_s = sum(r["model_s"] for r in trained) / len(trained)
    assert len(trained) == 5
    assert _numbers(learned) == [
        round(sum(accuracies) / len(accuracies), 3),
        round(min(accuracies), 3),
        round(mean_s, 1),
    ]
    assert _numbers(best_rule)[:2] == [round(rule["accuracy"], 3), round(rule["model_s"], 1)]
    assert _numbers(best_single)[:2] == [round(single["accuracy"], 3), round(single["model_s"], 1)]


def test_the_readme_conductor_row_states_its_committed_report() -> None:
    """The warm-started conductor's row: its seeds' mean and worst accuracy and pooled cents, the best
    rule's and the best single agent's, as experiments/conductor-warm/results/report.json holds them."""
    report = json.loads((ROOT / "experiments/conductor-warm/results/report.json").read_text())
    arms = report["arms"]
    seeds = [a for name, a in arms.items() if name.endswith("warm_start")]
    pooled = report["pooled"]["warm-started (before GRPO)"]
    rule = next(a for name, a in arms.items() if "best-rule" in name)
    single = next(a for name, a in arms.items() if "best-single" in name)
    _, learned, best_rule, best_single, _ = _row("| plans for sim workers in the routing world")
    assert pooled["seeds"] == len(seeds) == 3
    assert _numbers(learned) == [
        round(pooled["accuracy"], 3),
        round(min(a["accuracy"] for a in seeds), 3),
        round(pooled["cents"], 3),
    ]
    for cell, arm in ((best_rule, rule), (best_single, single)):
        assert _numbers(cell)[:2] == [round(arm["accuracy"], 3), round(arm["cents"], 3)]


# (how the README row starts, the conductor A/B's report: its arms priced in model minutes)
MINUTE_ROWS = (
    ("| plans with cascades for sim workers in the calibrated world", "sim-local-cascade"),
    ("| plans with cascades on real models, replayed", "local-mix-cascade"),
)


@pytest.mark.parametrize(("start", "results"), MINUTE_ROWS, ids=[r for _, r in MINUTE_ROWS])
def test_a_readme_conductor_row_priced_in_model_time_states_its_report(start: str, results: str) -> None:
    """A conductor row of a local world: the seeds' pooled and worst accuracy and pooled model seconds,
    the best rule's and the best single agent's accuracy and model seconds, and the two p-values."""
    report = json.loads((ROOT / "experiments/conductor-warm/results" / results / "report.json").read_text())
    arms = report["arms"]
    seeds = [a for name, a in arms.items() if name.endswith("warm_start")]
    pooled = report["pooled"]["warm-started (before GRPO)"]
    rule = next(a for name, a in arms.items() if "best-rule" in name)
    single = next(a for name, a in arms.items() if "best-single" in name)
    _, learned, best_rule, best_single, _ = _row(start)
    assert pooled["seeds"] == len(seeds) == 3
    assert _numbers(learned) == [
        round(pooled["accuracy"], 3),
        round(min(a["accuracy"] for a in seeds), 3),
        round(60 * pooled["minutes"], 1),
    ]
    for cell, arm in ((best_rule, rule), (best_single, single)):
        assert _numbers(cell)[:2] == [round(arm["accuracy"], 3), round(60 * arm["minutes"], 1)]
    assert f"p = {pooled['vs_best_rule']['p']:.2g}" in best_rule
    assert f"p = {pooled['vs_best_single']['p']:.2g}" in best_single
