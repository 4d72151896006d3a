"""Agents a router has never seen (issue 36, section 3): measured cards, a scorer with no parameter per
agent id, and a study whose held-out agents never appear in training."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from puppeteer.agents.cards import AgentCard, CardError, PoolCards, card_scale, cards_path
from puppeteer.agents.pool import Pool, PoolError, load_pool
from puppeteer.cli import main as cli_main
from puppeteer.envs.build import EnvConfig, build_env
from puppeteer.errors import UserError
from puppeteer.jobs.cards import calibration_tasks, measure_cards
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.train.reinforce import ReinforceConfig, run_fingerprint, train
from tests.experiment_modules import experiment_module

_unseen = experiment_module("unseen-agents", "unseen")
OutcomeTable, UnseenSettings = _unseen.OutcomeTable, _unseen.UnseenSettings
gain_captured, run_one, training_pool = _unseen.gain_captured, _unseen.run_one, _unseen.training_pool

SUITE = "mix-math-mmlu"
HELD = "wordy-cot"
# every agent has the same description and prices: only its card tells the agents apart
SKILLS = {"gen": (62, 62), "mathy": (95, 35), "weak": (40, 40), "wordy": (35, 95)}


def _pool_file(folder: Path, skills: dict[str, tuple[int, int]] = SKILLS, name: str = "toy-cards") -> Path:
    spec = {
        "name": name,
        "backend_options": {"sim": {"seed": 0, "rho": 0.3, "columns": {"gsm8k": "G", "mmlu": "M"}}},
        "models": {
            m: {"backend": "sim", "target": m, "price_in": 0.5, "price_out": 1.0, "params_b": 10,
                "options": {"skills": {"G": g, "M": k}, "tokens_mean": 300, "tokens_per_s": 50}}
            for m, (g, k) in skills.items()
        },
        "agents": [
            {"name": f"{m}-cot", "model": m, "pattern": "cot", "description": "a model"} for m in skills
        ],
    }  # fmt: skip
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _with_cards(folder: Path, per_domain: int = 20) -> Pool:
    path = _pool_file(folder)
    measure_cards(load_pool(path), SUITE, per_domain=per_domain).save(cards_path(path))
    return load_pool(path)


def _config(**more: Any) -> PolicyConfig:
    return PolicyConfig(encoder="hashing", hidden=32, max_steps=1, min_steps=1, cards=True, **more)


def _settings() -> EnvConfig:
    return EnvConfig(mode="step", lam=0.05, max_steps=1, min_steps=1, cost_model="usd")


def _jittered_logits(policy: PuppeteerPolicy) -> tuple[torch.Tensor, list[str]]:
    """Every weight moved off its (often zero) start, so each term counts; then the logits on the
    first test item of the policy's own pool, and the agents' names in order."""
    with torch.no_grad():
        for p in policy.scorer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    env = build_env(_settings(), pool=policy.pool, suite=SUITE, split="test", n_tasks=2)
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    return policy.logits([policy.features(obs)])[0], [a.name for a in policy.pool.agents]


# ----------------------------------------------------------------------------- cards


def test_cards_are_measured_on_a_calibration_split_and_found_beside_the_pool(tmp_path: Path) -> None:
    pool = _with_cards(tmp_path, per_domain=30)
    cards = pool.cards
    assert cards is not None and cards.domains == ("gsm8k", "mmlu") and cards.split == "train"
    assert [c.name for c in cards.cards] == [a.name for a in pool.agents]
    mathy, wordy = cards.card("mathy-cot"), cards.card("wordy-cot")
    assert mathy.items == {"gsm8k": 30, "mmlu": 30}
    # the declared skills, as 30 items per domain measure them
    assert mathy.accuracy["gsm8k"] > 0.8 > 0.55 > mathy.accuracy["mmlu"]
    assert wordy.accuracy["mmlu"] > 0.8 > 0.55 > wordy.accuracy["gsm8k"]
    # price per call: the env's usd cost of one call, in cents; speed below the declared decode rate
    # (the first token's wait counts), and the same for agents of the same speed
    assert 0.01 < mathy.cents_per_call < 0.1
    assert 30 < mathy.tokens_per_s < 50 and wordy.tokens_per_s == pytest.approx(mathy.tokens_per_s, rel=0.1)
    # a subset of the pool keeps the cards; the file round-trips
    assert pool.subset(["wordy-cot"]).cards == cards
    assert PoolCards.load(cards.save(tmp_path / "again.json")) == cards


def test_cards_never_see_the_test_items_and_bad_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="never on 'test'"):
        calibration_tasks(SUITE, "test")
    train = calibration_tasks(SUITE, "train", per_domain=5)
    assert [t.domain for t in train].count("gsm8k") == 5 and len(train) == 10
    from puppeteer.tasks import load_suite

    test_ids = {t.id for t in load_suite(SUITE, "test")}
    assert not test_ids & {t.id for t in calibration_tasks(SUITE, "train", per_domain=60)}
    path = _pool_file(tmp_path)
    cards_path(path).write_text('{"pool": "x"}')
    with pytest.raises(PoolError, match="not a cards file"):
        load_pool(path)
    with pytest.raises(CardError, match="lacks the accuracy"):
        PoolCards("p", SUITE, "train", 1, ("gsm8k",), (AgentCard("a", 1.0, 1.0, {"mmlu": 0.5}),))


def test_cards_follow_a_table_built_on_n_items_and_the_declared_speeds(tmp_path: Path) -> None:
    """A shipped outcome table holds the split's first n items (``load_suite(n=n)``, not the first n of
    the whole split's order), so ``--n`` takes the calibration items among those; and where a pool
    declares its models' speeds the card's speed is single-stream at those speeds (a replayed call's
    latency is the build machine's load, not the agent's speed)."""
    from puppeteer.tasks import load_suite

    among = {t.id for t in load_suite(SUITE, "train", n=40)}
    chosen = calibration_tasks(SUITE, "train", per_domain=20, n=40)
    assert {t.id for t in chosen} == among and len(chosen) == 40
    raw = yaml.safe_load(_pool_file(tmp_path).read_text())
    for model in raw["models"].values():
        model.update(prefill_tps=1000.0, decode_tps=10.0)
    (tmp_path / "timed.yaml").write_text(yaml.safe_dump({**raw, "name": "timed"}))
    cards = measure_cards(load_pool(tmp_path / "timed.yaml"), SUITE, per_domain=5)
    card = cards.card("mathy-cot")
    assert 9.0 < card.tokens_per_s < 10.0  # decode 10 tokens/s, slowed a little by the prompt's prefill
    # the model time per call, what a `minutes` cost model charges, is a feature of timed cards only
    assert card.seconds_per_call is not None and card.seconds_per_call > 10.0
    assert cards.timed and cards.feature_names[3:5] == ("ln model s per call", "model minutes per call")
    features = cards.features(["mathy-cot"])[0]
    assert features[4] == pytest.approx(card.seconds_per_call / 60.0)
    assert PoolCards.load(cards.save(tmp_path / "timed.json")) == cards
    untimed = measure_cards(load_pool(_pool_file(tmp_path)), SUITE, per_domain=5)
    assert not untimed.timed and untimed.n_features == 3 + 2  # as before: price, speed, two accuracies


def test_puppeteer_pool_cards_writes_the_cards_beside_the_pool(tmp_path: Path) -> None:
    path = _pool_file(tmp_path)
    assert cli_main(["pool", "cards", "--pool", str(path), "--suite", SUITE, "--per-domain", "3"]) == 0
    saved = json.loads(cards_path(path).read_text())
    assert saved["per_domain"] == 3 and [c["name"] for c in saved["cards"]] == [f"{m}-cot" for m in SKILLS]
    assert load_pool(path).cards is not None


def test_card_scale_standardises_over_the_training_agents_with_a_floor() -> None:
    raw = np.array([[0.0, 0.9], [2.0, 0.9]], dtype=np.float32)
    shift, scale = card_scale(raw)
    assert shift.tolist() == pytest.approx([1.0, 0.9])
    assert scale.tolist() == pytest.approx([1 / 1.05, 1 / 0.05])  # std 1 and 0, plus the floor


# ----------------------------------------------------------------------------- the scorer


def test_a_card_reading_scorer_has_no_parameter_per_agent_id(tmp_path: Path) -> None:
    """The weights are the same shapes for a pool of 2 and of 4 agents, and adding agents, or
    reordering them, leaves every other agent's score as it was: a score depends on the agent's
    text and card only."""
    pool = _with_cards(tmp_path)
    small = pool.subset(["mathy-cot", "gen-cot"])
    policy = PuppeteerPolicy(small, _config(surface=True, signals=True), seed=0)
    big = PuppeteerPolicy(pool, _config(surface=True, signals=True), seed=0)
    shapes = {k: tuple(v.shape) for k, v in policy.scorer.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in big.scorer.state_dict().items()}
    with torch.no_grad():  # move every weight off its zero start, so each term counts
        for p in policy.scorer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    env = build_env(_settings(), pool=pool, suite=SUITE, split="test", n_tasks=4)
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    obs = {**obs, "signals": np.linspace(0, 1, len(obs["signals"]), dtype=np.float32)}
    order = ["wordy-cot", "gen-cot", "weak-cot", "mathy-cot"]
    wide = policy.with_pool(pool.subset(order))
    logits = wide.logits([wide.features(obs)])[0]
    narrow_obs = {**obs, "mask": np.ones(3, dtype=np.int8), "counts": np.zeros(3, dtype=np.int64)}
    narrow = policy.logits([policy.features(narrow_obs)])[0]
    assert logits[order.index("mathy-cot")].item() == pytest.approx(narrow[0].item(), abs=1e-5)
    assert logits[order.index("gen-cot")].item() == pytest.approx(narrow[1].item(), abs=1e-5)
    # identical text, different cards: different scores
    assert len({round(x, 4) for x in logits[:-1].tolist()}) == 4
    with pytest.raises(ValueError, match=r"only a policy with policy\.cards"):
        PuppeteerPolicy(small, replace(_config(), cards=False)).with_pool(pool)


def test_cards_need_a_pool_with_cards_and_a_plain_policy_is_as_it_was(tmp_path: Path) -> None:
    bare = load_pool(_pool_file(tmp_path, name="no-cards"))
    with pytest.raises(ValueError, match="has no agent cards"):
        PuppeteerPolicy(bare, _config())
    with pytest.raises(ValueError, match="layers=norm"):
        PolicyConfig(cards=True, layers="tanh")
    plain = PuppeteerPolicy(bare, replace(_config(), cards=False))
    assert "agent_emb" in plain.scorer.state_dict() and "mask_in.weight" in plain.scorer.state_dict()
    plain.save(tmp_path / "plain")
    assert "cards" not in json.loads((tmp_path / "plain" / "policy.json").read_text())["config"]
    env = build_env(_settings(), pool=bare, suite=SUITE, split="train", n_tasks=4)
    assert "cards" not in run_fingerprint(env, plain, ReinforceConfig())["policy"]
    with pytest.raises(ValueError, match="differs"):
        PuppeteerPolicy.load(tmp_path / "plain", bare.subset(["gen-cot"]))


# ----------------------------------------------------------------------------- the held-out study


@pytest.fixture(scope="module")
def held_out_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, UnseenSettings, dict[str, Any]]:
    """One card-reading router trained without ``wordy-cot`` (the only agent strong on MMLU)."""
    folder = tmp_path_factory.mktemp("unseen")
    _with_cards(folder)
    s = UnseenSettings(
        pool=str(folder / "toy-cards.yaml"),
        suite=SUITE,
        held=(HELD,),
        n_train=64,
        n_eval=40,
        episodes=4098,  # groups of 3 (every training agent first): 1366 item visits
        batch_episodes=48,
        lr=0.003,
        encoder="hashing",
        hidden=32,
        surface=False,
    )
    result = run_one(folder / "out", folder / "work", s, "held-out", seed=0)
    return folder, s, result


@pytest.mark.learning
def test_held_out_agents_never_appear_in_training(
    held_out_run: tuple[Path, UnseenSettings, dict[str, Any]],
) -> None:
    folder, s, result = held_out_run
    run = folder / "work" / f"held-out-s{result['seed']}"
    steps = [
        step
        for line in (run / "trajectories.jsonl").read_text().splitlines()
        for step in json.loads(line)["steps"]
    ]
    called = {step["agent_name"] for step in steps}
    assert len(steps) >= s.episodes and called == {"gen-cot", "mathy-cot", "weak-cot"}  # every other agent
    assert HELD not in result["train_agents"]
    saved = json.loads((run / "final" / "policy.json").read_text())
    assert HELD not in saved["agents"]
    # nor do its card's numbers: the standardisation is the training agents' alone
    full = load_pool(s.pool)
    policy = PuppeteerPolicy.load(run / "final", full)
    assert full.cards is not None
    shift, scale = card_scale(full.cards.features(["gen-cot", "mathy-cot", "weak-cot"]))
    assert policy.scorer.card_shift.tolist() == pytest.approx(shift.tolist())
    assert policy.scorer.card_scale.tolist() == pytest.approx(scale.tolist())
    with pytest.raises(PoolError, match="held-out agents must be agents"):
        training_pool(full, ["nobody"])


@pytest.mark.learning
def test_a_card_reading_router_uses_an_agent_it_never_saw(
    held_out_run: tuple[Path, UnseenSettings, dict[str, Any]],
) -> None:
    """Trained on gen / mathy / weak (identical text), the router is given wordy-cot, whose card says 95%
    on MMLU: it sends MMLU items to it and keeps GSM8K on mathy, as the whole pool's optimum does."""
    _, _, result = held_out_run
    six, unseen = result["six"], result["unseen"]

    def share(routes: dict[str, dict[str, int]], domain: str, agent: str) -> float:
        return routes[domain].get(agent, 0) / sum(routes[domain].values())

    assert six["shares"][HELD] == 0.0
    assert share(six["routes_by_domain"], "mmlu", "gen-cot") >= 0.9  # the best it was trained with
    assert share(unseen["routes_by_domain"], "mmlu", HELD) >= 0.9
    assert share(unseen["routes_by_domain"], "gsm8k", "mathy-cot") >= 0.8
    assert unseen["expected_return"] > six["expected_return"] + 0.1  # MMLU: about 0.62 -> 0.95


