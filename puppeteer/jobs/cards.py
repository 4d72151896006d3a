"""Measure a pool's agent cards (:mod:`puppeteer.agents.cards`), the job behind ``puppeteer pool cards``.

Each agent is called once on each item of a small calibration split, through the env as an
evaluation runs it (one call, then the Terminator; cost model ``usd``): the first ``per_domain``
items of each domain of the suite's ``split`` (``train`` by default; the ``test`` split is refused,
so that no card has seen the items a policy is judged on). The card records the mean price per
call in US cents, the completion tokens per second of the calls (single stream: the calls' model
seconds at the pool's declared speeds where it declares them, else the backend's own latency of each
call, summed) and the share of items answered right per domain.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable
from types import MappingProxyType

from puppeteer.agents.cards import AgentCard, PoolCards
from puppeteer.agents.pool import Pool
from puppeteer.envs.build import EnvConfig, build_env
from puppeteer.envs.rollout import run_actions
from puppeteer.errors import UserError
from puppeteer.tasks.suites import load_suite
from puppeteer.types import Task

log = logging.getLogger(__name__)

FORBIDDEN_SPLITS = ("test", "all")  # the items policies are judged on (or a split holding them)


def calibration_tasks(
    suite: str, split: str = "train", per_domain: int = 20, n: int | None = None
) -> tuple[Task, ...]:
    """The first ``per_domain`` items of each domain of ``suite``'s ``split``, in the split's order;
    with ``n``, among the items a run on ``n`` items of the split takes (``load_suite(n=n)``: the items
    a shipped outcome table holds when it was built on ``n``)."""
    if split in FORBIDDEN_SPLITS:
        raise UserError(f"cards are measured on a calibration split, never on {split!r} (the held-out items)")
    if per_domain < 1:
        raise UserError(f"per_domain must be >= 1, got {per_domain}")
    taken: Counter[str] = Counter()
    chosen = []
    for task in load_suite(suite, split, n=n):
        if taken[task.domain] < per_domain:
            taken[task.domain] += 1
            chosen.append(task)
    if not chosen:
        raise UserError(f"suite {suite!r} has no items in split {split!r}")
    return tuple(chosen)


def measure_cards(
    pool: Pool,
    suite: str,
    *,
    split: str = "train",
    per_domain: int = 20,
    seed: int = 0,
    n: int | None = None,
    on_agent: Callable[[AgentCard], None] | None = None,
) -> PoolCards:
    """Every agent of ``pool`` on the calibration split (item ``i`` reset with ``seed + i``)."""
    tasks = calibration_tasks(suite, split, per_domain, n)
    settings = EnvConfig(mode="step", lam=0.0, max_steps=1, min_steps=1, cost_model="usd")
    env = build_env(settings, pool=pool, tasks=tasks)
    domains = tuple(sorted({t.domain for t in tasks}))
    stop = pool.terminator_id
    cards = []
    for a, agent in enumerate(pool.agents):
        right: defaultdict[str, int] = defaultdict(int)
        seen: Counter[str] = Counter()
        cents, tokens, seconds, declared_total = 0.0, 0, 0.0, 0.0
        for i, task in enumerate(tasks):
            end = run_actions(env, [a, stop], seed=seed + i, options={"task_index": i})
            seen[task.domain] += 1
            right[task.domain] += int(end.correct)
            cents += 100.0 * end.usd
            steps = end.trajectory.steps
            tokens += sum(step.completion.completion_tokens for step in steps)
            # single stream at the pool's declared speeds where it declares them (a replayed or batched
            # call's latency says how loaded the machine was, not how fast the agent is)
            declared = pool.model_seconds(steps)
            seconds += declared if declared is not None else sum(step.completion.latency_s for step in steps)
            declared_total += declared or 0.0
        card = AgentCard(
            name=agent.name,
            cents_per_call=cents / len(tasks),
            tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
            accuracy=MappingProxyType({d: right[d] / seen[d] for d in domains}),
            items=MappingProxyType({d: seen[d] for d in domains}),
            seconds_per_call=declared_total / len(tasks) if pool.has_speeds else None,
        )
        log.info("card %s: %s", agent.name, card.to_dict())
        if on_agent is not None:
            on_agent(card)
        cards.append(card)
    env.close()
    return PoolCards(
        pool=pool.name,
        suite=suite,
        split=split,
        per_domain=per_domain,
        domains=domains,
        cards=tuple(cards),
    )


__all__ = ["calibration_tasks", "measure_cards"]
