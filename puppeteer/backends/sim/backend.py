"""A calibrated, seeded simulator of LLM workers.

Each simulated worker answers an item correctly with a probability given by a declared skill
table (``model.options["skills"][column]``). Correctness is drawn as

    correct  iff  sqrt(rho) * z_item + sqrt(1 - rho) * e_call  <  Phi^-1(p)

with ``z_item`` a latent difficulty shared by every worker (hash of seed and item key) and ``e_call``
per-call noise (hash of seed, item, model target, pattern, sample index, step index and the
visible earlier answers). The sum is standard normal, so each worker's *marginal* accuracy is
exactly ``p`` while hard items are hard for everyone. Wrong answers are drawn from a small
per-item distractor set, so wrong workers often agree on the same wrong answer.

Reasoning patterns shift ``p`` on the logit scale (``cot`` is the calibrated baseline); the
revising patterns (verify, critique, refine, reflect) and ``summarize`` react to the answers of
earlier steps they can see. Tokens, price, FLOPs and latency follow the model's declared numbers.
Nothing here knows about Task objects: the environment hands in ``SimItem`` records keyed by
``CallContext.item_key``. See docs/sim.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from types import MappingProxyType
from typing import Any, NamedTuple

from puppeteer.backends.sim.answers import (
    _CANONICAL_INT,
    _FILLER,
    SimItem,
    _displayed,
    _normalized,
    _reasoning_prefix,
    _render_final,
    display_answer,
    distractors,
    normalize_answer,
)
from puppeteer.backends.sim.difficulty import DifficultyModel, conditional_accuracy
from puppeteer.types import Agent, Completion, CompletionRequest, ModelSpec

logger = logging.getLogger(__name__)

_STD_NORMAL = NormalDist()
_U64 = float(2**64)

DEFAULT_PATTERN_EFFECTS: Mapping[str, float] = MappingProxyType(
    {
        "direct": -0.6,
        "cot": 0.0,
        "plan": 0.1,
        "critique": 0.0,
        "reflect": 0.05,
        "refine": 0.05,
        "verify": 0.0,
        "summarize": -0.2,
    }
)
"""Logit shifts on a worker's skill, per reasoning pattern (``cot`` = the calibrated table)."""

DEFAULT_TOKEN_MULTIPLIERS: Mapping[str, float] = MappingProxyType(
    {
        "direct": 0.2,
        "cot": 1.0,
        "plan": 1.2,
        "critique": 0.7,
        "reflect": 0.8,
        "refine": 0.9,
        "verify": 0.6,
        "summarize": 0.5,
    }
)
"""Multipliers on a model's ``tokens_mean`` per reasoning pattern."""

DEFAULT_TOOL_EFFECTS: Mapping[str, float] = MappingProxyType({"python": 0.3, "calculator": 0.3})
"""Logit shifts for tools; applied (largest one only) on items whose kind is in ``tool_kinds``."""

REVISING_PATTERNS = frozenset({"verify", "critique", "refine", "reflect"})
FOLLOWING_PATTERNS = frozenset({"summarize"})
KINDS = ("numeric", "letter", "math", "code", "text")

_DEFAULT_TOKENS_MEAN = 512.0
_DEFAULT_TOKENS_PER_S = 50.0
_DEFAULT_FIRST_TOKEN_S = 0.5


class SkillError(LookupError):
    """A model lacks the skill table or the column a call needs."""


