"""Side-by-side wall-time comparisons of two arms of the same workloads (the end-to-end benchmark,
``benchmarks/bench_end_to_end.py``): each arm's command, a resumable log of finished runs, and the
table of medians.

The log is JSON lines, one per finished run (``workload``, ``arm``, ``round``, ``rc``, ``wall_s``
and anything else the runner records); a line cut short by a killed run is skipped, and only runs
that exited 0 count as done or enter the table.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

# llama.cpp's one-at-a-time path against batched decoding (the default)
ARMS = ("one-at-a-time", "batched")


@dataclass(frozen=True)
class Workload:
    """A command, given its run directory and its fresh response cache; the arms add their flags."""

    name: str
    describe: str
    base: Callable[[Path, Path], list[str]]
    arm_flags: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({"one-at-a-time": ("--no-batching",)})
    )

    def command(self, arm: str, run: Path, cache: Path) -> list[str]:
        return [*self.base(run, cache), *self.arm_flags.get(arm, ())]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The finished runs; a line cut short by a killed benchmark is skipped."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def done_keys(path: Path) -> set[tuple[str, str, int]]:
    """(workload, arm, round) of every run in the log that exited 0: a rerun skips them."""
    return {(r["workload"], r["arm"], r["round"]) for r in read_rows(path) if r["rc"] == 0}


def table(rows: Sequence[Mapping[str, Any]], ws: Mapping[str, Workload], arms: Sequence[str] = ARMS) -> str:
    """Markdown: per workload with successful runs on both arms, the median wall time of each arm,
    their ratio (first arm over second: the speed-up) and how many runs each median is of."""
    first, second = arms
    lines = [
        f"| workload | {first}, wall s | {second}, wall s | speed-up | runs |",
        "|---|---:|---:|---:|---|",
    ]
    for name, w in ws.items():
        ok = [r for r in rows if r["workload"] == name and r["rc"] == 0]
        walls = {arm: [float(r["wall_s"]) for r in ok if r["arm"] == arm] for arm in arms}
        if not all(walls.values()):
            continue
        off, on = (statistics.median(walls[a]) for a in arms)
        runs = f"{len(walls[first])} + {len(walls[second])}"
        lines.append(f"| {w.describe} | {off:.0f} | {on:.0f} | {off / on:.2f}x | {runs} |")
    return "\n".join(lines)
