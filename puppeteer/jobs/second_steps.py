"""Extend a pool's shipped outcome table with two-step chains: a first answer, then a second agent on it.

A *chain* is ``[first, second]``: the first agent answers alone (its call replays from the table's
single-agent rows), then a second agent that reads earlier work (a verifier, a reviser) is shown that
answer and called for real. The second call's prompt is fixed by the item and the first response, so
its response, merged into ``responses.jsonl.gz``, replays exactly whenever the chain runs again (as a
``chain:FIRST,SECOND`` workflow or as two steps of a step-wise policy). Each chain's row goes into
``steps.jsonl.gz`` (:class:`puppeteer.backends.replay.StepOutcome`).

Which first agents: per kind of item, the best agents on the *training* items of the table
(:func:`first_agents`), so nothing about the held-out items decides what is recorded on them.

A build runs shard by shard (the first ``n`` items of a split; items already recorded are skipped, so
``train:40`` then ``train:80`` runs 40 new items), and within a shard one second agent at a time (the
cheapest first) over every item's chain at once, so the local backend batches their calls. The table
is merged after each (shard, agent): a killed build resumes where it stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.backends.replay import (
    Outcome,
    StepOutcome,
    export_responses,
    read_outcomes,
    read_steps,
    write_steps,
)
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.jobs.outcomes import Shard, cost_order, trajectory_records
from puppeteer.tasks.suites import load_suite
from puppeteer.types import Task, Workflow

log = logging.getLogger(__name__)

FirstAgents = Mapping[str, tuple[str, ...]]  # kind -> first agents of its chains


def agent_value(rows: Sequence[Outcome], lam: float) -> float:
    """Accuracy minus ``lam`` per single-stream model minute, per item (how every rule is priced)."""
    return sum(o.correct - lam * o.model_s / 60.0 for o in rows) / len(rows)


def first_agents(
    outcomes: Sequence[Outcome], suite: str, lams: Sequence[float] = (0.0,), split: str = "train"
) -> dict[str, tuple[str, ...]]:
    """Per kind, the best single agent on ``split`` at each of ``lams`` (distinct, in ``lams`` order).

    Ties go to the cheaper agent (fewer model seconds), then the name. Only agents with a row on every
    item of the kind compete.
    """
    by_kind: dict[str, dict[str, list[Outcome]]] = {}
    for o in outcomes:
        if o.suite == suite and o.split == split:
            by_kind.setdefault(o.domain, {}).setdefault(o.agent, []).append(o)
    if not by_kind:
        raise ValueError(f"the table holds no {split} items of suite {suite!r}")
    chosen: dict[str, tuple[str, ...]] = {}
    for kind, agents in sorted(by_kind.items()):
        n = max(len(rows) for rows in agents.values())
        full = {a: rows for a, rows in agents.items() if len(rows) == n}
        picks: list[str] = []
        for lam in lams:
            best = max(
                sorted(full),
                key=lambda a, lam=lam: (agent_value(full[a], lam), -sum(o.model_s for o in full[a])),
            )
            if best not in picks:
                picks.append(best)
        chosen[kind] = tuple(picks)
    return chosen


@dataclass(frozen=True)
class KindChains:
    """A workflow per item: the chain ``[first, second]``, ``first`` named for the item's kind. The
    second step sees the first; the last answer counts."""

    routes: tuple[tuple[str, str], ...]  # (kind, first agent)
    second: str
    aggregate: str = "last"

    @property
    def name(self) -> str:
        return "kindchains:" + ",".join(f"{k}={a}" for k, a in self.routes) + f">{self.second}"

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow:
        first = dict(self.routes)[task.domain]
        ids = (pool.index(first), pool.index(self.second))
        return Workflow(model_id=ids, subtasks=(task.question, task.question), access_list=((), (0,)))


def steps_of_run(
    run_dir: Path, pool: Pool, split: str, firsts: Mapping[tuple[str, str], Outcome]
) -> list[StepOutcome]:
    """The chains of a finished run as rows; ``firsts`` maps (task id, first agent) to its table row."""
    rows = []
    for d in trajectory_records(run_dir):
        steps = d["steps"]
        if len(steps) != 2:
            raise ValueError(f"{run_dir}: {d['task_id']} ran {len(steps)} steps, not a two-step chain")
        first = firsts[(d["task_id"], steps[0]["agent_name"])]
        if steps[0]["answer"] != first.answer or steps[0]["completion"]["text"] != first.response:
            raise ValueError(
                f"{d['task_id']}: {first.agent}'s first call did not replay its table row; "
                "the chain's second prompt would not be the recorded one"
            )
        second, comp = steps[1], steps[1]["completion"]
        agent = second["agent_name"]
        model_s = pool.agent(pool.index(agent)).model.model_seconds(
            comp["prompt_tokens"], comp["completion_tokens"]
        )
        rows.append(
            StepOutcome(
                suite=d["suite"],
                split=split,
                task_id=d["task_id"],
                domain=first.domain,
                first=first.agent,
                agent=agent,
                correct=bool(d["correct"]),
                answer=second["answer"],
                first_correct=first.correct,
                first_answer=first.answer,
                prompt_tokens=int(comp["prompt_tokens"]),
                completion_tokens=int(comp["completion_tokens"]),
                model_s=round(float(model_s or 0.0), 3),
                truncated=bool(comp["truncated"]),
                error=d.get("error"),
                response=comp["text"],
            )
        )
    return rows


def build_steps(
    pool_name: str,
    suite: str,
    shards: Sequence[Shard],
    table: Path,
    work: Path,
    seconds: Sequence[str],
    firsts: FirstAgents,
    concurrency: int = 16,
    progress: bool = True,
    on_done: Callable[[Shard, str], None] | None = None,
) -> None:
    """Record every chain ``[first, second]`` (``first`` in ``firsts[kind]``, ``second`` in ``seconds``)
    on the items of ``shards`` into ``table`` (resumable; items already recorded are skipped)."""
    pool = load_pool(pool_name)
    for name in (*seconds, *(a for agents in firsts.values() for a in agents)):
        pool.index(name)  # an unknown agent fails before any call
    cache = work / "responses.sqlite"
    work.mkdir(parents=True, exist_ok=True)
    singles = {(o.split, o.task_id, o.agent): o for o in read_outcomes(table) if o.suite == suite}
    depth = max((len(a) for a in firsts.values()), default=0)
    for shard in shards:
        items = load_suite(suite, shard.split, n=shard.n)
        firsts_of = {(o[1], o[2]): v for o, v in singles.items() if o[0] == shard.split}
        for second in cost_order(pool, list(seconds)):
            for index in range(depth):
                done = {
                    o.task_id
                    for o in read_steps(table)
                    if o.suite == suite
                    and o.split == shard.split
                    and o.agent == second
                    and o.error is None
                    and o.first == _nth(firsts, o.domain, index)
                }
                todo = [t for t in items if t.id not in done and _nth(firsts, t.domain, index) is not None]
                missing = [t.id for t in todo if (t.id, _nth(firsts, t.domain, index)) not in firsts_of]
                if missing:
                    raise ValueError(
                        f"the table lacks the first calls of {len(missing)} {shard.split} items "
                        f"(first: {missing[0]}); build them with `puppeteer outcomes build`"
                    )
                if not todo:
                    log.info("%s %s:%d %s (first #%d): done", suite, shard.split, shard.n, second, index)
                    continue
                routes = tuple(
                    (k, agents[index]) for k, agents in sorted(firsts.items()) if len(agents) > index
                )
                run_dir = work / f"{shard.split}-{shard.n}" / f"{second}-{index}"
                res = evaluate_policy(
                    KindChains(routes, second),
                    pool,
                    suite,
                    split=shard.split,
                    tasks=todo,
                    max_steps=2,
                    cache=cache,
                    out_dir=run_dir,
                    overwrite=True,
                    progress=progress,
                    concurrency=concurrency,
                )
                total = write_steps(table, steps_of_run(run_dir, pool, shard.split, firsts_of))
                calls = export_responses(cache, table)
                log.info(
                    "%s %s:%d %s after first #%d: %d items, chain accuracy %.3f, %.1f s/item; "
                    "table %d chains, %d calls",
                    suite,
                    shard.split,
                    shard.n,
                    second,
                    index,
                    len(todo),
                    res.accuracy,
                    res.mean_model_s or 0.0,
                    total,
                    calls,
                )
            if on_done is not None:
                on_done(shard, second)


def _nth(firsts: FirstAgents, kind: str, index: int) -> str | None:
    agents = firsts.get(kind, ())
    return agents[index] if index < len(agents) else None


def parse_firsts(text: str) -> dict[str, tuple[str, ...]]:
    """``gsm8k=a+b,mmlu=c`` -> ``{"gsm8k": ("a", "b"), "mmlu": ("c",)}``."""
    out: dict[str, tuple[str, ...]] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        kind, eq, agents = part.partition("=")
        names = tuple(a.strip() for a in agents.split("+") if a.strip())
        if not eq or not kind.strip() or not names or kind.strip() in out:
            raise ValueError(f"first agents are KIND=A[+B],... with each kind once, got {part!r}")
        out[kind.strip()] = names
    if not out:
        raise ValueError("no first agents given")
    return out
