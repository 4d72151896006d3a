"""Build a pool's shipped outcome table (:mod:`puppeteer.backends.replay`) by running every agent alone.

One *shard* is the first ``n`` items of one split of a suite. For each agent (the cheapest first, so
that a stopped shard leaves whole agents behind), every item runs as a single-agent episode through
:func:`puppeteer.evaluation.evaluate.evaluate_policy` (items in parallel, so the local backend batches their
calls), with the real models behind a SQLite response cache of the table's own. When an agent
finishes, its outcomes and every call of the cache are merged into the table. A killed build resumes
where it stopped: finished agents are skipped and the calls of a half-done one replay from the cache.
The table is the artefact to commit; the cache and the per-agent run folders are scratch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.backends.replay import Outcome, export_responses, read_outcomes, write_outcomes
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.tasks.suites import load_suite

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shard:
    split: str
    n: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``test:100`` -> the first 100 test items."""
        split, _, n = text.partition(":")
        if not split or not n.isdigit() or int(n) <= 0:
            raise ValueError(f"a shard is SPLIT:N with N > 0 (e.g. test:100), got {text!r}")
        return cls(split, int(n))


def cost_order(pool: Pool, agents: Sequence[str]) -> list[str]:
    """Agents from the cheapest to the dearest at their full budget (a 150-token prompt)."""

    def est(name: str) -> float:
        a = pool.agent(pool.index(name))
        return a.model.model_seconds(150, a.max_tokens) or a.model.params_b * a.max_tokens

    return sorted(agents, key=est)


def trajectory_records(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Each episode of a finished run's ``trajectories.jsonl``, as a dict (blank lines skipped)."""
    with (run_dir / "trajectories.jsonl").open() as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def outcomes_of_run(run_dir: Path, pool: Pool, agent: str, split: str) -> list[Outcome]:
    rows = []
    for d in trajectory_records(run_dir):
        steps = d["steps"]
        comp = steps[0]["completion"] if steps else None
        model_s = (
            pool.agent(pool.index(agent)).model.model_seconds(
                comp["prompt_tokens"], comp["completion_tokens"]
            )
            if comp
            else 0.0
        )
        rows.append(
            Outcome(
                suite=d["suite"],
                split=split,
                task_id=d["task_id"],
                domain=d.get("domain") or d["task_id"].split("/")[0],
                agent=agent,
                correct=bool(d["correct"]),
                answer=d["final_answer"],
                prompt_tokens=int(comp["prompt_tokens"]) if comp else 0,
                completion_tokens=int(comp["completion_tokens"]) if comp else 0,
                model_s=round(float(model_s or 0.0), 3),
                truncated=bool(comp["truncated"]) if comp else False,
                tool_calls=int(steps[0].get("tool_calls", 0)) if steps else 0,
                error=d.get("error"),
                response=comp["text"] if comp else "",
            )
        )
    return rows


def build(
    pool_name: str,
    suite: str,
    shards: Sequence[Shard],
    table: Path,
    work: Path,
    agents: Sequence[str] | None = None,
    concurrency: int = 16,
    progress: bool = True,
    on_agent_done: Callable[[Shard, str], None] | None = None,
) -> None:
    """Fill ``table`` with every agent's outcome on every item of ``shards`` (resumable)."""
    pool = load_pool(pool_name)
    names = list(agents) if agents else [a.name for a in pool.agents]
    cache = work / "responses.sqlite"
    work.mkdir(parents=True, exist_ok=True)
    for shard in shards:
        items = load_suite(suite, shard.split, n=shard.n)
        ids = {t.id for t in items}
        finished: dict[str, set[str]] = {}  # read once a shard: each agent's run adds only its own rows
        for o in read_outcomes(table):
            if o.split == shard.split and o.suite == suite and o.error is None:
                finished.setdefault(o.agent, set()).add(o.task_id)
        for agent in cost_order(pool, names):
            if ids <= finished.get(agent, set()):
                log.info("%s %s:%d %s: done", suite, shard.split, shard.n, agent)
                continue
            run_dir = work / f"{shard.split}-{shard.n}" / agent
            res = evaluate_policy(
                f"single:{agent}",
                pool,
                suite,
                split=shard.split,
                tasks=items,  # the shard's items, loaded once above
                max_steps=1,
                cache=cache,
                out_dir=run_dir,
                overwrite=True,
                progress=progress,
                concurrency=concurrency,
            )
            total = write_outcomes(table, outcomes_of_run(run_dir, pool, agent, shard.split))
            calls = export_responses(cache, table)
            log.info(
                "%s %s:%d %s: accuracy %.3f, %.1f single-stream s/item; table %d outcomes, %d calls",
                suite,
                shard.split,
                shard.n,
                agent,
                res.accuracy,
                res.mean_model_s or 0.0,
                total,
                calls,
            )
            if on_agent_done is not None:
                on_agent_done(shard, agent)
