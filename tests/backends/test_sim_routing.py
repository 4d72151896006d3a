"""The routing world (issue 29): visible difficulty, its calibration, the optimum, a learner that routes."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from puppeteer.agents.pool import load_pool
from puppeteer.analytics.optimum import sim_backend, visible_optimum
from puppeteer.backends.sim import SimBackend
from puppeteer.backends.sim.answers import SimItem
from puppeteer.backends.sim.difficulty import DifficultyModel, conditional_accuracy, visible_feature
from puppeteer.envs.build import EnvConfig, build_env
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.surface import N_SURFACE, surface_features
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.tasks import load_suite
from puppeteer.train.reinforce import ReinforceConfig, evaluate, train
from puppeteer.types import CallContext, CompletionRequest, Message, ModelSpec
from tests.experiment_modules import experiment_module

_calibration = experiment_module("sim-routing", "sim_calibration")  # the routing study's fit
DomainOutcomes, fit_domain = _calibration.DomainOutcomes, _calibration.fit_domain
statistics = _calibration.statistics

QUANTILES = tuple(float(x) for x in np.linspace(3.0, 7.0, 21))  # ln(chars) from 20 to ~1100 characters


def _model(p: float) -> ModelSpec:
    return ModelSpec(name="m", backend="sim", target="m", params_b=1.0, options={"skills": {"X": p}})


def _request(model: ModelSpec, key: str) -> CompletionRequest:
    ctx = CallContext(item_key=key, pattern="cot")
    return CompletionRequest(model=model, messages=(Message("user", "q"),), context=ctx)


def _backend(w: float, rho: float = 0.5, n: int = 4000, seed: int = 0) -> tuple[SimBackend, list[str]]:
    rng = np.random.default_rng(seed)
    xs = rng.uniform(3.0, 7.0, size=n)  # uniform on the quantiles' range: d is standard normal
    items = {f"i{k}": SimItem(gold="7", domain="dom", visible_x=float(x)) for k, x in enumerate(xs)}
    difficulty = DifficultyModel({"dom": QUANTILES}, {"dom": w})
    return SimBackend(items, columns={"dom": "X"}, rho=rho, difficulty=difficulty, seed=seed), list(items)


def test_visible_difficulty_keeps_each_workers_marginal_accuracy() -> None:
    for p in (0.3, 0.8):
        for w in (0.0, 0.6):
            sim, keys = _backend(w)
            acc = np.mean([sim.decide(_request(_model(p), k)).correct for k in keys])
            assert abs(acc - p) < 0.03, (p, w, acc)


def test_the_visible_score_moves_accuracy_as_the_model_says() -> None:
    sim, keys = _backend(w=0.8, rho=0.6)
    model = _model(0.7)
    d = np.array([sim.visible_score(k) for k in keys])
    correct = np.array([sim.decide(_request(model, k)).correct for k in keys])
    easy, hard = d < -0.5, d > 0.5
    assert correct[easy].mean() > correct[hard].mean() + 0.25
    for mask in (easy, hard):
        predicted = np.mean([conditional_accuracy(0.7, 0.6, 0.8, x) for x in d[mask]])
        assert abs(correct[mask].mean() - predicted) < 0.04
    # and without a visible share the question's length says nothing
    flat, keys = _backend(w=0.0, rho=0.6)
    d0 = np.array([flat.visible_score(k) for k in keys])
    c0 = np.array([flat.decide(_request(model, k)).correct for k in keys])
    assert abs(c0[d0 < -0.5].mean() - c0[d0 > 0.5].mean()) < 0.06


def test_difficulty_options_are_checked() -> None:
    with pytest.raises(ValueError, match="visible share but no quantiles"):
        DifficultyModel.from_options({"visible": {"a": 0.3}})
    with pytest.raises(ValueError, match=r"must be in \[0, 1\)"):
        DifficultyModel.from_options({"quantiles": {"a": [1, 2]}, "visible": {"a": 1.0}})
    with pytest.raises(ValueError, match="unknown difficulty option"):
        DifficultyModel.from_options({"quantiles": {}, "slope": 1})
    model = DifficultyModel({"a": (1.0, 2.0, 3.0)}, {"a": 0.5})
    assert model.score("a", 2.0) == pytest.approx(0.0)
    assert model.score("a", 0.0) < -0.9 < 0.9 < model.score("a", 9.0)  # clipped at half a quantile step
    assert model.score("b", 2.0) is None and model.share("b") == 0.0
    assert visible_feature("x" * 100) == pytest.approx(math.log(100))


def test_the_calibration_fit_recovers_the_parameters_it_was_drawn_with() -> None:
    rng = np.random.default_rng(3)
    n, rho, w = 400, 0.6, 0.5
    d = rng.standard_normal(n)
    z = np.sqrt(w) * d + np.sqrt(1 - w) * rng.standard_normal(n)
    tau = np.array([-0.5, 0.0, 0.4, 0.9, 1.3])
    correct = np.sqrt(rho) * z[:, None] + np.sqrt(1 - rho) * rng.standard_normal((n, 5)) < tau
    data = DomainOutcomes("x", tuple("abcde"), tuple(map(str, range(n))), d, correct)
    fit = fit_domain(data)
    assert abs(fit.rho - rho) <= 0.15 and abs(fit.w - w) <= 0.2
    stats = statistics(data)
    assert stats["acc_easy_third"] > stats["acc_hard_third"]
    assert stats["oracle"] >= stats["best_agent"]


def _toy_pool(tmp_path: Path) -> Path:
    """Two models, each strong on one domain and weak on the other, at different prices."""
    spec = {
        "name": "toy-routing",
        "backend_options": {"sim": {"seed": 0, "rho": 0.5, "columns": {"gsm8k": "G", "mmlu": "M"}}},
        "models": {
            "mathy": {"backend": "sim", "target": "mathy", "price_in": 1.0, "price_out": 4.0, "params_b": 70,
                      "options": {"skills": {"G": 95, "M": 35}, "tokens_mean": 300}},
            "wordy": {"backend": "sim", "target": "wordy", "price_in": 0.1, "price_out": 0.4, "params_b": 8,
                      "options": {"skills": {"G": 35, "M": 90}, "tokens_mean": 300}},
        },
        "agents": [
            {"name": "mathy-cot", "model": "mathy", "pattern": "cot", "description": "math"},
            {"name": "wordy-cot", "model": "wordy", "pattern": "cot", "description": "knowledge"},
        ],
    }  # fmt: skip
    path = tmp_path / "toy-routing.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_optimum_equals_brute_force_over_every_assignment(tmp_path: Path) -> None:
    pool = load_pool(_toy_pool(tmp_path))
    tasks = load_suite("mix-math-mmlu", "test", n=6)
    env = build_env(
        EnvConfig(mode="step", lam=0.5, max_steps=1, min_steps=1, cost_model="usd"), pool=pool, tasks=tasks
    )
    opt = visible_optimum(env)
    sim = sim_backend(env)
    ends = {a: [visible_optimum(env, available=[a]).choices[i].expected for i in range(6)] for a in (0, 1)}
    brute = max(
        np.mean([ends[a][i] for i, a in enumerate(assign)]) for assign in itertools.product((0, 1), repeat=6)
    )
    assert opt.expected_return == pytest.approx(brute)
    for c, t in zip(opt.choices, tasks, strict=True):  # and it reads the domain: each to its specialist
        assert c.agent == (0 if t.domain == "gsm8k" else 1)
        assert sim.accuracy_given_visible(pool.agent(c.agent), t.id) > 0.85
    assert opt.optimum.accuracy >= max(s.accuracy for s in opt.singles)
    only_wordy = visible_optimum(env, available=[1])  # the optimum respects who is on offer
    assert {c.agent for c in only_wordy.choices} == {1}


@pytest.mark.learning
def test_reinforce_learns_routes_that_depend_on_the_item(tmp_path: Path) -> None:
    """The scorer's first design (tanh) saturated under REINFORCE and then scored every task alike, so
    every trained router sent everything to one agent. Here the best agent depends on the domain: the
    trained greedy router must send each domain to its specialist."""
    pool = load_pool(_toy_pool(tmp_path))
    settings = EnvConfig(mode="step", lam=0.1, max_steps=1, min_steps=1, cost_model="usd")
    env = build_env(settings, pool=pool, suite="mix-math-mmlu", split="train", n_tasks=64)
    test_env = build_env(settings, pool=pool, suite="mix-math-mmlu", split="test", n_tasks=40)
    policy = PuppeteerPolicy(
        pool, PolicyConfig(encoder="hashing", hidden=32, max_steps=1, min_steps=1), seed=0
    )
    cfg = ReinforceConfig(episodes=2048, batch_episodes=64, group_size=4, lr=0.003, eval_every=1000, seed=0)
    train(env, policy, cfg, tmp_path / "run")
    policy.config = PolicyConfig(encoder="hashing", hidden=32, max_steps=1, min_steps=1, greedy=True)
    result = evaluate(test_env, policy)
    assert result["top_first_share"] <= 0.6  # both agents used
    assert result["accuracy"] >= 0.8  # each specialist alone: about 0.65
    routed = []
    for i, task in enumerate(test_env.tasks):
        obs, _ = test_env.reset(seed=i, options={"task_index": i})
        action = policy.choose(policy.features(obs), greedy=True)
        routed.append(action == (0 if task.domain == "gsm8k" else 1))
    assert np.mean(routed) >= 0.9  # held-out items, read through a hashing encoder


def test_surface_features_and_a_policy_that_reads_them() -> None:
    short, long = surface_features("What is 2 + 3?"), surface_features("word " * 300 + "\n1 2 3 4 5")
    assert short.shape == (N_SURFACE,) and long[0] > short[0] and long[1] > short[1]
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", split="test", n_tasks=2, max_steps=2)
    policy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=2, surface=True))
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    other = {**obs, "task": obs["task"] + " " * 400}  # same words, longer text
    a, b = (policy.logits([policy.features(o)]) for o in (obs, other))
    assert not np.allclose(a.detach().numpy(), b.detach().numpy())


def test_code_items_are_graded_once_per_distinct_answer_and_the_simulators_gold_passes() -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="humaneval", split="test", n_tasks=3, max_steps=1)
    best = max(range(len(env.pool)), key=lambda a: env.pool.agent(a).model.options["skills"]["LiveCodeBench"])
    twin = env.clone()
    right = 0
    for e in (env, twin, env):
        for i in range(3):
            e.reset(seed=i, options={"task_index": i})
            _, _, _, _, info = e.step(best)
            right += info["correct"]
    assert right >= 6  # the best coder (0.83) is right on most; before the fix, code gold never passed
    assert len(env.parts.grades) <= 6  # three items, at most two distinct answers each, graded once


def test_the_routing_pool_and_suite_load_with_cited_skills() -> None:
    pool = load_pool("sim-routing")
    assert len(pool) == 8
    prices = [a.model.price_out for a in pool.agents]
    assert max(prices) / min(prices) >= 20
    tasks = load_suite("mix-routing", "test")
    domains = {"gsm8k", "math500", "mmlu", "humaneval", "gpqa-diamond"}
    assert {t.domain for t in tasks} == domains
    opts = pool.backend_options["sim"]["difficulty"]
    assert set(opts["quantiles"]) == domains
    skills = {a.name: a.model.options["skills"] for a in pool.agents}
    best = {col: max(skills, key=lambda a: skills[a][col]) for col in ("MATH", "HumanEval", "GPQA")}
    # each specialist leads its own column, and a frontier model leads GPQA: no agent is best everywhere
    assert best == {"MATH": "math72b-cot", "HumanEval": "coder32b-cot", "GPQA": "sonnet35-cot"}


def test_the_first_routing_world_keeps_its_items_and_their_order_under_its_new_name() -> None:
    """``sim-routing-v1`` / ``mix-routing-v1`` are the world experiments/lam-conditioned/README.md was
    measured on;
    ``order_name`` keeps the items and their order of the suite's old name."""
    assert len(load_pool("sim-routing-v1")) == 6
    from puppeteer.tasks.spec import read_spec

    spec = read_spec("mix-routing-v1")
    assert spec.order_key == "mix-routing" and read_spec("mix-routing").order_key == "mix-routing"
    ids = [t.id for t in load_suite("mix-routing-v1", "test", n=160)]
    first = ["humaneval/145", "gsm8k/1307", "math500/243", "humaneval/36", "math500/375", "humaneval/61"]
    assert ids[:6] == first  # as listed by mix-routing before the rename
    assert len(ids) == 160 and {i.split("/")[0] for i in ids} == {"gsm8k", "math500", "mmlu", "humaneval"}


