"""The step-wise orchestrator: a frozen sentence encoder plus a small trained scorer.

logit(s, a) = MLP([h(s), g(e_a), h(s) * g(e_a)]) where h encodes the task text, the
transcript so far, the step number, who has acted and who is on offer (the availability mask:
whether to stop or call again can depend on it), and e_a is a trainable embedding of agent a
initialised from its description. Unavailable agents are also masked out of the logits.
With ``PolicyConfig.surface``, h(s) also reads the question's length and number count
(:mod:`puppeteer.surface`). With ``PolicyConfig.signals``, h(s) also reads the answer signals
z(s) of the steps so far (:mod:`puppeteer.signals`), and the logit gains a linear term
w_a . z(s): what a cascade needs. With ``PolicyConfig.lam_range`` (a policy for every price of
cost, issue 36), h(s) also reads the episode's lambda ``obs["lam"]`` (:mod:`puppeteer.lam_range`:
clamped into the trained range, two features, through first-layer weights of their own), and the
logit gains a bilinear term
(W l) . g(e_a): how far each agent's score moves with the price, read through the agent's own
representation.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from puppeteer.encoders import CachedEncoder, make_encoder
from puppeteer.lam_range import N_LAM_FEATURES, LamRange
from puppeteer.pool import Pool
from puppeteer.safeload import atomic_torch_save, safe_torch_load
from puppeteer.signals import N_SIGNALS
from puppeteer.surface import N_SURFACE, surface_features

log = logging.getLogger(__name__)

TERMINATOR_TEXT = "Terminator: stop the discussion now and submit the majority answer."
_NO_SURFACE = np.zeros(0, dtype=np.float32)
_NO_LAM = np.zeros(0, dtype=np.float32)
SCORER_LAYERS = ("norm", "tanh")
STATE_WINDOW = 500  # sentence encoders read ~256 tokens; the latest part of the transcript matters most


def state_window(state: str) -> str:
    return state[-STATE_WINDOW:] if state else "(nothing yet)"


@dataclass(frozen=True)
class PolicyConfig:
    encoder: str = "minilm"
    encoder_options: tuple[tuple[str, Any], ...] = ()
    hidden: int = 128
    max_steps: int = 5
    min_steps: int = 0  # the Terminator is never chosen before this many agents acted
    greedy: bool = False
    signals: bool = False  # also read obs["signals"] (puppeteer.signals: answered, whole number, agreement)
    surface: bool = False  # also read the question's surface features (puppeteer.surface: length, numbers)
    # the scorer's layers: "norm" (LayerNorm + GELU) or "tanh" (the first design; its head saturates
    # under REINFORCE's steps and then scores every task alike: docs/sim-routing.md)
    layers: str = "norm"
    # [low, high]: the policy reads the episode's lambda (obs["lam"]) and is used at any lambda in this
    # range (puppeteer.lam_range); None: a policy for the one lambda it was trained at
    lam_range: tuple[float, float] | None = None
    # k: the scorer reads the (standardised) question embedding projected onto its k principal
    # directions among the training tasks (fit_inputs): a low-rank view that cannot tell apart the
    # items of one kind, a prior towards routes that generalise; None: every direction ("norm" only)
    task_dims: int | None = None

    def __post_init__(self) -> None:
        if self.task_dims is not None and (self.task_dims < 1 or self.layers != "norm"):
            raise ValueError(f"policy.task_dims must be >= 1 (with layers=norm), got {self.task_dims}")
        if self.layers not in SCORER_LAYERS:
            raise ValueError(f"policy.layers: unknown {self.layers!r}; known: {', '.join(SCORER_LAYERS)}")
        lam_range = LamRange.of(self.lam_range)
        object.__setattr__(self, "lam_range", lam_range.bounds if lam_range is not None else None)


def agent_text(pool: Pool, i: int) -> str:
    a = pool.agent(i)
    tools = ", ".join(a.tools) or "no tools"
    return f"{a.name}: {a.description} (model {a.model.name}, pattern {a.pattern}, {tools})"


@dataclass(frozen=True)
class Features:
    """What the scorer needs from one observation (the encoder's work already done)."""

    task: np.ndarray
    state: np.ndarray
    step: int
    counts: np.ndarray
    mask: np.ndarray
    signals: np.ndarray  # puppeteer.signals.answer_signals of the steps so far (zeros if not read)
    surface: np.ndarray  # puppeteer.surface.surface_features of the question (empty if not read)
    lam: np.ndarray  # LamRange.features of the episode's lambda (empty if not read)


class Scorer(nn.Module):
    def __init__(
        self,
        dim: int,
        n_actions: int,
        max_steps: int,
        hidden: int,
        agent_init: np.ndarray,
        n_signals: int = 0,
        n_surface: int = 0,
        layers: str = "norm",
        n_lam: int = 0,
        task_dims: int | None = None,
    ) -> None:
        super().__init__()
        self.max_steps = max_steps
        self.n_signals = n_signals
        self.n_surface = n_surface
        self.n_lam = n_lam
        self.agent_emb = nn.Parameter(torch.as_tensor(agent_init, dtype=torch.float32).clone())
        state_in = 2 * dim + (max_steps + 1) + n_actions + n_signals + n_surface
        if layers == "tanh":
            self.state_net = nn.Sequential(nn.Linear(state_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden))
            self.head = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        else:
            # normalised inputs to each nonlinearity: the agent terms of the head cannot grow until
            # they drown the state's (the tanh design's failure), and GELU does not saturate
            self.state_net = nn.Sequential(
                nn.Linear(state_in, hidden),
                nn.Sequential(nn.LayerNorm(hidden), nn.GELU()),
                nn.Linear(hidden, hidden),
            )
            self.head = nn.Sequential(
                nn.LayerNorm(3 * hidden), nn.Linear(3 * hidden, hidden), nn.GELU(), nn.Linear(hidden, 1)
            )
        self.agent_net = nn.Linear(dim, hidden)
        # "norm" also standardises the task embedding per dimension (statistics of the training tasks,
        # set by PuppeteerPolicy.fit_inputs; identity until then): a frozen sentence encoder's vectors
        # share a large common direction, and the differences between questions that a router must
        # read were a few percent of the scorer's first layer
        self.standardize = layers == "norm"
        if self.standardize:
            self.register_buffer("task_shift", torch.zeros(dim))
            self.register_buffer("task_scale", torch.ones(dim))
        self.task_dims = task_dims
        if task_dims is not None:  # the projection onto the top task_dims directions (identity until fit)
            self.register_buffer("task_proj", torch.eye(dim))
        if n_signals:
            # the signals also move each action's logit directly: through the MLP alone, two states
            # that differ only in a few signal inputs saturate its tanh units before they separate
            self.signal_logits = nn.Linear(n_signals, n_actions, bias=False)
            nn.init.zeros_(self.signal_logits.weight)
        # who is on offer enters the state's first layer through weights of its own, zero at the start:
        # an untrained scorer (and the random draws of every other layer) is what it was before the
        # state read the mask, and the mask's effect is learned from nothing
        self.mask_in = nn.Linear(n_actions, hidden, bias=False)
        nn.init.zeros_(self.mask_in.weight)
        if n_lam:
            # the price enters the state's first layer through weights of its own, at their default
            # scale: among the hundreds of (standardised) text inputs of the first layer its two
            # features would weigh a few percent, and the policy would settle on one agent for every
            # lambda before learning where the price changes the choice
            self.lam_in = nn.Linear(n_lam, hidden, bias=False)
            # it also moves each action's logit through the agent's own representation,
            # (W l) . g(e_a): the return is linear in lambda, and a term per agent id would not carry
            # over to agents the policy has not seen. Zero at the start, like the mask's weights.
            self.lam_agent = nn.Linear(n_lam, hidden, bias=False)
            nn.init.zeros_(self.lam_agent.weight)

    def forward(
        self,
        task: torch.Tensor,
        state: torch.Tensor,
        step: torch.Tensor,
        counts: torch.Tensor,
        mask: torch.Tensor,
        signals: torch.Tensor | None = None,
        surface: torch.Tensor | None = None,
        lam: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Masked logits, shape (batch, n_actions)."""
        onehot = nn.functional.one_hot(step.clamp(max=self.max_steps), self.max_steps + 1).float()
        if self.standardize:
            task = (task - self.task_shift) * self.task_scale
        if self.task_dims is not None:
            task = task @ self.task_proj
        parts = [task, state, onehot, counts.float() / self.max_steps]
        if self.n_signals:
            if signals is None:
                raise ValueError(f"this scorer reads {self.n_signals} answer signals; none given")
            signals = signals.float()
            parts.append(signals)
        if self.n_surface:
            if surface is None:
                raise ValueError(f"this scorer reads {self.n_surface} surface features; none given")
            parts.append(surface.float())
        first, act, second = self.state_net
        pre = first(torch.cat(parts, dim=-1)) + self.mask_in(mask.float())
        if self.n_lam:
            if lam is None:
                raise ValueError(f"this scorer reads {self.n_lam} lambda features; none given")
            lam = lam.float()
            pre = pre + self.lam_in(lam)
        h = second(act(pre))
        g = self.agent_net(self.agent_emb)  # (A, hidden)
        hb = h[:, None, :].expand(-1, g.shape[0], -1)
        gb = g[None, :, :].expand(h.shape[0], -1, -1)
        logits = self.head(torch.cat([hb, gb, hb * gb], dim=-1)).squeeze(-1)
        if signals is not None and self.n_signals:
            logits = logits + self.signal_logits(signals)
        if lam is not None and self.n_lam:
            logits = logits + self.lam_agent(lam) @ g.T
        return logits.masked_fill(~mask.bool(), float("-inf"))


class PuppeteerPolicy:
    """Step-mode policy. ``act`` samples (or argmaxes) an action; ``log_probs`` re-scores for training."""

    name = "puppeteer"

    def __init__(
        self,
        pool: Pool,
        config: PolicyConfig = PolicyConfig(),
        encoder: CachedEncoder | None = None,
        seed: int = 0,
    ) -> None:
        self.pool = pool
        self.config = config
        self.encoder = encoder or make_encoder(config.encoder, **dict(config.encoder_options))
        texts = [agent_text(pool, i) for i in range(len(pool))] + [TERMINATOR_TEXT]
        torch.manual_seed(seed)
        self.scorer = Scorer(
            self.encoder.dim,
            pool.n_actions,
            config.max_steps,
            config.hidden,
            self.encoder.encode(texts),
            n_signals=N_SIGNALS if config.signals else 0,
            n_surface=N_SURFACE if config.surface else 0,
            layers=config.layers,
            n_lam=N_LAM_FEATURES if config.lam_range is not None else 0,
            task_dims=config.task_dims,
        )
        self._warned_lams: set[float] = set()  # lambdas outside the range already warned about

    @property
    def lam_range(self) -> LamRange | None:
        """The range of lambdas this policy was trained over (None: one fixed lambda)."""
        return LamRange.of(self.config.lam_range)

    def fit_inputs(self, texts: Sequence[str]) -> None:
        """Standardise the task embedding per dimension by these (training) tasks' statistics and,
        with ``task_dims``, project it onto their ``task_dims`` principal directions."""
        if not self.scorer.standardize or not texts:
            return
        emb = torch.as_tensor(self.encoder.encode(list(dict.fromkeys(texts))), dtype=torch.float32)
        with torch.no_grad():
            self.scorer.task_shift.copy_(emb.mean(dim=0))
            std = emb.std(dim=0) if len(emb) > 1 else torch.ones(emb.shape[1])
            self.scorer.task_scale.copy_(1.0 / (std + 1e-2 * float(std.mean()) + 1e-6))
            if self.scorer.task_dims is not None:
                z = (emb - self.scorer.task_shift) * self.scorer.task_scale
                _, _, vh = torch.linalg.svd(z, full_matrices=False)
                top = vh[: self.scorer.task_dims]  # (k, dim): the directions the training tasks vary most
                self.scorer.task_proj.copy_(top.T @ top)

    def __deepcopy__(self, memo: dict[int, Any]) -> PuppeteerPolicy:
        """A twin with its own scorer that shares the pool and the (frozen, cached) encoder.

        Concurrent evaluation gives every worker a deep copy; copying the pool's read-only maps
        fails and copying a sentence encoder would load it again per worker.
        """
        twin = object.__new__(type(self))
        memo[id(self)] = twin
        twin.__dict__.update(self.__dict__)
        twin.scorer = copy.deepcopy(self.scorer, memo)
        return twin

    # ------------------------------------------------------------------ features
    def features(self, obs: dict[str, Any]) -> Features:
        return self.features_batch([obs])[0]

    def features_batch(self, observations: Sequence[dict[str, Any]]) -> list[Features]:
        """Encode many observations with one encoder call (much faster than one by one)."""
        texts = [t for o in observations for t in (o["task"], state_window(o["state"]))]
        emb = self.encoder.encode(texts)
        return [
            Features(
                task=emb[2 * i],
                state=emb[2 * i + 1],
                step=int(o["step"]),
                counts=np.asarray(o["counts"], dtype=np.int64),
                mask=self._mask(o),
                signals=self._signals(o),
                surface=surface_features(o["task"]) if self.config.surface else _NO_SURFACE,
                lam=self._lam(o),
            )
            for i, o in enumerate(observations)
        ]

    def _signals(self, obs: dict[str, Any]) -> np.ndarray:
        if not self.config.signals:
            return np.zeros(N_SIGNALS, dtype=np.float32)
        if "signals" not in obs:
            raise KeyError("this policy reads obs['signals'] (PolicyConfig.signals); the obs has none")
        return np.asarray(obs["signals"], dtype=np.float32)

    def _lam(self, obs: dict[str, Any]) -> np.ndarray:
        lam_range = self.lam_range
        if lam_range is None:
            return _NO_LAM
        if "lam" not in obs:
            raise KeyError("this policy reads obs['lam'] (PolicyConfig.lam_range); the obs has none")
        lam = float(np.asarray(obs["lam"], dtype=np.float64).reshape(-1)[0])
        if not lam_range.contains(lam) and lam not in self._warned_lams:
            self._warned_lams.add(lam)  # once per value, not at every step of every episode
            lam_range.clamp(lam)  # logs the warning
        return lam_range.features(lam)

    def _mask(self, obs: dict[str, Any]) -> np.ndarray:
        mask = np.array(obs["mask"], dtype=bool)
        if int(obs["step"]) < self.config.min_steps and mask[:-1].any():
            mask[-1] = False  # the Terminator is the last action
        return mask

    @staticmethod
    def batch(feats: Sequence[Features]) -> tuple[torch.Tensor, ...]:
        return (
            torch.as_tensor(np.stack([f.task for f in feats])),
            torch.as_tensor(np.stack([f.state for f in feats])),
            torch.as_tensor([f.step for f in feats], dtype=torch.long),
            torch.as_tensor(np.stack([f.counts for f in feats])),
            torch.as_tensor(np.stack([f.mask for f in feats])),
            torch.as_tensor(np.stack([f.signals for f in feats])),
            torch.as_tensor(np.stack([f.surface for f in feats])),
            torch.as_tensor(np.stack([f.lam for f in feats])),
        )

    def logits(self, feats: Sequence[Features]) -> torch.Tensor:
        return self.scorer(*self.batch(feats))

    # ------------------------------------------------------------------ acting
    def reset(self, task_id: str) -> None:  # stateless between steps: the observation carries the state
        return None

    def choose(
        self, feats: Features, generator: torch.Generator | None = None, greedy: bool | None = None
    ) -> int:
        return self.choose_batch([feats], generator, greedy)[0]

    def choose_batch(
        self, feats: Sequence[Features], generator: torch.Generator | None = None, greedy: bool | None = None
    ) -> list[int]:
        with torch.no_grad():
            logits = self.logits(feats)
        if self.config.greedy if greedy is None else greedy:
            return [int(a) for a in torch.argmax(logits, dim=-1)]
        probs = torch.softmax(logits, dim=-1)
        return [int(a) for a in torch.multinomial(probs, 1, generator=generator)[:, 0]]

    def act(self, obs: dict[str, Any], rng: np.random.Generator) -> int:
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        return self.choose(self.features(obs), gen)

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        atomic_torch_save(self.scorer.state_dict(), d / "policy.pt")
        config = asdict(self.config)
        for key in ("lam_range", "task_dims"):  # unset: the file is what it was before the setting
            if config[key] is None:
                del config[key]
        meta = {
            "config": config,
            "pool": self.pool.name,
            "agents": [a.name for a in self.pool.agents],
        }
        (d / "policy.json").write_text(json.dumps(meta, indent=2))
        return d

    @classmethod
    def load(cls, directory: str | Path, pool: Pool, encoder: CachedEncoder | None = None) -> PuppeteerPolicy:
        d = Path(directory)
        meta = json.loads((d / "policy.json").read_text())
        if meta["agents"] != [a.name for a in pool.agents]:
            raise ValueError(f"policy was trained on agents {meta['agents']}, pool {pool.name!r} differs")
        raw = meta["config"]
        raw["encoder_options"] = tuple(tuple(x) for x in raw.get("encoder_options", ()))
        raw.setdefault("layers", "tanh")  # saved before the scorer's layers were a choice
        policy = cls(pool, PolicyConfig(**raw), encoder=encoder)
        policy.scorer.load_state_dict(safe_torch_load(d / "policy.pt"))
        return policy
