from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.rollout import Episode, run_lockstep
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import PolicyConfig
from puppeteer.train.reinforce import (
    BASELINES,
    ReinforceConfig,
    ResumeMismatch,
    evaluate,
    train,
)

FAST = PolicyConfig(encoder="hashing", hidden=32, max_steps=3)


def _env(split: str = "train", **kw) -> ConductorEnv:
    return ConductorEnv(mode="step", pool="sim-paper", suite="arith", split=split, max_steps=3, **kw)


def test_unavailable_agents_are_never_chosen() -> None:
    env = _env(unavailable=[0, 1, 2])
    policy = PuppeteerPolicy(env.pool, FAST)
    gen = torch.Generator().manual_seed(0)
    eps = run_lockstep([env, env.clone()], policy, [(s, None) for s in range(40)], generator=gen)
    used = {a for e in eps for a in e.actions}
    assert used.isdisjoint({0, 1, 2})
    assert len(used) > 3  # the untrained policy explores the rest


def test_training_with_a_masked_action_stays_finite(tmp_path: Path) -> None:
    """Masked actions (here the Terminator at step 0) must not turn the entropy gradient into nan."""
    env = _env(min_steps=1)
    policy = PuppeteerPolicy(env.pool, replace(FAST, min_steps=1), seed=0)
    cfg = ReinforceConfig(
        episodes=64, batch_episodes=32, group_size=4, eval_every=1000, seed=0, entropy_coef=0.1
    )
    train(env, policy, cfg, tmp_path)
    assert all(torch.isfinite(p).all() for p in policy.scorer.parameters())
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 64 and all(json.loads(line)["steps"] for line in lines)


def test_a_policy_with_min_steps_never_stops_early_even_in_an_env_without_it() -> None:
    env = _env()  # min_steps=0: the env allows the Terminator at step 0
    term = env.pool.terminator_id
    observations = [env.reset(seed=seed)[0] for seed in range(100)]

    def first_actions(min_steps: int) -> list[int]:
        policy = PuppeteerPolicy(env.pool, replace(FAST, min_steps=min_steps), seed=0)  # sampling
        return [policy.act(obs, np.random.default_rng(i)) for i, obs in enumerate(observations)]

    assert term in first_actions(0)  # an untrained policy stops at once now and then
    assert term not in first_actions(1)


def test_save_load_round_trip(tmp_path: Path) -> None:
    env = _env()
    policy = PuppeteerPolicy(env.pool, FAST, seed=3)
    obs, _ = env.reset(seed=0)
    feats = policy.features(obs)
    policy.save(tmp_path / "p")
    loaded = PuppeteerPolicy.load(tmp_path / "p", env.pool)
    assert torch.equal(policy.logits([feats]), loaded.logits([feats]))
    assert loaded.config == policy.config
    other = ConductorEnv(mode="step", pool="local", suite="arith")
    with pytest.raises(ValueError, match="differs"):
        PuppeteerPolicy.load(tmp_path / "p", other.pool)


def test_encoder_cache_hits_repeated_texts() -> None:
    env = _env()
    policy = PuppeteerPolicy(env.pool, FAST)
    obs, _ = env.reset(seed=0)
    policy.features(obs)
    misses = policy.encoder.misses
    policy.features(obs)
    assert policy.encoder.misses == misses and policy.encoder.hits >= 2


def _ep(ret: float) -> Episode:
    return Episode(task_id="t", feats=[], actions=[0], rewards=[ret], returns=[ret])


def test_baselines_by_hand() -> None:
    groups = [[_ep(1.0), _ep(0.0), _ep(0.5)], [_ep(0.2)]]
    cfg = ReinforceConfig(ema_decay=0.5)
    assert BASELINES["none"](groups, {}, cfg) == [[[0], [0], [0]], [[0]]]
    assert BASELINES["group"](groups, {}, cfg) == [[[0.25], [0.75], [0.5]], [[0.0]]]  # leave-one-out means
    state: dict[str, float] = {}
    assert BASELINES["ema"](groups, state, cfg) == [[[0], [0], [0]], [[0]]]
    assert state["ema"] == pytest.approx(1.7 / 4)
    assert BASELINES["ema"](groups, state, cfg)[0][0] == [pytest.approx(1.7 / 4)]
    assert state["ema"] == pytest.approx(1.7 / 4)


