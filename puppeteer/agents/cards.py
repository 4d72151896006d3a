"""Agent cards: a compact, measured description of each agent of a pool.

A card says what a router needs to weigh an agent it has never seen: the agent's price (mean US
cents per call), its single-stream speed (completion tokens per second of its calls) and its
accuracy per domain on a small calibration split of a suite (never its test items).
``puppeteer pool cards NAME`` measures them through the env (:mod:`puppeteer.jobs.cards`) and
writes ``<pool>.cards.json`` beside the pool's YAML, where :func:`puppeteer.agents.pool.load_pool` finds
it (``Pool.cards``). A policy with ``PolicyConfig.cards`` reads each agent's card as numbers
(:meth:`PoolCards.features`, standardised by the training pool's statistics, :func:`card_scale`)
beside its text, so that an agent's score depends on what it is, not on its position in the pool.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

CARDS_SUFFIX = ".cards.json"
CARD_VERSION = 1
# the standardisation's floor on a feature's spread across the training pool: a column on which the
# training agents nearly agree must not turn a new agent's small difference into a huge input
SCALE_FLOOR = 0.05
# the features before the accuracies; the price per call itself (not its log) is what the return
# charges (lambda x cents), so a scorer may read it linearly (PRICE_LINEAR: its index)
PRICE_SPEED = ("ln cents per call", "cents per call", "ln tokens per s")
PRICE_LINEAR = 1
# where every card has it (pools that declare their models' speeds): the model time of a call, what a
# `minutes` cost model charges (lambda x minutes), read as its log and itself, before the accuracies
MODEL_TIME = ("ln model s per call", "model minutes per call")


class CardError(ValueError):
    """A cards file is malformed, or lacks an agent that a policy needs."""


@dataclass(frozen=True)
class AgentCard:
    """One agent as measured: price, speed and accuracy per domain (with the items behind each)."""

    name: str
    cents_per_call: float  # mean US cents per call on the calibration items
    tokens_per_s: float  # completion tokens per second of its calls (single stream)
    accuracy: Mapping[str, float]  # per domain: share of calibration items answered right
    items: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # per domain
    # mean single-stream model seconds per call at the pool's declared speeds (None: no declared speeds)
    seconds_per_call: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cents_per_call": self.cents_per_call,
            "tokens_per_s": self.tokens_per_s,
            "accuracy": dict(self.accuracy),
            "items": dict(self.items),
            **({"seconds_per_call": self.seconds_per_call} if self.seconds_per_call is not None else {}),
        }


@dataclass(frozen=True)
class PoolCards:
    """Every agent's card, and where they were measured (suite, split, items per domain)."""

    pool: str
    suite: str
    split: str
    per_domain: int
    domains: tuple[str, ...]
    cards: tuple[AgentCard, ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.cards]
        if len(set(names)) != len(names):
            raise CardError(f"cards of pool {self.pool!r}: agent names repeat: {names}")
        for c in self.cards:
            missing = [d for d in self.domains if d not in c.accuracy]
            if missing:
                raise CardError(f"card of {c.name!r} lacks the accuracy of domain(s) {missing}")

    @property
    def timed(self) -> bool:
        """Whether every card states its model time per call (the features then include it)."""
        return bool(self.cards) and all(c.seconds_per_call is not None for c in self.cards)

    @property
    def feature_names(self) -> tuple[str, ...]:
        return (*PRICE_SPEED, *(MODEL_TIME if self.timed else ()), *(f"accuracy {d}" for d in self.domains))

    @property
    def cost_features(self) -> tuple[int, ...]:
        """The indices of the features a return charges per call, which a scorer reads linearly: the
        price (lambda x cents) and, on timed cards, the model minutes (lambda x minutes; a local pool's
        calls cost no money, so its price column is zero for every agent)."""
        return (PRICE_LINEAR, *((len(PRICE_SPEED) + 1,) if self.timed else ()))

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    def card(self, name: str) -> AgentCard:
        for c in self.cards:
            if c.name == name:
                return c
        raise CardError(
            f"no card for agent {name!r} (pool {self.pool!r}; cards: {[c.name for c in self.cards]}); "
            f"measure it: puppeteer pool cards --pool {self.pool} --suite {self.suite}"
        )

    def features(self, names: Sequence[str]) -> np.ndarray:
        """Raw numeric features of the named agents, shape ``(len(names), n_features)``: ln price,
        price, ln speed (:data:`PRICE_SPEED`), where every card has it the model time per call
        (:data:`MODEL_TIME`), then the accuracy per domain (in ``domains`` order)."""
        rows = []
        timed = self.timed
        for name in names:
            c = self.card(name)
            seconds = c.seconds_per_call or 0.0
            rows.append(
                [
                    math.log(max(c.cents_per_call, 1e-6)),
                    c.cents_per_call,
                    math.log(max(c.tokens_per_s, 1e-3)),
                    *((math.log(max(seconds, 1e-3)), seconds / 60.0) if timed else ()),
                    *(float(c.accuracy[d]) for d in self.domains),
                ]
            )
        return np.asarray(rows, dtype=np.float32).reshape(len(names), self.n_features)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": CARD_VERSION,
            "pool": self.pool,
            "suite": self.suite,
            "split": self.split,
            "per_domain": self.per_domain,
            "domains": list(self.domains),
            "cards": [c.to_dict() for c in self.cards],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PoolCards:
        try:
            if int(raw.get("version", CARD_VERSION)) != CARD_VERSION:
                raise CardError(f"cards version {raw.get('version')!r}; this puppeteer reads {CARD_VERSION}")
            return cls(
                pool=str(raw["pool"]),
                suite=str(raw["suite"]),
                split=str(raw["split"]),
                per_domain=int(raw["per_domain"]),
                domains=tuple(str(d) for d in raw["domains"]),
                cards=tuple(
                    AgentCard(
                        name=str(c["name"]),
                        cents_per_call=float(c["cents_per_call"]),
                        tokens_per_s=float(c["tokens_per_s"]),
                        accuracy=MappingProxyType({str(k): float(v) for k, v in c["accuracy"].items()}),
                        items=MappingProxyType({str(k): int(v) for k, v in (c.get("items") or {}).items()}),
                        seconds_per_call=(
                            float(c["seconds_per_call"]) if c.get("seconds_per_call") is not None else None
                        ),
                    )
                    for c in raw["cards"]
                ),
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise CardError(f"not a cards file ({type(e).__name__}: {e})") from None

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return p

    @classmethod
    def load(cls, path: str | Path) -> PoolCards:
        p = Path(path)
        try:
            raw = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CardError(f"{p}: not JSON ({e})") from None
        try:
            return cls.from_dict(raw)
        except CardError as e:
            raise CardError(f"{p}: {e}") from None


def cards_path(pool_file: str | Path) -> Path:
    """Where the cards of the pool defined in ``pool_file`` live: beside it, ``<stem>.cards.json``."""
    p = Path(pool_file)
    return p.with_name(p.stem + CARDS_SUFFIX)


def card_scale(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shift and scale that standardise each feature over these agents (the training pool's):
    ``(x - shift) * scale``; the spread is floored at :data:`SCALE_FLOOR`."""
    x = np.asarray(raw, dtype=np.float64)
    shift = x.mean(axis=0)
    spread = x.std(axis=0) if len(x) > 1 else np.zeros(x.shape[1])
    return shift.astype(np.float32), (1.0 / (spread + SCALE_FLOOR)).astype(np.float32)


__all__ = [
    "CARDS_SUFFIX",
    "PRICE_LINEAR",
    "PRICE_SPEED",
    "AgentCard",
    "CardError",
    "PoolCards",
    "card_scale",
    "cards_path",
]
