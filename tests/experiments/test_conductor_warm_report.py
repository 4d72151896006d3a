"""experiments/conductor-warm/report.py: returns, deltas and McNemar counts of an A/B's arms, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.experiment_modules import experiment_module

report = experiment_module("conductor-warm", "report")


def _arm(root: Path, name: str, rows: list[tuple[str, bool, float, list[int] | None]]) -> None:
    (root / name).mkdir(parents=True)
    lines = []
    for task_id, correct, usd, plan in rows:
        workflow = {"model_id": plan, "final": None} if plan is not None else None
        lines.append(
            json.dumps({"task_id": task_id, "correct": correct, "cost_usd": usd, "workflow": workflow})
        )
    (root / name / "trajectories.jsonl").write_text("\n".join(lines) + "\n")


def test_report_prices_items_and_pairs_each_arm_with_the_rule_and_the_single(tmp_path: Path) -> None:
    ab = tmp_path / "ab"
    items = [f"gsm8k/{i}" for i in range(4)] + [f"mmlu/{i}" for i in range(6)]
    conductor = [(t, i < 8, 0.001, [0] if t.startswith("gsm8k") else [1, 2]) for i, t in enumerate(items)]
    _arm(ab, "A_conductor_grpo_runs_x_s1_warm_start", conductor)
    _arm(ab, "B_conductor_grpo_runs_x_s1", conductor)
    _arm(ab, "C_best-rule_200_usd", [(t, i >= 2, 0.002, None) for i, t in enumerate(items)])
    _arm(ab, "D_best-single_200_usd", [(t, i < 5, 0.0, None) for i, t in enumerate(items)])
    report.main([str(ab), "--lam", "0.1", "--out", str(tmp_path / "res")])
    out = json.loads((tmp_path / "res" / "report.json").read_text())
    arm = out["arms"]["A_conductor_grpo_runs_x_s1_warm_start"]
    # 8 of 10 right at 0.1 cents an item: 0.8 - 0.1 x 0.1 = 0.79; the rule 0.8 - 0.1 x 0.2 = 0.78
    assert arm["accuracy"] == 0.8 and arm["cents"] == pytest.approx(0.1)
    assert arm["return"] == pytest.approx(0.79)
    assert arm["vs_best_rule"]["delta_points"] == pytest.approx(1.0)
    # items 0, 1 only the conductor; items 8, 9 only the rule
    assert (arm["vs_best_rule"]["only_arm"], arm["vs_best_rule"]["only_ref"]) == (2, 2)
    assert arm["vs_best_single"]["delta_points"] == pytest.approx(100 * (0.79 - 0.5))
    assert arm["plans"]["distinct"] == 2 and arm["plans"]["at_least_10pct"] == 2
    pooled = out["pooled"]["warm-started (before GRPO)"]
    assert pooled["seeds"] == 1 and pooled["worst_seed_vs_best_rule"] == pytest.approx(1.0)
    assert "after GRPO" in out["pooled"]
    assert "Backend: sim" in (tmp_path / "res" / "report.md").read_text()
