from __future__ import annotations

import math

import pytest

from puppeteer.envs.aggregate import last_answer, majority_vote
from puppeteer.envs.reward import PuppeteerReward, conductor_reward, discounted_returns, step_cost
from puppeteer.types import Completion, ModelSpec


def test_conductor_reward_levels() -> None:
    assert conductor_reward(parsed=False, correct=False) == 0.0
    assert conductor_reward(parsed=True, correct=False) == 0.5
    assert conductor_reward(parsed=True, correct=True) == 1.0
    assert conductor_reward(parsed=True, correct=True, cost=2.0, lam=0.1) == pytest.approx(0.8)
    assert conductor_reward(parsed=False, correct=False, cost=2.0, lam=0.1) == 0.0


def test_step_cost_matches_formula() -> None:
    # C_t = F * log(1 + t/phi): F = 2.0, t = 3, phi = 5 -> 2 * ln(1.6)
    assert step_cost(2.0, 3, 5.0) == pytest.approx(2.0 * 0.47000362924573558)
    with pytest.raises(ValueError):
        step_cost(1.0, 1, 0.0)


def test_puppeteer_returns_follow_the_recursion_by_hand() -> None:
    rw = PuppeteerReward(lam=0.1, gamma=0.9, phi=2.0)
    # three activations costing F = 1, 2, 1.5, then the Terminator, correct answer
    r1 = rw.step_reward(1.0, 1)  # -0.1 * 1 * ln(1.5)
    r2 = rw.step_reward(2.0, 2)  # -0.1 * 2 * ln(2)
    r3 = rw.step_reward(1.5, 3)  # -0.1 * 1.5 * ln(2.5)
    rT = rw.final_reward(True, 0.0, 3)  # Terminator costs nothing: 1
    assert r1 == pytest.approx(-0.1 * math.log(1.5))
    assert r2 == pytest.approx(-0.2 * math.log(2.0))
    assert rT == 1.0
    G = discounted_returns([r1, r2, r3, rT], 0.9)
    # R_T = 1; R_3 = 0.9*1 - 0.15 ln 2.5; R_2 = 0.9 R_3 - 0.2 ln 2; R_1 = 0.9 R_2 - 0.1 ln 1.5
    R3 = 0.9 * 1.0 - 0.15 * math.log(2.5)
    R2 = 0.9 * R3 - 0.2 * math.log(2.0)
    R1 = 0.9 * R2 - 0.1 * math.log(1.5)
    assert G == pytest.approx([R1, R2, R3, 1.0])
    assert rw.final_reward(False, 1.0, 1) == pytest.approx(-0.1 * math.log(1.5))


def test_cost_models() -> None:
    from puppeteer.envs.reward import cost_model

    c = Completion("x", 600, 400, cost_usd=0.02, flops=3e12, latency_s=1.0, model="m")
    m = ModelSpec("m", "llamacpp", "m", params_b=1.5, prefill_tps=60.0, decode_tps=8.0)
    assert cost_model("tokens")(c, m) == pytest.approx(1.0)
    assert cost_model("flops")(c, m) == pytest.approx(3.0)
    assert cost_model("usd")(c, m) == pytest.approx(2.0)
    # 600 prompt tokens at 60/s + 400 completion tokens at 8/s = 10 s + 50 s = one minute
    assert cost_model("minutes")(c, m) == pytest.approx(1.0)
    with pytest.raises(KeyError, match="known"):
        cost_model("joules")


def test_minutes_cost_needs_declared_speeds() -> None:
    from puppeteer.envs.reward import check_cost_model, cost_model

    fast = ModelSpec("fast", "llamacpp", "f", params_b=0.5, prefill_tps=100.0, decode_tps=20.0)
    bare = ModelSpec("bare", "llamacpp", "b", params_b=0.5)
    assert bare.model_seconds(10, 10) is None
    assert fast.model_seconds(100, 20) == pytest.approx(2.0)
    check_cost_model("minutes", [fast])
    check_cost_model("tokens", [bare])  # only 'minutes' needs speeds
    with pytest.raises(ValueError, match="bare"):
        check_cost_model("minutes", [fast, bare])
    with pytest.raises(ValueError, match="bare"):
        cost_model("minutes")(Completion("x", 1, 1, 0.0, 0.0, 0.0, "b"), bare)
    with pytest.raises(ValueError, match="positive"):
        ModelSpec("neg", "llamacpp", "n", params_b=0.5, decode_tps=0.0)


def test_majority_vote_and_tie_break() -> None:
    assert majority_vote(["3", "4", "3", None]) == "3"
    assert majority_vote(["3", "4"]) == "4"  # tie: the most recent answer wins
    assert majority_vote(["4", "3", "3", "4"]) == "4"
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None
    assert last_answer(["1", "2", None]) == "2"
    assert last_answer([None]) is None
