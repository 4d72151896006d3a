"""Cascade plans (``aggregate="cascade"``): a plan's ``final = 'cascade:TRIGGER'`` runs each later step
only when the trigger fires on the answer before it; the last step run answers, and only the steps run
are paid for. Hand-built episodes whose answers are known (no model)."""

from __future__ import annotations

import random

import pytest

from puppeteer.agents.pool import Pool, pool_from_dict
from puppeteer.backends.base import SyncBackend
from puppeteer.envs.conductor_grammar import plan_grammar
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.workflow import WorkflowError, format_workflow, parse_workflow
from puppeteer.tasks.signals import fires
from puppeteer.types import Completion, CompletionRequest, Task
from tests.gbnf_sampler import sample

# agent 0 answers 2.5 (not a whole number), agent 1 gives no number, agent 2 answers 9
TEXTS = ("Final answer: 2.5", "I cannot tell.", "Final answer: 9")


class Fixed(SyncBackend):
    name = "fixed"

    def complete(self, request: CompletionRequest) -> Completion:
        return Completion(TEXTS[int(request.model.target)], 10, 5, 0.001, 0.0, 0.25, request.model.target)


def _pool() -> Pool:
    models = {f"m{i}": {"backend": "sim", "target": str(i), "params_b": 1} for i in range(len(TEXTS))}
    agents = [{"name": f"a{i}", "model": f"m{i}", "pattern": "cot"} for i in range(len(TEXTS))]
    return pool_from_dict({"name": "fixed", "models": models, "agents": agents})


def _env(aggregate: str = "cascade") -> ConductorEnv:
    task = Task("t/1", "What is the number?", "9", "t", "math", "numeric")
    return ConductorEnv(
        pool=_pool(),
        tasks=[task],
        backend=Fixed(),
        mode="workflow",
        max_steps=3,
        aggregate=aggregate,
        workflow_lam=0.1,
    )


def _plan(ids: list[int], final: str) -> str:
    subtasks = [f"s{i}" for i in range(len(ids))]
    return f"model_id = {ids}\nsubtasks = {subtasks}\naccess_list = {[[] for _ in ids]}\nfinal = {final!r}"


# (plan, trigger) -> agents run, final answer
CASES = [
    ([0, 2], "cascade:not-integer", [0, 2], "9"),  # 2.5 is not whole: escalate
    ([2, 0], "cascade:not-integer", [2], "9"),  # 9 is whole: stop
    ([0, 1, 2], "cascade:silent", [0], "2.5"),  # 2.5 is an answer: stop at once
    ([1, 0, 2], "cascade:silent", [1, 0], "2.5"),  # no answer, then 2.5: stop after the second
    ([1, 1, 2], "cascade:silent", [1, 1, 2], "9"),  # silent twice: the third runs
]


@pytest.mark.parametrize(("ids", "final", "ran", "answer"), CASES)
def test_a_cascade_runs_a_step_only_when_the_trigger_fires_before_it(
    ids: list[int], final: str, ran: list[int], answer: str
) -> None:
    env = _env()
    env.reset(seed=0)
    _, reward, done, _, info = env.step(_plan(ids, final))
    traj = info["trajectory"]
    assert done and info["parse_error"] is None
    assert [s.agent_id for s in traj.steps] == ran
    assert (traj.final_answer, traj.final_choice) == (answer, final)
    # only the steps run are paid for: lambda 0.1 x 0.015 thousand tokens a call
    assert info["cost"] == pytest.approx(0.015 * len(ran))
    assert reward == pytest.approx((1.0 if answer == "9" else 0.5) - 0.1 * 0.015 * len(ran))


def test_only_a_cascade_env_takes_cascades_and_a_cascade_needs_two_steps() -> None:
    env = _env("plan")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(_plan([0, 2], "cascade:not-integer"))
    assert reward == 0.0 and "offers no cascades" in info["parse_error"]
    for final, why in (("cascade:always", "a cascade is one of"), ("cascade:often", "a cascade is one of")):
        with pytest.raises(WorkflowError, match=why):
            parse_workflow(_plan([0, 2], final), 3, final=True, cascade=True)
    with pytest.raises(WorkflowError, match="two steps"):
        parse_workflow(_plan([0], "cascade:silent"), 3, final=True, cascade=True)
    plan = parse_workflow(_plan([0, 2], "cascade:failed-check"), 3, final=True, cascade=True)
    assert parse_workflow(format_workflow(plan), 3, final=True, cascade=True) == plan


