"""The simulator fitted to a real outcome table (issue 57, section 3): the fit recovers what it is fitted
on, the shipped `sim-local` pool keeps the real table's marginals and correlations, and its mechanics
(model groups, greedy repeats, verifiers that flag without fixing)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from puppeteer.agents.pool import Pool, load_pool, pool_from_dict
from puppeteer.analytics.second_steps import relations, within_kind_phi
from puppeteer.analytics.sim_fit import AgentSpec, fit_latent, fit_table, kind_tables
from puppeteer.backends.replay import Outcome, StepOutcome, read_outcomes
from puppeteer.backends.sim import SimBackend
from puppeteer.backends.sim.answers import SimItem
from puppeteer.jobs.sim_fit import pool_document
from puppeteer.tasks import load_suite
from puppeteer.types import Agent, ModelSpec
from tests.experiment_modules import experiment_module

_check = experiment_module("sim-calibrated", "sim_check")  # experiments/sim-calibrated/sim_check.py
accuracies, backend, call, real_matrix = _check.accuracies, _check.backend, _check.call, _check.real_matrix
relation_phis, sim_matrix = _check.relation_phis, _check.sim_matrix

# --------------------------------------------------------------------------- the fit, on hand-built tables


def _row(task: str, agent: str, correct: bool, tokens: int = 10) -> Outcome:
    kind = task.split("/")[0]
    return Outcome("t", "test", task, kind, agent, correct, "1", 20, tokens, 1.0, False, 0)


SPECS = [
    AgentSpec("big-a", "big", "cot"),
    AgentSpec("big-b", "big", "pot"),
    AgentSpec("small-a", "small", "cot"),
    AgentSpec("small-b", "small", "direct"),
]


def test_the_fit_keeps_each_agents_accuracy_and_tokens_exactly() -> None:
    grid = {  # agent -> correctness on items k/0..k/3 of two kinds
        "big-a": ([1, 1, 1, 0], [1, 0, 0, 0]),
        "big-b": ([1, 1, 0, 0], [1, 1, 0, 0]),
        "small-a": ([1, 0, 0, 0], [0, 0, 0, 1]),
        "small-b": ([1, 1, 1, 1], [0, 0, 0, 0]),
    }
    rows = [
        _row(f"{kind}/{i}", agent, bool(c), tokens=10 * (i + 1))
        for agent, kinds in grid.items()
        for kind, column in zip(("x", "y"), kinds, strict=True)
        for i, c in enumerate(column)
    ]
    fit = fit_table(rows, [], SPECS, nodes=8)
    skills = {a.name: dict(a.skills) for a in fit.agents}
    assert skills == {
        "big-a": {"x": 0.75, "y": 0.25},
        "big-b": {"x": 0.5, "y": 0.5},
        "small-a": {"x": 0.25, "y": 0.25},
        "small-b": {"x": 1.0, "y": 0.0},
    }
    assert all(dict(a.tokens_mean) == {"x": 25.0, "y": 25.0} for a in fit.agents)  # (10+20+30+40)/4


def _probit_table(rho: float, g: float, n: int, seed: int) -> list[Outcome]:
    """Outcomes drawn from the simulator's latent model: two groups of two agents, one kind."""
    rng = np.random.default_rng(seed)
    p = {"big-a": 0.7, "big-b": 0.55, "small-a": 0.45, "small-b": 0.3}
    group = {"big-a": 0, "big-b": 0, "small-a": 1, "small-b": 1}
    z = rng.standard_normal(n)
    v = rng.standard_normal((n, 2))
    rows = []
    for agent, acc in p.items():
        e = rng.standard_normal(n)
        latent = math.sqrt(rho) * z + math.sqrt(g) * v[:, group[agent]] + math.sqrt(1 - rho - g) * e
        tau = float(np.quantile(latent, acc))  # thresholds at the empirical quantile: accuracy as declared
        rows += [_row(f"k/{i}", agent, bool(latent[i] < tau)) for i in range(n)]
    return rows