@pytest.mark.learning
def test_trying_every_first_agent_routes_where_sampling_commits_to_one(tmp_path: Path) -> None:
    """At lr 1e-2 the sampled policy gradient commits to one agent on the two-specialist toy (share 1.0,
    measured); with ``first_step=all`` each group tries both agents and the first decision's gradient
    is exact, and the router sends each domain to its specialist."""
    pool = load_pool(_toy_pool(tmp_path))
    settings = EnvConfig(mode="step", lam=0.1, max_steps=1, min_steps=1, cost_model="usd")
    env = build_env(settings, pool=pool, suite="mix-math-mmlu", split="train", n_tasks=64)
    test_env = build_env(settings, pool=pool, suite="mix-math-mmlu", split="test", n_tasks=40)
    config = PolicyConfig(encoder="hashing", hidden=32, max_steps=1, min_steps=1)
    policy = PuppeteerPolicy(pool, config, seed=0)
    cfg = ReinforceConfig(
        episodes=1024, batch_episodes=64, lr=0.01, first_step="all", eval_every=1000, seed=0
    )
    state = train(env, policy, cfg, tmp_path / "run")
    assert state.episodes == 1024  # groups of two (every agent once), 32 per update
    policy.config = PolicyConfig(encoder="hashing", hidden=32, max_steps=1, min_steps=1, greedy=True)
    result = evaluate(test_env, policy)
    assert result["accuracy"] >= 0.8 and result["top_first_share"] <= 0.6


