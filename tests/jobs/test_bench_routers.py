"""`puppeteer outcomes routers` on a toy imported table: every router, its metrics, the report files."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from puppeteer.cli import main
from puppeteer.jobs.bench_routers import LEARNED
from puppeteer.outcomes.importer import import_table
from puppeteer.outcomes.table import ReadOptions


def _logs() -> pd.DataFrame:
    """`big` (cost 10) is right on sums and trivia, `small` (cost 1) on trivia only, `odd` (cost 2) on
    every third prompt; 30 train and 10 test prompts."""
    rows = []
    for i in range(40):
        kind = "sum" if i % 2 else "trivia"
        prompt = (
            f"Compute the sum of {i} and {i + 3}"
            if kind == "sum"
            else f"Which painter made artwork {i} famous"
        )
        for model, cost in (("big", 0.010), ("small", 0.001), ("odd", 0.002)):
            right = {"big": True, "small": kind == "trivia", "odd": i % 3 == 0}[model]
            rows.append(
                (f"q{i:02d}", prompt, kind, "test" if i >= 30 else "train", model, float(right), cost)
            )
    return pd.DataFrame(rows, columns=["prompt_id", "prompt", "task", "split", "model", "score", "cost_usd"])


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("bench")
    _logs().to_csv(tmp / "logs.csv", index=False)
    folder = import_table(
        [tmp / "logs.csv"], tmp / "toy", options=ReadOptions(validation_fraction=0.0)
    ).folder
    argv = [
        "outcomes",
        "routers",
        str(folder),
        "--out",
        str(tmp / "out"),
        "--seeds",
        "0",
        "--encoder",
        "hashing",
    ]
    assert main([*argv, "--lams", "6", "--episodes", "60"]) == 0
    return tmp / "out", json.loads((tmp / "out" / "results.json").read_text())


def test_writes_the_table_plot_and_results(results: tuple[Path, dict]) -> None:
    out, r = results
    assert (out / "routers.png").stat().st_size > 0
    table = (out / "routers.md").read_text()
    for name in ("random", "best-single", "per-task", "knn", "logistic", "cluster", "oracle", LEARNED):
        assert f"| {name} |" in table
    assert r["n_train"] == 30 and r["n_test"] == 10


def test_references_and_the_exact_routers_by_hand(results: tuple[Path, dict]) -> None:
    _, r = results
    ref = r["references"]
    assert ref["strong"] == "big" and ref["weak"] == "small"
    # test prompts 30..39: trivia are the even ones (5 of 10); big is always right
    assert ref["strong_point"] == pytest.approx((0.010, 1.0))
    assert ref["weak_point"] == pytest.approx((0.001, 0.5))
    assert ref["oracle_quality"] == 1.0
    oracle = r["runs"]["oracle"][0]
    # at lam 0 the oracle takes the cheapest right model:
    # small on trivia (5), odd on 33 and 39, big on 31, 35, 37
    first = oracle["points"][0]
    assert first["quality"] == 1.0 and first["cost"] == pytest.approx(
        (5 * 0.001 + 2 * 0.002 + 3 * 0.010) / 10
    )
    # per task: big on sums, small on trivia at any price below 0.5 quality per 0.009 USD
    per_task = r["runs"]["per-task"][0]["points"][0]
    assert per_task["quality"] == 1.0 and per_task["cost"] == pytest.approx((5 * 0.001 + 5 * 0.010) / 10)
    single = r["runs"]["best-single"][0]["points"][0]
    assert single["shares"] == {"big": 1.0} and single["quality"] == 1.0
    # best-single's hull: (0.001, 0.5) .. (0.01, 1.0) over the oracle range [0.001, 0.01]: APGR 0.5
    assert r["runs"]["best-single"][0]["apgr"] == pytest.approx(0.5)
    assert r["runs"]["per-task"][0]["gap_closed"] == 0.0  # best single already reaches the oracle here
