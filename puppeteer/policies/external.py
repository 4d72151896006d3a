"""Step policies trained by outside RL libraries, runnable like any other policy (spec ``sb3:DIR``).

A directory written by :func:`save_sb3` holds ``model.zip`` (an sb3 / sb3-contrib model) and
``puppeteer.json`` (the algorithm, the observation encoder and the pool's agents), so
``puppeteer eval --policy sb3:DIR``, ``puppeteer run --policy sb3:DIR`` and ``puppeteer serve``
apply it. :func:`puppeteer.train.sb3.train_maskable_ppo` writes one.
"""

from __future__ import annotations

import importlib
import json
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from puppeteer.agents.pool import Pool
from puppeteer.envs.encoders import make_encoder
from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.wrappers import ObservationEncoder

META_FILE = "puppeteer.json"
MODEL_FILE = "model.zip"
# algorithm -> "module:PolicyClass" of its network (what ``model.policy`` is); loaded only when used
ALGORITHMS = {
    "MaskablePPO": "sb3_contrib.common.maskable.policies:MaskableActorCriticPolicy",
    "PPO": "stable_baselines3.common.policies:ActorCriticPolicy",
    "A2C": "stable_baselines3.common.policies:ActorCriticPolicy",
    "DQN": "stable_baselines3.dqn.policies:DQNPolicy",
}
POLICY_WEIGHTS = "policy.pth"  # inside model.zip: the network's state dict, a plain tensor file
# network settings that may be read from the zip's JSON ``data`` (never its pickled entries)
ARCH_KEYS = ("net_arch", "share_features_extractor", "ortho_init")
MAX_LAYERS, MAX_WIDTH = 16, 4096  # net_arch bounds: a few thousand units a layer is already large
MAX_STEPS = 256  # the observation has one input per step index


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
    min_steps: int = 0  # the Terminator was masked until this many agents acted (absent in older files: 0)
    # trained over a range of lambdas, read from ``obs["lam"]`` (absent in older files: one lambda)
    lam_range: tuple[float, float] | None = None


class MaskableModelPolicy:
    """Wraps a model with ``predict(obs, action_masks=..., deterministic=...)`` as a StepPolicy.

    When the encoder reads lambda (``ObservationEncoder(lam_range=...)``), :attr:`lam_range` tells
    ``eval --lam``, ``run --lam`` and ``serve`` (a request's own ``lam``) that it routes at any price in
    that range; a lambda outside it is clamped, with one warning per value.
    """

    def __init__(
        self,
        model: Predictor,
        encoder: ObservationEncoder,
        name: str = "sb3",
        deterministic: bool = True,
        masked: bool = True,
        min_steps: int = 0,
    ) -> None:
        self.model, self.encoder, self.name = model, encoder, name
        self.deterministic, self.masked, self.min_steps = deterministic, masked, min_steps
        self._warned_lams: set[float] = set()

    @property
    def lam_range(self) -> LamRange | None:
        """The lambdas the model was trained over (None: the one lambda of its training)."""
        return self.encoder.lam_range

    def reset(self, task_id: str) -> None:
        return None

    def act(self, obs: dict[str, Any], rng: np.random.Generator) -> int:
        kwargs: dict[str, Any] = {"deterministic": self.deterministic}
        if self.masked:
            mask = np.array(obs["mask"], dtype=bool)
            if int(obs["step"]) < self.min_steps and mask[:-1].any():
                mask[-1] = False  # as in training: the Terminator waits for min_steps agents
            kwargs["action_masks"] = mask
        lam_range = self.lam_range
        if lam_range is not None:
            lam = float(np.asarray(obs["lam"], dtype=np.float64).reshape(-1)[0])
            if not lam_range.contains(lam) and lam not in self._warned_lams:
                self._warned_lams.add(lam)  # once per value, not at every step
                lam_range.clamp(lam)  # logs the warning; the encoder clamps the features
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
    min_steps: int = 0,
    lam_range: LamRange | tuple[float, float] | None = None,
) -> Path:
    trained_range = LamRange.of(lam_range)
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
        min_steps,
        trained_range.bounds if trained_range is not None else None,
    )
    (d / META_FILE).write_text(json.dumps(asdict(meta), indent=2) + "\n")
    return d


class UnsafePolicyFile(ValueError):
    """A policy file that could only be loaded by running code from it (unpickling)."""


def _policy_kwargs(zf: zipfile.ZipFile, where: Path) -> dict[str, Any]:
    """The network settings of the zip's ``data`` entry, read as JSON; pickled values are refused."""
    try:
        data = json.loads(zf.read("data"))
    except (KeyError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    raw = data.get("policy_kwargs") if isinstance(data, dict) else None
    if raw is None:
        return {}
    if not isinstance(raw, dict) or ":serialized:" in raw:
        raise UnsafePolicyFile(
            f"{where}: its policy_kwargs are pickled Python objects; puppeteer never unpickles policy "
            "files (that runs code). Train with default or JSON-only policy_kwargs and save with save_sb3"
        )
    kwargs = {k: raw[k] for k in ARCH_KEYS if k in raw}
    if "net_arch" in kwargs:
        _check_arch(kwargs["net_arch"], where)
    return kwargs


def _check_arch(arch: Any, where: Path) -> None:
    """``net_arch``: at most :data:`MAX_LAYERS` layers of 1..:data:`MAX_WIDTH` units (a list, or
    ``{"pi": [...], "vf": [...]}``); a network of 200,000-unit layers is refused before it is built."""
    parts = list(arch.values()) if isinstance(arch, dict) else [arch]
    for sizes in parts:
        if (
            not isinstance(sizes, list)
            or len(sizes) > MAX_LAYERS
            or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_WIDTH for n in sizes)
        ):
            raise ValueError(
                f"{where}: policy_kwargs.net_arch must list at most {MAX_LAYERS} layer widths in "
                f"1..{MAX_WIDTH}, got {arch!r:.80}"
            )


