"""The local experiment (experiments/local-experiment/local_experiment.py) end to end on the simulator
(the real run uses llama.cpp models)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from puppeteer.agents.pool import load_pool
from puppeteer.envs.trajectories import read_trajectories
from tests.experiment_modules import experiment_module

exp = experiment_module("local-experiment", "local_experiment")


@pytest.mark.slow  # ~40 s idle: two training runs, two re-evaluations, eleven baselines
def test_train_baselines_and_report_on_the_simulator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exp"
    argv = [
        "--out", str(out), "--pool", "sim-paper", "--cost-model", "tokens", "--lam", "0,2", "--seeds", "1",
        "--episodes", "128", "--n-train", "20", "--n-eval", "20", "--encoder", "hashing", "--quiet",
    ]  # fmt: skip
    exp.main(argv)
    text = (out / "report.md").read_text()
    assert capsys.readouterr().out.endswith(text + "\n")  # the report is also printed
    assert (out / "pareto.png").stat().st_size > 5000
    pool = load_pool("sim-paper")
    rows = {r.label: r for r in exp.collect(out, pool)}
    # both trained runs and every single agent but the verifier, on the same 20 items
    assert {"trained lambda=0 seed 0", "trained lambda=2 seed 0", "random"} <= set(rows)
    assert sum(label.startswith("single:") for label in rows) == sum(
        a.pattern != "verify" for a in pool.agents
    )
    assert {r.n for r in rows.values()} == {20}
    # the paired line of each trained run agrees with the per-item outcomes
    singles = [r for label, r in rows.items() if label.startswith("single:")]
    best = max(singles, key=lambda r: (r.accuracy, -r.model_s))
    for lam in ("0", "2"):
        run = rows[f"trained lambda={lam} seed 0"]
        only_best = int((best.items["correct"] & ~run.items["correct"]).sum())
        only_run = int((~best.items["correct"] & run.items["correct"]).sum())
        line = next(x for x in text.splitlines() if x.startswith(f"| trained lambda={lam} seed 0 |"))
        assert f"({only_best} / {only_run})" in line
        assert f"{run.accuracy - best.accuracy:+.3f}" in line
    # max_steps=1: a trained router makes exactly one call per item
    assert all(rows[f"trained lambda={lam} seed 0"].items["calls"].eq(1).all() for lam in ("0", "2"))
    # the ceilings: every single agent also ran on the 20 training items (replayed for the probe), and
    # at lambda 0 (the only row under the tokens cost model) the oracle's accuracy is the coverage
    assert len(list((out / "baselines-train").glob("single_*/results.json"))) == len(singles)
    covered = pd.concat([r.items["correct"] for r in singles], axis=1).any(axis=1).mean()
    ceiling = next(x for x in text.splitlines() if x.startswith("| 0 |")).split("|")
    trained0 = rows["trained lambda=0 seed 0"]
    assert ceiling[2].strip() == f"{trained0.accuracy:.3f} / {trained0.model_s:.1f}"
    assert ceiling[-2].strip().startswith(f"{covered:.3f} /")
    assert "With more labels (5-fold cross-fit" in text


@pytest.mark.slow  # ~20 s: one training run on three agents of the pool, its baselines
def test_agents_restricts_the_router_and_the_baselines_to_those_agents(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    agents = ["gemma3-27b-cot", "qwen3-32b-cot", "gpt5-cot"]
    argv = [
        "--out", str(out), "--pool", "sim-paper", "--cost-model", "tokens", "--lam", "0", "--seeds", "1",
        "--episodes", "64", "--n-train", "10", "--n-eval", "10", "--encoder", "hashing", "--quiet",
        "--agents", ",".join(agents),
    ]  # fmt: skip
    exp.main(argv)
    pool = load_pool("sim-paper").subset(agents)
    rows = {r.label: r for r in exp.collect(out, pool)}
    assert set(rows) == {"trained lambda=0 seed 0", "random", *(f"single:{a}" for a in agents)}
    for label in ("trained lambda=0 seed 0", "random"):
        called = {
            s.agent_name
            for t in read_trajectories(rows[label].run_dir / "trajectories.jsonl")
            for s in t.steps
        }
        assert called and called <= set(agents), (label, called)
    assert f"Pool `sim-paper[{','.join(agents)}]`" in (out / "report.md").read_text()


def test_seed_list_trains_the_seeds_named_instead_of_the_first_n() -> None:
    import argparse

    seed_list = exp.seed_list

    assert seed_list(argparse.Namespace(seeds=3, seed_list=None)) == [0, 1, 2]
    assert seed_list(argparse.Namespace(seeds=3, seed_list="2,5")) == [2, 5]