@dataclass(frozen=True)
class SimParams:
    """The simulator's behavioural parameters (all have calibrated defaults)."""

    rho: float = 0.5
    pattern_effects: Mapping[str, float] = field(default_factory=lambda: DEFAULT_PATTERN_EFFECTS)
    token_multipliers: Mapping[str, float] = field(default_factory=lambda: DEFAULT_TOKEN_MULTIPLIERS)
    tool_effects: Mapping[str, float] = field(default_factory=lambda: DEFAULT_TOOL_EFFECTS)
    tool_kinds: frozenset[str] = frozenset({"numeric", "math"})
    keep_slip: float = 0.3
    follow_prob: float = 0.85
    tokens_sigma: float = 0.35
    distractor_weights: tuple[float, ...] = (0.7, 0.2, 0.1)
    difficulty: DifficultyModel | None = None  # the part of the item latent that the question shows
    # the share of a call's own noise that the same model with the same pattern draws again when it is
    # called on the item again in one episode: 0 (the default) makes every call independent given the
    # item, so repeating one cheap agent and voting gains as much as asking different ones; 1 makes a
    # repeat as right or wrong as the first call, as a temperature-0 model asked again mostly is
    # (experiments/sim-routing/README.md, "Emergent graphs"). The marginal accuracy of every call is
    # unchanged.
    repeat_corr: float = 0.0
    # the share of the correctness latent that calls of one model *group* (a model option ``group``,
    # by default the model's target) share on an item beyond the item's difficulty ``rho``: the
    # agents of one set of weights err together more than agents of different weights do
    # (experiments/second-steps: within-kind error phi 0.27 for the same model, 0.05 across sizes).
    # Two calls of one group have latent correlation rho + group_corr; of different groups, rho.
    group_corr: float = 0.0
    # a reviser whose own attempt is wrong, shown a wrong majority, states its own (other) wrong answer
    # with this probability instead of repeating the majority: it flags a wrong answer without fixing
    # it (a real verifier's detection rate is above its fix rate). 0 keeps the majority.
    switch_prob: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.rho < 1.0:
            raise ValueError(f"rho must be in [0, 1), got {self.rho}")
        if not 0.0 <= self.repeat_corr <= 1.0:
            raise ValueError(f"repeat_corr must be in [0, 1], got {self.repeat_corr}")
        if not 0.0 <= self.group_corr < 1.0 - self.rho:
            raise ValueError(f"group_corr must be in [0, 1 - rho), got {self.group_corr} (rho {self.rho})")
        if not 0.0 <= self.switch_prob <= 1.0:
            raise ValueError(f"switch_prob must be a probability, got {self.switch_prob}")
        if not 0.0 <= self.keep_slip <= 1.0 or not 0.0 <= self.follow_prob <= 1.0:
            raise ValueError("keep_slip and follow_prob must be probabilities")
        if not self.distractor_weights or any(w < 0 for w in self.distractor_weights):
            raise ValueError("distractor_weights must be non-negative and non-empty")

    def pattern_shift(self, pattern: str) -> float:
        return float(self.pattern_effects.get(pattern, 0.0))

    def token_multiplier(self, pattern: str) -> float:
        return float(self.token_multipliers.get(pattern, 1.0))

    def tool_shift(self, tools: Sequence[str], kind: str | None) -> float:
        if kind is None or kind not in self.tool_kinds:
            return 0.0
        return max((float(self.tool_effects.get(t, 0.0)) for t in tools), default=0.0)


@dataclass(frozen=True)
class SimOutcome:
    """The decision behind one simulated call (exposed for analysis and tests).

    ``source`` says where the answer came from: own (own attempt), kept (kept a visible correct
    answer), dropped (abandoned a visible correct answer), fixed (replaced a visible wrong answer
    by the gold), repeated (repeated a visible wrong answer), followed (summarizer copied the
    visible majority), switched (replaced a visible wrong answer by another wrong one) or unknown (item
    not in the answer key).
    """

    answer: str
    correct: bool
    column: str | None
    p: float
    source: str


# --------------------------------------------------------------------------- skills and oracle


def skill(model: ModelSpec, column: str) -> float:
    """The model's declared accuracy on a column as a fraction (percent values are divided by 100)."""
    skills = model.options.get("skills") if model.options else None
    if not isinstance(skills, Mapping):
        raise SkillError(
            f"model {model.name!r} has no 'skills' table in its options (the sim backend needs one)"
        )
    if column not in skills:
        raise SkillError(
            f"model {model.name!r} has no skill for column {column!r}; it has: {', '.join(map(str, skills))}"
        )
    value = float(skills[column])
    if value > 1.0:
        value /= 100.0
    if not 0.0 <= value <= 1.0:
        raise SkillError(f"skill of {model.name!r} on {column!r} must be in [0, 1] or percent, got {value}")
    return value


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1.0 - 1e-9)
    return math.log(p / (1.0 - p))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def shifted(p: float, shift: float) -> float:
    """Apply a logit shift to a probability (0 and 1 stay fixed, a zero shift is exact)."""
    if shift == 0.0 or p <= 0.0 or p >= 1.0:
        return p
    return _sigmoid(_logit(p) + shift)


