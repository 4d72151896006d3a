"""Wrappers that let outside RL libraries (SB3, sb3-contrib, CleanRL-style code, RLlib) use ``Conductor-v0``.

The step-mode observation is a ``Dict`` holding text (the task and the transcript); these
libraries want one numeric array. :class:`EncodedObservation` turns it into a fixed-size
``Box`` with the project's frozen text encoders (``hashing``: no model, microseconds;
``minilm``: the packaged all-MiniLM-L6-v2), laid out as

    [ enc(task) | enc(last part of the transcript) | mask | one-hot(step) | counts / max_steps
      | signals (with ``signals=True``: the answer signals of :mod:`puppeteer.tasks.signals`)
      | lambda (with ``lam_range=(low, high)``: ``obs["lam"]`` as :meth:`LamRange.features` reads it) ]

With ``lam_range``, :func:`make_encoded_env` also gives the env that range, so each episode draws its
own lambda and one model learns every price::

    env = make_encoded_env(pool="sim-routing", suite="mix-routing", lam_range=(0.01, 0.5))

``action_masks()`` stays reachable through any stack of wrappers (``get_wrapper_attr``),
which is what sb3-contrib's ``MaskablePPO`` asks for::

    env = make_encoded_env(pool="sim-paper", suite="arith", encoder="hashing")
    model = MaskablePPO("MlpPolicy", env).learn(4096)

:class:`ObservationEncoder` is the same encoding as a plain function, for code that
drives the raw env itself (see :class:`puppeteer.policies.external.MaskableModelPolicy`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from puppeteer.envs.encoders import TextEncoder, make_encoder
from puppeteer.envs.lam_range import N_LAM_FEATURES, LamRange
from puppeteer.tasks.signals import N_SIGNALS

log = logging.getLogger(__name__)

STATE_WINDOW = 500  # the same window as the puppeteer policy: the latest part of the transcript


def _state_window(state: str) -> str:
    return state[-STATE_WINDOW:] if state else "(nothing yet)"


class ObservationEncoder:
    """Maps step-mode observations to float32 vectors of length :attr:`dim`."""

    def __init__(
        self,
        encoder: TextEncoder,
        n_actions: int,
        max_steps: int,
        signals: bool = False,
        lam_range: LamRange | tuple[float, float] | None = None,
    ) -> None:
        self.encoder = encoder
        self.n_actions = n_actions
        self.max_steps = max_steps
        self.signals = signals
        self.lam_range = LamRange.of(lam_range)
        self._base = 2 * encoder.dim + 2 * n_actions + max_steps + 1
        self._lam_at = self._base + (N_SIGNALS if signals else 0)
        self.dim = self._lam_at + (N_LAM_FEATURES if self.lam_range is not None else 0)

    @property
    def space(self) -> spaces.Box:
        return spaces.Box(low=-1.0, high=1.0, shape=(self.dim,), dtype=np.float32)

    def encode_batch(self, observations: Sequence[dict[str, Any]]) -> np.ndarray:
        texts = [t for o in observations for t in (str(o["task"]), _state_window(str(o["state"])))]
        emb = self.encoder.encode(texts) if texts else np.zeros((0, self.encoder.dim), np.float32)
        out = np.zeros((len(observations), self.dim), dtype=np.float32)
        d, n = self.encoder.dim, self.n_actions
        for i, o in enumerate(observations):
            step = min(int(o["step"]), self.max_steps)
            out[i, :d] = emb[2 * i]
            out[i, d : 2 * d] = emb[2 * i + 1]
            out[i, 2 * d : 2 * d + n] = np.asarray(o["mask"], dtype=np.float32)
            out[i, 2 * d + n + step] = 1.0
            counts = np.asarray(o["counts"], np.float32) / self.max_steps
            out[i, 2 * d + n + self.max_steps + 1 : self._base] = counts
            if self.signals:
                out[i, self._base : self._lam_at] = np.asarray(o["signals"], np.float32)
            if self.lam_range is not None:
                lam = float(np.asarray(o["lam"], dtype=np.float64).reshape(-1)[0])
                out[i, self._lam_at :] = self.lam_range.features(lam)
        return np.clip(out, -1.0, 1.0)

    def __call__(self, obs: dict[str, Any]) -> np.ndarray:
        return self.encode_batch([obs])[0]


def _step_env(env: gym.Env[Any, Any]) -> Any:
    from puppeteer.envs.env import ConductorEnv

    base = env.unwrapped
    if not isinstance(base, ConductorEnv):
        raise TypeError(f"EncodedObservation wraps Conductor-v0, got {type(base).__name__}")
    if base.config.mode != "step":
        raise ValueError("EncodedObservation needs mode='step' (workflow actions are text, not ids)")
    return base


class EncodedObservation(gym.ObservationWrapper[np.ndarray, Any, dict[str, Any]]):
    """Step-mode ``Conductor-v0`` with a ``Box`` observation; ``action_masks()`` passes through."""

    def __init__(
        self,
        env: gym.Env[dict[str, Any], Any],
        encoder: str | TextEncoder = "hashing",
        signals: bool = False,
        lam_range: LamRange | tuple[float, float] | None = None,
        **encoder_options: Any,
    ) -> None:
        super().__init__(env)
        base = _step_env(env)
        text_encoder = make_encoder(encoder, **encoder_options) if isinstance(encoder, str) else encoder
        self.encoder = ObservationEncoder(
            text_encoder, base.pool.n_actions, base.config.max_steps, signals, lam_range
        )
        self.observation_space = self.encoder.space

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        return self.encoder(observation)

    def action_masks(self) -> np.ndarray:
        """Valid actions now, from the innermost env that has them (MaskablePPO's convention)."""
        return np.asarray(self.env.get_wrapper_attr("action_masks")(), dtype=bool)


def make_encoded_env(
    encoder: str | TextEncoder = "hashing",
    encoder_options: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    signals: bool = False,
    lam_range: tuple[float, float] | None = None,
    torch_threads: int | None = 1,
    invalid_action: str = "remap",
    **env_kwargs: Any,
) -> EncodedObservation:
    """``gym.make("Conductor-v0", mode="step", **env_kwargs)`` wrapped in :class:`EncodedObservation`;
    ``lam_range``: the env draws each episode's lambda from it and the observation carries it.

    What SB3 users expect without flags:

    * ``invalid_action="remap"``: a masked action (the Terminator before ``min_steps`` agents acted)
      goes to the next allowed one, so algorithms that ignore masks (PPO, A2C, DQN, SB3's
      ``check_env``) run; MaskablePPO never picks one, so nothing changes for it. ``"raise"``: the
      env's own default (:class:`~puppeteer.errors.InvalidAction`).
    * ``torch_threads=1``: torch's intra-op threads set to 1 unless ``OMP_NUM_THREADS`` says otherwise
      (small networks on small batches: torch's default threads made MaskablePPO 13-20x slower on two
      cores, same results); ``None`` leaves torch as it is.
    """
    if lam_range is not None:
        env_kwargs["lam_range"] = lam_range
    if torch_threads is not None:
        one_torch_thread(torch_threads)
    if "config" not in env_kwargs:  # a typed config carries its own invalid_action
        env_kwargs["invalid_action"] = invalid_action
    env = gym.make("Conductor-v0", mode="step", max_episode_steps=max_episode_steps, **env_kwargs)
    return EncodedObservation(env, encoder, signals=signals, lam_range=lam_range, **(encoder_options or {}))


def one_torch_thread(n: int = 1) -> int:
    """Set torch's intra-op threads to ``n`` (or to ``OMP_NUM_THREADS`` where the user set it); the count
    now. Logged (INFO) when it changes torch's count."""
    import torch

    given = os.environ.get("OMP_NUM_THREADS", "")
    wanted = int(given) if given.strip().isdigit() and int(given) > 0 else n
    before = torch.get_num_threads()
    if before != wanted:
        torch.set_num_threads(wanted)
        log.info("torch intra-op threads: %d -> %d (small RL networks run fastest on few)", before, wanted)
    return wanted


__all__ = ["EncodedObservation", "ObservationEncoder", "make_encoded_env", "one_torch_thread"]
