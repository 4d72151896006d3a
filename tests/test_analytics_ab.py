from __future__ import annotations

import json
from pathlib import Path

import pytest
from analytics_fixtures import trajectory, write_eval_run

from puppeteer.analytics import load
from puppeteer.analytics.ab import compare_runs, run_ab
from puppeteer.cli import main


def test_ab_on_the_simulator_pairs_items_and_writes_reports(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    r = run_ab("single:gemma3-27b-cot", "oracle", "sim-paper", "arith", out, n=60)
    a, b = load(out / "A_single_gemma3-27b-cot"), load(out / "B_oracle")
    assert list(a["task_id"]) == list(b["task_id"]) and r.n_pairs == 60
    mc = r.accuracy
    assert mc.both + mc.only_a + mc.only_b + mc.neither == 60
    assert r.a.accuracy == pytest.approx((mc.both + mc.only_a) / 60)
    assert r.b.accuracy == pytest.approx((mc.both + mc.only_b) / 60)
    assert r.metrics["calls"].diff == pytest.approx(b["calls"].mean() - a["calls"].mean())
    assert r.metrics["tokens"].ci_low <= r.metrics["tokens"].diff <= r.metrics["tokens"].ci_high
    assert r.a.backend == "sim"
    saved = json.loads((out / "ab.json").read_text())
    assert saved["accuracy"]["only_b"] == mc.only_b and saved["n_pairs"] == 60
    md = (out / "ab.md").read_text()
    assert "exact McNemar" in md and "backend: sim" in md
    assert (out / "ab.png").stat().st_size > 5000
    # the same comparison from the two finished run directories gives the same numbers
    again = compare_runs(out / "A_single_gemma3-27b-cot", out / "B_oracle")
    assert again.accuracy == r.accuracy and again.metrics == r.metrics


def test_ab_pairs_by_task_id_and_drops_unpaired_items(tmp_path: Path) -> None:
    ra = write_eval_run(
        tmp_path / "a",
        [trajectory("x", ["A"], True), trajectory("y", ["A"], False), trajectory("z", ["A"], True)],
    )
    rb = write_eval_run(tmp_path / "b", [trajectory("y", ["B", "B"], True), trajectory("x", ["B"], True)])
    r = compare_runs(ra, rb)
    assert r.n_pairs == 2 and (r.accuracy.both, r.accuracy.only_b) == (1, 1)
    assert r.metrics["calls"].diff == pytest.approx(0.5)


def test_ab_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    assert (
        main(
            [
                "ab",
                "single:gpt5-cot",
                "vote:3",
                "--pool",
                "sim-paper",
                "--suite",
                "arith",
                "--n",
                "20",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "McNemar" in capsys.readouterr().out
    assert (out / "ab.json").exists()