def _read_meta(path: Path) -> dict[str, Any]:
    """``puppeteer.json`` of an sb3 policy, each field's type and bounds checked (one line naming it)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a JSON file ({type(e).__name__})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: must be a JSON object of settings")
    known = set(SB3Meta.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    missing = sorted(k for k in ("algorithm", "encoder", "max_steps", "agents") if k not in raw)
    if unknown or missing:
        what = f"unknown setting {unknown[0]!r}" if unknown else f"no {missing[0]!r}"
        raise ValueError(f"{path}: {what}; settings: {', '.join(sorted(known))}")
    checks: dict[str, tuple[Any, str]] = {
        "algorithm": (lambda v: isinstance(v, str), "a string"),
        "encoder": (lambda v: isinstance(v, str), "a string"),
        "max_steps": (lambda v: _whole(v, 1, MAX_STEPS), f"a whole number in 1..{MAX_STEPS}"),
        "min_steps": (lambda v: _whole(v, 0, MAX_STEPS), f"a whole number in 0..{MAX_STEPS}"),
        "agents": (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), "a list of names"),
        "encoder_options": (lambda v: isinstance(v, dict), "an object"),
        "signals": (lambda v: isinstance(v, bool), "true or false"),
    }
    for key, (ok, what) in checks.items():
        if key in raw and not ok(raw[key]):
            raise ValueError(f"{path}: {key} must be {what}, got {raw[key]!r:.40}")
    return raw


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _read_weights(zf: zipfile.ZipFile, where: Path) -> dict[str, Any]:
    import io

    import torch

    try:
        blob = zf.read(POLICY_WEIGHTS)
    except KeyError:
        raise ValueError(f"{where} has no {POLICY_WEIGHTS}: not a stable-baselines3 model file") from None
    try:
        return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    except Exception as e:  # weights_only refuses anything but tensors and plain containers
        raise UnsafePolicyFile(f"{where}: {POLICY_WEIGHTS} is not a plain tensor file ({e})") from None


def load_sb3(directory: str | Path, pool: Pool) -> MaskableModelPolicy:
    """An ``sb3:DIR`` policy, loaded without unpickling anything from the directory.

    The network is built anew from ``puppeteer.json`` (algorithm, observation encoder, agents) and
    the zip's JSON settings, and its weights come from the zip's ``policy.pth`` through
    ``torch.load(weights_only=True)``. SB3's own ``load`` would unpickle the zip's ``data``
    (cloudpickle: a crafted file runs code), so it is never called.
    """
    d = Path(directory)
    if not (d / META_FILE).is_file() or not (d / MODEL_FILE).is_file():
        raise FileNotFoundError(
            f"no sb3 policy in {d}: expected {META_FILE} and {MODEL_FILE}; save a model with "
            "puppeteer.policies.external.save_sb3(model, DIR, pool, encoder, max_steps), which writes both"
        )
    raw = _read_meta(d / META_FILE)
    trained_range = LamRange.of(raw.get("lam_range"))  # a JSON list back to checked bounds
    bounds = trained_range.bounds if trained_range is not None else None
    meta = SB3Meta(**{**raw, "agents": tuple(raw["agents"]), "lam_range": bounds})
    if list(meta.agents) != [a.name for a in pool.agents]:
        raise ValueError(f"policy was trained on agents {list(meta.agents)}, pool {pool.name!r} differs")
    if meta.algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {meta.algorithm!r}; known: {', '.join(ALGORITHMS)}")
    module, _, cls = ALGORITHMS[meta.algorithm].partition(":")
    try:
        policy_cls = getattr(importlib.import_module(module), cls)
    except ImportError as e:
        raise ImportError(f"{meta.algorithm} needs: pip install 'puppeteer-orchestra[rl]'") from e
    from gymnasium import spaces

    encoder = ObservationEncoder(
        make_encoder(meta.encoder, **meta.encoder_options),
        pool.n_actions,
        meta.max_steps,
        meta.signals,
        meta.lam_range,
    )
    try:
        zf = zipfile.ZipFile(d / MODEL_FILE)
    except zipfile.BadZipFile:
        raise ValueError(f"{d / MODEL_FILE} is not a zip file") from None
    with zf:
        kwargs = _policy_kwargs(zf, d / MODEL_FILE)
        weights = _read_weights(zf, d / MODEL_FILE)
    network = policy_cls(encoder.space, spaces.Discrete(pool.n_actions), lambda _: 0.0, **kwargs)
    try:
        network.load_state_dict(weights, strict=True)
    except RuntimeError as e:
        first = str(e).splitlines()[0]
        raise ValueError(
            f"{d / MODEL_FILE}: the weights do not fit a {meta.algorithm} network ({first})"
        ) from None
    network.set_training_mode(False)
    return MaskableModelPolicy(
        network, encoder, name=f"sb3:{d}", masked=meta.algorithm == "MaskablePPO", min_steps=meta.min_steps
    )


__all__ = ["ALGORITHMS", "MaskableModelPolicy", "SB3Meta", "UnsafePolicyFile", "load_sb3", "save_sb3"]
