"""Items in flight at once: the results do not depend on concurrency, and order is kept."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from _eval_lines import comparable_lines

from puppeteer.agents.pool import load_pool
from puppeteer.envs.group import LocalEnvGroup
from puppeteer.envs.parallel import default_concurrency, map_as_completed
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.tasks import load_suite


def test_map_as_completed_runs_each_item_once_with_one_worker_per_thread() -> None:
    in_use: set[int] = set()
    guard = threading.Lock()
    peak = [0]

    def fn(worker: int, i: int) -> int:
        with guard:
            assert worker not in in_use  # a worker state is never shared by two running items
            in_use.add(worker)
            peak[0] = max(peak[0], len(in_use))
        time.sleep(0.01 * (i % 3))
        with guard:
            in_use.discard(worker)
        return i * i

    got = dict(map_as_completed(fn, 20, [0, 1, 2, 3]))
    assert got == {i: i * i for i in range(20)}
    assert peak[0] > 1


def test_map_as_completed_with_one_worker_is_in_order_in_this_thread() -> None:
    main = threading.get_ident()
    assert list(map_as_completed(lambda w, i: (i, threading.get_ident() == main), 3, ["w"])) == [
        (0, (0, True)),
        (1, (1, True)),
        (2, (2, True)),
    ]


def test_default_concurrency_only_for_model_calling_pools() -> None:
    assert default_concurrency(("sim",)) == 1
    assert default_concurrency(("llamacpp",)) > 1 and default_concurrency(("sim", "litellm")) > 1


@pytest.mark.parametrize("spec", ["moa", "random-step"])
def test_concurrent_eval_equals_the_sequential_one(tmp_path: Path, spec: str) -> None:
    pool = load_pool("sim-paper")
    tasks = load_suite("arith", "test", n=24)
    one = evaluate_policy(
        spec, pool, "arith", tasks=tasks, out_dir=tmp_path / "one", progress=False, concurrency=1
    )
    many = evaluate_policy(
        spec, pool, "arith", tasks=tasks, out_dir=tmp_path / "many", progress=False, concurrency=6
    )
    assert (many.correct, many.mean_calls, many.mean_prompt_tokens, many.mean_reward) == (
        one.correct,
        one.mean_calls,
        one.mean_prompt_tokens,
        one.mean_reward,
    )
    seq, par = (comparable_lines(tmp_path / name / "trajectories.jsonl") for name in ("one", "many"))
    assert [x["index"] for x in par] == list(range(24))  # rewritten in item order once complete
    assert par == seq


def test_a_puppeteer_policy_is_copied_per_worker_and_its_eval_equals_the_sequential_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import copy

    from puppeteer.policies.puppeteer import PuppeteerPolicy
    from puppeteer.policies.puppeteer_config import PolicyConfig

    pool = load_pool("sim-paper")
    tasks = load_suite("arith", "test", n=24)
    policy = PuppeteerPolicy(pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=3), seed=0)
    twin = copy.deepcopy(policy)  # the pool's read-only maps cannot be deep-copied: shared instead
    assert twin.pool is policy.pool and twin.encoder is policy.encoder and twin.scorer is not policy.scorer
    assert all(
        (a == b).all()
        for a, b in zip(twin.scorer.state_dict().values(), policy.scorer.state_dict().values(), strict=True)
    )
    one = evaluate_policy(
        policy,
        pool,
        "arith",
        tasks=tasks,
        out_dir=tmp_path / "one",
        progress=False,
        concurrency=1,
        max_steps=3,
    )
    with caplog.at_level("WARNING", logger="puppeteer.evaluation.executors"):
        many = evaluate_policy(
            policy,
            pool,
            "arith",
            tasks=tasks,
            out_dir=tmp_path / "many",
            progress=False,
            concurrency=6,
            max_steps=3,
        )
    assert "cannot be copied" not in caplog.text  # it used to fall back to one item at a time
    assert (many.correct, many.mean_calls, many.mean_reward) == (one.correct, one.mean_calls, one.mean_reward)
    assert comparable_lines(tmp_path / "many" / "trajectories.jsonl") == comparable_lines(
        tmp_path / "one" / "trajectories.jsonl"
    )


class _Env:
    def __init__(self, backends: tuple[str, ...]) -> None:
        self.pool = SimpleNamespace(backends=lambda: backends)
        self.config = SimpleNamespace(gamma=0.99)
        self.thread: int | None = None

    def step(self, action: int) -> tuple[int, ...]:
        self.thread = threading.get_ident()
        time.sleep(0.02)
        return (action, 0, True, False, {})


def test_rollout_steps_run_in_threads_only_for_model_calling_pools() -> None:
    sim = [_Env(("sim",)) for _ in range(3)]
    assert LocalEnvGroup(sim).step_many(list(enumerate([1, 2, 3]))) == [
        (a, 0, True, False, {}) for a in (1, 2, 3)
    ]
    assert {e.thread for e in sim} == {threading.get_ident()}
    local = [_Env(("llamacpp",)) for _ in range(3)]
    assert LocalEnvGroup(local).step_many(list(enumerate([4, 5, 6]))) == [
        (a, 0, True, False, {}) for a in (4, 5, 6)
    ]
    assert threading.get_ident() not in {e.thread for e in local} and len({e.thread for e in local}) == 3
