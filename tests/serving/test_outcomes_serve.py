"""A router trained on an imported table of logged outcomes serves live traffic through each agent's
``live:`` model (litellm's mock responses stand in for the live models)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from puppeteer.agents.pool import Pool, PoolError, load_pool
from puppeteer.envs.build import build_env
from puppeteer.outcomes.importer import import_table
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.serving.orchestrator import Orchestrator
from puppeteer.train.reinforce import ReinforceConfig, train

MOCK = {"big": "The big model says 4.\nAnswer: 4", "small": "The small model says 5.\nAnswer: 5"}


def _logs() -> pd.DataFrame:
    """Arithmetic QUESTIONS only `big` gets right, trivia QUESTIONS only `small` (at a tenth of the cost)."""
    rows = []
    for i in range(24):
        kind = "sum" if i % 2 else "trivia"
        prompt = (
            f"Compute the sum of {i} and {i + 3} plus seven"
            if kind == "sum"
            else f"Which painter made artwork number {i} famous"
        )
        for model, cost in (("big", 0.01), ("small", 0.001)):
            right = (model == "big") == (kind == "sum")
            rows.append((f"q{i}", prompt, kind, "test" if i >= 20 else "train", model, float(right), cost))
    return pd.DataFrame(rows, columns=["prompt_id", "prompt", "task", "split", "model", "score", "cost_usd"])


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("serve")
    _logs().to_csv(tmp / "logs.csv", index=False)
    done = import_table(
        [tmp / "logs.csv"], tmp / "mine", live={"big": "openai/big-live", "small": "openai/small-live"}
    )
    raw = yaml.safe_load(done.pool.read_text())
    for agent in ("big", "small"):  # litellm's offline mock stands in for the live models
        raw["models"][f"{agent}-live"]["options"] = {"mock_response": MOCK[agent]}
    done.pool.write_text(yaml.safe_dump(raw))
    return done.folder


def test_the_import_names_live_models_and_the_live_pool_uses_them(imported: Path) -> None:
    pool = load_pool(imported / "pool.yaml")
    assert pool.backends() == ("logged",)
    live = pool.live_pool()
    assert [a.name for a in live.agents] == ["big", "small"]
    assert [a.model.target for a in live.agents] == ["openai/big-live", "openai/small-live"]
    assert live.backends() == ("litellm",) and live.replay is None
    with pytest.raises(PoolError, match=r"agents \['small'\] name no live: model"):
        replace(pool, live={"big": pool.live["big"]}).live_pool()


QUESTIONS = ["Compute the sum of 21 and 24 plus seven", "Which painter made artwork number 20 famous"]


def _router_trained_on_the_logs(pool: Pool, imported: Path, run: Path) -> str:
    """A one-call router trained on the imported table's training items; its policy spec."""
    env = build_env(
        None,
        pool=pool,
        suite=str(imported / "suite.yaml"),
        split="train",
        mode="step",
        max_steps=1,
        min_steps=1,
        cost_model="usd",
        lam=0.0,
    )
    policy = PuppeteerPolicy(
        pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=1, min_steps=1), seed=0
    )
    train(
        env,
        policy,
        ReinforceConfig(episodes=40, batch_episodes=20, first_step="all", eval_every=10**9),
        run,
    )
    return f"puppeteer:{run / 'final'}"


def test_a_router_trained_on_the_logs_routes_live_requests(imported: Path, tmp_path: Path) -> None:
    pool = load_pool(imported / "pool.yaml")
    spec = _router_trained_on_the_logs(pool, imported, tmp_path / "run")
    suite = str(imported / "suite.yaml")
    with Orchestrator.load(spec, pool, max_steps=1, lam=0.0, suite=suite, split="test") as logged:
        on_logs = [logged.answer(q) for q in QUESTIONS]  # the test items, replayed from the table
    with Orchestrator.load(spec, pool.live_pool(), max_steps=1, lam=0.0) as live:
        on_live = [live.answer(q) for q in QUESTIONS]
    for a, b in zip(on_logs, on_live, strict=True):
        assert a.correct is not None and b.correct is None  # a live question has no gold answer
        assert [s.agent_name for s in b.steps] == [s.agent_name for s in a.steps]  # the same router's choice
        assert (
            b.final_answer == {"big": "4", "small": "5"}[b.steps[0].agent_name]
        )  # answered by the live model
        assert b.steps[0].completion.model.endswith("-live") or "live" in b.steps[0].completion.model

    from fastapi.testclient import TestClient

    from puppeteer.serving.serve import create_app

    with Orchestrator.load(spec, pool.live_pool(), max_steps=1, lam=0.0) as orch:
        reply = TestClient(create_app(orch)).post(
            "/v1/chat/completions",
            json={"model": "puppeteer", "messages": [{"role": "user", "content": QUESTIONS[0]}]},
        )
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] == on_live[0].final_answer


@pytest.mark.slow  # loads the two embedded Qwen2.5-Coder models (llama.cpp), a few seconds of decoding
def test_the_embedded_models_stand_in_for_the_logged_ones(imported: Path, tmp_path: Path) -> None:
    """The same imported pool, its `live:` models the embedded llama.cpp models (`big` -> the 1.5B,
    `small` -> the 0.5B): the router trained on the logs sends each live question where it sent the
    logged one, and that model answers it for real."""
    pytest.importorskip("llama_cpp")
    raw = yaml.safe_load((imported / "pool.yaml").read_text())
    raw["models"]["big-live"] = {"backend": "llamacpp", "target": "qwen2.5-coder-1.5b", "params_b": 1.54}
    raw["models"]["small-live"] = {"backend": "llamacpp", "target": "qwen2.5-coder-0.5b", "params_b": 0.49}
    for agent in raw["agents"]:
        agent["max_tokens"] = 48  # short answers keep the test to seconds
    raw["backend_options"] = {"llamacpp": {"n_ctx": 1024}}
    (imported / "pool-embedded.yaml").write_text(yaml.safe_dump(raw))  # beside its table (replay: .)
    pool = load_pool(imported / "pool-embedded.yaml")
    spec = _router_trained_on_the_logs(pool, imported, tmp_path / "run")
    with Orchestrator.load(
        spec, pool, max_steps=1, lam=0.0, suite=str(imported / "suite.yaml"), split="test"
    ) as o:
        logged = [o.answer(q) for q in QUESTIONS]
    with Orchestrator.load(spec, pool.live_pool(), max_steps=1, lam=0.0) as o:
        live = [o.answer(q) for q in QUESTIONS]
    targets = {"big": "qwen2.5-coder-1.5b", "small": "qwen2.5-coder-0.5b"}
    for a, b in zip(logged, live, strict=True):
        assert [s.agent_name for s in b.steps] == [s.agent_name for s in a.steps]
        step = b.steps[0]
        assert targets[step.agent_name] in step.completion.model and step.completion.completion_tokens > 0
        assert step.completion.text.strip()  # the embedded model's own words, not a logged response
    for agent, target in targets.items():  # each embedded model serves its agent's requests
        with Orchestrator.load(f"single:{agent}", pool.live_pool(), max_steps=1, lam=0.0) as o:
            reply = o.answer(QUESTIONS[0])
        assert target in reply.steps[0].completion.model and reply.steps[0].completion.text.strip()
