"""What an evaluation writes: one ``trajectories.jsonl`` line per item and the :class:`EvalResult`
summary in ``results.json`` (accuracy with its Wilson interval, the cost means, the conductor's rounds);
episodes run elsewhere written in the same format (:func:`record_episodes`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from puppeteer.agents.pool import Pool
from puppeteer.envs.trajectories import trajectory_from_dict, trajectory_to_dict
from puppeteer.evaluation.stats import wilson_interval
from puppeteer.types import Task, Trajectory

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class EvalResult:
    policy: str
    pool: str
    suite: str
    split: str
    n: int
    seed: int
    mode: str
    backends: tuple[str, ...]
    max_steps: int
    lam: float
    correct: int
    accuracy: float
    ci_low: float
    ci_high: float
    n_errors: int
    n_parse_errors: int
    mean_calls: float
    mean_prompt_tokens: float
    mean_completion_tokens: float
    mean_usd: float
    mean_flops: float
    mean_latency_s: float
    mean_reward: float
    wall_s: float
    completed: bool = True
    policy_name: str = ""
    cache_path: str | None = None
    cache_hits: int | None = None
    cache_misses: int | None = None
    out_dir: str | None = None
    available: tuple[str, ...] | None = None
    max_depth: int = 0
    recursion: str = "offer"
    # the conductor LM's own calls (conductor policies only; the worker means above exclude them)
    mean_conductor_calls: float = 0.0
    mean_conductor_prompt_tokens: float = 0.0
    mean_conductor_completion_tokens: float = 0.0
    mean_conductor_latency_s: float = 0.0
    mean_conductor_usd: float = 0.0
    per_depth: tuple[dict[str, Any], ...] | None = None
    # single-stream model seconds per item at the pool's declared speeds (ModelSpec.model_seconds);
    # None when a model of the pool declares none. Unlike mean_latency_s it does not depend on the
    # batch a call shared or the load of the machine.
    mean_model_s: float | None = None
    # shares of all calls (steps) that were cut at their max_tokens / that ran at least one tool
    # call (for program-of-thought agents: the program ran)
    truncated_rate: float = 0.0
    tool_call_rate: float = 0.0
    # the terms of a fair A/B (``puppeteer ab`` warns where two arms differ in them): how the final
    # answer was chosen (EnvConfig.aggregate: last, vote or plan); whether the conductor's own tokens
    # are in each episode's cost ("counted"; "not counted"; "none": no conductor LM); the items the
    # policy was trained or fitted on (TrainItems as a dict; None: untrained or not recorded)
    final_answer: str | None = None
    conductor_cost: str = "none"
    train_items: dict[str, Any] | None = None

    @property
    def mean_tokens(self) -> float:
        return self.mean_prompt_tokens + self.mean_completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Record:
    correct: bool
    error: str | None
    trajectory: Trajectory | None
    extra: dict[str, Any] = field(default_factory=dict)  # conductor calls, planning rounds


def _conductor_fields(records: Sequence[_Record], max_depth: int) -> dict[str, Any]:
    """Means of the conductor's own calls, and accuracy / calls / cost per recursion depth."""
    done = [r for r in records if r.trajectory is not None and "conductor" in r.extra]
    if not done:
        return {}

    def mean(values: Sequence[float]) -> float:
        return float(np.mean(values)) if values else 0.0

    calls = [r.extra["conductor"] for r in done]
    generated = [r.trajectory for r in done if r.extra["conductor"]]  # type: ignore[misc]
    counted = all(t.conductor_tokens is not None for t in generated)
    fields: dict[str, Any] = dict(
        conductor_cost=("counted" if counted else "not counted") if generated else "none",
        mean_conductor_calls=mean([len(c) for c in calls]),
        mean_conductor_prompt_tokens=mean([sum(x["prompt_tokens"] for x in c) for c in calls]),
        mean_conductor_completion_tokens=mean([sum(x["completion_tokens"] for x in c) for c in calls]),
        mean_conductor_latency_s=mean([sum(x["latency_s"] for x in c) for c in calls]),
        mean_conductor_usd=mean([sum(x["cost_usd"] for x in c) for c in calls]),
    )
    per_depth = []
    for d in range(max_depth + 1):
        # each episode as if it had stopped after round d (episodes that ended earlier keep their end)
        correct, worker_calls, usd, conductor_calls, reached = [], [], [], [], 0
        for r in done:
            rounds = r.extra["rounds"][: d + 1]
            reached += len(r.extra["rounds"]) > d
            correct.append(bool(rounds[-1]["correct"]))
            idx = {i for x in rounds for i in x["steps"]}
            steps = [s for s in r.trajectory.steps if s.index in idx]  # type: ignore[union-attr]
            worker_calls.append(len(steps))
            usd.append(
                sum(s.completion.cost_usd or 0.0 for s in steps)
                + sum(c["cost_usd"] for c in r.extra["conductor"][: d + 1])
            )
            conductor_calls.append(min(len(r.extra["conductor"]), d + 1))
        per_depth.append(
            dict(
                depth=d,
                reached=reached,
                accuracy=mean(correct),
                mean_worker_calls=mean(worker_calls),
                mean_conductor_calls=mean(conductor_calls),
                mean_usd_incl_conductor=mean(usd),
            )
        )
    fields["per_depth"] = tuple(per_depth)
    return fields