def test_the_fit_recovers_a_known_correlation_and_model_group() -> None:
    # 600 items of four agents: the maximum-likelihood estimates' standard errors are about 0.05 here
    # (their spread over seeds of this draw); 0.12 is over two of them
    rows = _probit_table(rho=0.35, g=0.3, n=600, seed=1)
    names = [s.name for s in SPECS]
    tables = kind_tables(rows, names)
    fit = fit_latent(tables, [0, 0, 1, 1], fit_visible=False, nodes=12)
    assert fit.rho["k"] == pytest.approx(0.35, abs=0.12)
    assert fit.group_corr == pytest.approx(0.3, abs=0.12)
    assert fit.loglik > fit.loglik_no_group + 10  # the group component is plainly supported
    # without a group component in the data, none is found
    flat = fit_latent(
        kind_tables(_probit_table(0.4, 0.0, 600, 2), names), [0, 0, 1, 1], fit_visible=False, nodes=12
    )
    assert flat.group_corr < 0.08 and flat.rho["k"] == pytest.approx(0.4, abs=0.12)


def test_the_fitted_pool_document_loads_and_simulates_its_table() -> None:
    real = load_pool("local-mix")
    specs = [AgentSpec("qwen1.5b-cot", "qwen-1.5b", "cot"), AgentSpec("qwen0.5b-pot", "qwen-0.5b", "pot")]
    rows = [_row(f"x/{i}", "qwen1.5b-cot", i % 4 != 0) for i in range(40)]  # 0.75
    rows += [_row(f"x/{i}", "qwen0.5b-pot", i % 5 == 0) for i in range(40)]  # 0.2
    # (first right, chain right, flagged): 3 wrong first answers (1 fixed, 2 flagged), 2 right (1 broken)
    pattern = [(False, True, True), (False, False, True), (False, False, False), (True, True, False)]
    pattern.append((True, False, True))
    steps = [
        StepOutcome(
            "t", "test", f"x/{i}", "x", "qwen1.5b-cot", "qwen0.5b-verify", c, "2" if f else "1", fc, "1",
            10, 5, 1.0, False,
        )
        for i, (fc, c, f) in enumerate(pattern * 4)
    ]  # fmt: skip
    fit = fit_table(
        rows, steps, [*specs, AgentSpec("qwen0.5b-verify", "qwen-0.5b", "verify", reads_context=True)]
    )
    assert fit.verifiers and fit.verifiers[0].fix == pytest.approx(1 / 3)
    assert fit.verifiers[0].breaks == pytest.approx(0.5)
    assert fit.verifiers[0].detection == pytest.approx(2 / 3)
    doc = pool_document(fit, _with_verifier(real), "tiny")
    pool = pool_from_dict(doc)
    assert [a.name for a in pool.agents] == ["qwen1.5b-cot", "qwen0.5b-pot", "qwen0.5b-verify"]
    assert pool.agents[0].model.prefill_tps == real.agents[0].model.prefill_tps
    sim = SimBackend(**{**doc["backend_options"]["sim"], "answer_key": _items(2000, "x")})
    for agent, p in ((pool.agents[0], 0.75), (pool.agents[1], 0.2)):
        acc = np.mean([call(sim, agent, f"x/{i}").correct for i in range(2000)])
        assert acc == pytest.approx(p, abs=0.035)  # 2000 draws: 3.5 standard errors at p = 0.5


def _with_verifier(pool: Pool) -> Pool:
    steps = load_pool("local-mix-steps")
    return steps if pool.name != steps.name else pool


def _items(n: int, kind: str) -> dict[str, SimItem]:
    return {f"{kind}/{i}": SimItem(gold=str(i), domain=kind, kind="numeric") for i in range(n)}


# --------------------------------------------------------------------------- the shipped sim-local pool


@pytest.fixture(scope="module")
def shipped() -> tuple[Pool, list[Outcome], list]:  # type: ignore[type-arg]
    real = load_pool("local-mix")
    assert real.replay is not None
    tasks = load_suite("mix-local", "train") + load_suite("mix-local", "test")
    return load_pool("sim-local"), list(read_outcomes(real.replay)), tasks


