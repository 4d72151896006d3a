"""A table built by `puppeteer outcomes build` (the shipped local-mix table), exported to the long form
and imported again, gives the same evaluations: every agent right on the same items, at the same tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from puppeteer.agents.pool import load_pool
from puppeteer.backends.replay import read_outcomes
from puppeteer.envs.build import build_env
from puppeteer.envs.rollout import run_actions
from puppeteer.outcomes.export import long_from_outcomes
from puppeteer.outcomes.importer import import_table
from puppeteer.tasks.packages import MissingDataPackage
from puppeteer.tasks.suites import load_suite


def test_the_shipped_table_round_trips_through_import(tmp_path: Path) -> None:
    pool = load_pool("local-mix")
    try:
        tasks = load_suite("mix-local", "test", n=40)
    except MissingDataPackage as e:
        pytest.skip(str(e))
    outcomes = [o for o in read_outcomes(pool.replay) if o.split == "test"]
    frame = long_from_outcomes(outcomes, {t.id: t.question for t in tasks}, pool)
    assert len(frame) == 40 * len(pool.agents)
    frame.to_csv(tmp_path / "local-mix.csv", index=False)
    done = import_table([tmp_path / "local-mix.csv"], tmp_path / "again")

    env = build_env(None, pool=str(done.pool), suite=str(done.suite), split="test", mode="step", max_steps=1)
    stop = env.pool.terminator_id
    logged = {(o.task_id, o.agent): o for o in outcomes}
    suite = env.tasks[0].suite
    for i, task in enumerate(env.tasks):
        original = task.id.removeprefix(f"{suite}/")
        for a, agent in enumerate(env.pool.agents):
            end = run_actions(env, [a, stop], seed=0, options={"task_index": i})
            o = logged[(original, agent.name)]
            assert end.correct == o.correct, (original, agent.name)
            call = end.trajectory.steps[0].completion
            assert (call.prompt_tokens, call.completion_tokens) == (o.prompt_tokens, o.completion_tokens)