def test_first_step_all_with_later_steps_and_its_limits(tmp_path: Path) -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", split="train", n_tasks=8, max_steps=2)
    policy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=2), seed=0)
    cfg = ReinforceConfig(episodes=88, batch_episodes=44, group_size=4, first_step="all", seed=0)
    state = train(env, policy, cfg, tmp_path / "run")
    n_first = len(env.pool) + 1  # every agent and, with min_steps 0, the Terminator
    assert state.episodes == 88 and 88 % n_first == 0
    assert all(np.isfinite(h["train/loss"]) for h in state.history)
    lines = (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 88
    # over k-of-n subsets a group tries its k agents and the Terminator (tests/agents/test_holdout_subsets.py)
    subsets = ConductorEnv(
        mode="step", pool="sim-paper", suite="arith", n_tasks=4, max_steps=2, k_available=3
    )
    state = train(subsets, policy, cfg, tmp_path / "other")
    assert state.episodes == 88 and all(np.isfinite(h["train/loss"]) for h in state.history)
    with pytest.raises(ValueError, match="first_step"):
        ReinforceConfig(first_step="some")


def test_training_standardises_the_task_embedding_and_saving_keeps_it(tmp_path: Path) -> None:
    """A frozen encoder's vectors share a common direction; the "norm" scorer standardises the task
    embedding by the training tasks' statistics (set at a fresh start, kept in checkpoints)."""
    env = ConductorEnv(
        mode="step", pool="sim-paper", suite="mix-math-mmlu", split="train", n_tasks=16, max_steps=1
    )
    policy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=1, min_steps=1))
    assert float(policy.scorer.task_shift.abs().sum()) == 0.0  # identity before training
    train(env, policy, ReinforceConfig(episodes=32, batch_episodes=32, seed=0), tmp_path / "run")
    emb = policy.encoder.encode([t.question for t in env.tasks])
    np.testing.assert_allclose(policy.scorer.task_shift.numpy(), emb.mean(axis=0), atol=1e-5)
    assert float(policy.scorer.task_scale.min()) > 1.0  # hashing features vary by far less than 1
    loaded = PuppeteerPolicy.load(tmp_path / "run" / "final", env.pool)
    np.testing.assert_allclose(loaded.scorer.task_scale.numpy(), policy.scorer.task_scale.numpy())
    legacy = PuppeteerPolicy(env.pool, PolicyConfig(encoder="hashing", hidden=16, layers="tanh"))
    assert not hasattr(legacy.scorer, "task_shift")


