"""A fair A/B between the modes: one final-answer choice for both, the conductor's own tokens in its
cost, on hand-built episodes whose answers and token counts are known (no model)."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from puppeteer.agents.pool import Pool, pool_from_dict
from puppeteer.backends.base import SyncBackend
from puppeteer.envs.conductor_grammar import plan_grammar
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import run_actions, run_conductor_episode
from puppeteer.envs.workflow import parse_workflow
from puppeteer.integrations.trl import WorkflowScorer
from puppeteer.policies.conductor import ConductorPolicy
from puppeteer.types import Completion, CompletionRequest, ConductorAction, ModelSpec, Task
from tests.gbnf_sampler import sample

# agent i of the pool always answers ANSWERS[i], at WORKER_PROMPT + WORKER_COMPLETION tokens a call
ANSWERS = ("7", "5", "9")
WORKER_PROMPT, WORKER_COMPLETION = 10, 5
# steps: agent 0 (7), agent 1 (5), agent 1 (5), agent 2 (9): last 9, vote 5, step 0 is 7
PLAN = "model_id = [0, 1, 1, 2]\nsubtasks = ['a', 'b', 'c', 'd']\naccess_list = [[], [], [], []]"


class ByModel(SyncBackend):
    """Each model answers its own fixed number; the conductor model writes the scripted plan."""

    name = "by-model"

    def __init__(self, plan: str = PLAN) -> None:
        self.plan = plan

    def complete(self, request: CompletionRequest) -> Completion:
        target = request.model.target
        if target == "conductor":
            return Completion(self.plan, 300, 40, 0.002, 0.0, 1.5, "conductor")
        text = f"Final answer: {ANSWERS[int(target)]}"
        return Completion(text, WORKER_PROMPT, WORKER_COMPLETION, 0.001, 0.0, 0.25, target)


def _pool() -> Pool:
    models = {f"m{i}": {"backend": "sim", "target": str(i), "params_b": 1} for i in range(len(ANSWERS))}
    agents = [{"name": f"a{i}", "model": f"m{i}", "pattern": "cot"} for i in range(len(ANSWERS))]
    return pool_from_dict({"name": "fixed", "models": models, "agents": agents})


def _task(gold: str) -> Task:
    return Task("t/1", "What is the number?", gold, "t", "math", "numeric")


def _env(gold: str = "5", plan: str = PLAN, **settings: object) -> ConductorEnv:
    settings = {"mode": "workflow", "max_steps": 5, **settings}
    return ConductorEnv(pool=_pool(), tasks=[_task(gold)], backend=ByModel(plan), **settings)  # type: ignore[arg-type]


def _with_final(final: str) -> str:
    return f"{PLAN}\nfinal = {final}"


# --------------------------------------------------------------------------- the final answer


# (env choice, the plan's final line or None) -> the final answer and the choice recorded
CHOICES = [
    ("last", None, "9", "last"),
    ("vote", None, "5", "vote"),
    ("plan", "0", "7", "step 0"),
    ("plan", "'vote'", "5", "vote"),
    ("plan", "-1", "9", "step 3"),
    ("plan", None, "9", "last"),  # a plan that names none: the last step's answer
    ("last", "0", "9", "last"),  # the plan's final is read only when the env lets the plan choose
]


@pytest.mark.parametrize(("aggregate", "final", "answer", "recorded"), CHOICES)
@pytest.mark.parametrize("gold", ANSWERS)
def test_workflow_grades_the_answer_its_final_choice_picks(
    aggregate: str, final: str | None, answer: str, recorded: str, gold: str
) -> None:
    env = _env(gold, aggregate=aggregate)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(PLAN if final is None else _with_final(final))
    traj = info["trajectory"]
    assert (traj.final_answer, traj.final_choice) == (answer, recorded)
    assert traj.correct is (answer == gold) and reward == (1.0 if answer == gold else 0.5)


def test_step_mode_offers_last_and_vote_over_the_same_steps() -> None:
    actions = [0, 1, 1, 2, 3]  # the same four agents as PLAN, then the Terminator
    got = {}
    for aggregate in ("last", "vote", None):
        env = _env(mode="step", aggregate=aggregate, lam=0.0)
        end = run_actions(env, actions, seed=0)
        got[aggregate] = (end.trajectory.final_answer, end.trajectory.final_choice, end.correct)
    assert got == {"last": ("9", "last", False), "vote": ("5", "vote", True), None: ("5", "vote", True)}
    with pytest.raises(ValueError, match="needs mode='workflow'"):
        _env(mode="step", aggregate="plan")
    with pytest.raises(ValueError, match="aggregate must be one of"):
        _env(aggregate="first")


@pytest.mark.parametrize("final", ["4", "-5", "'first'", "True"])
def test_a_final_that_names_no_step_is_a_parse_error(final: str) -> None:
    env = _env(aggregate="plan")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(_with_final(final))
    assert reward == 0.0 and "final" in info["parse_error"]


def test_only_a_plan_choice_tells_the_conductor_and_its_grammar_about_final() -> None:
    prompts = {}
    for aggregate in ("last", "vote", "plan"):
        env = _env(aggregate=aggregate)
        _, info = env.reset(seed=0)
        prompts[aggregate] = info["conductor_prompt"].messages[0].content
        assert info["plan_space"].final is (aggregate == "plan")
    assert "final = k" in prompts["plan"] and "final" not in prompts["last"].lower().replace(
        "final answer", ""
    )
    assert "majority vote" in prompts["vote"]
    grammar = plan_grammar([0, 1, 2], 4, 400, final=True)
    rng, finals = random.Random(0), set()
    for _ in range(300):
        text = sample(grammar.text, rng)
        assert len(text) <= grammar.longest
        finals.add(parse_workflow(text, 3, final=True).final)
    assert {"vote", "last", None, 0, 3} <= finals


# --------------------------------------------------------------------------- the conductor's cost


def test_the_conductors_tokens_are_in_the_episodes_cost_and_apart() -> None:
    """4 worker calls of 15 tokens (0.060 thousand) and a plan of 100 + 20 tokens (0.120 thousand)."""
    plan = Completion(PLAN, 100, 20, 0.0, 0.0, 2.0, "conductor")
    counted, plain = _env("9", workflow_lam=1.0), _env("9", workflow_lam=1.0)
    counted.reset(seed=0)
    plain.reset(seed=0)
    _, r_counted, _, _, info = counted.step(ConductorAction(PLAN, plan))
    _, r_plain, _, _, plain_info = plain.step(PLAN)
    assert info["cost"] == pytest.approx(0.180) and info["conductor_cost"] == pytest.approx(0.120)
    assert plain_info["cost"] == pytest.approx(0.060) and plain_info["conductor_cost"] == 0.0
    assert r_counted == pytest.approx(1.0 - 0.180) and r_plain == pytest.approx(1.0 - 0.060)
    traj = info["trajectory"]
    assert traj.conductor_tokens == 120 and traj.prompt_tokens + traj.completion_tokens == 60
    assert plain_info["trajectory"].conductor_tokens is None


def test_an_unparsable_plan_still_pays_for_its_tokens_and_minutes_use_reported_seconds() -> None:
    env = _env("9", workflow_lam=1.0)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(
        ConductorAction("no lists", Completion("no lists", 400, 100, None, 0, 1, "c"))
    )
    assert reward == 0.0 and info["cost"] == pytest.approx(0.5) and info["trajectory"].conductor_tokens == 500
    from puppeteer.envs.reward import conductor_cost

    c = Completion("x", 600, 60, None, 0.0, 90.0, "c")
    assert conductor_cost("minutes", c) == pytest.approx(1.5)  # no declared speeds: 90 reported seconds
    fast = ModelSpec("c", "x", "x", 1.0, prefill_tps=600.0, decode_tps=60.0)
    assert conductor_cost("minutes", c, fast) == pytest.approx(2.0 / 60)  # 1 s + 1 s at its speeds


def test_a_conductor_policys_episode_counts_its_own_calls() -> None:
    """The built-in conductor path: its completion (300 + 40 tokens) comes with its action."""
    env = _env("9", workflow_lam=1.0)
    policy = ConductorPolicy(ModelSpec("conductor", "by-model", "conductor", 0.0), backend=ByModel())
    traj, record = run_conductor_episode(env, policy, seed=0, index=0)
    assert (
        traj.conductor_tokens
        == 340
        == sum(c["prompt_tokens"] + c["completion_tokens"] for c in record["conductor"])
    )
    assert traj.reward == pytest.approx(1.0 - (60 + 340) / 1000)


def test_the_grpo_scorer_counts_the_completions_tokens() -> None:
    env = _env("9", workflow_lam=1.0)
    scorer = WorkflowScorer(env, max_workers=1)
    plans = [Completion(PLAN, 100, 20, None, 0.0, 0.0, "c"), None]
    outcomes = scorer.score(["t/1", "t/1"], [PLAN, PLAN], conductor=plans)
    assert [o.conductor_tokens for o in outcomes] == [120, 0]
    assert [o.reward for o in outcomes] == pytest.approx([1.0 - 0.180, 1.0 - 0.060])


def _completion_ids(n: int) -> list[int]:
    return list(range(n))


def test_the_grpo_reward_counts_prompt_and_completion_tokens() -> None:
    from puppeteer.integrations.trl import ConductorReward

    env = _env("9", workflow_lam=1.0)
    reward = ConductorReward(env, max_workers=1, prompt_tokens=lambda prompt: len(prompt.split()))
    prompts: Sequence[str] = ["one two three", "one two three"]
    got = reward(prompts, [PLAN, PLAN], task_id=["t/1", "t/1"], completion_ids=[_completion_ids(7), []])
    assert got == pytest.approx([1.0 - (60 + 10) / 1000, 1.0 - (60 + 3) / 1000])


# --------------------------------------------------------------------------- ab's fairness warnings

TRAINED = {"train_items": {"suite": "arith", "split": "train", "n": 200}}


def _runs(
    tmp_path: Path, extra_a: dict, extra_b: dict, ids_b: Sequence[str] = ("x", "y")
) -> tuple[Path, Path]:
    from analytics_fixtures import trajectory, write_eval_run

    a = write_eval_run(tmp_path / "a", [trajectory(i, ["A"], True) for i in ("x", "y")], extra=extra_a)
    b = write_eval_run(tmp_path / "b", [trajectory(i, ["B"], False) for i in ids_b], extra=extra_b)
    return a, b


@pytest.mark.parametrize(
    ("extra_a", "extra_b", "ids_b", "warning"),
    [
        (
            {"final_answer": "vote"},
            {"final_answer": "last"},
            ("x", "y"),
            "final answer differently: A vote, B last",
        ),
        (
            {"conductor_cost": "not counted"},
            {"conductor_cost": "counted"},
            ("x", "y"),
            "tokens are not counted in A, counted in B",
        ),
        # a run from before the field: its conductor's tokens were never counted
        (
            {"mean_conductor_calls": 1.0},
            {"conductor_cost": "none"},
            ("x", "y"),
            "not counted in A, none in B",
        ),
        (
            {},
            TRAINED,
            ("x", "y"),
            "trained on different items: A none (untrained, or not recorded), B arith/train (first 200)",
        ),
        ({}, {}, ("x", "z"), "evaluated on different items: 1 only in A, 1 only in B; the 1 shared"),
    ],
)
def test_ab_warns_where_the_arms_differ_and_records_it(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    extra_a: dict,
    extra_b: dict,
    ids_b: Sequence[str],
    warning: str,
) -> None:
    from puppeteer.analytics.ab import compare_runs, markdown, write_report

    a, b = _runs(tmp_path, extra_a, extra_b, ids_b)
    with caplog.at_level(logging.WARNING, logger="puppeteer.analytics.ab"):
        result = compare_runs(a, b)
    assert len(result.fairness) == 1 and warning in result.fairness[0]
    assert any("unfair A/B" in r.message and warning in r.message for r in caplog.records)
    write_report(result, tmp_path)
    assert json.loads((tmp_path / "ab.json").read_text())["fairness"] == list(result.fairness)
    assert warning in markdown(result)


def test_ab_is_quiet_where_the_terms_agree(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from puppeteer.analytics.ab import compare_runs

    same = {"final_answer": "vote", **TRAINED}
    # a counted conductor against a policy without one: both costs are whole
    a, b = _runs(tmp_path, {**same, "conductor_cost": "counted"}, {**same, "conductor_cost": "none"})
    with caplog.at_level(logging.WARNING, logger="puppeteer.analytics.ab"):
        assert compare_runs(a, b).fairness == ()
    assert not any("unfair" in r.message for r in caplog.records)


def test_evaluations_record_their_terms_and_ab_reads_them(tmp_path: Path) -> None:
    """A one-agent plan keeps the last answer, a vote of three votes: the simulator's runs say so."""
    from puppeteer.analytics.ab import run_ab

    result = run_ab("single:gpt5-cot", "vote:3", "sim-paper", "arith", tmp_path, n=8)
    saved = [
        json.loads((tmp_path / d / "results.json").read_text()) for d in ("A_single_gpt5-cot", "B_vote_3")
    ]
    assert [(s["final_answer"], s["conductor_cost"], s["train_items"]) for s in saved] == [
        ("last", "none", None),
        ("vote", "none", None),
    ]
    assert result.fairness == ("the arms choose the final answer differently: A last, B vote",)


