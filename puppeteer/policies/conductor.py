"""The conductor as a policy: a language model that writes a whole workflow as text.

``ConductorPolicy`` turns the environment's conductor prompt (workflow mode) into a completion
through the project's :class:`~puppeteer.backends.base.Backend` protocol, so the response cache,
the embedded llama.cpp models, litellm and transformers all work unchanged. The policy writes
TEXT; the environment parses it (parse failures are recorded and score 0). With recursion on, an
episode may ask the policy to act again (a new planning round with a new prompt).

Spec forms (``make_policy``): see :data:`CONDUCTOR_SPEC_FORMS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.backends import make_router
from puppeteer.backends.base import Backend
from puppeteer.backends.models import EMBEDDED_MODELS
from puppeteer.envs.build import EnvConfig
from puppeteer.envs.conductor_grammar import plan_grammar
from puppeteer.envs.conductor_prompt import ConductorPrompt
from puppeteer.envs.rollout import run_conductor_episode
from puppeteer.envs.workflow import PlanSpace
from puppeteer.policies.protocol import EpisodeRecord, EpisodeSettings
from puppeteer.types import Completion, CompletionRequest, ConductorAction, Message, ModelSpec, Task

if TYPE_CHECKING:
    from puppeteer.agents.pool import Pool
    from puppeteer.envs.env import ConductorEnv

DEFAULT_CONDUCTOR_MODEL = "qwen2.5-coder-1.5b"
DEFAULT_MAX_TOKENS = 256
CONSTRAINED_MAX_TOKENS = 768  # room for ~250 characters of reasoning and 5 steps of ~75-character subtasks
GRAMMAR_BACKENDS = frozenset({"llamacpp"})  # backends that decode under a GBNF grammar
FREE_PREFIX = "free"

CONDUCTOR_SPEC_FORMS: tuple[str, ...] = (
    "conductor             prompted LM conductor: Qwen2.5-Coder-1.5B (embedded GGUF, llama.cpp); on llama.cpp"
    " every plan is decoded under a grammar, so it parses",
    "conductor:free[:...]  the same conductor without the grammar (free text, may not parse)",
    "conductor:KEY         an embedded model: qwen2.5-coder-1.5b | qwen2.5-coder-0.5b | smollm2-135m",
    "conductor:litellm:M   any litellm model string, e.g. conductor:litellm:openai/gpt-4o-mini",
    "conductor:hf:PATH     transformers: an HF model id, a local dir or a GRPO checkpoint (CPU);"
    " PATH#FILE.gguf loads a GGUF file in dir PATH",
    "conductor:grpo:RUN    a conductor trained by `puppeteer train track=conductor` (run dir RUN), planning"
    " with its run's prompt, answer prefix and agents (needs the grpo extra)",
)
# registered in puppeteer.policies.registry; lives in puppeteer.train.grpo.policy (batched generation)
GRPO_RUN_PREFIX = "conductor:grpo:"


@dataclass(frozen=True)
class ConductorCall:
    """One planning round of the conductor LM: its text and its own cost."""

    depth: int
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cost_usd: float
    flops: float
    cached: bool
    truncated: bool
    queue_s: float = 0.0  # waited for the model before running (not in latency_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _params_b(target: str) -> float:
    """Parameters (billions) for the FLOPs proxy: known for embedded models (``KEY`` or ``embedded:KEY``)."""
    model = EMBEDDED_MODELS.get(target.removeprefix("embedded:"))
    return model.params_b if model is not None else 0.0


def conductor_model(spec_arg: str) -> ModelSpec:
    """The conductor's :class:`ModelSpec` from the part of the spec after ``conductor:``."""
    arg = spec_arg.strip()
    if not arg:
        arg = DEFAULT_CONDUCTOR_MODEL
    backend, sep, target = arg.partition(":")
    if sep and backend in ("litellm", "llamacpp", "hf", "transformers"):
        backend = "transformers" if backend == "hf" else backend
    else:
        backend, target = "llamacpp", arg
    if not target:
        raise ValueError(f"conductor:{backend}: needs a model after the colon")
    if backend == "llamacpp" and target not in EMBEDDED_MODELS:
        raise ValueError(f"unknown embedded model {target!r}; known: {', '.join(sorted(EMBEDDED_MODELS))}")
    return ModelSpec(name="conductor", backend=backend, target=target, params_b=_params_b(target))