def test_on_the_routing_world_the_optimum_beats_the_most_accurate_agent_at_a_fraction_of_its_cost() -> None:
    """The world's property (issue 29, experiments/sim-routing/README.md section 5): no agent is best
    everywhere, so the
    optimum given what the question shows is more accurate than Sonnet, the most accurate agent, at
    under half its cost (lambda 0.05; 200 held-out items: +3.0 points at 34% of the cost, measured)."""
    from puppeteer.analytics.optimum import visible_optimum

    settings = EnvConfig(mode="step", lam=0.05, max_steps=1, min_steps=1, cost_model="usd")
    env = build_env(settings, pool=load_pool("sim-routing"), suite="mix-routing", split="test", n_tasks=200)
    opt = visible_optimum(env)
    singles = {s.name: s for s in opt.singles}
    most_accurate = max(singles.values(), key=lambda s: s.accuracy)
    assert most_accurate.name == "sonnet35-cot"
    assert opt.optimum.accuracy >= most_accurate.accuracy + 0.02
    assert opt.optimum.cost <= 0.5 * most_accurate.cost
    shares = opt.shares([a.name for a in env.pool.agents])
    assert sum(share >= 0.1 for share in shares.values()) >= 3  # routes by domain, not one agent


def test_accuracy_given_the_item_is_what_repeated_calls_on_it_score() -> None:
    """accuracy_given_item is P(correct | the item's whole latent difficulty): the share of fresh calls
    on one item that are right, and, averaged over many items, the agent's marginal accuracy."""
    from puppeteer.analytics.optimum import sim_backend
    from puppeteer.envs.rollout import run_actions

    settings = EnvConfig(mode="step", lam=0.0, max_steps=1, min_steps=1, cost_model="usd")
    env = build_env(settings, pool=load_pool("sim-routing"), suite="mix-routing", split="train", n_tasks=300)
    sim = sim_backend(env)
    agent = env.pool.agent(0)
    p = [sim.accuracy_given_item(agent, t.id) for t in env.tasks]
    assert max(p) - min(p) > 0.5  # hard items are hard: the latent spreads the items
    # repeated calls on two items (one hard, one easy) score what the formula says
    stop = env.pool.terminator_id
    for i in (int(np.argmin(np.abs(np.array(p) - 0.3))), int(np.argmin(np.abs(np.array(p) - 0.8)))):
        right = [run_actions(env, [0, stop], seed=s, options={"task_index": i}).correct for s in range(1500)]
        assert np.mean(right) == pytest.approx(p[i], abs=0.04)  # 3.5 standard errors at p = 0.5
    # averaged over a domain's items it is the marginal accuracy given what the questions show
    visible = [sim.accuracy_given_visible(agent, t.id) for t in env.tasks]
    assert np.mean(p) == pytest.approx(np.mean(visible), abs=0.05)
    with pytest.raises(KeyError, match="answer key"):
        sim.accuracy_given_item(agent, "no-such-item")


