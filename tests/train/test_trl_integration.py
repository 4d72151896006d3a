"""The conductor's trl reward: hand-written completions, concurrency of a batch, dataset, tool environment."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time

import pytest

from puppeteer.agents.pool import load_pool
from puppeteer.envs.env import ConductorEnv
from puppeteer.integrations.trl import (
    ConductorReward,
    ConductorToolEnv,
    ConductorToolEnvFactory,
    WorkflowScorer,
    completion_text,
    conductor_dataset,
    conductor_rows,
)
from puppeteer.tasks import load_suite
from puppeteer.types import Completion, CompletionRequest, Task

pytestmark = pytest.mark.integration

GOOD, BAD = 0, 6  # sim-paper agent ids: gpt5-cot (knows every answer here), gemma3-27b-cot (always wrong)


class GoldBackend:
    """Test double: agent GOOD's model answers each item's gold, every other model gold + 1.

    It records how many calls are in flight at once (``peak``), sleeping ``delay`` seconds per call.
    """

    name = "gold"

    def __init__(self, tasks: tuple[Task, ...], good_model: str, delay: float = 0.0) -> None:
        self.gold = {t.id: t.answer for t in tasks}
        self.good_model = good_model
        self.delay = delay
        self.calls = 0
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()

    def _text(self, request: CompletionRequest) -> Completion:
        gold = self.gold[request.context.item_key]
        answer = gold if request.model.target == self.good_model else str(int(gold) + 1)
        return Completion(
            text=f"Working.\nAnswer: {answer}",
            prompt_tokens=100,
            completion_tokens=20,
            cost_usd=0.0,
            flops=1.0,
            latency_s=self.delay,
            model=request.model.target,
        )

    def _enter(self) -> None:
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def complete(self, request: CompletionRequest) -> Completion:
        self._enter()
        try:
            time.sleep(self.delay)
            return self._text(request)
        finally:
            self._leave()

    async def acomplete(self, request: CompletionRequest) -> Completion:
        self._enter()
        try:
            await asyncio.sleep(self.delay)
            return self._text(request)
        finally:
            self._leave()


@pytest.fixture(scope="module")
def tasks() -> tuple[Task, ...]:
    return load_suite("arith", "train", n=8)


def make_env(tasks: tuple[Task, ...], delay: float = 0.0, **kw) -> tuple[ConductorEnv, GoldBackend]:
    pool = load_pool("sim-paper")
    backend = GoldBackend(tasks, pool.agent(GOOD).model.target, delay=delay)
    assert pool.agent(BAD).model.target != backend.good_model
    return ConductorEnv(mode="workflow", pool=pool, tasks=tasks, backend=backend, **kw), backend


def plan(*agents: int) -> str:
    steps = len(agents)
    subtasks = [f"Solve step {i}." for i in range(steps)]
    access_list = [[]] + ["all"] * (steps - 1)
    lists = f"model_id = {list(agents)}\nsubtasks = {subtasks!r}\naccess_list = {access_list!r}"
    return "Thinking: a plan.\n" + lists


HOSTILE = (
    "model_id = [__import__('os').system('touch /tmp/pwned')]\nsubtasks = ['x']\naccess_list = [[]]",
    "model_id = [0]\nsubtasks = [open('/etc/passwd').read()]\naccess_list = [[]]",
    "model_id = [" + "[" * 5000 + "]" * 5000 + "]\nsubtasks = ['x']\naccess_list = [[]]",
    "\x00" * 10_000 + "model_id = [0",
)


def test_reward_on_hand_written_completions(tasks: tuple[Task, ...]) -> None:
    env, backend = make_env(tasks)
    reward = ConductorReward(env, max_workers=4)
    tid = tasks[0].id
    completions = [
        "I would ask GPT-5 to solve it.",  # unparsable: no lists
        plan(BAD),  # parsed, the last (only) step is wrong
        plan(GOOD),  # parsed and right
        plan(BAD, GOOD),  # the last step's answer counts
        plan(GOOD, BAD),
        "model_id = [99]\nsubtasks = ['Solve.']\naccess_list = [[]]",  # no such worker
        *HOSTILE,
    ]
    calls_before = backend.calls
    logged: dict[str, float] = {}
    rewards = reward(
        prompts=["p"] * len(completions),
        completions=completions,
        task_id=[tid] * len(completions),
        log_metric=logged.__setitem__,
    )
    assert rewards == [0.0, 0.5, 1.0, 1.0, 0.5, 0.0] + [0.0] * len(HOSTILE)
    assert backend.calls - calls_before == 1 + 1 + 2 + 2  # unparsable and hostile workflows run nothing
    outcomes = reward.last
    assert [o.parsed for o in outcomes[:6]] == [False, True, True, True, True, False]
    assert outcomes[3].steps == 2 and outcomes[3].calls == 2 and outcomes[3].correct
    assert "out of range" in (outcomes[5].parse_error or "")
    assert logged["conductor/parse_rate"] == pytest.approx(4 / len(completions))
    assert logged["conductor/accuracy"] == pytest.approx(2 / len(completions))
    assert logged["conductor/steps"] == pytest.approx(6 / len(completions))
    assert logged["conductor/cost"] > 0


def test_unavailable_worker_and_cost_penalty(tasks: tuple[Task, ...]) -> None:
    env, _ = make_env(tasks, unavailable=(GOOD,))
    reward = ConductorReward(env)
    tid = tasks[1].id
    assert reward(prompts=["p"] * 2, completions=[plan(GOOD), plan(BAD)], task_id=[tid] * 2) == [0.0, 0.5]
    assert "not available" in (reward.last[0].parse_error or "")
    priced, _ = make_env(tasks, workflow_lam=0.5)
    r = ConductorReward(priced)(prompts=["p"], completions=[plan(GOOD, GOOD)], task_id=[tid])
    # two calls of 100 + 20 tokens at 0.5 per thousand tokens
    assert r == [pytest.approx(1.0 - 0.5 * 0.24)]


def test_conversational_completions_and_missing_task_id(tasks: tuple[Task, ...]) -> None:
    env, _ = make_env(tasks)
    reward = ConductorReward(env)
    msgs = [[{"role": "assistant", "content": plan(GOOD)}]]
    assert reward(prompts=[[{"role": "user", "content": "q"}]], completions=msgs, task_id=[tasks[2].id]) == [
        1.0
    ]
    assert completion_text(msgs[0]) == plan(GOOD)
    with pytest.raises(ValueError, match="task_id"):
        reward(prompts=["p"], completions=[plan(GOOD)])
    with pytest.raises(KeyError, match="not among"):
        reward(prompts=["p"], completions=[plan(GOOD)], task_id=["nope"])


def test_a_batch_of_workflows_runs_concurrently(tasks: tuple[Task, ...]) -> None:
    """16 one-step workflows whose calls each take 0.2 s overlap: far more than one call is in flight."""
    env, backend = make_env(tasks, delay=0.2)
    scorer = WorkflowScorer(env, max_workers=16)
    ids = [t.id for t in tasks] * 2
    start = time.perf_counter()
    outcomes = scorer.score(ids, [plan(GOOD)] * len(ids))
    wall = time.perf_counter() - start
    assert all(o.correct for o in outcomes)
    assert backend.calls == 16
    assert backend.peak >= 8, f"at most {backend.peak} calls overlapped"
    assert wall < 16 * 0.2 / 2  # a sequential run needs 3.2 s; overlap is what this checks, not speed
    serial_env, serial = make_env(tasks, delay=0.01)
    WorkflowScorer(serial_env, max_workers=1).score(ids[:4], [plan(GOOD)] * 4)
    assert serial.peak == 1


def test_order_of_outcomes_and_same_draws_for_a_group(tasks: tuple[Task, ...]) -> None:
    """Sim workers: a group of identical workflows for one item gets identical rewards (same item seed)."""
    env = ConductorEnv(mode="workflow", pool="sim-paper", tasks=tasks)
    scorer = WorkflowScorer(env, max_workers=8, seed=3)
    group = scorer.score([tasks[0].id] * 6, [plan(3)] * 6)
    assert len({o.reward for o in group}) == 1
    mixed = scorer.score([t.id for t in tasks], [plan(3)] * len(tasks))
    assert [o.task_id for o in mixed] == [t.id for t in tasks]


def test_dataset_rows_carry_the_env_prompt_and_task_id(tasks: tuple[Task, ...]) -> None:
    env, _ = make_env(tasks)
    rows = conductor_rows(env)
    assert [r["task_id"] for r in rows] == [t.id for t in tasks]
    obs, _ = env.reset(options={"task": tasks[3]})
    assert rows[3]["prompt"] == obs["prompt"] and tasks[3].question in rows[3]["prompt"]
    chat = conductor_dataset(env, chat=True)
    messages = chat[3]["prompt"]
    assert messages == [m.as_dict() for m in env.prompt().messages]  # the env's chat layout
    assert [m["role"] for m in messages[1:-1]] == ["user", "assistant"] * ((len(messages) - 2) // 2)
    assert tasks[3].question in messages[-1]["content"] and "model_id" in messages[-2]["content"]
    assert chat.column_names == ["prompt", "task_id", "suite", "available", "lam"]
    with pytest.raises(ValueError, match="workflow-mode"):
        conductor_rows(ConductorEnv(mode="step", pool="sim-paper", tasks=tasks))


def test_tool_environment_for_environment_factory(tasks: tuple[Task, ...]) -> None:
    env, _ = make_env(tasks)
    factory = ConductorToolEnvFactory(env)
    tool_env = factory()
    assert isinstance(tool_env, ConductorToolEnv) and tool_env._env is not env
    assert tool_env.reset(task_id=tasks[0].id, prompt="ignored") is None
    assert tool_env.get_reward() == 0.0
    assert tool_env.run_workflow([BAD], ["Solve."], [[]]).startswith("final answer:")
    assert tool_env.get_reward() == 0.5
    out = tool_env.run_workflow([GOOD, 42], ["Solve.", "Check."], [[], "all"])
    assert out.startswith("invalid workflow") and tool_env.get_reward() == 0.0
    tool_env.run_workflow([BAD, GOOD], ["Solve.", "Check."], [[], "all"])
    assert tool_env.get_reward() == 1.0


def test_tool_method_has_a_schema_trl_can_render() -> None:
    from transformers.utils import get_json_schema

    schema = get_json_schema(ConductorToolEnv.run_workflow)
    props = schema["function"]["parameters"]["properties"]
    assert set(props) == {"model_id", "subtasks", "access_list"}
    assert props["model_id"]["type"] == "array"


def test_an_answer_prefix_opens_the_assistant_turn_and_the_reward_puts_it_back(
    tasks: tuple[Task, ...],
) -> None:
    from puppeteer.integrations.trl import prefixed_rows
    from puppeteer.train.conductor_model import tiny_tokenizer

    env, _ = make_env(tasks)
    tok = tiny_tokenizer()
    rows = prefixed_rows(conductor_rows(env, chat=True), tok, "model_id = [")
    assert len(rows) == len(tasks) and all(r["prompt"].endswith("assistant:model_id = [") for r in rows)
    assert rows[0]["task_id"] == tasks[0].id and "Question:" in rows[0]["prompt"]
    with pytest.raises(ValueError, match="chat rows"):
        prefixed_rows(conductor_rows(env, chat=False), tok, "model_id = [")
    rest = plan(GOOD).split("model_id = [", 1)[1]  # what the model writes after the prefix
    reward = ConductorReward(env, max_workers=2, answer_prefix="model_id = [")
    assert reward([None, None], [rest, "0, 1]\n"], task_id=[tasks[0].id, tasks[0].id]) == [1.0, 0.0]
    assert ConductorReward(env)([None], [rest], task_id=[tasks[0].id]) == [0.0]  # without the prefix


def test_reward_records_every_sample_with_its_grpo_step(tasks: tuple[Task, ...], tmp_path) -> None:
    from types import SimpleNamespace

    env, _ = make_env(tasks)
    path = tmp_path / "samples.jsonl"
    reward = ConductorReward(env, max_workers=2, record=path)
    tid = tasks[0].id
    for step in (0, 1):
        reward(
            prompts=["p", "p"],
            completions=[plan(GOOD), "no lists here"],
            task_id=[tid, tid],
            trainer_state=SimpleNamespace(global_step=step),
        )
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 1, 2, 2]  # the step each batch was sampled for
    assert [r["reward"] for r in rows] == [1.0, 0.0, 1.0, 0.0]
    assert rows[0]["completion"] == plan(GOOD) and rows[0]["parsed"] and not rows[1]["parsed"]


def test_each_row_offers_its_own_subset_and_the_reward_env_uses_it(tasks: tuple[Task, ...]) -> None:
    """k of n per row: the prompt lists the row's agents, the reward runs the plan with those agents,
    the draw is the same on every call (seeded by task id), and held-out subsets never appear."""
    env, _ = make_env(tasks, k_available=3)
    rows = conductor_rows(env, chat=False, seed=5)
    subsets = [tuple(r["available"]) for r in rows]
    assert all(len(s) == 3 for s in subsets) and len(set(subsets)) > 1  # rows differ
    assert subsets == [tuple(r["available"]) for r in conductor_rows(env, seed=5)]  # reproducible
    for row, subset in zip(rows, subsets, strict=True):
        table = row["prompt"].split("Agents:")[1].split("\n\n")[0]
        listed = {int(m) for m in re.findall(r"^(\d+) \|", table, flags=re.M)}
        assert listed == set(subset), (listed, subset)
    reward = ConductorReward(env)
    with_good = next(i for i, s in enumerate(subsets) if GOOD in s)
    without = next(i for i, s in enumerate(subsets) if GOOD not in s)
    ids = [tasks[with_good].id, tasks[without].id]
    offered = [subsets[with_good], subsets[without]]
    got = reward(prompts=["p"] * 2, completions=[plan(GOOD)] * 2, task_id=ids, available=offered)
    assert got == [1.0, 0.0]  # the same plan is right where GOOD is offered, rejected where it is not
    assert "not available" in (reward.last[1].parse_error or "")
    held = (subsets[0],)
    held_env, _ = make_env(tasks, k_available=3, holdout_subsets=held)
    assert all(tuple(r["available"]) not in held for r in conductor_rows(held_env, seed=5))