def test_outcome_table_scores_routes_and_the_gain_captured(tmp_path: Path) -> None:
    pool = load_pool(_pool_file(tmp_path))
    env = build_env(_settings(), pool=pool, suite=SUITE, split="test", n_tasks=10)
    table = OutcomeTable.of(env)
    best = table.optimum()
    assert table.score(best)["expected_return"] >= max(
        table.score([n] * 10)["expected_return"] for n in table.names
    )
    assert set(table.optimum(["gen-cot", "weak-cot"])) <= {"gen-cot", "weak-cot"}
    m = table.score(["mathy-cot"] * 10)
    assert m["shares"]["mathy-cot"] == 1.0 and m["accuracy"] == pytest.approx(table.correct[:, 1].mean())
    assert gain_captured(0.80, 0.808, 0.81) == pytest.approx(0.8)
    assert gain_captured(0.8, 0.9, 0.8) is None


def test_a_saved_card_reading_policy_loads_onto_a_larger_pool(tmp_path: Path) -> None:
    pool = _with_cards(tmp_path)
    small = pool.subset(["gen-cot", "mathy-cot"])
    env = build_env(_settings(), pool=small, suite=SUITE, split="train", n_tasks=8)
    policy = PuppeteerPolicy(small, _config(), seed=1)
    train(
        env, policy, ReinforceConfig(episodes=32, batch_episodes=16, first_step="all", seed=0), tmp_path / "r"
    )
    loaded = PuppeteerPolicy.load(tmp_path / "r" / "final", pool)
    twin = policy.with_pool(pool)
    test = build_env(_settings(), pool=pool, suite=SUITE, split="test", n_tasks=3)
    obs, _ = test.reset(seed=0, options={"task_index": 1})
    assert torch.allclose(loaded.logits([loaded.features(obs)]), twin.logits([twin.features(obs)]))
    saved = json.loads((tmp_path / "r" / "final" / "policy.json").read_text())
    assert saved["config"]["cards"] is True and saved["card_domains"] == ["gsm8k", "mmlu"]


