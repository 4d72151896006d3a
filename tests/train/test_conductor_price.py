"""The conductor told the price of cost (issue 36, section 2): the prompt's price line, per-row
lambda in GRPO rows and their rewards, and a trained-over-a-range conductor planning at any lambda."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from puppeteer.agents.pool import load_pool
from puppeteer.envs.build import EnvConfig
from puppeteer.envs.conductor_prompt import Price, build_prompt, load_prompt_config
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.reward import COST_MODELS, COST_UNITS, conductor_reward
from puppeteer.integrations.trl import ConductorReward, WorkflowScorer, conductor_rows
from puppeteer.tasks import load_suite

PRICE = re.compile(r"every (.+?) the workflow\s+spends costs ([0-9.e+-]+) points")


def stated(prompt: str) -> tuple[str, float] | None:
    """The unit and lambda a prompt's price line states (None: no price line)."""
    m = PRICE.search(prompt)
    return (" ".join(m.group(1).split()), float(m.group(2))) if m else None


def env(**kw) -> ConductorEnv:
    tasks = load_suite("arith", split="train", n=12)
    return ConductorEnv(EnvConfig(mode="workflow", **kw), pool=load_pool("sim-paper"), tasks=tasks)


PLAN = "model_id = [0, 1]\nsubtasks = ['Solve it.', 'Check it.']\naccess_list = [[], 'all']"


def test_every_cost_model_has_a_unit_and_every_prompt_config_a_price_line() -> None:
    assert set(COST_UNITS) == set(COST_MODELS)
    for name in ("prompt-v1", "prompt-v1-short", "prompt-v2"):
        cfg = load_prompt_config(name)
        assert "{lam}" in cfg.price and "{unit}" in cfg.price


def test_the_prompt_states_the_price_only_when_the_env_sets_one() -> None:
    plain = env(workflow_lam=0.3)  # priced, but not told: the prompt is what it always was
    obs, _ = plain.reset(seed=0)
    assert stated(obs["prompt"]) is None
    pool = load_pool("sim-paper")
    assert obs["prompt"] == build_prompt(pool, plain.task.question, plain.task.domain).text
    told = env(workflow_lam=0.3, price_in_prompt=True, cost_model="usd")
    obs, _ = told.reset(seed=0)
    assert stated(obs["prompt"]) == ("US cent of the agents' price", 0.3)
    obs, _ = told.reset(seed=0, options={"lam": 2.5})  # a reset's lambda is the one stated and paid
    assert stated(obs["prompt"])[1] == 2.5 and told.lam == 2.5
    with pytest.raises(ValueError, match="needs mode='workflow'"):
        EnvConfig(mode="step", price_in_prompt=True)
    with pytest.raises(ValueError, match="no price line"):
        build_prompt(
            pool,
            "q",
            "arith",
            config=load_prompt_config("prompt-v1").__class__(
                version="x", intro="i", format="f", recursion="r", followup="u"
            ),
            price=Price(0.1, "cent"),
        )


def test_each_row_draws_its_price_states_it_and_its_reward_pays_it() -> None:
    """With a lambda range every row has its own lambda (reproducibly), its prompt states it, and the
    reward of the same plan on the same item differs by exactly the lambda difference times its cost."""
    ranged = env(lam_range=(0.01, 1.0), cost_model="tokens")
    rows = conductor_rows(ranged, seed=3)
    lams = [r["lam"] for r in rows]
    assert all(0.01 <= x <= 1.0 for x in lams) and len(set(lams)) == len(lams)
    assert lams == [r["lam"] for r in conductor_rows(ranged, seed=3)]  # the same on every call
    assert lams != [r["lam"] for r in conductor_rows(ranged, seed=4)]
    for row in rows:
        unit, lam = stated(row["prompt"])
        assert unit.startswith("1,000 tokens") and lam == pytest.approx(row["lam"], rel=1e-5)

    scorer = WorkflowScorer(ranged, max_workers=1, seed=3)
    ids = [r["task_id"] for r in rows]
    paid = scorer.score(ids, [PLAN] * len(ids), lam=lams)
    for o, lam in zip(paid, lams, strict=True):
        assert o.parsed and o.cost > 0
        assert o.reward == pytest.approx(conductor_reward(True, o.correct, o.cost, lam))
    # trl hands the row's columns to the reward function: the lam column is what it pays
    reward = ConductorReward(scorer)
    low = reward(prompts=["p"] * 2, completions=[PLAN] * 2, task_id=ids[:2], lam=[0.0, 0.0])
    high = reward(prompts=["p"] * 2, completions=[PLAN] * 2, task_id=ids[:2], lam=[1.0, 1.0])
    for a, b, o in zip(low, high, paid[:2], strict=True):
        assert a - b == pytest.approx(o.cost)  # the same calls, re-priced


def test_rows_without_a_range_keep_their_rewards() -> None:
    """A fixed-price env's rows carry its lambda; passing it back changes nothing."""
    fixed = env(workflow_lam=0.2)
    rows = conductor_rows(fixed, seed=1)
    assert {r["lam"] for r in rows} == {0.2}
    scorer = WorkflowScorer(fixed, max_workers=1, seed=1)
    ids = [r["task_id"] for r in rows]
    assert scorer.score(ids, [PLAN] * len(ids)) == scorer.score(ids, [PLAN] * len(ids), lam=[0.2] * len(ids))


def test_grpo_rows_draw_a_price_and_the_trained_run_plans_at_any_lambda(tmp_path: Path) -> None:
    """A (tiny) GRPO run over a lambda range: held-out rows each draw theirs and are paid at it; the
    run evaluated as a policy plans at the caller's lambda, clamped into the range."""
    from test_conductor_grpo import FULL_FT, TINY, conductor_cfg

    from puppeteer.evaluation.evaluate import evaluate_policy
    from puppeteer.train.grpo import GRPOJob, run_conductor_training
    from puppeteer.train.grpo.policy import TrainedConductor

    cfg = conductor_cfg(
        FULL_FT, *TINY, "grpo.max_steps=1", "eval.before=false", "workflow_lam_range=[0.01,1]"
    )
    assert GRPOJob.from_mapping(cfg).env_config(load_pool("sim-paper")).lam_range == (0.01, 1.0)
    run = tmp_path / "run"
    run_conductor_training(cfg, run)
    heldout = [json.loads(x) for x in (run / "heldout_after.jsonl").read_text().splitlines()]
    assert len({r["lam"] for r in heldout}) == len(heldout) and all(0.01 <= r["lam"] <= 1 for r in heldout)
    for r in heldout:
        assert r["reward"] == pytest.approx(conductor_reward(r["parsed"], r["correct"], r["cost"], r["lam"]))

    policy = TrainedConductor(run)
    from puppeteer.policies.protocol import EpisodeSettings

    config = policy.configure(EpisodeSettings(lam=5.0), (), (), load_pool("sim-paper"))
    assert config.lam_range is None and config.workflow_lam == 1.0 and config.states_price
    result = evaluate_policy(
        f"conductor:grpo:{run}", "sim-paper", "arith", n=2, lam=0.2, out_dir=tmp_path / "e"
    )
    assert result.lam == pytest.approx(0.2)

    with pytest.raises(ValueError):
        GRPOJob.from_mapping({**cfg, "workflow_lam_range": [1.0, 0.5]})
