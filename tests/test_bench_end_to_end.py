"""scripts/bench_end_to_end.py: resuming, the speed-up table, and the batching knob it turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _scripts import load_script

from puppeteer.cli import main


def _row(workload: str, arm: str, rnd: int, wall: float, rc: int = 0) -> dict[str, Any]:
    return {"workload": workload, "arm": arm, "round": rnd, "rc": rc, "wall_s": wall}


def test_table_reports_medians_and_their_ratio_over_successful_runs_only() -> None:
    bench = load_script("bench_end_to_end")
    rows = [
        _row("quickstart", "one-at-a-time", 0, 900.0),
        _row("quickstart", "one-at-a-time", 1, 1100.0),
        _row("quickstart", "one-at-a-time", 2, 1000.0),
        _row("quickstart", "batched", 0, 500.0),
        _row("quickstart", "batched", 1, 400.0),
        _row("quickstart", "batched", 2, 10.0, rc=1),  # a crashed run is not a fast one
        _row("baselines", "batched", 0, 300.0),  # no one-at-a-time run yet: no line
    ]
    table = bench.table(rows, bench.workloads(8))
    lines = table.splitlines()
    assert len(lines) == 3  # header, rule, quickstart
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    # medians 1000 (of 900, 1000, 1100) and 450 (of 400, 500): 2.22x, from 3 + 2 runs
    assert cells[1:] == ["1000", "450", "2.22x", "3 + 2"]


def test_done_keys_skip_only_runs_that_finished(tmp_path: Path) -> None:
    bench = load_script("bench_end_to_end")
    log = tmp_path / "e2e.jsonl"
    assert bench.done_keys(log) == set()
    rows = [_row("quickstart", "batched", 0, 500.0), _row("quickstart", "one-at-a-time", 0, 60.0, rc=137)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"workload": "quick')  # cut short
    assert bench.done_keys(log) == {("quickstart", "batched", 0)}


def test_only_the_one_at_a_time_arm_turns_batching_off(tmp_path: Path) -> None:
    bench = load_script("bench_end_to_end")
    for w in bench.workloads(8).values():
        off = w.command("one-at-a-time", tmp_path, tmp_path / "c.sqlite")
        on = w.command("batched", tmp_path, tmp_path / "c.sqlite")
        assert "--no-batching" in off and "--no-batching" not in on
        assert off[off.index("--cache") + 1] == str(tmp_path / "c.sqlite")


def test_quickstart_cli_passes_threads_and_batching(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[Any] = []
    monkeypatch.setattr("puppeteer.jobs.quickstart.run_quickstart", lambda cfg, *a, **k: seen.append(cfg))
    assert main(["quickstart", "--out", str(tmp_path), "--no-batching", "--threads", "1"]) == 0
    assert main(["quickstart", "--out", str(tmp_path)]) == 0
    assert (seen[0].batching, seen[0].n_threads) == (False, 1)
    assert (seen[1].batching, seen[1].n_threads) == (True, None)