def test_the_card_accuracy_on_the_questions_domain_is_read_through_a_fitted_classifier(
    tmp_path: Path,
) -> None:
    """fit_inputs with the training tasks' domains fits which card column a question needs: on held-out
    questions the classifier names the right domain, and an MMLU question's matched accuracy ranks
    the MMLU specialist first and the GSM8K specialist last."""
    from puppeteer.tasks import load_suite

    pool = _with_cards(tmp_path)
    policy = PuppeteerPolicy(pool, _config(), seed=0)
    train_tasks = load_suite(SUITE, "train", n=64)
    before = policy.scorer.domain_accuracy(torch.as_tensor(policy.encoder.encode(["a question"])))
    columns = policy.scorer.card_inputs()[:, -3:-1]  # the standardised accuracies (gsm8k, mmlu)
    assert torch.allclose(before[0], columns.mean(dim=1))  # not fitted yet: every domain alike
    policy.fit_inputs([t.question for t in train_tasks], [t.domain for t in train_tasks])
    test = load_suite(SUITE, "test", n=40)
    x = torch.as_tensor(policy.encoder.encode([t.question for t in test]))
    p = torch.softmax(policy.scorer.standardized(x) @ policy.scorer.domain_w + policy.scorer.domain_b, dim=-1)
    domains = pool.cards.domains if pool.cards else ()
    named = [domains[i] for i in p.argmax(dim=-1).tolist()]
    assert np.mean([n == t.domain for n, t in zip(named, test, strict=True)]) >= 0.9
    matched = policy.scorer.domain_accuracy(x)
    names = [a.name for a in pool.agents]
    mmlu = next(i for i, t in enumerate(test) if t.domain == "mmlu")
    order = matched[mmlu, :-1].argsort(descending=True).tolist()
    assert [names[i] for i in order[:2]] == ["wordy-cot", "gen-cot"]
    assert matched[mmlu, -1].item() == 0.0  # the Terminator has no accuracy