@pytest.mark.data
def test_the_training_limit_picks_per_domain_from_the_training_items_and_values_them_held_out() -> None:
    """training_limit: per domain the agent of best mean E[G | item] over the training items, valued on
    the held-out items. On sim-routing (300 training items) those picks are the held-out optimum's
    routes, worth nearly all of it; on sim-paper at lambda 0.1 its 100 training items (10 of AIME, 20 of
    GPQA) pick routes worth less than gpt5-cot alone (experiments/sim-routing/README.md section 6)."""
    from puppeteer.analytics.optimum import training_limit

    settings = EnvConfig(mode="step", lam=0.08, max_steps=1, min_steps=1, cost_model="usd")
    pool = load_pool("sim-routing")
    train_env = build_env(settings, pool=pool, suite="mix-routing", split="train", n_tasks=300)
    test_env = build_env(settings, pool=pool, suite="mix-routing", split="test", n_tasks=200)
    limit = training_limit(train_env, test_env)
    assert limit.picks == {
        "gpqa-diamond": "sonnet35-cot",
        "gsm8k": "math72b-cot",
        "humaneval": "coder32b-cot",
        "math500": "math72b-cot",
        "mmlu": "qwen72b-cot",
    }
    assert limit.expected_return <= limit.optimum_expected_return + 1e-9
    assert limit.expected_return >= limit.optimum_expected_return - 0.002
    name, best = limit.best_single
    assert name == "qwen72b-cot" and limit.expected_return > best + 0.02

    paper = replace(settings, lam=0.1)
    pool = load_pool("sim-paper")
    train_env = build_env(paper, pool=pool, suite="mix-paper", split="train", n_tasks=100)
    test_env = build_env(paper, pool=pool, suite="mix-paper", split="test", n_tasks=150)
    limit = training_limit(train_env, test_env)
    name, best = limit.best_single
    assert name == "gpt5-cot"
    assert limit.optimum_expected_return > best + 0.01  # the world has headroom...
    assert limit.expected_return < best  # ...that 100 training items cannot find
    other = build_env(settings, pool=load_pool("sim-routing"), suite="mix-routing", n_tasks=5)
    with pytest.raises(ValueError, match="same pool"):
        training_limit(train_env, other)
