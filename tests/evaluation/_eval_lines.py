"""An eval run's trajectories.jsonl lines without the wall-clock fields, to compare two runs."""

from __future__ import annotations

import json
from pathlib import Path


def comparable_lines(path: Path) -> list[dict]:
    """Every line of ``path`` with ``wall_s`` and each call's ``latency_s`` dropped."""
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for x in lines:
        x.pop("wall_s")
        for step in x["steps"]:
            step["completion"].pop("latency_s", None)
    return lines