def test_cards_linear_scores_an_agent_by_its_price_and_domain_accuracy_only(tmp_path: Path) -> None:
    """With ``cards_linear`` two agents whose cards agree on price and accuracies score the same, whatever
    their text, speed or position; the saved file says so."""
    pool = _with_cards(tmp_path)
    assert pool.cards is not None
    twin_card = replace(pool.cards.card("gen-cot"), name="weak-cot", tokens_per_s=500.0)
    cards = replace(
        pool.cards, cards=tuple(twin_card if c.name == "weak-cot" else c for c in pool.cards.cards)
    )
    pool = replace(pool, cards=cards)
    policy = PuppeteerPolicy(pool, _config(cards_linear=True), seed=0)
    logits, names = _jittered_logits(policy)
    assert logits[names.index("weak-cot")].item() == pytest.approx(logits[names.index("gen-cot")].item())
    assert logits[names.index("wordy-cot")].item() != pytest.approx(logits[names.index("gen-cot")].item())
    policy.save(tmp_path / "lin")
    assert json.loads((tmp_path / "lin" / "policy.json").read_text())["config"]["cards_linear"] is True
    with pytest.raises(ValueError, match=r"needs policy\.cards"):
        PolicyConfig(cards_linear=True)


def test_without_its_text_an_agent_is_its_card(tmp_path: Path) -> None:
    """``cards_text=False``: two agents with the same card score the same whatever their names (with
    the text they do not). The saved file names the setting only when it is not the default."""
    pool = _with_cards(tmp_path)
    assert pool.cards is not None
    twin_card = replace(pool.cards.card("gen-cot"), name="weak-cot")
    cards = replace(
        pool.cards, cards=tuple(twin_card if c.name == "weak-cot" else c for c in pool.cards.cards)
    )
    pool = replace(pool, cards=cards)
    names = [a.name for a in pool.agents]
    env = build_env(_settings(), pool=pool, suite=SUITE, split="test", n_tasks=2)
    obs, _ = env.reset(seed=0, options={"task_index": 0})

    def logits(config: PolicyConfig) -> torch.Tensor:
        policy = PuppeteerPolicy(pool, config, seed=0)
        with torch.no_grad():
            for p in policy.scorer.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
            return policy.logits([policy.features(obs)])[0].detach()

    blind, named = logits(_config(cards_text=False)), logits(_config())
    assert blind[names.index("weak-cot")].item() == pytest.approx(blind[names.index("gen-cot")].item())
    assert named[names.index("weak-cot")].item() != pytest.approx(named[names.index("gen-cot")].item())

    policy = PuppeteerPolicy(pool, _config(cards_text=False), seed=0)
    policy.save(tmp_path / "blind")
    saved = json.loads((tmp_path / "blind" / "policy.json").read_text())["config"]
    assert saved["cards_text"] is False
    PuppeteerPolicy(pool, _config(), seed=0).save(tmp_path / "named")
    named = json.loads((tmp_path / "named" / "policy.json").read_text())["config"]
    assert "cards_text" not in named
    loaded = PuppeteerPolicy.load(tmp_path / "blind", pool)
    assert not loaded.config.cards_text
    with pytest.raises(ValueError, match=r"needs policy\.cards"):
        PolicyConfig(cards_text=False)


