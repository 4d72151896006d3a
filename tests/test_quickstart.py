"""The main job's code path, end to end on the simulator (the real-model run is timed in docs/quickstart)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from puppeteer.jobs.quickstart import QuickstartConfig, run_quickstart

SIM = QuickstartConfig(
    pool="sim-paper",
    agents=("gpt5-cot", "gemma3-27b-cot", "qwen3-32b-cot"),
    suite="arith",
    n_train=6,
    n_eval=8,
    episodes=64,
    encoder="hashing",
    baselines=("single:gemma3-27b-cot", "random"),
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("qs")
    with (out / "log").open("w") as log:
        summary = run_quickstart(SIM, out, cache=out / "responses.sqlite", console=Console(file=log))
    return out, summary


def test_writes_the_report_plots_results_and_policy(run: tuple[Path, dict]) -> None:
    out, _ = run
    for name in ("report.md", "results.json", "learning_curve.png", "agent_usage.png", "policy"):
        assert (out / name).exists(), name
    saved = json.loads((out / "results.json").read_text())
    assert saved["backend"] == "sim" and saved["episodes"] == 64 and saved["n_eval"] == 8
    policies = [r["policy"] for r in saved["results"]]
    assert policies == ["puppeteer (trained)", "single:gemma3-27b-cot", "random"]
    report = (out / "report.md").read_text()
    assert "Backend **sim**" in report and "llamacpp" not in report
    assert len((out / "train" / "trajectories.jsonl").read_text().splitlines()) == 64


def test_the_trained_router_calls_one_agent_and_beats_the_weak_one(run: tuple[Path, dict]) -> None:
    _, summary = run
    rows = {r["policy"]: r for r in summary["results"]}
    trained = rows["puppeteer (trained)"]
    assert trained["calls"] == 1.0  # max_steps=1, min_steps=1: one agent per item, never an empty episode
    # gpt5-cot is right on ~100% of arith, gemma3-27b-cot on ~41% (the paper's table the simulator follows)
    assert trained["accuracy"] > rows["single:gemma3-27b-cot"]["accuracy"]
