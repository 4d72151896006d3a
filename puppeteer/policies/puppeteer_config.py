"""The step-wise puppeteer's settings (``policy.*`` of a run's configuration), checked when made, and
the choices they name: the scorer's layers, the transcript's encoder and window."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from puppeteer.envs.encoders import CachedEncoder, hashing_encoder
from puppeteer.envs.lam_range import LamRange
from puppeteer.errors import UserError

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


# settings that studies tried, recorded no gain with and that left the library, with the
# value that turned them off: a saved run or policy may still name them at that value
# (experiments/local-mix/README.md: step_logits, stop_prior; experiments/unseen-agents/README.md:
# card_noise, rest_dropout)
REMOVED_SETTINGS: Mapping[str, object] = MappingProxyType(
    {"card_noise": 0.0, "rest_dropout": 0.0, "step_logits": False, "stop_prior": 0.0}
)


class RemovedSetting(UserError, ValueError):
    """A saved or given configuration turns on a setting the library no longer has."""


def removed_message(setting: str) -> str:
    """The one line for a removed setting (``setting`` as given: a key, or key=value)."""
    return (
        f"{setting} was removed from the library after its study (its code is in git history): "
        "drop the setting"
    )


def without_removed(config: Mapping[str, Any], where: str | None = None) -> dict[str, Any]:
    """``config`` (``policy.*`` settings) without the removed settings that are at their off value;
    :class:`RemovedSetting` (one line, after ``where`` if given) for one set to anything else."""
    kept = dict(config)
    for name, off in REMOVED_SETTINGS.items():
        if name not in kept:
            continue
        value = kept.pop(name)
        if isinstance(value, bool | int | float) and value == off:
            continue
        prefix = f"{where}: " if where else ""
        raise RemovedSetting(prefix + removed_message(f"policy.{name}={value!r:.40}"))
    return kept


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
    # read the question only as its kind: a classifier fitted on the training tasks' named kinds
    # (fit_inputs) says which, and the scorer reads that kind's mean training question: the input a
    # per-kind rule reads, and nothing that tells apart the items of one kind ("norm" only; replaces
    # task_dims)
    by_kind: bool = False
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
        if not isinstance(self.encoder, str):
            raise ValueError(f"policy.encoder must be an encoder name, got {self.encoder!r:.40}")
        if self.state_encoder not in STATE_ENCODERS:
            known = ", ".join(STATE_ENCODERS)
            raise ValueError(f"policy.state_encoder: unknown {self.state_encoder!r:.40}; known: {known}")
        if self.cards and self.layers != "norm":
            raise ValueError("policy.cards needs policy.layers=norm")
        if self.cards_linear and not self.cards:
            raise ValueError("policy.cards_linear needs policy.cards")
        if not self.cards_text and not self.cards:
            raise ValueError("policy.cards_text needs policy.cards")
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
        if self.task_dims is not None and (self.task_dims < 1 or self.layers != "norm"):
            raise ValueError(f"policy.task_dims must be >= 1 (with layers=norm), got {self.task_dims}")
        if self.by_kind and (self.layers != "norm" or self.task_dims is not None):
            raise ValueError(
                "policy.by_kind reads the question as its kind: it needs layers=norm and no task_dims"
            )
        if self.layers not in SCORER_LAYERS:
            raise ValueError(f"policy.layers: unknown {self.layers!r}; known: {', '.join(SCORER_LAYERS)}")
        lam_range = LamRange.of(self.lam_range)
        object.__setattr__(self, "lam_range", lam_range.bounds if lam_range is not None else None)


def _whole(name: str, value: Any, low: int, high: int) -> None:
    """A whole number in ``low..high`` (a bool or a float is refused), else ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"policy.{name} must be a whole number in {low}..{high}, got {value!r:.40}")
