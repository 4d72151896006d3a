"""Agent cards in the conductor's prompt (issue 31, section 2): the agents table shows each agent's
measured card (cents per call, share right per domain) with a prompt config that asks for it, and
``puppeteer eval`` chooses the prompt and what lambda prices."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from puppeteer.agents.pool import load_pool
from puppeteer.backends.base import SyncBackend
from puppeteer.envs.build import build_env
from puppeteer.envs.conductor_prompt import Price, build_prompt, load_prompt_config, pool_table
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.policies.conductor import ConductorPolicy
from puppeteer.policies.protocol import EpisodeSettings
from puppeteer.types import Completion, CompletionRequest, ModelSpec


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")]


def test_the_agents_table_shows_each_measured_card() -> None:
    pool = load_pool("sim-routing")
    assert pool.cards is not None
    plain = pool_table(pool)
    assert "cents/call" not in plain
    lines = pool_table(pool, self_id=len(pool), cards=True).splitlines()
    header = _cells(lines[0])
    assert header[7:] == ["cents/call", *(f"right {d}" for d in pool.cards.domains)]
    assert all(len(_cells(line)) == len(header) for line in lines)  # the conductor's own row too
    coder = next(line for line in lines if "| coder32b-cot |" in line)
    card = pool.cards.card("coder32b-cot")
    cells = dict(zip(header, _cells(coder), strict=True))
    assert float(cells["cents/call"]) == pytest.approx(card.cents_per_call, rel=1e-2)
    assert float(cells["right humaneval"]) == pytest.approx(card.accuracy["humaneval"], abs=0.005)
    # only the agents on offer; an agent without a card shows dashes
    offered = [a.name in ("sonnet35-cot", "qwen7b-cot") for a in pool.agents]
    assert len(pool_table(pool, offered, cards=True).splitlines()) == 3
    less = replace(pool, cards=replace(pool.cards, cards=pool.cards.cards[1:]))
    first = pool_table(less, cards=True).splitlines()[1]
    assert _cells(first)[7:] == ["-"] * (1 + len(pool.cards.domains))
    # a pool without cards: the plain table whatever the setting
    bare = replace(pool, cards=None)
    assert pool_table(bare, cards=True) == pool_table(bare)


def test_the_cards_prompt_reaches_the_conductor_through_the_env() -> None:
    cfg = load_prompt_config("prompt-v2-cards")
    assert cfg.cards and not load_prompt_config("prompt-v2").cards
    pool = load_pool("sim-routing")
    text = build_prompt(pool, "What is 2 + 3?", "gsm8k", 3, config=cfg).text
    assert "cents/call" in text and "right gsm8k" in text
    settings = EpisodeSettings(
        lam=0.5, max_steps=3, price_in_prompt=True, prompt="prompt-v2-cards", cost_model="usd"
    )
    config = settings.workflow_config(None)
    assert config.prompt == "prompt-v2-cards" and config.cost_model == "usd"
    env = build_env(config, pool=pool, suite="mix-routing", split="test", n_tasks=2)
    _, info = env.reset(seed=0, options={"task_index": 0})
    system = info["conductor_prompt"].messages[0].content
    assert "cents/call" in system and "US cent" in system and "costs 0.5 points" in system
    # unset, the env is what it was: the default prompt, tokens, no card columns
    default = EpisodeSettings(lam=0.5, max_steps=3).workflow_config(None)
    unset = {"prompt": default.prompt, "cost_model": default.cost_model, "price_in_prompt": False}
    assert default == replace(config, **unset)
    assert default.prompt == "prompt-v1" and default.cost_model == "tokens"


def test_eval_refuses_conductor_prompt_flags_for_other_policies(capsys: pytest.CaptureFixture[str]) -> None:
    """--prompt, --cost-model and --price-in-prompt set the conductor's prompt: for any other policy the
    command says so instead of ignoring them."""
    from puppeteer.cli import main

    for flags in (["--prompt", "prompt-v2-cards"], ["--cost-model", "usd"], ["--price-in-prompt"]):
        argv = ["eval", "--pool", "sim-routing", "--suite", "mix-routing", "--policy", "random", "--n", "2"]
        assert main([*argv, *flags]) != 0
        assert f"{flags[0]}: for conductor policies only" in capsys.readouterr().out


def _values(text: str) -> dict[str, float]:
    """Agent name -> its "value here" cell, from a prompt's agents table."""
    lines = [line for line in text.splitlines() if line.count("|") > 6]
    header = _cells(lines[0])
    col = header.index("value here")
    return {_cells(line)[1]: float(_cells(line)[col]) for line in lines[1:] if _cells(line)[col] != "-"}


