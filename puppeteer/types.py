"""Core value types shared by every layer: frozen dataclasses, no behaviour beyond small helpers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from puppeteer.utils.fastinit import fast_init

Role = Literal["system", "user", "assistant", "tool"]

EMPTY: Mapping[str, Any] = MappingProxyType({})


@fast_init  # built at every env step (puppeteer/utils/fastinit.py)
@dataclass(frozen=True)
class Message:
    role: Role
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class ModelSpec:
    """One model behind one backend.

    ``name`` is the pool-local label, ``backend`` a key of the backend registry and
    ``target`` what that backend needs to find the model (a litellm model string,
    an embedded model key, or a simulated worker name).
    Prices are USD per million tokens; ``params_b`` (billions of parameters) feeds
    the FLOPs proxy ``2 * params * tokens``. ``prefill_tps`` / ``decode_tps`` (optional) are the
    model's single-stream speed in tokens per second on a reference machine
    (``puppeteer pool calibrate``); with both, :meth:`model_seconds` prices a call as the
    time it takes alone there, whatever batch or load it really ran under.
    """

    name: str
    backend: str
    target: str
    params_b: float
    price_in: float = 0.0
    price_out: float = 0.0
    options: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    prefill_tps: float | None = None
    decode_tps: float | None = None

    def __post_init__(self) -> None:
        for name in ("prefill_tps", "decode_tps"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"model {self.name!r}: {name} must be positive, got {value!r}")

    @property
    def has_speed(self) -> bool:
        return self.prefill_tps is not None and self.decode_tps is not None

    def model_seconds(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """Single-stream seconds of one call at the declared speed (None without one)."""
        if self.prefill_tps is None or self.decode_tps is None:
            return None
        return prompt_tokens / self.prefill_tps + completion_tokens / self.decode_tps

    def usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.price_in + completion_tokens * self.price_out) / 1e6

    def flops(self, prompt_tokens: int, completion_tokens: int) -> float:
        return 2.0 * self.params_b * 1e9 * (prompt_tokens + completion_tokens)


@dataclass(frozen=True)
class Agent:
    """An agent is a name plus (model, reasoning pattern, tools)."""

    name: str
    model: ModelSpec
    pattern: str
    tools: tuple[str, ...] = ()
    description: str = ""
    max_tokens: int = 512


@dataclass(frozen=True)
class Task:
    """One item of a suite. ``domain`` names the skill column the item belongs to."""

    id: str
    question: str
    answer: str
    suite: str
    domain: str
    grader: str
    meta: Mapping[str, Any] = field(default_factory=lambda: EMPTY)


@fast_init  # built at every env step (puppeteer/utils/fastinit.py)
@dataclass(frozen=True)
class CallContext:
    """What the executor tells a backend about a call beyond the messages.

    Real backends ignore it; the simulator uses it (``item_key`` to find the item in
    its answer key, ``pattern`` for the reasoning-pattern effect). It never carries
    the gold answer.
    """

    item_key: str = ""
    pattern: str = ""
    step_index: int = 0
    tools: tuple[str, ...] = ()
    visible_answers: tuple[str, ...] = ()


@fast_init  # built at every env step (puppeteer/utils/fastinit.py)
@dataclass(frozen=True)
class CompletionRequest:
    model: ModelSpec
    messages: tuple[Message, ...]
    max_tokens: int = 512
    temperature: float = 0.0
    sample_index: int = 0
    stop: tuple[str, ...] = ()
    context: CallContext = field(default_factory=CallContext)
    # a GBNF grammar the completion must follow (constrained decoding; the llamacpp backend applies
    # it, others refuse it)
    grammar: str | None = None


@fast_init  # built at every env step (puppeteer/utils/fastinit.py)
@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    flops: float
    latency_s: float
    model: str
    cached: bool = False
    truncated: bool = False  # generation stopped at max_tokens (finish reason "length")
    # seconds the call waited for the model before it ran (a local backend's queue); not in latency_s
    queue_s: float = 0.0
    # a suffix of ``text`` that states the answer, set by a backend that vouches that the text before
    # it holds nothing an answer extractor reads (no answer marker, box, number, option letter, code
    # fence or continuation marker), so extracting from it gives what extracting from ``text`` gives
    # (the simulator writes its texts so). None: only the whole text says. Not part of saved records.
    answer_text: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@fast_init  # built at every env step (puppeteer/utils/fastinit.py)
@dataclass(frozen=True)
class Step:
    """One agent activation inside an episode."""

    index: int
    agent_id: int
    agent_name: str
    subtask: str
    visible: tuple[int, ...]
    completion: Completion
    answer: str | None
    tool_calls: int = 0


FinalChoice = str | int
"""How a workflow's final answer is chosen: ``"last"``, ``"vote"`` or a step index (the plan's ``final``)."""


@dataclass(frozen=True)
class Workflow:
    """The conductor's action: three aligned lists, and optionally the plan's ``final`` (which answer
    is final: ``"last"``, ``"vote"`` or a step index; None: the env's configured choice)."""

    model_id: tuple[int, ...]
    subtasks: tuple[str, ...]
    access_list: tuple[str | tuple[int, ...], ...]
    final: FinalChoice | None = None

    def __len__(self) -> int:
        return len(self.model_id)


@dataclass(frozen=True)
class TrainItems:
    """The items a policy was trained (or fitted) on: the first ``n`` of ``suite``/``split`` (None: all).
    Recorded in an evaluation's results so ``puppeteer ab`` can tell arms trained apart."""

    suite: str
    split: str
    n: int | None = None

    def __str__(self) -> str:
        return f"{self.suite}/{self.split}" + (f" (first {self.n})" if self.n is not None else " (all)")


@dataclass(frozen=True)
class ConductorAction:
    """A workflow-mode action with the generation that wrote it: the conductor's ``text`` and its
    ``completion`` (tokens, seconds, USD), so the episode's cost counts the conductor's own call.
    ``model``: the conductor's model, for cost models that price by it (FLOPs, declared speeds).
    A plain string action carries no generation: its episode's cost has no conductor part."""

    text: str
    completion: Completion | None = None
    model: ModelSpec | None = None


@fast_init  # built at every env step (puppeteer/utils/fastinit.py)
@dataclass(frozen=True)
class Trajectory:
    task_id: str
    suite: str
    mode: str
    steps: tuple[Step, ...]
    final_answer: str | None
    correct: bool
    reward: float
    parse_error: str | None = None
    workflow: Workflow | None = None
    # how the final answer was chosen: "last", "vote" or "step k" (a step the plan named, 0-based)
    final_choice: str | None = None
    # the conductor's own tokens counted in the episode's cost (workflow mode; None: no generation came
    # with the action, e.g. a fixed plan). The token properties below are the workers' alone.
    conductor_tokens: int | None = None

    @property
    def prompt_tokens(self) -> int:
        return sum(s.completion.prompt_tokens for s in self.steps)

    @property
    def completion_tokens(self) -> int:
        return sum(s.completion.completion_tokens for s in self.steps)

    @property
    def cost_usd(self) -> float:
        return sum(s.completion.cost_usd or 0.0 for s in self.steps)

    @property
    def flops(self) -> float:
        return sum(s.completion.flops for s in self.steps)