def expected_accuracy(
    agent: Agent, column: str, params: SimParams | None = None, kind: str | None = None
) -> float:
    """Marginal accuracy of an agent's own attempt on a column (no visible answers).

    ``kind`` (item kind) decides whether the agent's tools help; ``None`` ignores tools.
    """
    params = params or SimParams()
    shift = params.pattern_shift(agent.pattern) + params.tool_shift(agent.tools, kind)
    return shifted(skill(agent.model, column), shift)


def tokens_mean(model: ModelSpec, column: str | None = None) -> float:
    """The model's mean completion tokens (option ``tokens_mean``: a number, or column -> number; a
    column the mapping lacks, or none, takes the mapping's mean)."""
    value = (model.options or {}).get("tokens_mean", _DEFAULT_TOKENS_MEAN)
    if isinstance(value, Mapping):
        if column is not None and column in value:
            return float(value[column])
        return float(sum(float(v) for v in value.values()) / max(len(value), 1))
    return float(value)


def expected_call_cost(agent: Agent, params: SimParams | None = None, prompt_tokens: int = 0) -> float:
    """Expected USD of one call (completion tokens at the mean, ignoring the max_tokens cap)."""
    params = params or SimParams()
    mean = tokens_mean(agent.model) * params.token_multiplier(agent.pattern)
    return agent.model.usd(prompt_tokens, round(mean))


def oracle_agent(
    agents: Sequence[Agent], column: str, params: SimParams | None = None, kind: str | None = None
) -> int:
    """Index of the agent with the highest expected accuracy on a column; ties go to the cheaper one.

    Agents whose model has no skill table (non-sim backends) are skipped.
    """
    best: tuple[float, float, int] | None = None
    for index, agent in enumerate(agents):
        try:
            acc = expected_accuracy(agent, column, params, kind)
        except SkillError:
            continue
        key = (-round(acc, 12), expected_call_cost(agent, params), index)
        if best is None or key < best:
            best = key
    if best is None:
        raise SkillError(f"no agent has a skill for column {column!r}")
    return best[2]


# --------------------------------------------------------------------------- the backend


def _uniforms(key: str, count: int) -> tuple[float, ...]:
    digest = hashlib.blake2b(key.encode(), digest_size=8 * count).digest()
    return tuple((v + 0.5) / _U64 for v in struct.unpack(f"<{count}Q", digest))


_FIVE = struct.Struct("<5Q")


def _five_uniforms(key: str) -> tuple[float, float, float, float, float]:
    """``_uniforms(key, 5)``, unrolled (one per call of the simulator)."""
    a, b, c, d, e = _FIVE.unpack(hashlib.blake2b(key.encode(), digest_size=40).digest())
    return (a + 0.5) / _U64, (b + 0.5) / _U64, (c + 0.5) / _U64, (d + 0.5) / _U64, (e + 0.5) / _U64


@dataclass(frozen=True)
class _Prepared:
    item: SimItem
    column: str
    z: float
    gold: str
    gold_key: str
    wrong: tuple[str, ...]
    shared: float = 0.0  # sqrt(rho) * z: the item's part of every call's latent
    own: float = 1.0  # sqrt(1 - rho - group_corr): the weight of a call's own noise
    group: float = 0.0  # sqrt(group_corr): the weight of the item's draw per model group


@dataclass(frozen=True)
class _Worker:
    """Constants of one (model, pattern, tools, item column and kind): accuracy and token draws."""

    model: ModelSpec  # kept so that the id it is cached under stays this model's
    p: float
    threshold: float | None  # Phi^-1(p) when 0 < p < 1
    log_mean: float  # log(max(mean tokens, 1)) - sigma^2 / 2
    first_token_s: float
    tokens_per_s: float
    group: str = ""  # the model group whose calls share a part of their latent (``group_corr``)
    nonint: float = 0.0  # share of its wrong numeric answers stated as numbers that are not whole


class _Draw(NamedTuple):
    """One call's decision (a :class:`SimOutcome`'s fields) and what its text and tokens draw from."""

    answer: str
    correct: bool
    column: str | None
    p: float
    source: str
    kind: str
    u_tokens: float
    u_text: float
    worker: _Worker | None  # None: an item not in the answer key


