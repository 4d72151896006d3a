from __future__ import annotations

import numpy as np
import pytest

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.policies.baselines import (
    FixedChain,
    MajorityVote,
    MixtureOfAgents,
    OracleRouter,
    RandomStep,
    RandomWorkflow,
    SelfReflection,
    SingleAgent,
    SpecError,
    WorkflowPolicy,
    default_baseline_specs,
    strongest_agents,
)
from puppeteer.policies.registry import make_policy
from puppeteer.tasks import load_suite
from puppeteer.types import Completion, CompletionRequest, Task


@pytest.fixture(scope="module")
def pool() -> Pool:
    return load_pool("sim-paper")


@pytest.fixture(scope="module")
def arith() -> tuple[Task, ...]:
    return load_suite("arith", "test", n=120)


ALL_SPECS = [
    "single:gpt5-cot",
    "single:6",
    "random",
    "chain",
    "chain:qwen3-32b-cot,qwen3-32b-verify",
    "vote:3",
    "vote:gpt5-cot,sonnet4-cot,gemma3-27b-cot",
    "moa",
    "moa:0,1|gemma3-27b-summarize",
    "reflect",
    "reflect:qwen3-32b-cot",
    "reflect:qwen3-32b-cot:1",
    "oracle",
    "random-step",
]


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_every_spec_parses_and_runs(spec: str, pool: Pool, arith: tuple[Task, ...]) -> None:
    result = evaluate_policy(spec, pool, "arith", tasks=arith[:30], progress=False)
    assert result.n == 30 and result.n_errors == 0 and result.n_parse_errors == 0
    assert result.mode == ("step" if spec == "random-step" else "workflow")
    assert 0.0 < result.accuracy <= 1.0
    assert result.ci_low <= result.accuracy <= result.ci_high
    assert result.mean_calls >= 1.0 and result.mean_completion_tokens > 0 and result.mean_usd > 0


def test_spec_resolves_names_and_ids(pool: Pool) -> None:
    assert make_policy("single:6", pool) == SingleAgent("gemma3-27b-cot")
    assert make_policy("single: gpt5-cot ", pool) == SingleAgent("gpt5-cot")
    assert make_policy("chain:3,qwen3-32b-verify", pool) == FixedChain(("qwen3-32b-cot", "qwen3-32b-verify"))
    assert make_policy("vote:2", pool) == MajorityVote(k=2)
    assert make_policy("moa:0,1|9", pool) == MixtureOfAgents(
        ("gpt5-cot", "gemini25pro-cot"), "gemma3-27b-summarize"
    )
    assert make_policy("reflect:sonnet4-cot:4", pool) == SelfReflection("sonnet4-cot", 4)
    assert make_policy("random", pool, max_steps=3) == RandomWorkflow(max_steps=3)
    assert make_policy("random-step", pool, max_steps=4) == RandomStep(max_steps=4)


BAD_SPECS = [
    "nonsense",
    "single",
    "single:nobody",
    "single:99",
    "vote:11",
    "moa:0,1",
    "moa:0|",
    "reflect:gpt5-cot:x",
    "chain:terminator",
    "puppeteer:/no/such/dir",
]


@pytest.mark.parametrize("spec", BAD_SPECS)
def test_bad_specs_fail_clearly(spec: str, pool: Pool) -> None:
    with pytest.raises((SpecError, FileNotFoundError)) as err:
        make_policy(spec, pool)
    if spec == "nonsense":
        message = str(err.value)
        kinds = ("single", "chain", "vote", "moa", "reflect", "oracle", "random-step", "puppeteer")
        assert "\n" not in message and all(kind in message for kind in kinds)