def test_fitted_and_trained_policies_record_their_training_items(tmp_path: Path) -> None:
    from puppeteer.evaluation.evaluate import evaluate_policy
    from puppeteer.policies.baselines import run_train_items
    from puppeteer.types import TrainItems

    fitted = evaluate_policy("best-single:12", "sim-paper", "arith", n=4, progress=False)
    assert fitted.train_items == {"suite": "arith", "split": "train", "n": 12}
    run = tmp_path / "run"
    (run / "best").mkdir(parents=True)
    (run / "config.json").write_text(
        json.dumps({"suite": {"name": "arith", "train_split": "train", "n_train": 500}})
    )
    assert run_train_items(run / "best") == TrainItems("arith", "train", 500)  # as configured
    (run / "results.json").write_text(json.dumps({"n_train": 300}))
    assert run_train_items(run / "best") == TrainItems("arith", "train", 300)  # as the split held
    assert run_train_items(tmp_path) is None


def test_ab_can_run_every_arm_under_one_final_answer_choice(tmp_path: Path) -> None:
    from puppeteer.analytics.ab import run_ab

    result = run_ab("single:gpt5-cot", "vote:3", "sim-paper", "arith", tmp_path, n=8, final_answer="vote")
    assert result.fairness == ()
    saved = json.loads((tmp_path / "A_single_gpt5-cot" / "results.json").read_text())
    assert saved["final_answer"] == "vote"
