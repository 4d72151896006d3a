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
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from puppeteer.agents.cards import PRICE_LINEAR, card_scale
from puppeteer.agents.pool import Pool
from puppeteer.envs.encoders import CachedEncoder, make_encoder
from puppeteer.envs.lam_range import N_LAM_FEATURES, LamRange
from puppeteer.envs.surface import N_SURFACE, surface_features
from puppeteer.policies.policy_file import read_policy_file
from puppeteer.policies.puppeteer_config import STATE_ENCODERS, PolicyConfig, state_window
from puppeteer.policies.puppeteer_scorer import Features, Scorer
from puppeteer.tasks.signals import N_SIGNALS
from puppeteer.utils.safeload import atomic_torch_save, safe_torch_load

log = logging.getLogger(__name__)

TERMINATOR_TEXT = "Terminator: stop the discussion now and submit the majority answer."
_NO_SURFACE = np.zeros(0, dtype=np.float32)
_NO_LAM = np.zeros(0, dtype=np.float32)


def agent_text(pool: Pool, i: int) -> str:
    a = pool.agent(i)
    tools = ", ".join(a.tools) or "no tools"
    return f"{a.name}: {a.description} (model {a.model.name}, pattern {a.pattern}, {tools})"


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
            first = replace(config, max_steps=1, signals=False)
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
            by_kind=config.by_kind,
            cards=cards,
            n_domains=len(card_domains(pool)) if config.cards else 0,
            cards_linear=config.cards_linear,
            cards_text=config.cards_text,
            cost_features=pool.cards.cost_features if pool.cards is not None else (PRICE_LINEAR,),
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
        twin.scorer.set_agents(self._agent_texts(pool), pool_cards(pool))
        twin._trained = trained
        return twin

    def load_first(self, directory: str | Path) -> None:
        """Make the first decision with a saved one-call router's scorer (weights and the statistics it
        read its training tasks by); the decisions after a call keep this policy's own scorer. Needs
        ``one_call_first`` and a router saved with the same encoder, hidden size, layers, task_dims,
        by_kind and surface, on the same agents."""
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
        mine = {k: v for k, v in self.scorer.state_dict().items() if not k.startswith("later.")}
        state = _fitting_state(
            d,
            mine,
            "this policy's first scorer",
            "train the one-call router with the same encoder, hidden, layers, task_dims, by_kind and surface",
        )
        self.scorer.load_state_dict({**self.scorer.state_dict(), **state})

    def load_weights(self, directory: str | Path) -> None:
        """Start from a saved policy's weights (and the statistics it read its training tasks by): one
        saved with the same settings on the same agents."""
        d = Path(directory)
        if not (d / "policy.json").exists():
            raise FileNotFoundError(f"{d} holds no saved policy (policy.json); give a run's best/ or final/")
        meta = read_policy_file(d / "policy.json", PolicyConfig)
        if meta["agents"] != [a.name for a in self.pool.agents]:
            raise ValueError(f"{d} was trained on agents {meta['agents']}, this pool's differ")
        state = _fitting_state(
            d, self.scorer.state_dict(), "this policy's", "save it with the same policy settings"
        )
        self.scorer.load_state_dict(state)

    def freeze_later(self) -> None:
        """Keep the decisions after the first call fixed in training (the later scorer takes no gradient)."""
        if self.scorer.later is None:
            raise ValueError("only a policy with policy.step_heads has a later scorer of its own to freeze")
        for param in self.scorer.later.parameters():
            param.requires_grad_(False)

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
        if self.config.by_kind:
            if domains is None:
                raise ValueError("policy.by_kind reads the question as its kind: give the tasks' domains")
            self._fit_kinds(emb, texts, domains)
        if self.config.cards and domains is not None:
            self._fit_domains(texts, domains)

    def _fit_kinds(self, emb: torch.Tensor, texts: Sequence[str], domains: Sequence[str]) -> None:
        """Each kind's mean standardised question and the classifier that says which kind a question
        is (kinds in order of first appearance). ``emb``: the distinct ``texts``' embeddings, in order."""
        named = dict(zip(texts, domains, strict=True))  # its keys are emb's rows
        kinds = list(dict.fromkeys(named.values()))
        x = self.scorer.standardized(emb)
        y = torch.as_tensor([kinds.index(d) for d in named.values()])
        centroids = torch.stack([x[y == k].mean(dim=0) for k in range(len(kinds))])
        w, b = _multinomial_fit(x, y, len(kinds))
        for scorer in self._scorers():
            scorer.set_kinds(centroids, w, b)

    def _scorers(self) -> list[Scorer]:
        """The first decision's scorer and, with ``step_heads``, the later decisions'."""
        return [self.scorer] if self.scorer.later is None else [self.scorer, self.scorer.later]

    def _fit_domains(self, texts: Sequence[str], domains: Sequence[str]) -> None:
        """Ridge multinomial logistic regression of the card's domain on the standardised question."""
        known = card_domains(self.pool)
        pairs = dict((t, known.index(d)) for t, d in zip(texts, domains, strict=True) if d in known)
        if len({*pairs.values()}) < 2:
            return  # one domain (or none the cards know): the classifier stays uniform
        x = self.scorer.standardized(torch.as_tensor(self.encoder.encode(list(pairs)), dtype=torch.float32))
        w, b = _multinomial_fit(x, torch.as_tensor(list(pairs.values())), len(known))
        with torch.no_grad():
            self.scorer.domain_w.copy_(w)
            self.scorer.domain_b.copy_(b)

    def _fit_stats(self, emb: torch.Tensor) -> None:
        scorers = self._scorers()
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
            "by_kind",
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
        raw = dict(meta["config"])  # removed settings at their off value already dropped
        names = [a.name for a in pool.agents]
        if meta["agents"] != names:
            if not raw.get("cards"):
                hint = ""
                if set(meta["agents"]) <= set(names):
                    hint = (
                        f"; the pool holds them all: load it on pool.subset() of them (`--agents "
                        f"{','.join(meta['agents'])}` on the command line)"
                    )
                raise ValueError(
                    f"policy was trained on agents {meta['agents']}, pool {pool.name!r} differs{hint}"
                )
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


def _fitting_state(d: Path, mine: dict[str, torch.Tensor], whose: str, fix: str) -> dict[str, torch.Tensor]:
    """The scorer weights saved in ``d``, refused unless their names and shapes are ``mine``'s."""
    state = safe_torch_load(d / "policy.pt")
    odd = sorted(set(state) ^ set(mine)) + sorted(
        k for k in set(state) & set(mine) if state[k].shape != mine[k].shape
    )
    if odd:
        raise ValueError(f"{d}'s scorer does not fit {whose} (differs in {', '.join(odd[:4])}): {fix}")
    return state


def _multinomial_fit(x: torch.Tensor, y: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ridge multinomial logistic regression of the labels ``y`` (0..n-1) on ``x``: weights (dim, n)
    and biases (n,)."""
    w = torch.zeros(x.shape[1], n, requires_grad=True)
    b = torch.zeros(n, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=200, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        opt.zero_grad()
        value = nn.functional.cross_entropy(x @ w + b, y) + 1e-3 * (w * w).sum()
        value.backward()
        return value

    opt.step(loss)
    return w.detach(), b.detach()
