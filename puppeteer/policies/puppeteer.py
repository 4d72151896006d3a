"""The step-wise orchestrator: a frozen sentence encoder plus a small trained scorer.

logit(s, a) = MLP([h(s), g(e_a), h(s) * g(e_a)]) where h encodes the task text, the
transcript so far, the step number, who has acted and who is on offer (the availability mask:
whether to stop or call again can depend on it), and e_a is a trainable embedding of agent a
initialised from its description. Unavailable agents are also masked out of the logits.
With ``PolicyConfig.surface``, h(s) also reads the question's length and number count
(:mod:`puppeteer.envs.surface`). With ``PolicyConfig.signals``, h(s) also reads the answer signals
z(s) of the steps so far (:mod:`puppeteer.tasks.signals`), and the logit gains a linear term
w_a . z(s): what a cascade needs. With ``PolicyConfig.lam_range`` (a policy for every price of
cost), h(s) also reads the episode's lambda ``obs["lam"]`` (:mod:`puppeteer.envs.lam_range`:
clamped into the trained range, two features, through first-layer weights of their own), and the
logit gains a bilinear term
(W l) . g(e_a): how far each agent's score moves with the price, read through the agent's own
representation.
With ``PolicyConfig.cards`` (agents it has never seen), e_a is the agent's text
embedding, frozen, beside its measured card (:mod:`puppeteer.agents.cards`: price, speed, accuracy per
domain, standardised by the training pool's statistics), and no parameter belongs to an agent id:
the counts of who has acted move each action's logit through one shared weight, the state does not
read the availability mask (unavailable agents are still masked out of the logits), the signals move
the logits through the agent's representation, and the logit gains a bilinear term (V h) . c_a
that reads the card's price per call linearly, and a term w(h) * acc_a(s): the agent's measured
accuracy on the question's domain, the domain read by a classifier fitted on the training
questions' domains (:meth:`PuppeteerPolicy.fit_inputs`), weighed per state. The whole card (every
domain's accuracy) is also part of the agent's representation g(e_a). An agent's score depends only
on its text and card, so the policy scores agents added after training
(:meth:`PuppeteerPolicy.with_pool`). With ``PolicyConfig.cards_linear`` the agent enters only
through the price and domain-accuracy terms (no text, no MLP over the agent).
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from torch import nn

from puppeteer.agents.cards import PRICE_LINEAR, card_scale
from puppeteer.agents.pool import Pool
from puppeteer.envs.encoders import CachedEncoder, hashing_encoder, make_encoder
from puppeteer.envs.lam_range import N_LAM_FEATURES, LamRange
from puppeteer.envs.surface import N_SURFACE, surface_features
from puppeteer.policies.policy_file import read_policy_file
from puppeteer.tasks.signals import N_SIGNALS
from puppeteer.utils.safeload import atomic_torch_save, safe_torch_load

log = logging.getLogger(__name__)

TERMINATOR_TEXT = "Terminator: stop the discussion now and submit the majority answer."
_NO_SURFACE = np.zeros(0, dtype=np.float32)
_NO_LAM = np.zeros(0, dtype=np.float32)
SCORER_LAYERS = ("norm", "tanh")
MAX_HIDDEN = 1024  # the scorer's width: its head has 3 * hidden**2 weights (1024: 3 million)
MAX_POLICY_STEPS = 256  # the scorer has one input per step index
LATER_INPUTS = ("all", "question", "signals")  # PolicyConfig.later_inputs
STATE_WINDOW = 500  # sentence encoders read ~256 tokens; the latest part of the transcript matters most


def state_window(state: str) -> str:
    return state[-STATE_WINDOW:] if state else "(nothing yet)"


# what embeds the transcript, given the question's encoder (PolicyConfig.state_encoder)
STATE_ENCODERS: Mapping[str, Callable[[CachedEncoder], CachedEncoder]] = MappingProxyType(
    {"same": lambda encoder: encoder, "hashing": lambda encoder: hashing_encoder(dim=encoder.dim)}
)


@dataclass(frozen=True)
class PolicyConfig:
    encoder: str = "minilm"
    encoder_options: tuple[tuple[str, Any], ...] = ()
    # what embeds the transcript: "same" (the question's encoder) or "hashing" (hashed n-grams at the
    # question encoder's dimension: every episode's transcript is new text, so a sentence model would
    # run once per decision, while the question is embedded once per item and cached)
    state_encoder: str = "same"
    hidden: int = 128
    max_steps: int = 5
    min_steps: int = 0  # the Terminator is never chosen before this many agents acted
    greedy: bool = False
    signals: bool = (
        False  # also read obs["signals"] (puppeteer.tasks.signals: answered, whole number, agreement,
    )
    # the visible checks' verdicts: the env runs them for a policy that reads the signals)
    surface: bool = (
        False  # also read the question's surface features (puppeteer.envs.surface: length, numbers)
    )
    # the scorer's layers: "norm" (LayerNorm + GELU) or "tanh" (the first design; its head saturates
    # under REINFORCE's steps and then scores every task alike: experiments/sim-routing/README.md)
    layers: str = "norm"
    # [low, high]: the policy reads the episode's lambda (obs["lam"]) and is used at any lambda in this
    # range (puppeteer.envs.lam_range); None: a policy for the one lambda it was trained at
    lam_range: tuple[float, float] | None = None
    # k: the scorer reads the (standardised) question embedding projected onto its k principal
    # directions among the training tasks (fit_inputs): a low-rank view that cannot tell apart the
    # items of one kind, a prior towards routes that generalise; None: every direction ("norm" only)
    task_dims: int | None = None
    # read each agent's measured card (Pool.cards, puppeteer.agents.cards) and keep no parameter per agent id:
    # a policy that scores agents it has never seen ("norm" only)
    cards: bool = False
    # with cards: an agent enters the score only through its card's price per call and its accuracy on
    # the question's domain (no text, no MLP over the agent): what transfers to a new agent by
    # construction, and nothing that the cards do not say (experiments/unseen-agents/README.md)
    cards_linear: bool = False
    # with cards: whether the agent's text embedding enters the agent's representation beside its card
    # (false: the agent is its card, so a new agent is scored by what was measured, not by its name)
    cards_text: bool = True
    # with cards: while training, every update reads each standardised card feature plus Gaussian noise
    # of this spread (a fresh draw per update; acting and evaluation read the measured card): a scorer
    # cannot learn the few training agents' exact cards by heart, only what varies smoothly with them
    card_noise: float = 0.0
    # with cards (not cards_linear): in each training update, each agent's MLP term (the score beyond
    # the linear cost and domain-accuracy terms) is dropped with this probability, so the linear terms
    # must rank the agents on their own and the MLP learns corrections to them; an agent the policy was
    # not trained with gets no MLP term at all (its card's terms only), a training agent always has it
    rest_dropout: float = 0.0
    # a linear term per action on the step and on who has acted (zero at the start): the decision after
    # a call gets agent preferences of its own beside the MLP's agent terms, which every step shares
    step_logits: bool = False
    # with step_logits: the Terminator's starting logit at every step after the first (0: none), so a
    # router starts out stopping after one call rather than judging each first agent by a random second
    stop_prior: float = 0.0
    # a second scorer, with weights of its own, for every decision after the first: what is learned
    # about calling again cannot move the first choice (measured on local-mix: it did not stop the first
    # choice collapsing onto one agent either; experiments/local-mix/README.md, section 6)
    step_heads: bool = False
    # with step_heads: the first decision's scorer is laid out as a one-call router's (max_steps 1, no
    # signals, no step terms: nothing it would read at the first step), so a trained one-call router's
    # weights can make that decision (trainer.init_first) while the decisions after a call are learned
    one_call_first: bool = False
    # with step_heads, what the decisions after a call read: "all"; "question" (not the transcript's
    # embedding); "signals" (neither the question nor the transcript: the step, who has acted, who is on
    # offer and the answer signals). The narrower, the more what is learned after a call is a rule over
    # the signals and who acted, shared by every item alike, rather than a memory of each training item
    later_inputs: str = "all"

    def __post_init__(self) -> None:
        _whole("hidden", self.hidden, 1, MAX_HIDDEN)
        _whole("max_steps", self.max_steps, 1, MAX_POLICY_STEPS)
        _whole("min_steps", self.min_steps, 0, MAX_POLICY_STEPS)
        if self.task_dims is not None:
            _whole("task_dims", self.task_dims, 1, MAX_HIDDEN)
        for name in ("card_noise", "rest_dropout", "stop_prior"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"policy.{name} must be a finite number, got {value!r:.40}")
        if not isinstance(self.encoder, str):
            raise ValueError(f"policy.encoder must be an encoder name, got {self.encoder!r:.40}")
        if self.state_encoder not in STATE_ENCODERS:
            known = ", ".join(STATE_ENCODERS)
            raise ValueError(f"policy.state_encoder: unknown {self.state_encoder!r:.40}; known: {known}")
        if self.cards and self.layers != "norm":
            raise ValueError("policy.cards needs policy.layers=norm")
        if self.cards_linear and not self.cards:
            raise ValueError("policy.cards_linear needs policy.cards")
        if (not self.cards_text or self.card_noise) and not self.cards:
            raise ValueError("policy.cards_text and policy.card_noise need policy.cards")
        if self.card_noise < 0:
            raise ValueError(f"policy.card_noise must be >= 0, got {self.card_noise}")
        if self.step_logits and self.cards:
            raise ValueError("policy.step_logits is for policies without policy.cards")
        if self.step_heads and self.cards:
            raise ValueError("policy.step_heads is for policies without policy.cards")
        if self.one_call_first and not self.step_heads:
            raise ValueError(
                "policy.one_call_first lays out step_heads' first scorer: it needs policy.step_heads"
            )
        if self.later_inputs not in LATER_INPUTS:
            raise ValueError(
                f"policy.later_inputs: unknown {self.later_inputs!r}; known: {', '.join(LATER_INPUTS)}"
            )
        if self.later_inputs != "all" and not self.step_heads:
            raise ValueError(
                "policy.later_inputs narrows step_heads' later scorer: set policy.step_heads too"
            )
        if self.stop_prior and not self.step_logits:
            raise ValueError(
                "policy.stop_prior is the step term's starting value: it needs policy.step_logits"
            )
        if self.rest_dropout and (not self.cards or self.cards_linear):
            raise ValueError("policy.rest_dropout needs policy.cards without policy.cards_linear")
        if not 0 <= self.rest_dropout < 1:
            raise ValueError(f"policy.rest_dropout must be in [0, 1), got {self.rest_dropout}")
        if self.task_dims is not None and (self.task_dims < 1 or self.layers != "norm"):
            raise ValueError(f"policy.task_dims must be >= 1 (with layers=norm), got {self.task_dims}")
        if self.layers not in SCORER_LAYERS:
            raise ValueError(f"policy.layers: unknown {self.layers!r}; known: {', '.join(SCORER_LAYERS)}")
        lam_range = LamRange.of(self.lam_range)
        object.__setattr__(self, "lam_range", lam_range.bounds if lam_range is not None else None)


def _whole(name: str, value: Any, low: int, high: int) -> None:
    """A whole number in ``low..high`` (a bool or a float is refused), else ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"policy.{name} must be a whole number in {low}..{high}, got {value!r:.40}")


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
    signals: np.ndarray  # puppeteer.tasks.signals.answer_signals of the steps so far (zeros if not read)
    surface: np.ndarray  # puppeteer.envs.surface.surface_features of the question (empty if not read)
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
        cards: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        n_domains: int = 0,
        cards_linear: bool = False,
        cards_text: bool = True,
        card_noise: float = 0.0,
        cost_features: Sequence[int] = (PRICE_LINEAR,),
        rest_dropout: float = 0.0,
        step_logits: bool = False,
        stop_prior: float = 0.0,
    ) -> None:
        """``cards``: the agents' raw card features (agents x features, the Terminator excluded) and
        the shift and scale that standardise them (:func:`puppeteer.agents.cards.card_scale`); its last
        ``n_domains`` features are the accuracies per domain. ``cards_text``: the agent's text beside
        its card; ``card_noise``: the spread of the noise on the standardised card in gradient steps;
        ``cost_features``: the card features a return charges per call (read linearly);
        ``rest_dropout``: the chance that an agent's MLP term is dropped in a training update (and
        the MLP term only for the agents marked known, :meth:`set_agents`); ``step_logits``: a linear
        term per action on the step's one-hot and the calls so far (no cards), the Terminator's
        starting at ``stop_prior`` on every step after the first."""
        super().__init__()
        self.max_steps = max_steps
        self.n_signals = n_signals
        self.n_surface = n_surface
        self.n_lam = n_lam
        self.n_card = 0 if cards is None else int(cards[0].shape[1])
        self.cards_linear = cards_linear
        self.cards_text = cards_text or cards is None
        self.card_noise = card_noise
        self.rest_dropout = rest_dropout
        # (PolicyConfig.step_heads) the scorer of every step after the first, set by its policy
        self.later: Scorer | None = None
        if cards is None:
            self.agent_emb = nn.Parameter(torch.as_tensor(agent_init, dtype=torch.float32).clone())
        else:
            raw, shift, scale = cards
            self.register_buffer("card_shift", torch.as_tensor(shift, dtype=torch.float32).clone())
            self.register_buffer("card_scale", torch.as_tensor(scale, dtype=torch.float32).clone())
            self.set_agents(agent_init, raw)
        # with cards, who has acted enters through one shared weight per action instead (count_logit)
        state_in = 2 * dim + (max_steps + 1) + (0 if self.n_card else n_actions) + n_signals + n_surface
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
        # a card is read as its standardised features and a Terminator indicator (n_card + 1 numbers)
        self.agent_net = nn.Linear(
            (dim if self.cards_text else 0) + (self.n_card + 1 if self.n_card else 0), hidden
        )
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
        self.step_logits = None
        if step_logits:
            if self.n_card:
                raise ValueError("step_logits is for scorers without cards")
            self.step_logits = nn.Linear(max_steps + 1 + n_actions, n_actions, bias=False)
            nn.init.zeros_(self.step_logits.weight)
            with torch.no_grad():  # the Terminator's weight on the step one-hot of steps 1..max_steps
                self.step_logits.weight[n_actions - 1, 1 : max_steps + 1] = stop_prior
        if n_signals and not self.n_card:
            # the signals also move each action's logit directly: through the MLP alone, two states
            # that differ only in a few signal inputs saturate its tanh units before they separate
            self.signal_logits = nn.Linear(n_signals, n_actions, bias=False)
            nn.init.zeros_(self.signal_logits.weight)
        if n_signals and self.n_card:  # the same, through the agent's representation: (W z) . g(e_a)
            self.signal_agent = nn.Linear(n_signals, hidden, bias=False)
            nn.init.zeros_(self.signal_agent.weight)
        if self.n_card:
            # what the return charges per call (the price, lambda x cents; on timed cards also the model
            # minutes, lambda x minutes) and the Terminator indicator, read linearly per state,
            # (V h) . c_a. Not the other features: among a few training agents they measure general
            # strength (frontier models lead every domain, are slower and cost more), and read linearly
            # they held a specialist, strong on one domain and cheap, below a generalist on the
            # specialist's own domain (measured: experiments/unseen-agents/README.md)
            self.card_linear = [*cost_features, self.n_card]
            self.card_logits = nn.Linear(hidden, len(self.card_linear), bias=False)
            nn.init.zeros_(self.card_logits.weight)
            self.count_logit = nn.Parameter(torch.zeros(1))
            # the card's accuracy on the question's domain, weighed per state: p(domain | question) from
            # a classifier on the standardised question (fitted by PuppeteerPolicy.fit_inputs; uniform
            # until then), and one weight w(h) for whichever agents are on offer
            self.n_domains = n_domains
            self.register_buffer("domain_w", torch.zeros(dim, n_domains))
            self.register_buffer("domain_b", torch.zeros(n_domains))
            self.match_logit = nn.Linear(hidden, 1)
            nn.init.zeros_(self.match_logit.weight)
            nn.init.zeros_(self.match_logit.bias)
        else:
            # who is on offer enters the state's first layer through weights of its own, zero at the
            # start: an untrained scorer (and the random draws of every other layer) is what it was
            # before the state read the mask, and the mask's effect is learned from nothing
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

    def set_agents(
        self, agent_init: np.ndarray, card_raw: np.ndarray, known: Sequence[bool] | None = None
    ) -> None:
        """(Cards only.) The agents this scorer scores: their text embeddings (the Terminator's last)
        and raw card features (agents only), and which agents it was trained with (``known``, agents
        only; default all; read with ``rest_dropout``); none is a parameter or saved with the weights."""
        text = torch.as_tensor(agent_init, dtype=torch.float32).clone()
        raw = torch.as_tensor(card_raw, dtype=torch.float32).clone()
        if raw.ndim != 2 or raw.shape[0] != text.shape[0] - 1:
            raise ValueError(f"{text.shape[0] - 1} agents but card features of shape {tuple(raw.shape)}")
        if hasattr(self, "card_shift") and raw.shape[1] != self.card_shift.shape[0]:
            n = self.card_shift.shape[0]
            raise ValueError(f"cards of {raw.shape[1]} features; this scorer reads {n}")
        self.register_buffer("agent_text", text, persistent=False)
        self.register_buffer("agent_card", raw, persistent=False)
        flags = [True] * raw.shape[0] if known is None else [bool(k) for k in known]
        if len(flags) != raw.shape[0]:
            raise ValueError(f"{raw.shape[0]} agents but {len(flags)} known flags")
        self.register_buffer("agent_known", torch.as_tensor([*flags, True]), persistent=False)

    def card_inputs(self) -> torch.Tensor:
        """(Cards only.) Per action: the standardised card and a Terminator indicator, (A + 1, n + 1);
        with ``card_noise``, plus noise wherever gradients flow (a training update), never when acting."""
        std = (self.agent_card - self.card_shift) * self.card_scale
        if self.card_noise and torch.is_grad_enabled():
            std = std + self.card_noise * torch.randn_like(std)
        cards = torch.cat([std, torch.zeros(1, std.shape[1])], dim=0)
        terminator = torch.zeros(cards.shape[0], 1)
        terminator[-1] = 1.0
        return torch.cat([cards, terminator], dim=-1)

    def standardized(self, task: torch.Tensor) -> torch.Tensor:
        return (task - self.task_shift) * self.task_scale if self.standardize else task

    def domain_accuracy(self, task: torch.Tensor, card: torch.Tensor | None = None) -> torch.Tensor:
        """(Cards only.) Each action's standardised card accuracy on the question's domain, (batch, A + 1)
        (the Terminator's: 0), under the domain classifier's probabilities. ``card``: the card inputs
        to read (one forward pass reads one draw of the noise); default :meth:`card_inputs`."""
        p = torch.softmax(self.standardized(task) @ self.domain_w + self.domain_b, dim=-1)
        card = self.card_inputs() if card is None else card
        acc = card[:, self.n_card - self.n_domains : self.n_card]  # (A + 1, D)
        return p @ acc.T

    def agents(self, card: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """g(e_a) for every action (A + 1, hidden), and the card inputs (None without cards)."""
        if not self.n_card:
            return self.agent_net(self.agent_emb), None
        card = self.card_inputs() if card is None else card
        parts = [self.agent_text, card] if self.cards_text else [card]
        return self.agent_net(torch.cat(parts, dim=-1)), card

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
        """Masked logits, shape (batch, n_actions) (``later``, when set, is called by the policy)."""
        onehot = nn.functional.one_hot(step.clamp(max=self.max_steps), self.max_steps + 1).float()
        card = self.card_inputs() if self.n_card else None  # one draw of the noise for the whole pass
        matched = self.domain_accuracy(task, card) if card is not None and self.n_domains else None
        task = self.standardized(task)
        if self.task_dims is not None:
            task = task @ self.task_proj
        parts = [task, state, onehot]
        if not self.n_card:
            parts.append(counts.float() / self.max_steps)
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
        pre = first(torch.cat(parts, dim=-1))
        if not self.n_card:
            pre = pre + self.mask_in(mask.float())
        if self.n_lam:
            if lam is None:
                raise ValueError(f"this scorer reads {self.n_lam} lambda features; none given")
            lam = lam.float()
            pre = pre + self.lam_in(lam)
        h = second(act(pre))
        if self.cards_linear and card is not None:  # the agent only through its price and domain accuracy
            return self._card_terms(h, card, counts, matched).masked_fill(~mask.bool(), float("-inf"))
        g, card = self.agents(card)  # (A + 1, hidden)
        logits = self._mlp_terms(h, g, signals)
        if self.step_logits is not None:
            logits = logits + self.step_logits(torch.cat([onehot, counts.float() / self.max_steps], dim=-1))
        if self.rest_dropout and card is not None:
            if lam is not None and self.n_lam:
                logits = logits + self.lam_agent(lam) @ g.T
            logits = self._card_terms(h, card, counts, matched, logits * self._rest_gate())
            return logits.masked_fill(~mask.bool(), float("-inf"))
        if card is not None:
            acted = self.count_logit * counts.float() / self.max_steps
            logits = logits + self.card_logits(h) @ card[:, self.card_linear].T + acted
        if matched is not None:
            logits = logits + self.match_logit(h) * matched
        if lam is not None and self.n_lam:
            logits = logits + self.lam_agent(lam) @ g.T
        return logits.masked_fill(~mask.bool(), float("-inf"))

    def _mlp_terms(self, h: torch.Tensor, g: torch.Tensor, signals: torch.Tensor | None) -> torch.Tensor:
        """The head over each (state, agent) pair, and the answer signals' terms, (batch, A + 1)."""
        hb = h[:, None, :].expand(-1, g.shape[0], -1)
        gb = g[None, :, :].expand(h.shape[0], -1, -1)
        logits = self.head(torch.cat([hb, gb, hb * gb], dim=-1)).squeeze(-1)
        if signals is not None and self.n_signals:
            extra = self.signal_agent(signals) @ g.T if self.n_card else self.signal_logits(signals)
            logits = logits + extra
        return logits

    def _card_terms(
        self,
        h: torch.Tensor,
        card: torch.Tensor,
        counts: torch.Tensor,
        matched: torch.Tensor | None,
        rest: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(Cards.) The card's linear terms: cost, who has acted and the domain accuracy, after ``rest``
        (the gated MLP terms of ``rest_dropout``; none with ``cards_linear``)."""
        logits = self.card_logits(h) @ card[:, self.card_linear].T
        if rest is not None:
            logits = rest + logits
        logits = logits + self.count_logit * counts.float() / self.max_steps
        if matched is not None:
            logits = logits + self.match_logit(h) * matched
        return logits

    def _rest_gate(self) -> torch.Tensor:
        """(``rest_dropout``.) Per action, whether its MLP terms count: 1 for an agent the scorer was
        trained with, 0 for one it was not, and in a training update (where gradients flow) 0 with
        probability ``rest_dropout`` for any agent but the Terminator."""
        gate = self.agent_known.float()
        if torch.is_grad_enabled():
            kept = (torch.rand(gate.shape) >= self.rest_dropout).float()
            kept[-1] = 1.0  # the Terminator has no card to fall back on
            gate = gate * kept
        return gate


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
        self.state_encoder = STATE_ENCODERS[config.state_encoder](self.encoder)
        cards = None
        if config.cards:
            raw = pool_cards(pool)
            cards = (raw, *card_scale(raw))  # standardised by this (the training) pool's statistics
        torch.manual_seed(seed)
        first = config
        if config.one_call_first:  # what the first step reads: no signals, step 0 of a one-call episode
            first = replace(config, max_steps=1, signals=False, step_logits=False, stop_prior=0.0)
        self.scorer = self._scorer(pool, first, cards)
        if config.step_heads:
            self.scorer.later = self._scorer(pool, config, cards)
        self._warned_lams: set[float] = set()  # lambdas outside the range already warned about
        # (cards) the agents this policy was trained with, where its pool holds others (with_pool, load)
        self._trained: set[str] | None = None

    def _scorer(self, pool: Pool, config: PolicyConfig, cards: Any) -> Scorer:
        return Scorer(
            self.encoder.dim,
            pool.n_actions,
            config.max_steps,
            config.hidden,
            self._agent_texts(pool),
            n_signals=N_SIGNALS if config.signals else 0,
            n_surface=N_SURFACE if config.surface else 0,
            layers=config.layers,
            n_lam=N_LAM_FEATURES if config.lam_range is not None else 0,
            task_dims=config.task_dims,
            cards=cards,
            n_domains=len(card_domains(pool)) if config.cards else 0,
            cards_linear=config.cards_linear,
            cards_text=config.cards_text,
            card_noise=config.card_noise,
            cost_features=pool.cards.cost_features if pool.cards is not None else (PRICE_LINEAR,),
            rest_dropout=config.rest_dropout,
            step_logits=config.step_logits,
            stop_prior=config.stop_prior,
        )

    def _agent_texts(self, pool: Pool) -> np.ndarray:
        texts = [agent_text(pool, i) for i in range(len(pool))] + [TERMINATOR_TEXT]
        return self.encoder.encode(texts)

    def with_pool(self, pool: Pool) -> PuppeteerPolicy:
        """(``cards`` only.) A twin with the same weights that scores the agents of ``pool``, agents it
        has never seen included, by their text and card (standardised as in training)."""
        if not self.config.cards:
            raise ValueError("only a policy with policy.cards scores another pool's agents")
        domains = card_domains(self.pool)
        if card_domains(pool) != domains:
            raise ValueError(
                f"pool {pool.name!r}'s cards cover domains {card_domains(pool)}; this policy reads {domains}"
            )
        twin = copy.deepcopy(self)
        twin.pool = pool
        trained = {a.name for a in self.pool.agents} if self._trained is None else self._trained
        known = [a.name in trained for a in pool.agents]
        twin.scorer.set_agents(self._agent_texts(pool), pool_cards(pool), known)
        twin._trained = trained
        return twin

    def load_first(self, directory: str | Path) -> None:
        """Make the first decision with a saved one-call router's scorer (weights and the statistics it
        read its training tasks by); the decisions after a call keep this policy's own scorer. Needs
        ``one_call_first`` and a router saved with the same encoder, hidden size, layers, task_dims and
        surface, on the same agents."""
        if not self.config.one_call_first:
            raise ValueError("loading a one-call router as the first decision needs policy.one_call_first")
        d = Path(directory)
        if not (d / "policy.json").exists():
            raise FileNotFoundError(f"{d} holds no saved policy (policy.json); give a run's best/ or final/")
        meta = json.loads((d / "policy.json").read_text())
        raw = meta["config"]
        if meta["agents"] != [a.name for a in self.pool.agents]:
            raise ValueError(f"{d} was trained on agents {meta['agents']}, this pool's differ")
        if int(raw.get("max_steps", 0)) != 1 or raw.get("step_heads"):
            raise ValueError(
                f"{d} is not a one-call router (max_steps={raw.get('max_steps')}); train one first"
            )
        state = safe_torch_load(d / "policy.pt")
        mine = {k: v for k, v in self.scorer.state_dict().items() if not k.startswith("later.")}
        odd = sorted(set(state) ^ set(mine)) + sorted(
            k for k in set(state) & set(mine) if state[k].shape != mine[k].shape
        )
        if odd:
            raise ValueError(
                f"{d}'s scorer does not fit this policy's first scorer (differs in {', '.join(odd[:4])}): "
                "train the one-call router with the same encoder, hidden, layers, task_dims and surface"
            )
        self.scorer.load_state_dict({**self.scorer.state_dict(), **state})

    def freeze_first(self) -> None:
        """Keep the first decision's scorer fixed in training (its parameters take no gradient)."""
        if self.scorer.later is None:
            raise ValueError("only a policy with policy.step_heads has a first scorer of its own to freeze")
        for name, param in self.scorer.named_parameters():
            if not name.startswith("later."):
                param.requires_grad_(False)

    @property
    def reads_checks(self) -> bool:
        """Whether its observations should carry the visible checks' verdicts (it reads the signals)."""
        return self.config.signals

    @property
    def lam_range(self) -> LamRange | None:
        """The range of lambdas this policy was trained over (None: one fixed lambda)."""
        return LamRange.of(self.config.lam_range)

    def fit_inputs(self, texts: Sequence[str], domains: Sequence[str] | None = None) -> None:
        """Standardise the task embedding per dimension by these (training) tasks' statistics and,
        with ``task_dims``, project it onto their ``task_dims`` principal directions; with ``cards``
        and the tasks' ``domains``, fit the classifier that says which card accuracy a question needs."""
        if not self.scorer.standardize or not texts:
            return
        emb = torch.as_tensor(self.encoder.encode(list(dict.fromkeys(texts))), dtype=torch.float32)
        self._fit_stats(emb)
        if self.config.cards and domains is not None:
            self._fit_domains(texts, domains)

    def _fit_domains(self, texts: Sequence[str], domains: Sequence[str]) -> None:
        """Ridge multinomial logistic regression of the card's domain on the standardised question."""
        known = card_domains(self.pool)
        pairs = dict((t, known.index(d)) for t, d in zip(texts, domains, strict=True) if d in known)
        if len({*pairs.values()}) < 2:
            return  # one domain (or none the cards know): the classifier stays uniform
        x = self.scorer.standardized(torch.as_tensor(self.encoder.encode(list(pairs)), dtype=torch.float32))
        y = torch.as_tensor(list(pairs.values()))
        w = torch.zeros(x.shape[1], len(known), requires_grad=True)
        b = torch.zeros(len(known), requires_grad=True)
        opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=200, line_search_fn="strong_wolfe")

        def loss() -> torch.Tensor:
            opt.zero_grad()
            value = nn.functional.cross_entropy(x @ w + b, y) + 1e-3 * (w * w).sum()
            value.backward()
            return value

        opt.step(loss)
        with torch.no_grad():
            self.scorer.domain_w.copy_(w.detach())
            self.scorer.domain_b.copy_(b.detach())

    def _fit_stats(self, emb: torch.Tensor) -> None:
        scorers = [self.scorer] if self.scorer.later is None else [self.scorer, self.scorer.later]
        with torch.no_grad():
            std = emb.std(dim=0) if len(emb) > 1 else torch.ones(emb.shape[1])
            shift, scale = emb.mean(dim=0), 1.0 / (std + 1e-2 * float(std.mean()) + 1e-6)
            proj = None
            if self.scorer.task_dims is not None:
                _, _, vh = torch.linalg.svd((emb - shift) * scale, full_matrices=False)
                top = vh[: self.scorer.task_dims]  # (k, dim): the directions the training tasks vary most
                proj = top.T @ top
            for scorer in scorers:
                scorer.task_shift.copy_(shift)
                scorer.task_scale.copy_(scale)
                if proj is not None:
                    scorer.task_proj.copy_(proj)

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
        tasks = self.encoder.encode([o["task"] for o in observations])
        states = self.state_encoder.encode([state_window(o["state"]) for o in observations])
        return [
            Features(
                task=tasks[i],
                state=states[i],
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
        inputs = self.batch(feats)
        first = self.scorer(*inputs)
        later = self.scorer.later
        if later is None:
            return first
        if self.config.later_inputs != "all":  # inputs[0]: the question's embedding, [1]: the transcript's
            task = inputs[0] if self.config.later_inputs == "question" else torch.zeros_like(inputs[0])
            inputs = (task, torch.zeros_like(inputs[1]), *inputs[2:])
        return torch.where((inputs[2] > 0)[:, None], later(*inputs), first)  # inputs[2]: the step

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
        for key in (
            "cards",
            "cards_linear",
            "card_noise",
            "rest_dropout",
            "step_logits",
            "stop_prior",
            "step_heads",
            "one_call_first",
        ):
            if not config[key]:
                del config[key]
        if config["cards_text"]:
            del config["cards_text"]
        if config["later_inputs"] == "all":
            del config["later_inputs"]
        if config["state_encoder"] == "same":
            del config["state_encoder"]
        meta: dict[str, Any] = {
            "config": config,
            "pool": self.pool.name,
            "agents": [a.name for a in self.pool.agents],
        }
        if self.config.cards:
            meta["card_domains"] = list(card_domains(self.pool))
        if self._trained is not None:  # a twin on another pool: the agents it was trained with
            meta["trained_agents"] = sorted(self._trained)
        (d / "policy.json").write_text(json.dumps(meta, indent=2))
        return d

    @classmethod
    def load(cls, directory: str | Path, pool: Pool, encoder: CachedEncoder | None = None) -> PuppeteerPolicy:
        """A saved policy for ``pool``: the pool it was trained on or, with ``cards``, any pool whose
        cards cover the same domains (agents it has never seen are scored by their text and card)."""
        d = Path(directory)
        meta = read_policy_file(d / "policy.json", PolicyConfig)
        raw = dict(meta["config"])
        names = [a.name for a in pool.agents]
        if meta["agents"] != names:
            if not raw.get("cards"):
                raise ValueError(f"policy was trained on agents {meta['agents']}, pool {pool.name!r} differs")
            if list(card_domains(pool)) != meta["card_domains"]:
                raise ValueError(
                    f"policy reads cards of domains {meta['card_domains']}; pool {pool.name!r}'s cards "
                    f"cover {list(card_domains(pool))}"
                )
            new = [n for n in names if n not in meta.get("trained_agents", meta["agents"])]
            if new:
                log.info("policy %s scores agents it was not trained with by their cards: %s", d, new)
        raw["encoder_options"] = tuple(tuple(x) for x in raw.get("encoder_options", ()))
        raw.setdefault("layers", "tanh")  # saved before the scorer's layers were a choice
        policy = cls(pool, PolicyConfig(**raw), encoder=encoder)
        # with cards, the saved card_shift/card_scale (the training pool's) replace this pool's
        try:
            policy.scorer.load_state_dict(safe_torch_load(d / "policy.pt"))
        except RuntimeError as e:  # policy.json's settings lay out another scorer than the weights'
            first = str(e).strip().splitlines()[0]
            raise ValueError(
                f"{d / 'policy.pt'}: the weights do not fit policy.json's settings ({first})"
            ) from None
        trained = set(meta.get("trained_agents", meta["agents"]))
        if raw.get("cards") and not trained >= set(names):
            known = [n in trained for n in names]
            policy.scorer.set_agents(policy._agent_texts(pool), pool_cards(pool), known)
            policy._trained = trained
        return policy


def pool_cards(pool: Pool) -> np.ndarray:
    """The raw card features of ``pool``'s agents (:meth:`puppeteer.agents.cards.PoolCards.features`)."""
    if pool.cards is None:
        raise ValueError(
            f"pool {pool.name!r} has no agent cards (policy.cards reads them); measure them: "
            f"puppeteer pool cards --pool {pool.name.split('[')[0]} --suite SUITE"
        )
    return pool.cards.features([a.name for a in pool.agents])


def card_domains(pool: Pool) -> tuple[str, ...]:
    return pool.cards.domains if pool.cards is not None else ()
