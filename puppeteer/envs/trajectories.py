"""Trajectories to and from JSON (one object per line in ``trajectories.jsonl``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from puppeteer.errors import UserError
from puppeteer.types import Completion, Step, Trajectory, Workflow


def trajectory_to_dict(t: Trajectory) -> dict[str, Any]:
    d = asdict(t)
    for step in d["steps"]:  # a backend's transport detail, derivable from the text: not recorded
        step["completion"].pop("answer_text", None)
    d["prompt_tokens"] = t.prompt_tokens
    d["completion_tokens"] = t.completion_tokens
    d["cost_usd"] = t.cost_usd
    d["flops"] = t.flops
    return d


def trajectory_from_dict(d: dict[str, Any]) -> Trajectory:
    steps = tuple(
        Step(**{**s, "visible": tuple(s["visible"]), "completion": Completion(**s["completion"])})
        for s in d["steps"]
    )
    wf = d.get("workflow")
    workflow = None
    if wf is not None:
        workflow = Workflow(
            model_id=tuple(wf["model_id"]),
            subtasks=tuple(wf["subtasks"]),
            access_list=tuple(a if a == "all" else tuple(a) for a in wf["access_list"]),
            final=wf.get("final"),
        )
    return Trajectory(
        task_id=d["task_id"],
        suite=d["suite"],
        mode=d["mode"],
        steps=steps,
        final_answer=d["final_answer"],
        correct=d["correct"],
        reward=d["reward"],
        parse_error=d.get("parse_error"),
        workflow=workflow,
        final_choice=d.get("final_choice"),
        conductor_tokens=d.get("conductor_tokens"),
    )


class MalformedTrajectory(UserError, ValueError):
    """A line of a trajectories file that is not an episode record (named by file and line)."""


def read_trajectories(path: str | Path) -> Iterator[Trajectory]:
    with Path(path).open() as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                try:
                    record = json.loads(line)
                    yield trajectory_from_dict(record)
                except (ValueError, TypeError, AttributeError, KeyError) as exc:
                    raise MalformedTrajectory(
                        f"{path}: line {number}: not an episode record ({exc})"
                    ) from None
