"""Side-by-side wall-time runs (benchmarks/sidebyside.py, which benchmarks/bench_end_to_end.py
drives): resuming, the speed-up table, the arms' flags, and the batching knob the quickstart turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from puppeteer.cli import main
from tests.experiment_modules import benchmark_module

_sidebyside = benchmark_module("sidebyside")
Workload, done_keys, table = _sidebyside.Workload, _sidebyside.done_keys, _sidebyside.table


def _row(workload: str, arm: str, rnd: int, wall: float, rc: int = 0) -> dict[str, Any]:
    return {"workload": workload, "arm": arm, "round": rnd, "rc": rc, "wall_s": wall}


def _workload(name: str) -> Workload:
    return Workload(name, f"`{name}`", lambda run, cache: ["puppeteer", name, "--cache", str(cache)])


def test_table_reports_medians_and_their_ratio_over_successful_runs_only() -> None:
    rows = [
        _row("quickstart", "one-at-a-time", 0, 900.0),
        _row("quickstart", "one-at-a-time", 1, 1100.0),
        _row("quickstart", "one-at-a-time", 2, 1000.0),
        _row("quickstart", "batched", 0, 500.0),
        _row("quickstart", "batched", 1, 400.0),
        _row("quickstart", "batched", 2, 10.0, rc=1),  # a crashed run is not a fast one
        _row("baselines", "batched", 0, 300.0),  # no one-at-a-time run yet: no line
    ]
    lines = table(rows, {w: _workload(w) for w in ("quickstart", "baselines")}).splitlines()
    assert len(lines) == 3  # header, rule, quickstart
    assert lines[0] == "| workload | one-at-a-time, wall s | batched, wall s | speed-up | runs |"
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    # medians 1000 (of 900, 1000, 1100) and 450 (of 400, 500): 2.22x, from 3 + 2 runs
    assert cells == ["`quickstart`", "1000", "450", "2.22x", "3 + 2"]


def test_done_keys_skip_only_runs_that_finished(tmp_path: Path) -> None:
    log = tmp_path / "e2e.jsonl"
    assert done_keys(log) == set()
    rows = [_row("quickstart", "batched", 0, 500.0), _row("quickstart", "one-at-a-time", 0, 60.0, rc=137)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"workload": "quick')  # cut short
    assert done_keys(log) == {("quickstart", "batched", 0)}


def test_only_the_one_at_a_time_arm_turns_batching_off(tmp_path: Path) -> None:
    w = _workload("quickstart")
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
