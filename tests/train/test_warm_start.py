"""The conductor's warm start: the kept plan per question, its recorded reward, the SFT rows and run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from puppeteer.agents.pool import load_pool
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.workflow import parse_workflow
from puppeteer.integrations.trl import WorkflowScorer, conductor_rows
from puppeteer.train.grpo.config import GRPOJob
from puppeteer.train.grpo.warm_start import (
    KeptPlan,
    WarmStartSpec,
    keep_best,
    kept_plans,
    plan_text,
    plan_workflow,
    read_plans,
    score_plans,
    sft_examples,
    summarize_kept,
    write_plans,
)

PLANS = (
    "single:gpt5-cot",
    "single:qwen3-32b-cot",
    "chain:qwen3-32b-cot,gpt5-cot",
    "vote:gpt5-cot,qwen3-32b-cot,gemma3-27b-cot",
)


def _env(n: int = 12, workflow_lam: float = 0.01) -> ConductorEnv:
    return ConductorEnv(
        mode="workflow", pool="sim-paper", suite="mix-paper", split="train", n_tasks=n,
        aggregate="plan", workflow_lam=workflow_lam, cost_model="tokens",
    )  # fmt: skip


def test_keep_best_by_question_takes_its_best_reward_then_the_kinds_best_then_fewer_steps() -> None:
    kinds = {"a1": "a", "a2": "a", "b1": "b"}
    rewards = {
        "single:x": {"a1": 1.0, "a2": 0.5, "b1": 0.5},
        "vote:x,y,z": {"a1": 1.0, "a2": 1.0, "b1": 0.5},  # a: mean 1.0 beats single:x's 0.75
        "chain:y,x": {"a1": 0.9, "a2": 0.9, "b1": 0.5},
        "single:y": {"a1": 0.2, "a2": 0.2, "b1": 0.5},  # b: all tie, kind means tie, fewest steps
    }
    kept = keep_best(rewards, kinds, by="question")
    # a1: single:x and vote tie at 1.0; the vote's mean over kind a is higher (1.0 vs 0.75)
    assert kept == {"a1": "vote:x,y,z", "a2": "vote:x,y,z", "b1": "single:x"}
    # b1: single:x and single:y tie everywhere on b and in steps: the name decides
    twins = {"single:y": {"b1": 0.5}, "single:x": {"b1": 0.5}}
    assert keep_best(twins, {"b1": "b"}, by="question") == {"b1": "single:x"}


def test_a_plan_the_table_cannot_answer_on_part_of_a_kind_is_kept_for_none_of_it() -> None:
    """A cascade whose second call a replay table lacks scores where its trigger did not fire, the easy
    questions: its mean there must not win the kind (both ways of keeping)."""
    kinds = {"a1": "a", "a2": "a", "b1": "b"}
    rewards = {
        "escalate:x,y@silent": {"a1": 1.0, "a2": None, "b1": 1.0},  # a2: the trigger fired, no recorded call
        "single:x": {"a1": 0.9, "a2": 0.4, "b1": 0.5},
    }
    for by in ("kind", "question"):
        assert keep_best(rewards, kinds, by=by) == {
            "a1": "single:x",
            "a2": "single:x",
            "b1": "escalate:x,y@silent",
        }


def test_keep_best_by_kind_gives_every_question_its_kinds_best_plan() -> None:
    kinds = {"a1": "a", "a2": "a", "b1": "b", "b2": "b"}
    rewards = {
        "single:cheap": {"a1": 1.0, "a2": 0.5, "b1": 1.0, "b2": 1.0},  # a: 0.75, b: 1.0
        "chain:y,x": {"a1": 0.9, "a2": 0.9, "b1": 1.0, "b2": 1.0},  # a: 0.9 (best), b: 1.0 (tie, 2 steps)
    }
    assert keep_best(rewards, kinds) == {
        "a1": "chain:y,x",
        "a2": "chain:y,x",
        "b1": "single:cheap",
        "b2": "single:cheap",
    }
    # by question a1 keeps the plan that happened to be best there
    assert keep_best(rewards, kinds, by="question")["a1"] == "single:cheap"
    with pytest.raises(ValueError, match="keep"):
        keep_best(rewards, kinds, by="item")


def test_a_plans_text_parses_back_to_its_workflow_with_its_final_answer() -> None:
    env = _env(2)
    pool, task = env.pool, env.tasks[0]
    for spec in PLANS:
        text = plan_text(spec, task, pool, "Solve it.")
        workflow = parse_workflow(text, n_agents=len(pool), final=True)
        assert workflow == plan_workflow(spec, task, pool, "Solve it.")
        assert set(workflow.subtasks) == {"Solve it."}
        assert workflow.final == ("vote" if spec.startswith("vote") else None)
        assert text.startswith("model_id = [")
    assert "final = 'vote'" in plan_text(PLANS[3], task, pool, "s")
    assert len(parse_workflow(plan_text(PLANS[2], task, pool, "s"), n_agents=len(pool))) == 2


def test_each_kept_plan_rescored_on_its_draws_equals_its_recorded_reward(tmp_path: Path) -> None:
    env = _env()
    rows = conductor_rows(env, chat=True, seed=0)
    spec = WarmStartSpec(plans=PLANS, draws=2, subtask="Solve the question.", keep="question")
    kept = kept_plans(env, rows, spec, tmp_path / "plans.jsonl", max_workers=2)
    assert {k.task_id for k in kept} == {t.id for t in env.tasks}
    scores = score_plans(env, rows, PLANS, spec.subtask, spec.draws, max_workers=2)
    for k in kept:
        assert k.reward == max(scores[p][k.task_id] for p in PLANS)  # the best plan on its question
        assert k.reward == scores[k.plan][k.task_id]
        again = [
            WorkflowScorer(env, max_workers=1, seed=d).score_one(k.task_id, k.text).reward for d in k.draws
        ]
        assert k.reward == pytest.approx(sum(again) / len(again), abs=1e-12)
    assert read_plans(tmp_path / "plans.jsonl") == kept
    # kept by kind: from the cached scores (no plan runs again), each question's kind's best plan
    by_kind = kept_plans(
        env, rows, WarmStartSpec(plans=PLANS, draws=2, keep="kind"), tmp_path / "plans.jsonl"
    )
    tasks = {t.id: t for t in env.tasks}
    for k in by_kind:
        same_kind = [t for t in tasks if tasks[t].domain == k.kind]
        best = max(PLANS, key=lambda p: sum(scores[p][t] for t in same_kind))
        assert sum(scores[k.plan][t] for t in same_kind) == sum(scores[best][t] for t in same_kind)
        assert k.reward == scores[k.plan][k.task_id] and k.keep == "kind"
    write_plans(tmp_path / "plans.jsonl", kept)
    # a second call reads the file instead of searching again (a changed file shows it)
    first = kept[0]
    edited = [dataclasses.replace(first, reward=-1.0), *kept[1:]]
    write_plans(tmp_path / "plans.jsonl", edited)
    assert kept_plans(env, rows, spec, tmp_path / "plans.jsonl")[0].reward == -1.0
    # another price is another setting: the cached scores are not used, every plan runs again
    dearer = _env(workflow_lam=0.5)
    repriced = kept_plans(dearer, conductor_rows(dearer, chat=True, seed=0), spec, tmp_path / "plans.jsonl")
    assert [k.reward for k in repriced] != [k.reward for k in kept]
    summary = summarize_kept(kept)
    assert summary["questions"] == len(kept) and sum(summary["plans"].values()) == len(kept)


def test_under_cascades_the_search_scores_cascade_plans_and_a_kept_one_rescores_to_its_reward(
    tmp_path: Path,
) -> None:
    """aggregate="cascade": the declared space adds every ordered pair as a cascade on each trigger; a
    cascade plan's text carries its final line, parses back to its workflow and, re-scored on its draws,
    gives the reward the search recorded (it pays only for the steps it ran)."""
    env = ConductorEnv(
        mode="workflow", pool="sim-paper", suite="mix-paper", split="train", n_tasks=8,
        aggregate="cascade", workflow_lam=0.01, cost_model="tokens",
    )  # fmt: skip
    rows = conductor_rows(env, chat=True, seed=0)
    from puppeteer.train.grpo.warm_start import searched_plans

    space = searched_plans(env, rows, WarmStartSpec())
    assert {p.rpartition("@")[2] for p in space if "@" in p} == {"silent", "not-integer", "failed-check"}
    assert not any("@" in p for p in searched_plans(_env(8), rows, WarmStartSpec()))
    cascade = "escalate:qwen3-32b-cot,gpt5-cot@not-integer"
    plans = (*PLANS, cascade)
    task = env.tasks[0]
    text = plan_text(cascade, task, env.pool, "s")
    assert "final = 'cascade:not-integer'" in text
    assert parse_workflow(text, len(env.pool), final=True, cascade=True) == plan_workflow(
        cascade, task, env.pool, "s"
    )
    spec = WarmStartSpec(plans=plans, draws=2, keep="question")
    kept = kept_plans(env, rows, spec, tmp_path / "plans.jsonl", max_workers=2)
    scores = score_plans(env, rows, plans, spec.subtask, spec.draws, max_workers=2)
    # the cascade is cheaper than the chain it cuts short wherever its first answer is a whole number
    assert any(scores[cascade][t] > scores["chain:qwen3-32b-cot,gpt5-cot"][t] for t in scores[cascade])
    for k in kept:
        again = [
            WorkflowScorer(env, max_workers=1, seed=d).score_one(k.task_id, k.text).reward for d in k.draws
        ]
        assert k.reward == pytest.approx(sum(again) / len(again), abs=1e-12)


def test_on_a_replayed_pool_a_plans_recorded_calls_replay_and_the_search_skips_what_the_table_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """local-mix-steps under strict replay: a plan's steps send step mode's requests (the question, not
    the plan's subtask line), so a single replays its recorded outcome, a cascade replays on every
    question and a verifier after a kind's recorded first agent replays; a plan the table cannot answer
    (a verifier after another first agent) is not scored there instead of stopping the search."""
    from puppeteer.backends.replay import read_outcomes

    monkeypatch.setenv("PUPPETEER_REPLAY", "strict")
    env = ConductorEnv(
        mode="workflow", pool="local-mix-steps", suite="mix-local", split="train", n_tasks=8,
        aggregate="cascade", workflow_lam=0.5, cost_model="minutes",
    )  # fmt: skip
    rows = conductor_rows(env, chat=True, seed=0)
    kinds = {t.id: t.domain for t in env.tasks}
    checked = {k for k in kinds.values()} & {"arith", "gsm8k"}  # the verifier's chains follow qwen1.5b-pot
    assert checked, "the draw holds an arithmetic or GSM8K item"
    plans = (
        "single:qwen1.5b-pot",
        "escalate:qwen0.5b-code,qwen1.5b-pot@failed-check",
        "chain:qwen1.5b-pot,qwen0.5b-verify",
        "chain:qwen0.5b-direct,qwen0.5b-verify",
    )
    scores = score_plans(env, rows, plans, "Any subtask line at all.", 1, max_workers=2)
    assert set(scores[plans[0]]) == set(scores[plans[1]]) == set(kinds)
    assert None not in scores[plans[0]].values() and None not in scores[plans[1]].values()
    recorded = {t for t, k in kinds.items() if k in checked}
    assert {t for t, v in scores[plans[2]].items() if v is not None} == recorded
    assert set(scores[plans[3]].values()) == {None}  # no first agent of a chain of this verifier
    table = {(o.task_id, o.agent): o.correct for o in read_outcomes(env.pool.replay)}
    scorer = WorkflowScorer(env, max_workers=1)
    for r in rows:
        text = plan_text(plans[0], {t.id: t for t in env.tasks}[r["task_id"]], env.pool, "Another one.")
        got = scorer.score_one(r["task_id"], text, r["available"], r["lam"])
        assert got.correct == table[r["task_id"], "qwen1.5b-pot"]


def test_sft_rows_continue_the_prompts_answer_prefix_and_end_the_sequence() -> None:
    kept = [
        KeptPlan("t1", "k", "single:a", "model_id = [0]\nsubtasks = ['s']\naccess_list = [[]]", 1.0, (0,))
    ]
    rows = sft_examples(kept, {"t1": "PROMPT model_id = ["}, "model_id = [", "</s>")
    assert rows == [
        {"prompt": "PROMPT model_id = [", "completion": "0]\nsubtasks = ['s']\naccess_list = [[]]</s>"}
    ]
    with pytest.raises(ValueError, match="answer prefix"):
        sft_examples(kept, {"t1": "P"}, "plan:", "</s>")


def test_the_warm_start_section_of_a_run_config() -> None:
    assert GRPOJob.from_mapping({}).warm_start is None
    assert GRPOJob.from_mapping({"warm_start": {"enabled": False, "draws": 5}}).warm_start is None
    job = GRPOJob.from_mapping({"warm_start": {"enabled": True, "draws": 5, "plans": ["single:a"]}})
    assert job.warm_start == WarmStartSpec(plans=("single:a",), draws=5)
    with pytest.raises(ValueError, match="draws"):
        WarmStartSpec(draws=0)
    with pytest.raises(ValueError, match="keep"):
        WarmStartSpec(keep="item")


@pytest.mark.integration
def test_a_warm_started_run_learns_the_kept_plans_and_evaluates_before_grpo(tmp_path: Path) -> None:
    """A tiny random model fine-tuned on the kept plans; the warm-started model evaluates as
    ``conductor:grpo:RUN/warm_start`` and a second start reads plans and model back."""
    pytest.importorskip("trl")
    from puppeteer.train.grpo import run_conductor_training
    from puppeteer.train.grpo.policy import load_job
    from tests.train.test_conductor_grpo import TINY, conductor_cfg

    cfg_overrides = (
        "conductor=cpu-smollm2-warm", *TINY, "suite=mix-paper", "pool=sim-paper", "final_answer=plan",
        "warm_start.draws=1", "warm_start.epochs=3", "warm_start.learning_rate=1e-3",
        "warm_start.batch_size=2", "warm_start.accumulation=1", f"warm_start.plans={list(PLANS[:2])}",
    )  # fmt: skip
    cfg = conductor_cfg(*cfg_overrides, "grpo.max_steps=1", "eval.before=false")
    results = run_conductor_training(cfg, tmp_path)
    warm = tmp_path / "warm_start"
    assert (warm / "final" / "config.json").is_file() and (warm / "plans.jsonl").is_file()
    assert results["warm_start"]["questions"] == 4
    losses = [h["loss"] for h in json.loads((warm / "sft_log.json").read_text()) if "loss" in h]
    assert losses and losses[-1] < losses[0]  # it learns the kept plans
    assert load_job(warm).warm_start == load_job(tmp_path).warm_start  # the run's own settings
    stamp = (warm / "sft_log.json").stat().st_mtime_ns
    run_conductor_training(cfg, tmp_path)  # resumes: no new search, no new fine-tune
    assert (warm / "sft_log.json").stat().st_mtime_ns == stamp
    assert len(read_plans(warm / "plans.jsonl")) == 4
    # grpo.max_steps=0: the warm start alone, saved as the run's final conductor, no GRPO step
    alone = run_conductor_training(
        conductor_cfg(*cfg_overrides, "grpo.max_steps=0", "eval.before=true"), tmp_path / "alone"
    )
    assert alone["steps"] == 0 and (tmp_path / "alone" / "final" / "config.json").is_file()
    assert alone["heldout_after"] == alone["heldout_before"] and alone["heldout_before"]["n"] == 3
    assert not (tmp_path / "alone" / "checkpoints").exists()
    assert load_pool("sim-paper").name == results["pool"]