def _two_step(actions: list[int], returns: list[float]) -> Episode:
    return Episode(task_id="t", feats=[], actions=actions, rewards=[0.0] * len(actions), returns=returns)


def test_the_prefix_baseline_compares_each_decision_with_the_same_situation() -> None:
    """Four episodes of one task. At step 0 the prefix baseline is the group's; at step 1 an episode
    is compared only with the others that made the same first choice, and with the group where none
    did."""
    g = [
        _two_step([0, 1], [0.9, 1.0]),
        _two_step([0, 2], [0.1, 0.2]),
        _two_step([0, 1], [0.7, 0.8]),
        _two_step([3], [0.3]),
    ]
    cfg = ReinforceConfig()
    group = BASELINES["group"]([g], {}, cfg)[0]
    prefix = BASELINES["prefix"]([g], {}, cfg)[0]
    assert [row[0] for row in prefix] == pytest.approx([row[0] for row in group])  # step 0: the group's
    assert prefix[0][0] == pytest.approx((0.1 + 0.7 + 0.3) / 3)
    # step 1 after action 0: the two other episodes that also started with 0
    assert prefix[0][1] == pytest.approx((0.2 + 0.8) / 2)
    assert prefix[1][1] == pytest.approx((1.0 + 0.8) / 2)
    assert prefix[2][1] == pytest.approx((1.0 + 0.2) / 2)
    # a one-step episode has one value; an episode alone in its situation falls back to the group
    assert len(prefix[3]) == 1
    lonely = [_two_step([0, 1], [0.5, 0.6]), _two_step([2, 1], [0.1, 0.2])]
    assert BASELINES["prefix"]([lonely], {}, cfg)[0] == [pytest.approx([0.1, 0.1]), pytest.approx([0.5, 0.5])]


@pytest.mark.learning
def test_training_approaches_the_best_single_agent(tmp_path: Path) -> None:
    from puppeteer.analytics.references import best_fixed_sequence

    env, test_env = _env("train"), _env("test", n_tasks=60)
    best, _ = best_fixed_sequence(test_env, max_len=1)
    policy = PuppeteerPolicy(env.pool, FAST, seed=0)
    before = evaluate(test_env, policy)
    cfg = ReinforceConfig(episodes=1536, batch_episodes=64, group_size=4, lr=0.01, eval_every=1000, seed=0)
    train(env, policy, cfg, tmp_path)
    after = evaluate(test_env, policy)
    assert after["return"] > before["return"] + 0.3
    assert after["return"] >= 0.8 * best.ret
    assert after["accuracy"] >= 0.85
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 1536 and json.loads(lines[0])["mode"] == "step"
    assert (tmp_path / "final" / "policy.pt").exists()


class Killed(Exception):
    pass