def test_sim_local_keeps_the_real_tables_marginals_and_correlations(shipped) -> None:  # type: ignore[no-untyped-def]
    pool, outcomes, tasks = shipped
    solvers = [a.name for i, a in enumerate(pool.agents) if not pool.reads_context(i)]
    real = real_matrix(outcomes, solvers)
    # 40 worlds x 130 items of a kind: 5200 independent draws per (agent, kind) cell (items and worlds
    # draw independent latents), a standard error of at most 0.0069; 0.03 is 4.3 of them, beyond the
    # Bonferroni bound (3.4) for the 32 cells, so a failure means a wrong skill, not bad luck
    sims = [sim_matrix(backend(pool, tasks, seed), pool, real) for seed in range(40)]
    real_acc = accuracies(real)
    for key, (k, n) in real_acc.items():
        sim_acc = sum(accuracies(s)[key][0] for s in sims) / (n * len(sims))
        assert sim_acc == pytest.approx(k / n, abs=0.03), key
    groups = {a.name: a.model.options["group"] for a in pool.agents if a.name in solvers}
    rel = relations(groups, dict.fromkeys(groups.values(), "qwen"))
    real_phi = relation_phis(real, rel)
    sim_phi = {r: float(np.mean([relation_phis(s, rel)[r] for s in sims])) for r in real_phi}
    # the real means' 95% bootstrap intervals are about +-0.03 (experiments/sim-calibrated/results)
    assert sim_phi["same model"] == pytest.approx(real_phi["same model"], abs=0.04)
    assert sim_phi["same family"] == pytest.approx(real_phi["same family"], abs=0.04)
    assert sim_phi["same model"] > sim_phi["same family"] + 0.12


def test_sim_local_repeats_are_identical_within_an_episode(shipped) -> None:  # type: ignore[no-untyped-def]
    pool, _, tasks = shipped
    sim = backend(pool, tasks, 0)
    keys = [t.id for t in tasks[:200]]
    for agent in pool.agents[:4]:
        first = [call(sim, agent, k, step=0) for k in keys]
        again = [call(sim, agent, k, step=3) for k in keys]
        assert [o.answer for o in first] == [o.answer for o in again]
        assert [o.correct for o in first] == [o.correct for o in again]


# --------------------------------------------------------------------------- the simulator's mechanics


def _model(name: str, group: str, p: float) -> ModelSpec:
    return ModelSpec(
        name=name,
        backend="sim",
        target=f"sim-{name}",
        params_b=1.0,
        options={"skills": {"x": p}, "group": group},
    )


def test_a_model_group_correlates_its_agents_and_keeps_their_marginals() -> None:
    sim = SimBackend(answer_key=_items(4000, "x"), rho=0.1, group_corr=0.5)
    models = [_model("a1", "A", 0.6), _model("a2", "A", 0.6), _model("b1", "B", 0.6)]
    agents = [Agent(name=m.name, model=m, pattern="cot") for m in models]
    wrong = {a.name: np.array([not call(sim, a, f"x/{i}").correct for i in range(4000)]) for a in agents}
    kinds = np.zeros(4000)
    same = within_kind_phi(wrong["a1"], wrong["a2"], kinds)
    other = within_kind_phi(wrong["a1"], wrong["b1"], kinds)
    assert same > other + 0.25 and other < 0.15
    for w in wrong.values():
        assert 1 - w.mean() == pytest.approx(0.6, abs=0.03)
    with pytest.raises(ValueError, match="group_corr"):
        SimBackend(rho=0.6, group_corr=0.5)


def test_a_verifier_flags_a_wrong_answer_without_fixing_it_at_switch_prob() -> None:
    items = _items(3000, "x")
    m = _model("v", "V", 0.0)  # never right on its own: it never fixes
    verifier = Agent(name="v", model=m, pattern="verify")
    for switch in (0.0, 0.4):
        sim = SimBackend(answer_key=items, switch_prob=switch)
        shown = [sim.answer_key[k].gold + "1" for k in items]  # a wrong first answer
        outs = [call(sim, verifier, k, step=1, visible=(w,)) for k, w in zip(items, shown, strict=True)]
        flagged = np.mean([o.answer != w for o, w in zip(outs, shown, strict=True)])
        assert not any(o.correct for o in outs)
        assert flagged == pytest.approx(switch, abs=0.03)