def test_priced_cards_value_each_agent_at_the_stated_price_and_the_best_changes_with_it() -> None:
    pool = load_pool("sim-routing")
    assert pool.cards is not None
    settings = EpisodeSettings(max_steps=3, price_in_prompt=True, prompt="prompt-v2-priced", cost_model="usd")
    env = build_env(settings.workflow_config(None), pool=pool, suite="mix-routing", split="test", n_tasks=40)
    gpqa = next(i for i, t in enumerate(env.tasks) if t.domain == "gpqa-diamond")
    best = {}
    for lam in (0.01, 3.0):
        _, info = env.reset(seed=0, options={"task_index": gpqa, "lam": lam})
        values = _values(info["conductor_prompt"].messages[0].content)
        assert len(values) == len(pool)
        card = pool.cards.card("sonnet35-cot")
        expected = 0.5 + 0.5 * card.accuracy["gpqa-diamond"] - lam * card.cents_per_call
        assert values["sonnet35-cot"] == pytest.approx(expected, abs=5e-4)
        best[lam] = max(values, key=values.__getitem__)
    # cheap, the most accurate agent on GPQA is worth its price; at 3 points a cent it is not
    assert best[0.01] == "sonnet35-cot" and best[3.0] != "sonnet35-cot"
    # without a stated price the column is not there; a config asking for it without cards is refused
    plain = build_prompt(pool, "Q?", "gsm8k", 3, config=load_prompt_config("prompt-v2-priced")).text
    assert "value here" not in plain and "cents/call" in plain
    with pytest.raises(ValueError, match="priced_cards needs"):
        replace(load_prompt_config("prompt-v2"), priced_cards=True)


def test_priced_cards_refuse_a_cost_model_whose_unit_no_card_gives() -> None:
    pool = load_pool("sim-routing")
    settings = EpisodeSettings(price_in_prompt=True, prompt="prompt-v2-priced", cost_model="tokens")
    env = build_env(settings.workflow_config(None), pool=pool, suite="mix-routing", split="test", n_tasks=2)
    with pytest.raises(ValueError, match="priced cards need a card cost"):
        env.reset(seed=0)


def _first_ids(text: str) -> list[int]:
    """The agent ids in the order of the agents table's rows (the conductor's own row aside)."""
    lines = [line for line in text.splitlines() if line.count("|") > 6]
    return [int(_cells(line)[0]) for line in lines[1:]]


