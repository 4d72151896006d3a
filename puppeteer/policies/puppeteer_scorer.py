"""The step-wise puppeteer's trained network: :class:`Scorer` maps an observation's
:class:`Features` (the encoder's work already done) to one logit per action (the model is described in
:mod:`puppeteer.policies.puppeteer`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from puppeteer.agents.cards import PRICE_LINEAR

MAX_KINDS = 64  # the kinds a by-kind scorer can tell apart (the rows of its kind_centroids buffer)


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
        by_kind: bool = False,
        cards: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        n_domains: int = 0,
        cards_linear: bool = False,
        cards_text: bool = True,
        cost_features: Sequence[int] = (PRICE_LINEAR,),
    ) -> None:
        """``cards``: the agents' raw card features (agents x features, the Terminator excluded) and
        the shift and scale that standardise them (:func:`puppeteer.agents.cards.card_scale`); its last
        ``n_domains`` features are the accuracies per domain. ``cards_text``: the agent's text beside
        its card; ``cost_features``: the card features a return charges per call (read linearly)."""
        super().__init__()
        self.max_steps = max_steps
        self.n_signals = n_signals
        self.n_surface = n_surface
        self.n_lam = n_lam
        self.n_card = 0 if cards is None else int(cards[0].shape[1])
        self.cards_linear = cards_linear
        self.cards_text = cards_text or cards is None
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
        self.by_kind = by_kind
        if by_kind:  # the question read as its kind's mean question (PuppeteerPolicy.fit_inputs)
            self.register_buffer("kind_centroids", torch.zeros(MAX_KINDS, dim))
            self.register_buffer("kind_w", torch.zeros(dim, MAX_KINDS))
            self.register_buffer("kind_b", torch.zeros(MAX_KINDS))
            self.register_buffer("kind_count", torch.zeros((), dtype=torch.long))
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

    def set_agents(self, agent_init: np.ndarray, card_raw: np.ndarray) -> None:
        """(Cards only.) The agents this scorer scores: their text embeddings (the Terminator's last)
        and raw card features (agents only); neither is a parameter nor saved with the weights."""
        text = torch.as_tensor(agent_init, dtype=torch.float32).clone()
        raw = torch.as_tensor(card_raw, dtype=torch.float32).clone()
        if raw.ndim != 2 or raw.shape[0] != text.shape[0] - 1:
            raise ValueError(f"{text.shape[0] - 1} agents but card features of shape {tuple(raw.shape)}")
        if hasattr(self, "card_shift") and raw.shape[1] != self.card_shift.shape[0]:
            n = self.card_shift.shape[0]
            raise ValueError(f"cards of {raw.shape[1]} features; this scorer reads {n}")
        self.register_buffer("agent_text", text, persistent=False)
        self.register_buffer("agent_card", raw, persistent=False)

    def card_inputs(self) -> torch.Tensor:
        """(Cards only.) Per action: the standardised card and a Terminator indicator, (A + 1, n + 1)."""
        std = (self.agent_card - self.card_shift) * self.card_scale
        cards = torch.cat([std, torch.zeros(1, std.shape[1])], dim=0)
        terminator = torch.zeros(cards.shape[0], 1)
        terminator[-1] = 1.0
        return torch.cat([cards, terminator], dim=-1)

    def standardized(self, task: torch.Tensor) -> torch.Tensor:
        return (task - self.task_shift) * self.task_scale if self.standardize else task

    def set_kinds(self, centroids: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> None:
        """(``by_kind``.) The kinds' mean standardised questions (one row a kind) and the classifier of
        the kind on the standardised question (weights (dim, kinds), biases (kinds,))."""
        k = len(centroids)
        if not 1 <= k <= MAX_KINDS:
            raise ValueError(f"a by-kind scorer reads 1..{MAX_KINDS} kinds, got {k}")
        with torch.no_grad():
            for buffer in (self.kind_centroids, self.kind_w, self.kind_b):
                buffer.zero_()
            self.kind_centroids[:k] = centroids
            self.kind_w[:, :k] = w
            self.kind_b[:k] = b
            self.kind_count.fill_(k)

    def kind_of(self, task: torch.Tensor) -> torch.Tensor:
        """(``by_kind``, kinds set.) The kind index the classifier gives each standardised question."""
        k = int(self.kind_count)
        return (task @ self.kind_w[:, :k] + self.kind_b[:k]).argmax(dim=-1)

    def as_kind(self, task: torch.Tensor) -> torch.Tensor:
        """(``by_kind``.) Each standardised question replaced by the mean question of its kind (the
        question itself until the kinds are set)."""
        if int(self.kind_count) == 0:
            return task
        return self.kind_centroids[self.kind_of(task)]

    def domain_accuracy(self, task: torch.Tensor, card: torch.Tensor | None = None) -> torch.Tensor:
        """(Cards only.) Each action's standardised card accuracy on the question's domain, (batch, A + 1)
        (the Terminator's: 0), under the domain classifier's probabilities. ``card``: the card inputs
        to read (computed once per forward pass); default :meth:`card_inputs`."""
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
        card = self.card_inputs() if self.n_card else None
        matched = self.domain_accuracy(task, card) if card is not None and self.n_domains else None
        task = self.standardized(task)
        if self.task_dims is not None:
            task = task @ self.task_proj
        if self.by_kind:
            task = self.as_kind(task)
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
        self, h: torch.Tensor, card: torch.Tensor, counts: torch.Tensor, matched: torch.Tensor | None
    ) -> torch.Tensor:
        """(Cards, ``cards_linear``.) The card's linear terms: cost, who has acted and the domain
        accuracy."""
        logits = self.card_logits(h) @ card[:, self.card_linear].T
        logits = logits + self.count_logit * counts.float() / self.max_steps
        if matched is not None:
            logits = logits + self.match_logit(h) * matched
        return logits