def test_wrong_numeric_answers_are_not_whole_numbers_at_the_declared_share() -> None:
    from puppeteer.tasks.signals import is_integer

    items = _items(3000, "x")
    model = ModelSpec(
        name="n", backend="sim", target="sim-n", params_b=1.0,
        options={"skills": {"x": 0.0}, "nonint_wrong": {"x": 0.3}},
    )  # fmt: skip
    agent = Agent(name="n", model=model, pattern="cot")
    outs = [call(SimBackend(answer_key=items), agent, k) for k in items]
    share = np.mean([not is_integer(o.answer) for o in outs])
    assert share == pytest.approx(0.3, abs=0.03)  # 3000 draws: 3.6 standard errors
    assert not any(o.correct for o in outs)


def test_a_pot_agent_writes_the_function_itself_on_a_code_item() -> None:
    from puppeteer.types import CallContext, CompletionRequest, Message

    gold = "def add(a, b):\n    return a + b"
    sim = SimBackend(answer_key={"c/0": SimItem(gold=gold, domain="c", kind="code")})
    model = ModelSpec(name="m", backend="sim", target="sim-m", params_b=1.0, options={"skills": {"c": 1.0}})
    request = CompletionRequest(
        model=model, messages=(Message("user", "q"),), context=CallContext(item_key="c/0", pattern="pot")
    )
    text = sim.complete(request).text
    assert f"```python\n{gold}\n```" in text and "print(answer)" not in text


# --------------------------------------------------------------------------- the shipped fit regenerates


def test_the_fit_reads_only_the_named_verifiers_chains_on_the_named_shards() -> None:
    from puppeteer.errors import UserError
    from puppeteer.jobs.outcomes import Shard
    from puppeteer.jobs.sim_fit import FitSimConfig, chains_read

    first_train = [t.id for t in load_suite("mix-local", "train", n=2)]
    later_train = next(t.id for t in load_suite("mix-local", "train") if t.id not in first_train)
    first_test = load_suite("mix-local", "test", n=1)[0].id

    def step(split: str, task: str, agent: str, suite: str = "mix-local") -> StepOutcome:
        kind = task.split("/")[0]
        return StepOutcome(suite, split, task, kind, "first", agent, True, "1", True, "1", 10, 5, 1.0, False)

    steps = [
        step("train", first_train[0], "v-small"),
        step("train", first_train[1], "v-big"),
        step("train", later_train, "v-small"),  # outside train:2
        step("test", first_test, "v-small"),  # test is not named
        step("train", first_train[0], "v-small", suite="other"),
    ]
    every = chains_read(steps, FitSimConfig())
    assert every == steps[:4]  # every chain of the suite
    named = FitSimConfig(verifiers=("v-small",), chains=(Shard("train", 2),))
    assert chains_read(steps, named) == [steps[0]]
    with pytest.raises(UserError, match="no chain of verifier 'v-none'"):
        chains_read(steps, FitSimConfig(verifiers=("v-none",)))


@pytest.mark.data
def test_the_shipped_sim_local_regenerates_from_the_command_in_its_header() -> None:
    import re
    import shlex
    from pathlib import Path

    from puppeteer.jobs.outcomes import Shard
    from puppeteer.jobs.sim_fit import FitSimConfig, fit_sim

    shipped = Path("agents/sim-local.yaml").read_text(encoding="utf-8")
    command = re.search(r"`puppeteer outcomes fit-sim (.*?)`", shipped)
    assert command is not None
    words = shlex.split(command.group(1))
    pairs = list(zip(words[::2], words[1::2], strict=True))
    arg = dict(pairs)
    config = FitSimConfig(
        pool=arg["--pool"],
        suite=arg["--suite"],
        name=arg["--name"],
        verifiers=tuple(v for k, v in pairs if k == "--verifier"),
        chains=tuple(Shard.parse(v) for k, v in pairs if k == "--chains"),
    )
    _, text = fit_sim(config)
    assert text == shipped