def test_ordered_priced_table_runs_best_value_first_and_the_examples_follow_it() -> None:
    """prompt-v2-priced-ordered: the rows are sorted by value at the stated price, and the examples'
    one-step plan names the table's first row, so the agent a plan starts from moves with the price."""
    pool = load_pool("sim-routing")
    settings = EpisodeSettings(
        max_steps=3, price_in_prompt=True, prompt="prompt-v2-priced-ordered", cost_model="usd"
    )
    env = build_env(settings.workflow_config(None), pool=pool, suite="mix-routing", split="test", n_tasks=40)
    gpqa = next(i for i, t in enumerate(env.tasks) if t.domain == "gpqa-diamond")
    first = {}
    for lam in (0.01, 3.0):
        _, info = env.reset(seed=0, options={"task_index": gpqa, "lam": lam})
        prompt = info["conductor_prompt"]
        system = prompt.messages[0].content
        values = _values(system)
        rows = _first_ids(system)
        assert sorted(rows) == list(range(len(pool)))  # every agent once
        ordered = [values[pool.agents[i].name] for i in rows]
        assert ordered == sorted(ordered, reverse=True)
        # the one-step example (the first shot) names the table's first row
        assert f"model_id = [{rows[0]}]" in prompt.messages[2].content
        first[lam] = pool.agents[rows[0]].name
    assert first[0.01] == "sonnet35-cot" and first[3.0] != "sonnet35-cot"
    # the unordered priced prompt keeps the pool's order and its examples name agent 0
    env2 = build_env(
        replace(settings, prompt="prompt-v2-priced").workflow_config(None),
        pool=pool,
        suite="mix-routing",
        split="test",
        n_tasks=40,
    )
    _, info = env2.reset(seed=0, options={"task_index": gpqa, "lam": 3.0})
    assert _first_ids(info["conductor_prompt"].messages[0].content) == list(range(len(pool)))
    assert "model_id = [0]" in info["conductor_prompt"].messages[2].content
    # only with priced cards; a subset keeps only the agents on offer, in value order
    with pytest.raises(ValueError, match="order_by_value needs"):
        replace(load_prompt_config("prompt-v2-cards"), order_by_value=True)
    offered = [a.name in ("sonnet35-cot", "qwen7b-cot", "gpt4o-cot") for a in pool.agents]
    cfg = load_prompt_config("prompt-v2-priced-ordered")
    task = env.tasks[gpqa]
    text = build_prompt(
        pool, task.question, task.domain, 3, available=offered, config=cfg, price=Price(3.0, "US cent", "usd")
    )
    rows = _first_ids(text.messages[0].content)
    assert pool.agents[rows[0]].name == "qwen7b-cot" and len(rows) == 3


class _FirstRow(SyncBackend):
    """A scripted conductor that plans one call to the first row of its agents table, as the prompted
    1.5B mostly does (experiments/lam-conditioned/README.md)."""

    name = "first-row"

    def complete(self, request: CompletionRequest) -> Completion:
        system = request.messages[0].content
        table = system.split("Agents:\n", 1)[1].splitlines()
        first = int(_cells(table[1])[0])
        text = f"# the first row\nmodel_id = [{first}]\nsubtasks = ['Solve it.']\naccess_list = [[]]"
        return Completion(
            text=text,
            prompt_tokens=100,
            completion_tokens=20,
            cost_usd=0.0,
            flops=1.0,
            latency_s=0.1,
            model="first-row",
        )


def test_a_first_row_conductor_spends_less_as_the_stated_price_rises(tmp_path: Path) -> None:
    """Through evaluation: with the ordered priced table, a conductor that names the first row picks the
    best value at every price, so its mean cost falls from lambda 0.01 to 3 on the same items; the
    per-item records carry no question text."""
    from tests.experiment_modules import experiment_module

    items = experiment_module("_shared", "conductor_items")  # experiments/_shared/conductor_items.py
    first_is_best_value, item_records = items.first_is_best_value, items.item_records

    pool = load_pool("sim-routing")
    policy = ConductorPolicy(
        model=ModelSpec("conductor", "first-row", "fake", params_b=1.0),
        backend=_FirstRow(),
        name="conductor:first-row",
    )
    cents = {}
    for lam in (0.01, 3.0):
        run = tmp_path / f"lam{lam:g}"
        result = evaluate_policy(
            policy,
            pool,
            "mix-routing",
            n=20,
            lam=lam,
            max_steps=3,
            out_dir=run,
            progress=False,
            price_in_prompt=True,
            prompt="prompt-v2-priced-ordered",
            cost_model="usd",
        )
        items = item_records(run, [a.name for a in pool.agents])
        assert len(items) == 20 and all(len(i["plan"]) == 1 for i in items)
        assert all(first_is_best_value(pool, i, lam, "usd") for i in items)
        assert not any("question" in i for i in items)
        cents[lam] = 100 * result.mean_usd
    assert cents[3.0] < 0.5 * cents[0.01]