class SimBackend:
    """Seeded, deterministic simulated workers calibrated to a skill table.

    ``answer_key`` maps ``CallContext.item_key`` to ``SimItem``; ``columns`` maps an item's domain
    to a skill column (unknown domains use ``default_column``, else the domain itself).
    ``realtime=True`` really waits the simulated latency. ``answer_text=True`` (the default) vouches
    for each completion's final answer part (``Completion.answer_text``), which the env extracts from
    instead of the whole text (same answers, a fraction of the time); ``False`` leaves only the text.
    Remaining keyword options are the behavioural parameters of ``SimParams``.
    """

    name = "sim"

    def __init__(
        self,
        answer_key: Mapping[str, SimItem] | None = None,
        columns: Mapping[str, str] | None = None,
        default_column: str | None = None,
        seed: int = 0,
        realtime: bool = False,
        pattern_effects: Mapping[str, float] | None = None,
        *,
        rho: float = 0.5,
        token_multipliers: Mapping[str, float] | None = None,
        tool_effects: Mapping[str, float] | None = None,
        tool_kinds: Sequence[str] = ("numeric", "math"),
        keep_slip: float = 0.3,
        follow_prob: float = 0.85,
        tokens_sigma: float = 0.35,
        distractor_weights: Sequence[float] = (0.7, 0.2, 0.1),
        difficulty: Mapping[str, Any] | DifficultyModel | None = None,
        repeat_corr: float = 0.0,
        group_corr: float = 0.0,
        switch_prob: float = 0.0,
        answer_text: bool = True,
    ) -> None:
        self.answer_key: dict[str, SimItem] = dict(answer_key or {})
        self.answer_text = bool(answer_text)
        self.columns: dict[str, str] = dict(columns or {})
        self.default_column = default_column
        self.seed = int(seed)
        self.realtime = bool(realtime)
        self.params = SimParams(
            rho=float(rho),
            pattern_effects=MappingProxyType({**DEFAULT_PATTERN_EFFECTS, **(pattern_effects or {})}),
            token_multipliers=MappingProxyType({**DEFAULT_TOKEN_MULTIPLIERS, **(token_multipliers or {})}),
            tool_effects=MappingProxyType(
                dict(DEFAULT_TOOL_EFFECTS if tool_effects is None else tool_effects)
            ),
            tool_kinds=frozenset(tool_kinds),
            keep_slip=float(keep_slip),
            follow_prob=float(follow_prob),
            tokens_sigma=float(tokens_sigma),
            distractor_weights=tuple(float(w) for w in distractor_weights),
            difficulty=difficulty
            if isinstance(difficulty, DifficultyModel) or difficulty is None
            else DifficultyModel.from_options(difficulty),
            repeat_corr=float(repeat_corr),
            group_corr=float(group_corr),
            switch_prob=float(switch_prob),
        )
        self._prepared: dict[str, _Prepared] = {}
        self._workers: dict[tuple[int, str, str, tuple[str, ...], str], _Worker] = {}
        self._wrong_edges: dict[int, tuple[float, ...]] = {}

    # ------------------------------------------------------------------ setup

    def add_items(self, items: Mapping[str, SimItem]) -> None:
        """Add (or replace) answer-key entries; cached draws for replaced keys are dropped."""
        for key, item in items.items():
            self.answer_key[key] = item
            self._prepared.pop(key, None)

    def column_for(self, domain: str) -> str:
        return self.columns.get(domain) or self.default_column or domain

    # ------------------------------------------------------------------ the draw

    def _prepare(self, key: str) -> _Prepared | None:
        """Per-item constants, computed once: latent difficulty, gold and distractors as written."""
        prepared = self._prepared.get(key)
        if prepared is None:
            item = self.answer_key.get(key)
            if item is None:
                return None
            (u,) = _uniforms(f"{self.seed}|item|{key}", 1)
            gold = _displayed(item.gold, item.kind)
            n_wrong = len(self.params.distractor_weights)
            # distractors are numbers near the gold: the same few strings across items
            wrong = tuple([_displayed(d, item.kind) for d in distractors(item, self.seed, n_wrong)])
            z = _STD_NORMAL.inv_cdf(u)
            if self.params.difficulty is not None:
                z, _ = self.params.difficulty.latent(item.domain, item.visible_x, z)
            rho = self.rho_for(item.domain)
            g = self.params.group_corr
            if rho + g >= 1.0:
                raise ValueError(f"rho {rho} of domain {item.domain!r} plus group_corr {g} must stay below 1")
            prepared = _Prepared(
                item,
                self.column_for(item.domain),
                z,
                gold,
                normalize_answer(gold, item.kind),
                wrong,
                math.sqrt(rho) * z,
                math.sqrt(1.0 - rho - g),
                math.sqrt(g),
            )
            self._prepared[key] = prepared
        return prepared

    def _pick_wrong(self, prepared: _Prepared, u: float, nonint: float = 0.0) -> str:
        """A distractor by popularity; with probability ``nonint`` a whole-number one is stated as a
        number that is not whole (a real model's wrong arithmetic often is: ``11.75``, ``1.5``)."""
        edges = self._edges(len(prepared.wrong))
        k = next((i for i, edge in enumerate(edges) if u < edge), len(edges) - 1)
        answer = prepared.wrong[k]
        if nonint <= 0.0 or prepared.item.kind != "numeric" or not _CANONICAL_INT.fullmatch(answer):
            return answer
        low, high = (edges[k - 1] if k else 0.0), edges[k]
        # u's place within its bin is a uniform of its own
        return f"{answer}.5" if (u - low) / max(high - low, 1e-12) < nonint else answer

    def _other_wrong(self, prepared: _Prepared, majority_key: str, own: str) -> str:
        """The call's own wrong answer, or the first distractor that is not the majority's answer."""
        kind = prepared.item.kind
        for answer in (own, *prepared.wrong):
            if _normalized(answer, kind) != majority_key:
                return answer
        return own

    def _edges(self, n: int) -> tuple[float, ...]:
        """The cumulative shares of the first ``n`` distractor weights (the popularity of wrong answers)."""
        edges = self._wrong_edges.get(n)
        if edges is None:
            weights = self.params.distractor_weights[:n]
            total = sum(weights) or 1.0
            acc, out = 0.0, []
            for w in weights:
                acc += w / total
                out.append(acc)
            edges = self._wrong_edges[n] = tuple(out)
        return edges

    def visible_score(self, key: str) -> float | None:
        """The item's visible difficulty score ``d`` (None: no difficulty model or no feature)."""
        item = self.answer_key.get(key)
        if item is None or self.params.difficulty is None:
            return None
        return self.params.difficulty.score(item.domain, item.visible_x)

    def accuracy_given_visible(self, agent: Agent, key: str) -> float:
        """P(correct) of the agent's own first attempt on item ``key`` given what the question shows.

        Without a difficulty model this is the agent's marginal accuracy on the item's column.
        """
        item = self.answer_key[key]
        p = expected_accuracy(agent, self.column_for(item.domain), self.params, item.kind)
        difficulty = self.params.difficulty
        if difficulty is None:
            return p
        w = difficulty.share(item.domain)
        rho = self.rho_for(item.domain)
        return conditional_accuracy(p, rho, w, difficulty.score(item.domain, item.visible_x))

    def accuracy_given_item(self, agent: Agent, key: str) -> float:
        """P(correct) of the agent's own first attempt on item ``key`` given the item's whole latent
        difficulty (visible and hidden): what a learner that has seen this item many times can know,
        and no router can know of a new item."""
        item = self._prepare(key)
        if item is None:
            raise KeyError(f"item {key!r} is not in the simulator's answer key")
        a = agent
        worker = self._worker(a.model, item.column, a.pattern or "cot", tuple(a.tools), item.item.kind)
        if worker.p >= 1.0 or worker.threshold is None:
            return 1.0 if worker.p >= 1.0 else 0.0
        spread = math.sqrt(item.own * item.own + item.group * item.group)  # the group draw is not the item's
        if spread == 0.0:
            return float(item.shared < worker.threshold)
        return _STD_NORMAL.cdf((worker.threshold - item.shared) / spread)

    def rho_for(self, domain: str) -> float:
        """The share of the correctness latent that is item difficulty, for an item of ``domain``."""
        difficulty = self.params.difficulty
        return self.params.rho if difficulty is None else difficulty.rho_for(domain, self.params.rho)

    def decide(self, request: CompletionRequest) -> SimOutcome:
        """What the call answers and whether that is correct (no text, no tokens)."""
        d = self._draw(request)
        return SimOutcome(d.answer, d.correct, d.column, d.p, d.source)

    def _worker(
        self, model: ModelSpec, column: str, pattern: str, tools: tuple[str, ...], kind: str
    ) -> _Worker:
        """The constants of a call by ``model`` with ``pattern`` and ``tools`` on a ``column``/``kind``
        item (computed once)."""
        key = (id(model), column, pattern, tools, kind)
        worker = self._workers.get(key)
        if worker is None or worker.model is not model:
            p = shifted(
                skill(model, column), self.params.pattern_shift(pattern) + self.params.tool_shift(tools, kind)
            )
            threshold = _STD_NORMAL.inv_cdf(p) if 0.0 < p < 1.0 else None
            options: Mapping[str, Any] = model.options or {}
            group = str(options.get("group", model.target))
            nonint = float(dict(options.get("nonint_wrong") or {}).get(column, 0.0))
            worker = _Worker(
                model, p, threshold, *self._token_constants(model, pattern, column), group, nonint
            )
            self._workers[key] = worker
        return worker

    def _token_constants(
        self, model: ModelSpec, pattern: str, column: str | None = None
    ) -> tuple[float, float, float]:
        """log(mean tokens) - sigma^2 / 2, first-token seconds and tokens per second of a call."""
        options: Mapping[str, Any] = model.options or {}
        mean = tokens_mean(model, column) * self.params.token_multiplier(pattern)
        sigma = self.params.tokens_sigma
        return (
            math.log(max(mean, 1.0)) - sigma * sigma / 2.0,
            float(options.get("first_token_s", _DEFAULT_FIRST_TOKEN_S)),
            float(options.get("tokens_per_s", _DEFAULT_TOKENS_PER_S)),
        )

    def _call_noise(
        self, u_e: float, u_wrong: float, item_key: str, request: CompletionRequest, pattern: str
    ) -> tuple[float, float]:
        """A call's own standard-normal noise and the uniform that picks its wrong answer; with
        ``repeat_corr`` r > 0, sqrt(r) of the noise is drawn once per (episode sample, item, model,
        pattern), so the same agent asked again shares it; with r = 1 the wrong answer is drawn there
        too, so a repeat says what the first call said (a greedy model asked the same question again)."""
        z = _STD_NORMAL.inv_cdf(u_e)
        r = self.params.repeat_corr
        if r <= 0.0:
            return z, u_wrong
        key = f"{self.seed}|repeat|{item_key}|{request.model.target}|{pattern}|{request.sample_index}"
        u_repeat, u_repeat_wrong = _uniforms(key, 2)
        z_repeat = _STD_NORMAL.inv_cdf(u_repeat)
        if r >= 1.0:
            return z_repeat, u_repeat_wrong
        return math.sqrt(r) * z_repeat + math.sqrt(1.0 - r) * z, u_wrong

    def _group_noise(self, item_key: str, group: str) -> float:
        """The item's standard-normal draw for one model group (shared by the group's calls)."""
        (u,) = _uniforms(f"{self.seed}|group|{item_key}|{group}", 1)
        return _STD_NORMAL.inv_cdf(u)

    def _draw(self, request: CompletionRequest) -> _Draw:
        ctx = request.context
        pattern = ctx.pattern or "cot"
        visible = tuple([v for v in ctx.visible_answers if v and v.strip()])
        call_key = (
            f"{self.seed}|call|{ctx.item_key}|{request.model.target}|{pattern}|"
            f"{request.sample_index}|{ctx.step_index}|" + "\x1f".join(visible)
        )
        u_e, u_wrong, u_choice, u_tokens, u_text = _five_uniforms(call_key)
        item = self._prepare(ctx.item_key)
        if item is None:
            logger.debug("sim: item %r not in the answer key; replying generically", ctx.item_key)
            return _Draw("unknown", False, None, 0.0, "unknown", "text", u_tokens, u_text, None)
        kind = item.item.kind
        worker = self._worker(request.model, item.column, pattern, ctx.tools, kind)
        p = worker.p
        noise, u_own_wrong = self._call_noise(u_e, u_wrong, ctx.item_key, request, pattern)
        latent = item.shared + item.own * noise
        if item.group:
            latent += item.group * self._group_noise(ctx.item_key, worker.group)
        own_correct = p >= 1.0 or (worker.threshold is not None and latent < worker.threshold)
        own_answer = item.gold if own_correct else self._pick_wrong(item, u_own_wrong, worker.nonint)

        answer, correct, source = own_answer, own_correct, "own"
        if visible and (pattern in REVISING_PATTERNS or pattern in FOLLOWING_PATTERNS):
            keys = [_normalized(v, kind) for v in visible]
            counts: dict[str, int] = {}  # the first of the most frequent, as Counter.most_common
            for k in keys:
                counts[k] = counts.get(k, 0) + 1
            majority_key = max(counts, key=counts.__getitem__)
            majority_correct = majority_key == item.gold_key
            majority = (
                item.gold if majority_correct else display_answer(visible[keys.index(majority_key)], kind)
            )
            if pattern in FOLLOWING_PATTERNS:
                if u_choice < self.params.follow_prob:
                    answer, correct, source = majority, majority_correct, "followed"
            elif majority_correct:
                if u_choice < 1.0 - self.params.keep_slip * (1.0 - p):
                    answer, correct, source = item.gold, True, "kept"
                else:
                    answer, correct, source = self._pick_wrong(item, u_wrong), False, "dropped"
            elif own_correct:
                answer, correct, source = item.gold, True, "fixed"
            elif u_choice < self.params.switch_prob:  # flags the wrong majority with another wrong answer
                answer, correct, source = self._other_wrong(item, majority_key, own_answer), False, "switched"
            else:
                answer, correct, source = majority, False, "repeated"
        return _Draw(answer, correct, item.column, p, source, kind, u_tokens, u_text, worker)

    # ------------------------------------------------------------------ the completion

    def _build(self, request: CompletionRequest) -> Completion:
        draw = self._draw(request)
        model = request.model
        pattern = request.context.pattern or "cot"
        worker = draw.worker
        if worker is None:  # an item not in the answer key: the model's token numbers, no skill needed
            worker = _Worker(model, 0.0, None, *self._token_constants(model, pattern))
        z = _STD_NORMAL.inv_cdf(draw.u_tokens)
        tokens = max(1, round(math.exp(worker.log_mean + self.params.tokens_sigma * z)))
        if request.max_tokens and request.max_tokens > 0:
            tokens = min(tokens, request.max_tokens)
        prompt_tokens = math.ceil(sum([len(m.content) for m in request.messages]) / 4)
        latency = worker.first_token_s + tokens / worker.tokens_per_s

        answer_text: str | None
        if draw.source == "unknown":
            answer_text = "Answer: unknown"
            text = "I am not sure how to solve this one; my best guess follows.\n" + answer_text
        elif pattern == "pot" and draw.kind != "code":
            # program of thought: a program that prints the answer (run later); on a code item the
            # program is the function itself, as a real model writes it (the grader reads the block)
            answer_text = None
            text = "\n".join(["```python", f"answer = {draw.answer!r}", "print(answer)", "```"])
        else:
            answer_text = _render_final(draw.answer, draw.kind)
            shift = int(draw.u_text * 1_000_003) % len(_FILLER)
            text = _reasoning_prefix(pattern, max(1, min(8, tokens // 80)), shift) + answer_text
        return Completion(  # positional (text, prompt and completion tokens, cost, flops, latency, model,
            # cached, truncated, queue_s, answer_text): made at every call, and keywords cost a third of it
            text,
            prompt_tokens,
            tokens,
            model.usd(prompt_tokens, tokens),
            model.flops(prompt_tokens, tokens),
            latency,
            model.target,
            False,
            False,
            0.0,
            answer_text if self.answer_text else None,
        )

    def complete(self, request: CompletionRequest) -> Completion:
        completion = self._build(request)
        if self.realtime:
            time.sleep(completion.latency_s)
        return completion

    async def acomplete(self, request: CompletionRequest) -> Completion:
        completion = self._build(request)
        if self.realtime:
            await asyncio.sleep(completion.latency_s)
        return completion


__all__ = [
    "DEFAULT_PATTERN_EFFECTS",
    "DEFAULT_TOKEN_MULTIPLIERS",
    "DEFAULT_TOOL_EFFECTS",
    "KINDS",
    "SimBackend",
    "SimOutcome",
    "SimParams",
    "SkillError",
    "expected_accuracy",
    "expected_call_cost",
    "oracle_agent",
    "shifted",
    "skill",
    "tokens_mean",
]
