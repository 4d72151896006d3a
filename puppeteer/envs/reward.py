"""Rewards for both tracks and the cost models behind them.

Conductor: 0 unparsable, 0.5 parsed but wrong, 1 correct, optionally minus lambda*cost.
Puppeteer: the return satisfies R_T = r - lambda*C_T and R_t = gamma*R_{t+1} - lambda*C_t
with C_t = F*log(1 + t/phi). The env pays -lambda*C_t at each non-final step and
r - lambda*C_T at the last one, so the gamma-discounted sum of its rewards from t is R_t.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from puppeteer.types import Completion, ModelSpec

CostFn = Callable[[Completion, ModelSpec], float]


def _minutes(c: Completion, model: ModelSpec) -> float:
    seconds = model.model_seconds(c.prompt_tokens, c.completion_tokens)
    if seconds is None:
        raise ValueError(
            f"cost model 'minutes' needs prefill_tps and decode_tps for model {model.name!r} in the pool "
            "(measure them with `puppeteer pool calibrate`)"
        )
    return seconds / 60.0


# F for one call (the completion and the model that made it), in units that make lambda ~ 0.1
# meaningful: thousands of tokens, TFLOPs (2 * params * tokens / 1e12), US cents, or minutes of
# single-stream model time at the pool's declared speed (ModelSpec.model_seconds).
COST_MODELS: Mapping[str, CostFn] = MappingProxyType(
    {
        "tokens": lambda c, m: c.total_tokens / 1000.0,
        "flops": lambda c, m: c.flops / 1e12,
        "usd": lambda c, m: (c.cost_usd or 0.0) * 100.0,
        "minutes": _minutes,
    }
)


AUTO = "auto"  # the cost model a pool's declarations support best (auto_cost_model)


def auto_cost_model(models: Iterable[ModelSpec]) -> str:
    """``usd`` when every model has a price, else ``minutes`` when every model declares its speeds,
    else ``tokens``: the price of quality in the units the pool can state."""
    specs = list(models)
    if specs and all(m.price_in > 0 or m.price_out > 0 for m in specs):
        return "usd"
    if specs and all(m.prefill_tps and m.decode_tps for m in specs):
        return "minutes"
    return "tokens"


# what one unit of each cost model is, in words (the conductor's price line states lambda per unit)
COST_UNITS: Mapping[str, str] = MappingProxyType(
    {
        "tokens": "1,000 tokens (prompt and completion, all agents)",
        "flops": "TFLOP of the agents' compute",
        "usd": "US cent of the agents' price",
        "minutes": "minute of the agents' model time",
    }
)


# cost models that price a call by the model's declared single-stream speed
NEEDS_SPEED = frozenset({"minutes"})


def check_cost_model(name: str, models: Iterable[ModelSpec]) -> CostFn:
    """The cost model ``name``, checked against the models it will price: fails early (ValueError)
    when it needs speeds some of ``models`` lack (KeyError when the name is unknown)."""
    fn = cost_model(name)
    if name in NEEDS_SPEED:
        missing = sorted({m.name for m in models if not m.has_speed})
        if missing:
            raise ValueError(
                f"cost model {name!r} needs prefill_tps and decode_tps in the pool for: {', '.join(missing)} "
                "(measure them with `puppeteer pool calibrate`)"
            )
    return fn


def cost_model(name: str) -> CostFn:
    try:
        return COST_MODELS[name]
    except KeyError:
        raise KeyError(f"unknown cost model {name!r}; known: {', '.join(COST_MODELS)}") from None


_UNDECLARED = ModelSpec(name="conductor", backend="", target="", params_b=0.0)


def conductor_cost(name: str, completion: Completion, model: ModelSpec | None = None) -> float:
    """F of the conductor's own generation under cost model ``name``: priced like a worker's call
    (``model``: the conductor's, where given); under ``minutes`` without declared speeds, the seconds
    the backend reported for it (``latency_s``)."""
    spec = model if model is not None else _UNDECLARED
    if name in NEEDS_SPEED and not spec.has_speed:
        return completion.latency_s / 60.0
    return cost_model(name)(completion, spec)


def conductor_reward(parsed: bool, correct: bool, cost: float = 0.0, lam: float = 0.0) -> float:
    base = 0.0 if not parsed else (1.0 if correct else 0.5)
    return base - lam * cost if parsed else base


def step_cost(f: float, t: int, phi: float) -> float:
    """C_t = F * log(1 + t/phi) for the t-th activation (t starts at 1)."""
    if phi <= 0:
        raise ValueError("phi must be positive")
    return f * math.log1p(t / phi)


@dataclass(frozen=True)
class PuppeteerReward:
    lam: float = 0.1
    gamma: float = 0.99
    phi: float = 5.0
    correct_reward: float = 1.0
    wrong_reward: float = 0.0

    def step_reward(self, f: float, t: int) -> float:
        """Reward paid for a non-final activation."""
        return -self.lam * step_cost(f, t, self.phi)

    def final_reward(self, correct: bool, f: float, t: int) -> float:
        """Reward paid at the last step (``f = 0`` when the episode ends by the Terminator)."""
        r = self.correct_reward if correct else self.wrong_reward
        return r - self.lam * step_cost(f, t, self.phi)


def discounted_return(rewards: Sequence[float], gamma: float) -> float:
    """R_0 of :func:`discounted_returns` (the same sums in the same order), 0.0 for no rewards."""
    acc = 0.0
    for r in reversed(rewards):
        acc = r + gamma * acc
    return acc


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """R_t = r_t + gamma * R_{t+1}, computed backwards."""
    out = [0.0] * len(rewards)
    acc = 0.0
    for i in reversed(range(len(rewards))):
        acc = rewards[i] + gamma * acc
        out[i] = acc
    return out