def test_workflow_shapes(pool: Pool, arith: tuple[Task, ...]) -> None:
    task, rng = arith[0], np.random.default_rng(0)
    vote = make_policy("vote:3", pool).plan(task, pool, rng)  # type: ignore[union-attr]
    assert vote.model_id == (2, 1, 0) and vote.access_list == ((), (), ())  # strongest last: wins ties
    moa = make_policy("moa", pool).plan(task, pool, rng)  # type: ignore[union-attr]
    assert moa.model_id == (0, 1, 2, pool.index("gemma3-27b-summarize"))
    assert moa.access_list == ((), (), (), (0, 1, 2))
    reflect = make_policy("reflect:sonnet4-cot:2", pool).plan(task, pool, rng)  # type: ignore[union-attr]
    assert reflect.model_id == (2, 2, 2) and reflect.access_list == ("all", "all", "all")
    assert reflect.subtasks[0] == task.question and reflect.subtasks[1] != task.question
    chain = make_policy("chain", pool).plan(task, pool, rng)  # type: ignore[union-attr]
    assert [pool.agent(i).name for i in chain.model_id] == ["gpt5-cot", "qwen3-32b-verify"]


def test_strongest_agents_prefers_independent_solvers() -> None:
    local = load_pool("local")
    names = [local.agent(i).name for i in strongest_agents(local, 4)]
    # the 1.5B verifier reads earlier work, so independent solvers of any size come first
    assert names == ["qwen1.5b-cot", "qwen1.5b-python", "qwen0.5b-cot", "qwen0.5b-direct"]


def test_random_workflow_covers_lengths_and_agents(pool: Pool, arith: tuple[Task, ...]) -> None:
    policy = RandomWorkflow(max_steps=4)
    rng = np.random.default_rng(1)
    plans = [policy.plan(arith[0], pool, rng) for _ in range(400)]
    assert {len(p) for p in plans} == {1, 2, 3, 4}
    assert {a for p in plans for a in p.model_id} == set(range(len(pool)))
    assert all(a == "all" for p in plans for a in p.access_list)


def test_random_step_terminates_and_never_before_the_first_agent(pool: Pool) -> None:
    policy = RandomStep(max_steps=5)
    rng = np.random.default_rng(0)
    mask = pool.availability([1, 2])
    first = {policy.act({"mask": mask, "step": 0}, rng) for _ in range(300)}
    assert first == set(range(len(pool))) - {1, 2}
    later = [policy.act({"mask": mask, "step": 2}, rng) for _ in range(2000)]
    rate = later.count(pool.terminator_id) / len(later)
    assert 0.16 < rate < 0.24  # 1 / max_steps


class ThreeWayTie:
    """Test double: each model gives a different answer; only ``right``'s is the gold."""

    name = "tie"

    def __init__(self, gold: dict[str, str], right: str) -> None:
        self.gold, self.right = gold, right

    def complete(self, request: CompletionRequest) -> Completion:
        gold = self.gold[request.context.item_key]
        answer = gold if request.model.target == self.right else f"{gold}{len(request.model.target)}"
        return Completion(f"Answer: {answer}", 10, 5, 0.0, 1.0, 0.0, request.model.target)

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return self.complete(request)


@pytest.mark.parametrize("first", ["gpt5-cot", "gemma3-27b-cot"])
def test_vote_ties_go_to_the_first_listed_member(pool: Pool, arith: tuple[Task, ...], first: str) -> None:
    members = [first, *(m for m in ("gpt5-cot", "sonnet4-cot", "gemma3-27b-cot") if m != first)]
    backend = ThreeWayTie({t.id: t.answer for t in arith}, right=pool.agent(pool.index(first)).model.target)
    result = evaluate_policy(
        "vote:" + ",".join(members), pool, "arith", tasks=arith[:6], backend=backend, progress=False
    )
    assert result.correct == 6


def test_vote_of_strong_agents_beats_the_weakest_single_agent(pool: Pool) -> None:
    for suite in ("arith", "mix-math-mmlu"):
        tasks = load_suite(suite, "test", n=120)
        vote = evaluate_policy("vote:3", pool, suite, tasks=tasks, progress=False)
        weakest = evaluate_policy("single:gemma3-27b-cot", pool, suite, tasks=tasks, progress=False)
        assert vote.ci_low > weakest.ci_high, (suite, vote.accuracy, weakest.accuracy)
        assert vote.mean_calls == 3.0 and weakest.mean_calls == 1.0


