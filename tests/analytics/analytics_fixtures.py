"""Hand-built trajectories for the analytics tests (no model, no environment)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from puppeteer.envs.trajectories import trajectory_to_dict
from puppeteer.types import Completion, Step, Trajectory


def trajectory(
    task_id: str,
    agents: Sequence[str],
    correct: bool,
    mode: str = "step",
    access: Sequence[Sequence[int]] | None = None,
    suite: str = "arith",
    tokens: int = 100,
) -> Trajectory:
    ids = {"A": 0, "B": 1, "C": 2}
    steps = tuple(
        Step(
            index=i,
            agent_id=ids.get(a, 9),
            agent_name=a,
            subtask="solve",
            visible=tuple(access[i]) if access is not None else tuple(range(i)),
            completion=Completion(
                text=f"answer {i}",
                prompt_tokens=tokens,
                completion_tokens=tokens // 2,
                cost_usd=0.001,
                flops=1.0,
                latency_s=0.1,
                model=a,
            ),
            answer=str(i),
        )
        for i, a in enumerate(agents)
    )
    return Trajectory(
        task_id=task_id,
        suite=suite,
        mode=mode,
        steps=steps,
        final_answer="0",
        correct=correct,
        reward=1.0 if correct else 0.0,
    )


def write_eval_run(
    d: Path,
    trajectories: Sequence[Trajectory],
    policy: str = "p",
    seed: int = 0,
    torn_tail: bool = False,
    extra: dict[str, Any] | None = None,
) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    with (d / "trajectories.jsonl").open("w") as f:
        for i, t in enumerate(trajectories):
            f.write(
                json.dumps({**trajectory_to_dict(t), "index": i, "policy": policy, "domain": "arith"}) + "\n"
            )
        if torn_tail:
            f.write('{"task_id": "torn", "steps": [')
    results = {
        "policy": policy,
        "pool": "sim-paper",
        "suite": "arith",
        "split": "test",
        "mode": "step",
        "seed": seed,
        "lam": 0.1,
        "backends": ["sim"],
        **(extra or {}),
    }
    (d / "results.json").write_text(json.dumps(results))
    return d


def write_train_run(d: Path, trajectories: Sequence[Trajectory], batch_episodes: int) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    with (d / "trajectories.jsonl").open("w") as f:
        for t in trajectories:
            f.write(json.dumps(trajectory_to_dict(t)) + "\n")
    config = {
        "pool": {"name": "sim-paper"},
        "suite": {"name": "arith", "train_split": "train"},
        "lam": 0.1,
        "seed": 0,
        "trainer": {"batch_episodes": batch_episodes},
    }
    (d / "config.json").write_text(json.dumps(config))
    (d / "results.json").write_text(json.dumps({"backend": "sim"}))
    return d
