"""Step policies trained by outside RL libraries, runnable like any other policy (spec ``sb3:DIR``).

A directory written by :func:`save_sb3` holds ``model.zip`` (an sb3 / sb3-contrib model) and
``puppeteer.json`` (the algorithm, the observation encoder and the pool's agents), so
``puppeteer eval --policy sb3:DIR``, ``puppeteer run --policy sb3:DIR`` and ``puppeteer serve``
apply it. ``scripts/train_maskable_ppo.py`` writes one.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from puppeteer.encoders import make_encoder
from puppeteer.pool import Pool
from puppeteer.wrappers import ObservationEncoder

META_FILE = "puppeteer.json"
MODEL_FILE = "model.zip"
ALGORITHMS = {  # name -> "module:Class"; loaded only when used
    "MaskablePPO": "sb3_contrib:MaskablePPO",
    "PPO": "stable_baselines3:PPO",
    "A2C": "stable_baselines3:A2C",
    "DQN": "stable_baselines3:DQN",
}


class Predictor(Protocol):
    def predict(self, observation: np.ndarray, *args: Any, **kwargs: Any) -> tuple[Any, Any]: ...


@dataclass(frozen=True)
class SB3Meta:
    algorithm: str
    encoder: str
    max_steps: int
    agents: tuple[str, ...]
    encoder_options: dict[str, Any] = field(default_factory=dict)
    signals: bool = False  # the observation ends in the answer signals (absent in older files: False)


class MaskableModelPolicy:
    """Wraps a model with ``predict(obs, action_masks=..., deterministic=...)`` as a StepPolicy."""

    def __init__(
        self,
        model: Predictor,
        encoder: ObservationEncoder,
        name: str = "sb3",
        deterministic: bool = True,
        masked: bool = True,
    ) -> None:
        self.model, self.encoder, self.name = model, encoder, name
        self.deterministic, self.masked = deterministic, masked

    def reset(self, task_id: str) -> None:
        return None

    def act(self, obs: dict[str, Any], rng: np.random.Generator) -> int:
        kwargs: dict[str, Any] = {"deterministic": self.deterministic}
        if self.masked:
            kwargs["action_masks"] = np.asarray(obs["mask"], dtype=bool)
        action, _ = self.model.predict(self.encoder(obs), **kwargs)
        return int(np.asarray(action).reshape(()))


def save_sb3(
    model: Any,
    directory: str | Path,
    pool: Pool,
    encoder: str,
    max_steps: int,
    encoder_options: dict[str, Any] | None = None,
    signals: bool = False,
) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    model.save(d / MODEL_FILE)
    meta = SB3Meta(
        type(model).__name__,
        encoder,
        max_steps,
        tuple(a.name for a in pool.agents),
        dict(encoder_options or {}),
        signals,
    )
    (d / META_FILE).write_text(json.dumps(asdict(meta), indent=2) + "\n")
    return d


def load_sb3(directory: str | Path, pool: Pool) -> MaskableModelPolicy:
    d = Path(directory)
    if not (d / META_FILE).is_file():
        raise FileNotFoundError(f"no sb3 policy in {d} (expected {META_FILE} and {MODEL_FILE})")
    raw = json.loads((d / META_FILE).read_text())
    meta = SB3Meta(**{**raw, "agents": tuple(raw["agents"])})
    if list(meta.agents) != [a.name for a in pool.agents]:
        raise ValueError(f"policy was trained on agents {list(meta.agents)}, pool {pool.name!r} differs")
    if meta.algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {meta.algorithm!r}; known: {', '.join(ALGORITHMS)}")
    module, _, cls = ALGORITHMS[meta.algorithm].partition(":")
    try:
        algo = getattr(importlib.import_module(module), cls)
    except ImportError as e:
        raise ImportError(f"{meta.algorithm} needs: pip install 'puppeteer-orchestra[rl]'") from e
    model = algo.load(d / MODEL_FILE, device="cpu")
    encoder = ObservationEncoder(
        make_encoder(meta.encoder, **meta.encoder_options), pool.n_actions, meta.max_steps, meta.signals
    )
    return MaskableModelPolicy(model, encoder, name=f"sb3:{d}", masked=meta.algorithm == "MaskablePPO")


__all__ = ["ALGORITHMS", "MaskableModelPolicy", "SB3Meta", "load_sb3", "save_sb3"]