def _record_line(
    index: int, task: Task, policy: str, record: _Record, mode: str, wall_s: float
) -> dict[str, Any]:
    if record.trajectory is not None:
        d = trajectory_to_dict(record.trajectory)
    else:
        d = {
            "task_id": task.id,
            "suite": task.suite,
            "mode": mode,
            "steps": [],
            "final_answer": None,
            "correct": False,
            "reward": 0.0,
            "parse_error": None,
            "workflow": None,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cost_usd": 0.0,
            "flops": 0.0,
        }
    d.update(
        index=index,
        policy=policy,
        error=record.error,
        gold=task.answer,
        domain=task.domain,
        wall_s=round(wall_s, 4),
        **record.extra,
    )
    return d


def _model_seconds(trajectories: Sequence[Trajectory], pool: Pool | None) -> float | None:
    """Mean single-stream model seconds per item at the pool's declared speeds (None without them)."""
    if pool is None or not trajectories or not pool.has_speeds:
        return None
    return float(np.mean([pool.model_seconds(t.steps) for t in trajectories]))


def _summary(records: Sequence[_Record], n: int, speeds: Pool | None = None, **fields: Any) -> EvalResult:
    """``speeds``: the pool whose declared model speeds price ``mean_model_s``."""
    done = [r.trajectory for r in records if r.trajectory is not None]
    correct = sum(r.correct for r in records)
    lo, hi = wilson_interval(correct, n)

    def mean(values: Sequence[float]) -> float:
        return float(np.mean(values)) if values else 0.0

    return EvalResult(
        n=n,
        correct=correct,
        accuracy=correct / n if n else 0.0,
        ci_low=lo,
        ci_high=hi,
        n_errors=sum(r.error is not None for r in records),
        n_parse_errors=sum(t.parse_error is not None for t in done),
        mean_calls=mean([len(t.steps) for t in done]),
        mean_prompt_tokens=mean([t.prompt_tokens for t in done]),
        mean_completion_tokens=mean([t.completion_tokens for t in done]),
        mean_usd=mean([t.cost_usd for t in done]),
        mean_flops=mean([t.flops for t in done]),
        mean_latency_s=mean([sum(s.completion.latency_s for s in t.steps) for t in done]),
        mean_reward=mean([t.reward for t in done]),
        mean_model_s=_model_seconds(done, speeds),
        truncated_rate=mean([float(s.completion.truncated) for t in done for s in t.steps]),
        tool_call_rate=mean([float(s.tool_calls > 0) for t in done for s in t.steps]),
        **fields,
    )


def _write_results(out: Path | None, result: EvalResult) -> None:
    if out is not None:
        (out / "results.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")


def _line_record(line: Mapping[str, Any]) -> _Record:
    if line.get("error") is not None:
        return _Record(False, line["error"], None)
    traj = trajectory_from_dict(line)
    extra = {k: line[k] for k in ("conductor", "rounds", "available") if k in line}
    return _Record(traj.correct, None, traj, extra)


def record_episodes(
    out: Path | None,
    items: Sequence[Task],
    episodes: Sequence[tuple[Trajectory, Mapping[str, Any]]],
    *,
    pool: Pool,
    wall_s: float,
    **fields: Any,
) -> EvalResult:
    """Write episodes run elsewhere (one per item, in order: the trajectory and what its eval line
    adds, e.g. a conductor record) as an eval run directory: ``trajectories.jsonl`` and
    ``results.json`` in :func:`evaluate_policy`'s format, so ``puppeteer ab``, ``graph`` and
    :func:`puppeteer.analytics.load` read them. ``fields`` are :class:`EvalResult`'s identity
    fields (``policy``, ``suite``, ``split``, ``seed``, ``mode``, ``backends``, ``max_steps``, ``lam``...).
    """
    if len(items) != len(episodes):
        raise ValueError(f"{len(episodes)} episodes for {len(items)} items")
    records = [_Record(t.correct, None, t, dict(extra)) for t, extra in episodes]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        per_item = wall_s / max(len(items), 1)
        with (out / "trajectories.jsonl").open("w") as f:
            for i, (task, record) in enumerate(zip(items, records, strict=True)):
                line = _record_line(i, task, str(fields["policy"]), record, str(fields["mode"]), per_item)
                f.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
    result = _summary(
        records,
        len(items),
        speeds=pool,
        wall_s=wall_s,
        pool=pool.name,
        out_dir=str(out) if out is not None else None,
        **_conductor_fields(records, int(fields.get("max_depth", 0))),
        **fields,
    )
    _write_results(out, result)
    return result