def test_killed_run_resumes_to_the_same_result(tmp_path: Path) -> None:
    cfg = ReinforceConfig(
        episodes=384, batch_episodes=32, group_size=4, checkpoint_every=2, eval_every=1000, seed=5
    )

    def fresh() -> tuple[ConductorEnv, PuppeteerPolicy]:
        env = _env()
        return env, PuppeteerPolicy(env.pool, FAST, seed=1)

    env, full = fresh()
    train(env, full, cfg, tmp_path / "full")

    env, part = fresh()

    def kill_after_update_5(done: int, total: int, metrics: dict) -> None:
        if done == 5 * 32:
            raise Killed  # dies after update 5, before the checkpoint of update 6: loses that batch

    with pytest.raises(Killed):
        train(env, part, cfg, tmp_path / "resumed", progress=kill_after_update_5)
    env, resumed = fresh()  # a new process would start from scratch objects
    state = train(env, resumed, cfg, tmp_path / "resumed")
    assert state.episodes == 384
    for a, b in zip(full.scorer.parameters(), resumed.scorer.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    full_lines = (tmp_path / "full" / "trajectories.jsonl").read_text().splitlines()
    res_lines = (tmp_path / "resumed" / "trajectories.jsonl").read_text().splitlines()
    assert len(res_lines) == len(full_lines) == 384
    assert res_lines == full_lines


def test_a_run_directory_of_another_run_is_refused_not_resumed(tmp_path: Path) -> None:
    cfg = ReinforceConfig(episodes=64, batch_episodes=32, group_size=4, eval_every=1000, seed=5)
    env = _env()
    train(env, PuppeteerPolicy(env.pool, FAST, seed=1), cfg, tmp_path)
    saved = (tmp_path / "checkpoint.pt").read_bytes()
    other_tasks = ConductorEnv(
        mode="step", pool="sim-paper", suite="arith", split="train", n_tasks=20, max_steps=3
    )
    for env2, cfg2, why in [
        (env, replace(cfg, lr=0.5), "trainer"),
        (_env(lam=0.7), cfg, "env"),
        (other_tasks, cfg, "tasks"),
        (env, replace(cfg, episodes=16), "64 episodes, 16 asked"),
    ]:
        with pytest.raises(ResumeMismatch, match=why):
            train(env2, PuppeteerPolicy(env2.pool, FAST, seed=1), cfg2, tmp_path)
        assert (tmp_path / "checkpoint.pt").read_bytes() == saved  # the other run's checkpoint is untouched
    # the same run asked for more episodes resumes and trains on
    state = train(env, PuppeteerPolicy(env.pool, FAST, seed=1), replace(cfg, episodes=96), tmp_path)
    assert state.episodes == 96


def test_greedy_evaluation_is_deterministic() -> None:
    env = _env("test", n_tasks=20)
    policy = PuppeteerPolicy(env.pool, FAST, seed=2)
    assert evaluate(env, policy) == evaluate(env, policy)
    assert np.isfinite(evaluate(env, policy)["return"])


def test_a_run_trains_exactly_its_episodes_and_a_finished_run_reruns_as_done(tmp_path: Path) -> None:
    """Issue 33: 300 asked used to run 320 (the last batch overshot), and the finished run could then
    never be rerun ("checkpoint of another run"), nor could one killed after its last checkpoint."""
    env = _env("train")
    cfg = ReinforceConfig(episodes=300, batch_episodes=64, group_size=4, eval_every=1000, seed=0)
    state = train(env, PuppeteerPolicy(env.pool, FAST, seed=0), cfg, tmp_path)
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    assert state.episodes == 300 and len(lines) == 300
    final = (tmp_path / "final" / "policy.pt").read_bytes()
    (tmp_path / "final" / "policy.pt").unlink()  # as if killed after the last checkpoint
    again = train(env, PuppeteerPolicy(env.pool, FAST, seed=0), cfg, tmp_path)
    assert again.episodes == 300 and again.update == state.update
    assert (tmp_path / "trajectories.jsonl").read_text().splitlines() == lines
    assert (tmp_path / "final" / "policy.pt").read_bytes() == final


def test_a_run_killed_before_its_first_checkpoint_starts_clean(tmp_path: Path) -> None:
    """Issue 33: the lines a run wrote before it was killed (no checkpoint yet) were kept and the
    restarted run appended its own: episodes counted twice by analytics."""
    from puppeteer.train.logging import JsonlLogger

    env = _env("train")
    cfg = ReinforceConfig(episodes=128, batch_episodes=64, group_size=4, eval_every=1000, seed=0)
    clean = train(
        env,
        PuppeteerPolicy(env.pool, FAST, seed=0),
        cfg,
        tmp_path / "clean",
        logger=JsonlLogger(tmp_path / "clean.jsonl"),
    )
    run = tmp_path / "killed"
    run.mkdir()
    (run / "trajectories.jsonl").write_text('{"left": "by the killed run"}\n' * 64)
    (tmp_path / "killed.jsonl").write_text('{"step": 64, "train/return": 0.5}\n')
    state = train(
        env, PuppeteerPolicy(env.pool, FAST, seed=0), cfg, run, logger=JsonlLogger(tmp_path / "killed.jsonl")
    )
    assert state.episodes == clean.episodes == 128
    assert (run / "trajectories.jsonl").read_text() == (tmp_path / "clean" / "trajectories.jsonl").read_text()
    assert (tmp_path / "killed.jsonl").read_text() == (tmp_path / "clean.jsonl").read_text()


def test_the_state_reads_who_is_on_offer() -> None:
    """Issue 29: the mask used to only block logits, so "stop or call again" could not depend on who is
    available. It now enters the state through weights of its own, zero at the start (an untrained
    scorer is unchanged) and trainable: then the Terminator's logit moves with the offer."""
    env = _env()
    policy = PuppeteerPolicy(env.pool, FAST, seed=0)
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    narrower = {**obs, "mask": np.array(obs["mask"]).copy()}
    narrower["mask"][[1, 2, 3]] = 0
    term = env.pool.terminator_id

    def terminator_logit(o: dict) -> float:
        return float(policy.logits([policy.features(o)])[0, term])

    assert terminator_logit(obs) == terminator_logit(narrower)  # zero weights: no effect yet
    with torch.no_grad():
        policy.scorer.mask_in.weight.normal_()
    assert terminator_logit(obs) != terminator_logit(narrower)
    assert policy.scorer.mask_in.weight.requires_grad


def test_task_dims_projects_the_question_onto_the_training_tasks_top_directions(tmp_path: Path) -> None:
    """task_dims=k: after fit_inputs the scorer reads a rank-k view of the question, so two questions
    that differ only outside the training tasks' top k directions get the same logits; saved and
    loaded with the policy; refused below 1."""
    env = _env()
    policy = PuppeteerPolicy(env.pool, replace(FAST, task_dims=2), seed=0)
    questions = [t.question for t in env.tasks]
    policy.fit_inputs(questions)
    scorer = policy.scorer
    proj = scorer.task_proj
    assert torch.linalg.matrix_rank(proj).item() == 2
    assert torch.allclose(proj @ proj, proj, atol=1e-4)  # an orthogonal projection
    emb = torch.as_tensor(policy.encoder.encode(questions[:2]), dtype=torch.float32)
    z = (emb - scorer.task_shift) * scorer.task_scale
    outside = z[1] - z[1] @ proj  # the part of question 1 that the projection drops
    moved = emb[0] + outside / scorer.task_scale  # question 0 plus that part, in raw embedding space
    n = env.pool.n_actions
    args = (
        torch.zeros(1, emb.shape[1]),
        torch.zeros(1, dtype=torch.long),
        torch.zeros(1, n),
        torch.ones(1, n),
    )
    with torch.no_grad():
        a = scorer(emb[:1], *args)
        b = scorer(moved[None], *args)
    assert torch.allclose(a, b, atol=1e-4)
    full = PuppeteerPolicy(env.pool, FAST, seed=0)
    full.fit_inputs(questions)
    with torch.no_grad():
        assert not torch.allclose(full.scorer(emb[:1], *args), full.scorer(moved[None], *args), atol=1e-4)
    loaded = PuppeteerPolicy.load(policy.save(tmp_path / "p"), env.pool, encoder=policy.encoder)
    assert loaded.config.task_dims == 2 and torch.equal(loaded.scorer.task_proj, proj)
    with pytest.raises(ValueError, match="task_dims"):
        PolicyConfig(task_dims=0)


def test_by_kind_reads_the_question_only_as_its_nearest_training_kind(tmp_path: Path) -> None:
    """by_kind: after fit_inputs with the tasks' domains, every question is read as its kind's mean
    training question (the kind a classifier fitted on the training items gives: the suite's named
    kind on at least 95% of held-out items), so the questions of a kind get one set of logits and
    different kinds differ; saved and loaded with the policy; refused beside task_dims."""
    from puppeteer.tasks import load_suite

    env = _env()
    train_tasks, test_tasks = load_suite("mix-local", "train", n=200), load_suite("mix-local", "test", n=80)
    policy = PuppeteerPolicy(env.pool, replace(FAST, encoder="minilm", by_kind=True), seed=0)
    kinds = list(dict.fromkeys(t.domain for t in train_tasks))
    assert len(kinds) == 4
    policy.fit_inputs([t.question for t in train_tasks], [t.domain for t in train_tasks])
    scorer = policy.scorer
    assert int(scorer.kind_count) == 4
    emb = torch.as_tensor(policy.encoder.encode([t.question for t in test_tasks]), dtype=torch.float32)
    with torch.no_grad():
        read = scorer.as_kind(scorer.standardized(emb))
    centroids = scorer.kind_centroids[:4]
    which = [int(torch.nonzero((centroids == row).all(dim=1))[0]) for row in read]
    right = sum(kinds[k] == t.domain for k, t in zip(which, test_tasks, strict=True))
    assert right >= 0.95 * len(test_tasks)
    assert which == scorer.kind_of(scorer.standardized(emb)).tolist()
    n = env.pool.n_actions
    args = (
        torch.zeros(len(emb), emb.shape[1]),
        torch.zeros(len(emb), dtype=torch.long),
        torch.zeros(len(emb), n),
        torch.ones(len(emb), n),
    )
    with torch.no_grad():
        logits = scorer(emb, *args)
    for k in range(4):
        rows = logits[[i for i, w in enumerate(which) if w == k]]
        assert torch.allclose(rows, rows[:1].expand_as(rows), atol=1e-5)  # one reading per kind
    assert len({tuple(torch.round(r, decimals=4).tolist()) for r in logits}) == 4
    loaded = PuppeteerPolicy.load(policy.save(tmp_path / "p"), env.pool, encoder=policy.encoder)
    assert loaded.config.by_kind
    for key in ("kind_centroids", "kind_w", "kind_b", "kind_count"):
        assert torch.equal(getattr(loaded.scorer, key), getattr(scorer, key))
    with pytest.raises(ValueError, match="by_kind"):
        PolicyConfig(by_kind=True, task_dims=8)
    with pytest.raises(ValueError, match="domains"):
        policy.fit_inputs([t.question for t in train_tasks])


@pytest.mark.learning
def test_the_entropy_bonus_decays_to_its_final_fraction(tmp_path: Path) -> None:
    """trainer.entropy_final_fraction: the bonus's weight falls linearly from entropy_coef to that
    fraction of it. A bonus this strong held constant keeps the policy near uniform; decayed to
    nothing, the same run commits (the policy's entropy at the end is far lower)."""
    from puppeteer.train.reinforce import entropy_coef

    cfg = ReinforceConfig(entropy_coef=0.05, entropy_final_fraction=0.1)
    assert [entropy_coef(cfg, f) for f in (0.0, 0.5, 1.0)] == pytest.approx([0.05, 0.0275, 0.005])
    assert entropy_coef(ReinforceConfig(entropy_coef=0.05), 1.0) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="entropy_final_fraction"):
        ReinforceConfig(entropy_final_fraction=-0.1)
    ends = []
    for final in (1.0, 0.0):
        env = ConductorEnv(
            mode="step", pool="sim-paper", suite="arith", split="train", max_steps=1, min_steps=1
        )
        policy = PuppeteerPolicy(env.pool, replace(FAST, max_steps=1, min_steps=1), seed=0)
        cfg = ReinforceConfig(
            episodes=1536, batch_episodes=64, lr=0.01, entropy_coef=0.3, entropy_final_fraction=final, seed=0
        )
        state = train(env, policy, cfg, tmp_path / f"final{final:g}")
        ends.append(state.history[-1]["train/entropy"])
    uniform = float(np.log(10))  # ten agents on offer
    assert ends[0] > 0.9 * uniform  # measured 2.17 of 2.30
    assert ends[1] < 0.75 * ends[0]  # measured 1.38
