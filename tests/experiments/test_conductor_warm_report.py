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


def test_with_a_pool_the_report_prices_model_minutes_at_its_declared_speeds(tmp_path: Path) -> None:
    from puppeteer.agents.pool import load_pool
    from puppeteer.envs.trajectories import trajectory_to_dict
    from puppeteer.types import Completion, Step, Trajectory

    pool = load_pool("sim-local")
    pot = pool.index("qwen1.5b-pot")
    model = pool.agent(pot).model  # prefill 46.7, decode 8.3 tokens/s in agents/sim-local.yaml

    def row(task_id: str, correct: bool, calls: int) -> dict:
        done = Completion("x", 467, 83, None, 0.0, 0.0, model.name)  # 10 s + 10 s = 1/3 minute a call
        steps = tuple(Step(k, pot, "qwen1.5b-pot", "", (), done, "1") for k in range(calls))
        return trajectory_to_dict(Trajectory(task_id, "mix-local", "workflow", steps, "1", correct, 0.0))

    ab = tmp_path / "ab"
    for name, calls in (("A_conductor_grpo_s1_warm_start", 2), ("B_best-rule", 1), ("C_best-single", 1)):
        (ab / name).mkdir(parents=True)
        rows = [row(f"gsm8k/{i}", i < 3, calls) for i in range(4)]
        (ab / name / "trajectories.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    argv = [str(ab), "--lam", "1", "--out", str(tmp_path / "res")]
    with pytest.raises(SystemExit):
        report.main([*argv, "--cost", "minutes"])  # minutes need the pool whose speeds price a call
    report.main([*argv, "--cost", "minutes", "--pool", "sim-local", "--backend", "sim (`sim-local`)"])
    out = json.loads((tmp_path / "res" / "report.json").read_text())
    assert out["lam_per_minute"] == 1.0
    arm = out["arms"]["A_conductor_grpo_s1_warm_start"]
    # two calls of 20 s each: 2/3 of a minute an item; the return 0.75 - 2/3
    assert arm["minutes"] == pytest.approx(2 / 3) and arm["return"] == pytest.approx(0.75 - 2 / 3)
    assert arm["vs_best_rule"]["delta_points"] == pytest.approx(-100 / 3)
    assert "model minutes" in (tmp_path / "res" / "report.md").read_text()


def test_the_report_reads_the_arms_the_ab_listed_not_an_earlier_runs_folders(tmp_path: Path) -> None:
    ab = tmp_path / "ab"
    items = [f"gsm8k/{i}" for i in range(4)]
    _arm(ab, "A_conductor_grpo_runs_x_s1_warm_start", [(t, True, 0.001, [0]) for t in items])
    _arm(ab, "B_best-rule_200_usd", [(t, False, 0.002, None) for t in items])  # an earlier run's rule
    _arm(ab, "C_best-rule_200_usd", [(t, True, 0.002, None) for t in items])
    _arm(ab, "D_best-single_200_usd", [(t, True, 0.0, None) for t in items])
    listed = ["A_conductor_grpo_runs_x_s1_warm_start", "C_best-rule_200_usd", "D_best-single_200_usd"]
    arms = [{"run_dir": f"runs/ab/{name}"} for name in listed]
    (ab / "arms.json").write_text(json.dumps({"arms": arms}))
    report.main([str(ab), "--lam", "0.1", "--out", str(tmp_path / "res")])
    out = json.loads((tmp_path / "res" / "report.json").read_text())
    assert sorted(out["arms"]) == listed
    assert out["arms"]["A_conductor_grpo_runs_x_s1_warm_start"]["vs_best_rule"]["only_ref"] == 0


def test_arms_given_as_finished_runs_are_read_where_they_are_and_the_routers_pooled(tmp_path: Path) -> None:
    """An A/B may pair its conductors with finished runs elsewhere (a quickstart's rule, best single
    agent and one router a seed): the report reads them from their own folders and pools the routers."""
    ab, qs = tmp_path / "ab", tmp_path / "qs" / "eval"
    items = [f"gsm8k/{i}" for i in range(4)]
    _arm(ab, "A_conductor_grpo_runs_x_s1_warm_start", [(t, True, 0.001, [0]) for t in items])
    _arm(qs, "best-rule_200", [(t, i < 3, 0.001, None) for i, t in enumerate(items)])
    _arm(qs, "best-single_200", [(t, i < 2, 0.0, None) for i, t in enumerate(items)])
    _arm(qs, "puppeteer-seed1", [(t, i < 3, 0.001, None) for i, t in enumerate(items)])
    _arm(qs, "puppeteer-seed2", [(t, i < 1, 0.001, None) for i, t in enumerate(items)])
    dirs = [str(ab / "A_conductor_grpo_runs_x_s1_warm_start")]
    dirs += [str(qs / n) for n in ("best-rule_200", "best-single_200", "puppeteer-seed1", "puppeteer-seed2")]
    (ab / "arms.json").write_text(json.dumps({"arms": [{"run_dir": d} for d in dirs]}))
    report.main([str(ab), "--lam", "0", "--out", str(tmp_path / "res")])
    out = json.loads((tmp_path / "res" / "report.json").read_text())
    routers = out["pooled"]["step-wise router"]
    # seeds right on 3 and 1 of 4 items: pooled 0.5, the rule 0.75; worst seed 0.25 - 0.75
    assert routers["seeds"] == 2 and routers["accuracy"] == 0.5
    assert routers["vs_best_rule"]["delta_points"] == pytest.approx(-25.0)
    assert routers["worst_seed_vs_best_rule"] == pytest.approx(-50.0)
    assert out["arms"]["A_conductor_grpo_runs_x_s1_warm_start"]["vs_best_rule"][
        "delta_points"
    ] == pytest.approx(25.0)
    assert "**step-wise router, 2 seeds pooled**" in (tmp_path / "res" / "report.md").read_text()


def test_models_counts_the_kinds_kept_plan_and_the_fine_tunes_cpu_time(tmp_path: Path) -> None:
    """models.py: for each conductor run, its fine-tune's CPU seconds and examples, and on the items the
    first run planned the share of plans that are the kind's kept plan (hand-made runs)."""
    from puppeteer.envs.trajectories import trajectory_to_dict
    from puppeteer.envs.workflow import format_workflow
    from puppeteer.train.grpo.warm_start import KeptPlan, write_plans
    from puppeteer.types import Trajectory, Workflow

    models = experiment_module("conductor-warm", "models")
    kept = Workflow((1,), ("s",), ((),))
    other = Workflow((0, 1), ("s", "s"), ((), ()), "cascade:not-integer")
    write_plans(
        tmp_path / "plans.jsonl", [KeptPlan("gsm8k/0", "gsm8k", "single:b", format_workflow(kept), 1.0, (0,))]
    )

    def run(name: str, model: str, runtime: float, plans: list[Workflow], first: int = 0) -> Path:
        root = tmp_path / name
        (root / "warm_start").mkdir(parents=True)
        (root / "config.json").write_text(json.dumps({"model": {"id": model}}))
        log = [{"loss": 0.5, "step": 1}, {"train_runtime": runtime, "epoch": 0.25, "step": 2}]
        (root / "warm_start" / "sft_log.json").write_text(json.dumps(log))
        (root / "eval").mkdir()
        rows = [
            trajectory_to_dict(
                Trajectory(f"gsm8k/{first + i}", "mix-local", "workflow", (), "1", i == 0, 0.0, workflow=w)
            )
            for i, w in enumerate(plans)
        ]
        (root / "eval" / "trajectories.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        return root

    big = run("s1", "qwen2.5-coder-0.5b", 600.0, [kept, other, kept])
    small = run("s2", "smollm2-135m", 1900.0, [other, kept, kept, kept])  # one item more: left out
    models.main(
        [str(big), str(small), "--plans", str(tmp_path / "plans.jsonl"), "--out", str(tmp_path / "res")]
    )
    out = json.loads((tmp_path / "res" / "models.json").read_text())
    assert out["items"] == 3
    first, second = out["rows"]
    assert (first["model"], first["sft_cpu_s"], first["examples"]) == ("qwen2.5-coder-0.5b", 600.0, 50)
    assert first["kept_plan_rate"] == pytest.approx(2 / 3) and second["kept_plan_rate"] == pytest.approx(
        2 / 3
    )
    assert first["accuracy"] == pytest.approx(1 / 3) and first["parse_rate"] == 1.0


PAGE = Path(__file__).parents[2] / "experiments" / "conductor-warm"


def _row(page: str, start: str) -> str:
    rows = [line for line in page.splitlines() if line.startswith(start)]
    assert len(rows) == 1, f"one row starting {start!r} on the page, found {len(rows)}"
    return rows[0]


@pytest.mark.parametrize(
    ("start", "arm"),
    [
        ("| **seed 622 after 21 GRPO steps**", "conductor_grpo_s622g"),
        ("| seed 622, warm start", "B_conductor_grpo_runs_conductor-warm_sim-local-cascade_s622_warm_start"),
    ],
)
def test_the_grpo_rows_of_the_page_state_the_committed_report(start: str, arm: str) -> None:
    res = json.loads((PAGE / "results" / "sim-local-cascade-grpo" / "report.json").read_text())["arms"][arm]
    row = _row((PAGE / "README.md").read_text(), start).replace("**", "")
    lo, hi = res["ci"]
    assert f"{res['accuracy']:.3f} [{lo:.3f}, {hi:.3f}]" in row
    assert f"| {res['minutes']:.3f} | {res['return']:.3f} |" in row
    rule = res["vs_best_rule"]
    assert (
        f"{rule['delta_points']:+.1f} (p = {rule['p']:.2g}; {rule['only_arm']} / {rule['only_ref']})" in row
    )


def test_the_model_rows_of_the_page_state_the_committed_comparison() -> None:
    models = json.loads(
        (PAGE / "results" / "sim-local-cascade-qwen2.5-coder-0.5b" / "models.json").read_text()
    )
    page = (PAGE / "README.md").read_text()
    names = {"qwen2.5-coder-0.5b": "Qwen2.5-Coder-0.5B", "smollm2-135m": "SmolLM2-135M"}
    for r in models["rows"]:
        seed = r["run"].rsplit("/s", 1)[1]
        row = _row(page, f"| {names[r['model']]} (seed {seed})")
        lo, hi = r["ci"]
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1:] == [
            f"{round(r['sft_cpu_s']):,}",
            str(r["examples"]),
            f"{r['last_loss']:.3f}",
            f"{r['parse_rate']:.2f}",
            f"{r['kept_plan_rate']:.2f}",
            f"{r['accuracy']:.3f} [{lo:.3f}, {hi:.3f}]",
            f"{r['return']:.3f}",
        ]