def test_on_timed_cards_the_scorer_reads_the_model_minutes_a_minutes_return_charges(tmp_path: Path) -> None:
    """A local pool's calls cost no money (price 0 for every agent), so the linear cost term also reads
    the model minutes per call where every card states them: two agents alike in price and accuracy
    but not in model time score differently under ``cards_linear``; untimed cards read the price only."""
    pool = _with_cards(tmp_path)
    assert pool.cards is not None and pool.cards.cost_features == (1,)
    seconds = {"gen-cot": 10.0, "mathy-cot": 12.0, "weak-cot": 40.0, "wordy-cot": 8.0}
    twin = pool.cards.card("gen-cot")
    timed = replace(
        pool.cards,
        cards=tuple(
            replace(twin if c.name == "weak-cot" else c, name=c.name, seconds_per_call=seconds[c.name])
            for c in pool.cards.cards
        ),
    )
    assert timed.cost_features == (1, 4) and timed.feature_names[4] == "model minutes per call"
    pool = replace(pool, cards=timed)
    policy = PuppeteerPolicy(pool, _config(cards_linear=True), seed=0)
    assert policy.scorer.card_linear == [1, 4, timed.n_features]
    logits, names = _jittered_logits(policy)
    assert logits[names.index("weak-cot")].item() != pytest.approx(logits[names.index("gen-cot")].item())