@dataclass
class ConductorPolicy:
    """Prompt -> generate -> text action. The environment's parser decides what the text means.

    ``backend`` defaults to a router over the built-in backends (own model instances, so the
    conductor's KV prefix survives between items); ``bind(cache=...)`` adds the response cache.
    """

    model: ModelSpec
    max_tokens: int | None = None  # None: CONSTRAINED_MAX_TOKENS when constrained, else DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    backend: Backend | None = None
    backend_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    name: str = ""
    aggregate: str = "last"
    calls: list[ConductorCall] = field(default_factory=list)
    # decode every plan under the round's grammar (conductor_grammar): None = where the backend can
    constrained: bool | None = None

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"conductor:{self.model.backend}:{self.model.target}"

    def bind(self, cache: str | Path | None = None, shared: Backend | None = None) -> None:
        """Create the default backend (with a response cache) unless one was given.

        ``shared`` (the env's router, behind the same response cache): used as is when this
        policy has no backend options of its own, so the conductor and the workers share one
        llama.cpp backend: each model loaded once, one compute lock for all threads, and the
        conductor's plans batched with the workers' calls of the same model.
        """
        if self.backend is None and shared is not None and not self.backend_options:
            self.backend = shared
        if self.backend is None:
            options = {k: dict(v) for k, v in self.backend_options.items()}
            options.setdefault("llamacpp", {}).setdefault("n_ctx", 4096)
            self.backend = make_router(options, cache=cache)

    def reset(self, task_id: str) -> None:
        """A new episode: forget the previous episode's calls."""
        self.calls = []

    # ------------------------------------------------------------------ the Policy contract
    @property
    def model_backends(self) -> tuple[str, ...]:
        """The backend of the conductor's own model (it generates during episodes too)."""
        return (self.model.backend,)

    def configure(
        self, settings: EpisodeSettings, tasks: Sequence[Task], seeds: Sequence[int], pool: Pool
    ) -> EnvConfig:
        """Workflow mode, the last step's answer, ``settings.max_depth`` more planning rounds allowed."""
        return settings.workflow_config(
            self.aggregate, max_depth=settings.max_depth, recursion=settings.recursion
        )

    def start(self, env: ConductorEnv, shared: Backend | None, cache: str | Path | None = None) -> None:
        """One backend for the conductor and the workers (the same response cache): see :meth:`bind`."""
        self.bind(cache, shared=shared)

    def episode(
        self, env: ConductorEnv, *, index: int, seed: int, options: Mapping[str, Any] | None = None
    ) -> EpisodeRecord:
        """Plan (and re-plan, with recursion) until the env ends the episode; the record holds the
        conductor's own calls and every planning round."""
        return run_conductor_episode(env, self, seed=seed, index=index, options=options)

    def fork(self) -> ConductorPolicy:
        """Its own record of calls; the model backend stays shared."""
        return replace(self, calls=[])

    @property
    def constrains(self) -> bool:
        """Whether plans are decoded under a grammar (explicitly, or because the backend can)."""
        return self.constrained if self.constrained is not None else self.model.backend in GRAMMAR_BACKENDS

    @property
    def token_budget(self) -> int:
        if self.max_tokens is not None:
            return self.max_tokens
        return CONSTRAINED_MAX_TOKENS if self.constrains else DEFAULT_MAX_TOKENS

    def grammar(self, space: PlanSpace | None) -> str | None:
        """The GBNF grammar of a planning round (None when unconstrained or the round is unknown)."""
        if space is None or not self.constrains:
            return None
        return plan_grammar(
            space.available,
            space.max_steps,
            self.token_budget,
            self_id=space.self_id,
            allow_empty=space.allow_empty,
            final=space.final,
            cascade=space.cascade,
        ).text

    def request(
        self, prompt: ConductorPrompt, sample_index: int = 0, space: PlanSpace | None = None
    ) -> CompletionRequest:
        return CompletionRequest(
            model=self.model,
            messages=prompt.messages,
            max_tokens=self.token_budget,
            temperature=self.temperature,
            sample_index=sample_index,
            grammar=self.grammar(space),
        )

    def write(
        self,
        prompt: ConductorPrompt,
        depth: int = 0,
        sample_index: int = 0,
        space: PlanSpace | None = None,
    ) -> str:
        """The conductor's completion text for ``prompt`` (recorded in :attr:`calls`)."""
        return self.generate(prompt, depth, sample_index, space).text

    def generate(
        self,
        prompt: ConductorPrompt,
        depth: int = 0,
        sample_index: int = 0,
        space: PlanSpace | None = None,
    ) -> Completion:
        """The conductor's completion for ``prompt`` (recorded in :attr:`calls`)."""
        if self.backend is None:
            self.bind()
        assert self.backend is not None
        c = self.backend.complete(self.request(prompt, sample_index, space))
        self.calls.append(
            ConductorCall(
                depth=depth,
                text=c.text,
                prompt_tokens=c.prompt_tokens,
                completion_tokens=c.completion_tokens,
                latency_s=c.latency_s,
                cost_usd=c.cost_usd or 0.0,
                flops=c.flops,
                cached=c.cached,
                truncated=c.truncated,
                queue_s=c.queue_s,
            )
        )
        return c

    def act(self, obs: Mapping[str, Any], info: Mapping[str, Any] | None = None) -> str:
        """Gym-style: the text action for a workflow-mode observation.

        Uses ``info["conductor_prompt"]`` (chat layout with few-shot turns) when present, else the
        flat ``obs["prompt"]`` as one user message.
        """
        return self.action(obs, info).text

    def action(self, obs: Mapping[str, Any], info: Mapping[str, Any] | None = None) -> ConductorAction:
        """:meth:`act` with the generation that wrote the text, so the env counts the conductor's
        own tokens in the episode's cost (what :meth:`episode` steps the env with)."""
        prompt = (info or {}).get("conductor_prompt")
        if not isinstance(prompt, ConductorPrompt):
            prompt = ConductorPrompt((Message("user", str(obs["prompt"])),))
        space = (info or {}).get("plan_space")
        space = space if isinstance(space, PlanSpace) else None
        c = self.generate(prompt, depth=int(obs.get("depth", 0)), space=space)
        return ConductorAction(c.text, c, self.model)


def make_conductor(arg: str) -> ConductorPolicy:
    """``ConductorPolicy`` from the part of a spec after ``conductor:`` (see CONDUCTOR_SPEC_FORMS)."""
    head, _, rest = arg.strip().partition(":")
    free = head == FREE_PREFIX
    model = conductor_model(rest if free else arg)
    name = "conductor" + (f":{arg.strip()}" if arg.strip() else "")
    return ConductorPolicy(model=model, name=name, constrained=False if free else None)