def test_the_prompt_and_the_grammar_offer_cascades_only_under_cascade() -> None:
    prompts = {}
    for aggregate in ("plan", "cascade"):
        env = _env(aggregate)
        _, info = env.reset(seed=0)
        prompts[aggregate] = info["conductor_prompt"].messages[0].content
        assert info["plan_space"].final and info["plan_space"].cascade is (aggregate == "cascade")
    assert "cascade:failed-check" in prompts["cascade"] and "cascade" not in prompts["plan"]
    rng = random.Random(0)
    for cascade in (False, True):
        grammar = plan_grammar([0, 1, 2], 3, 400, final=True, cascade=cascade)
        finals = set()
        for _ in range(300):
            text = sample(grammar.text, rng)
            assert len(text) <= grammar.longest
            plan = parse_workflow(text, 3, final=True, cascade=cascade)
            finals.add(plan.final)
            assert not (isinstance(plan.final, str) and plan.final.startswith("cascade:") and len(plan) < 2)
        cascades = {f for f in finals if isinstance(f, str) and f.startswith("cascade:")}
        assert cascades == (
            {"cascade:silent", "cascade:not-integer", "cascade:failed-check"} if cascade else set()
        )


def test_the_triggers_read_one_answer_and_its_visible_check() -> None:
    assert fires("silent", None) and not fires("silent", "3")
    assert fires("not-integer", "2.5") and fires("not-integer", None) and not fires("not-integer", "1,200")
    assert fires("failed-check", "def f(): ...", False) and not fires("failed-check", "def f(): ...", True)
    assert not fires("failed-check", "7", None)  # nothing to check: no escalation


def test_an_escalation_spec_plans_its_cascade_and_refuses_bad_ones() -> None:
    from puppeteer.policies.registry import SpecError, make_policy

    pool = _pool()
    chain = make_policy("escalate:a0,a2@not-integer", pool)
    assert chain.aggregate == "cascade" and chain.name == "escalate:a0,a2@not-integer"
    assert make_policy("chain:a0,a2", pool).aggregate == "last"
    plan = chain.plan(_env().tasks[0], pool, None)  # type: ignore[arg-type]
    assert plan.access_list == ((), ()) and plan.final == "cascade:not-integer"  # B answers alone
    bad_specs = (
        ("escalate:a0,a2@often", "trigger"),
        ("escalate:a0@silent", "two agents"),
        ("escalate:a0,a2", "@"),
    )
    for bad, why in bad_specs:
        with pytest.raises(SpecError, match=why):
            make_policy(bad, pool)


class Coder(SyncBackend):
    """Agent 0 writes a function that contradicts its docstring's examples, agent 1 the right one."""

    name = "coder"
    CODE = (
        "def add_one(xs):\n    return [x + 2 for x in xs]\n",
        "def add_one(xs):\n    return [x + 1 for x in xs]\n",
    )

    def complete(self, request: CompletionRequest) -> Completion:
        code = self.CODE[int(request.model.target)]
        return Completion(f"```python\n{code}```", 10, 5, 0.001, 0.0, 0.25, request.model.target)


@pytest.mark.parametrize(("ids", "ran", "correct"), [([0, 1], [0, 1], True), ([1, 0], [1], True)])
def test_a_failed_check_cascade_escalates_a_function_that_fails_its_examples(
    ids: list[int], ran: list[int], correct: bool
) -> None:
    from tests.tasks.test_visible import TASK

    models = {f"m{i}": {"backend": "sim", "target": str(i), "params_b": 1} for i in range(2)}
    agents = [{"name": f"c{i}", "model": f"m{i}", "pattern": "code"} for i in range(2)]
    pool = pool_from_dict({"name": "coders", "models": models, "agents": agents})
    env = ConductorEnv(
        pool=pool, tasks=[TASK], backend=Coder(), mode="workflow", max_steps=2, aggregate="cascade"
    )
    env.reset(seed=0)
    _, _, _, _, info = env.step(_plan(ids, "cascade:failed-check"))
    assert [s.agent_id for s in info["trajectory"].steps] == ran
    assert info["trajectory"].correct is correct