def test_oracle_matches_the_best_declared_skill(pool: Pool) -> None:
    result = evaluate_policy("oracle", pool, "mmlu", n=300, progress=False)
    best = max(float(a.model.options["skills"]["MMLU"]) for a in pool.agents) / 100  # gpt-5: 93.5
    assert result.ci_low <= best <= result.ci_high
    assert result.mean_calls == 1.0


def test_oracle_routes_per_column_and_refuses_real_pools(pool: Pool) -> None:
    oracle = OracleRouter.from_pool(pool)
    rng = np.random.default_rng(0)

    def routed(domain: str, grader: str) -> str:
        task = Task(id=f"x/{domain}", question="q", answer="A", suite="x", domain=domain, grader=grader)
        return pool.agent(oracle.plan(task, pool, rng).model_id[0]).name

    assert routed("gpqa-diamond", "letter") == "gemini25pro-cot"  # 84.8 beats gpt-5's 82.3
    assert routed("mmlu", "letter") == "gpt5-cot"
    assert routed("humaneval", "code") == "gpt5-cot"
    with pytest.raises(ValueError, match="simulated pool"):
        make_policy("oracle", load_pool("local"))


def test_default_specs_cover_every_single_agent(pool: Pool) -> None:
    specs = default_baseline_specs(pool)
    assert [s for s in specs if s.startswith("single:")] == [f"single:{a.name}" for a in pool.agents]
    kinds = {s.split(":")[0] for s in specs}
    assert kinds == {"single", "random", "chain", "vote", "moa", "reflect"}
    for spec in specs:
        assert isinstance(make_policy(spec, pool), WorkflowPolicy)


def test_learned_policy_runs_in_step_mode(tmp_path, pool: Pool, arith: tuple[Task, ...]) -> None:
    from puppeteer.policies.puppeteer import PuppeteerPolicy
    from puppeteer.policies.puppeteer_config import PolicyConfig

    PuppeteerPolicy(pool, PolicyConfig(encoder="hashing", max_steps=3), seed=1).save(tmp_path / "pol")
    policy = make_policy(f"puppeteer:{tmp_path / 'pol'}", pool)
    assert not isinstance(policy, WorkflowPolicy)
    result = evaluate_policy(policy, pool, "arith", tasks=arith[:10], max_steps=3, progress=False)
    assert result.mode == "step" and result.n_errors == 0
    assert result.mean_calls <= 3.0  # the env stops the episode at max_steps
    again = evaluate_policy(policy, pool, "arith", tasks=arith[:10], max_steps=3, progress=False)
    assert (again.correct, again.mean_calls) == (result.correct, result.mean_calls)  # greedy: deterministic


def test_bykind_routes_each_kind_of_task_to_its_agent() -> None:
    from puppeteer.agents.pool import load_pool
    from puppeteer.policies.baselines import SpecError
    from puppeteer.policies.registry import make_policy
    from puppeteer.tasks import load_suite

    pool = load_pool("sim-paper")
    policy = make_policy("bykind:mmlu=gpt5-cot,*=qwen3-32b-cot", pool)
    rng = np.random.default_rng(0)
    for task in load_suite("mix-paper", "test", n=12):
        want = "gpt5-cot" if task.domain == "mmlu" else "qwen3-32b-cot"
        plan = policy.plan(task, pool, rng)
        assert plan.model_id == (pool.index(want),) and plan.subtasks == (task.question,)
    for bad in ("bykind:", "bykind:mmlu", "bykind:mmlu=nobody", "bykind:a=gpt5-cot,a=gpt5-cot"):
        with pytest.raises(SpecError):
            make_policy(bad, pool)
    only = make_policy("bykind:mmlu=gpt5-cot", pool)
    other = next(t for t in load_suite("mix-paper", "test", n=12) if t.domain != "mmlu")
    with pytest.raises(ValueError, match="names no agent"):
        only.plan(other, pool, rng)
