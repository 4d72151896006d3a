"""Answer questions with any policy spec: behind ``puppeteer run --policy`` and ``puppeteer serve``.

::

    from puppeteer.serving.orchestrator import Orchestrator

    orch = Orchestrator.load("puppeteer:runs/train/x/best", pool="local")   # or "vote:3", "conductor:..."
    result = orch.answer("What is 17 * 23?")
    result.final_answer, result.steps, result.cost_usd

Policies come from :func:`puppeteer.policies.baselines.make_policy`, so every spec works
(trained ``puppeteer:PATH`` included). Each call builds a fresh, cheap environment around
one task and reuses the evaluation's episode code, so calls may run concurrently from
several threads; the backends (loaded models, response cache) are shared and created once.

A question found verbatim in ``suite`` runs as that item (its gold answer is then known
and graded, and a simulated pool knows it). Any other question is a free task graded by
``grader`` (``exact`` by default; ``numeric``, ``math`` or ``letter`` change the answer
format the agents are asked for); it has no gold answer, so ``correct`` is ``None``.

A policy trained over a range of lambdas (``lam_range``) routes each call at ``lam``
(a call's own, else the orchestrator's), clamped into its trained range with a logged warning;
the result's ``lam`` says which.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.backends.base import Backend
from puppeteer.envs.build import BackendSpec, build_backend
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.lam_range import LamRange
from puppeteer.errors import UserError
from puppeteer.policies.protocol import EpisodeSettings, Policy, as_policy
from puppeteer.policies.registry import make_policy
from puppeteer.tasks import load_suite
from puppeteer.types import Step, Task, Trajectory
from puppeteer.utils.seeding import item_seed
from puppeteer.utils.textsafe import encodable

FREE_SUITE = "free"


class UnknownToSimulator(UserError, ValueError):
    """A question outside the suite, asked of a simulated pool."""


@dataclass(frozen=True)
class OrchestratorResult:
    """One answered question: the final answer, the steps taken and what they cost."""

    question: str
    final_answer: str | None
    steps: tuple[Step, ...]
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    flops: float
    policy: str
    pool: str
    task_id: str
    correct: bool | None
    parse_error: str | None
    trajectory: Trajectory
    lam: float | None = None  # the lambda a conditioned policy routed at (None: a fixed-lambda policy)

    @property
    def calls(self) -> int:
        return len(self.steps)

    @property
    def text(self) -> str:
        """What a chat client sees: the final answer, else the last step's text."""
        if self.final_answer is not None:
            return self.final_answer
        return self.steps[-1].completion.text if self.steps else ""


class Orchestrator:
    """A policy bound to a pool and its backends. Thread-safe: each call runs its own environment."""

    def __init__(
        self,
        policy: Policy | Any,
        pool: Pool,
        spec: str,
        *,
        max_steps: int = 5,
        lam: float = 0.1,
        grader: str = "exact",
        tasks: Sequence[Task] = (),
        backend: Backend | None = None,
        cache: str | Path | None = None,
        seed: int = 0,
    ) -> None:
        self.policy: Policy = as_policy(policy)
        self.pool = pool
        self.spec = spec
        self.max_steps = max_steps
        self.lam = lam
        self.grader = grader
        self.seed = seed
        self._known = {t.question.strip(): t for t in tasks}
        self._owns_backend = backend is None
        self._cache = cache
        self._backend = backend
        self._lock = threading.Lock()
        self.lam_range: LamRange | None = LamRange.of(getattr(self.policy, "lam_range", None))
        if self.lam_range is not None:  # the default, clamped once (one warning, not one per call)
            self.lam = self.lam_range.clamp(lam)

    def episode_lam(self, lam: float | None = None) -> float:
        """The lambda an episode runs at: ``lam`` (else the orchestrator's), clamped into a conditioned
        policy's trained range (a warning is logged when it moves)."""
        if lam is None:
            return self.lam
        return self.lam_range.clamp(lam) if self.lam_range is not None else float(lam)

    @classmethod
    def load(
        cls,
        policy: str | Policy | Any,
        pool: str | Path | Pool = "local",
        *,
        max_steps: int = 5,
        lam: float = 0.1,
        grader: str = "exact",
        suite: str | None = None,
        split: str = "test",
        backend: Backend | None = None,
        cache: str | Path | None = None,
        seed: int = 0,
    ) -> Orchestrator:
        """Build from a policy spec (see ``puppeteer eval --help``) or a policy object."""
        pool = pool if isinstance(pool, Pool) else load_pool(pool)
        if isinstance(policy, str):
            spec, obj = policy, make_policy(policy, pool, max_steps)
        else:
            spec, obj = policy.name, policy
        tasks = load_suite(suite, split) if suite else ()
        return cls(
            obj,
            pool,
            spec,
            max_steps=max_steps,
            lam=lam,
            grader=grader,
            tasks=tasks,
            backend=backend,
            cache=cache,
            seed=seed,
        )

    # ------------------------------------------------------------------ backends
    def backend(self) -> Backend:
        """The shared backend, created on first use (a sim pool learns the known suite items)."""
        with self._lock:
            if self._backend is None:
                self._backend = build_backend(
                    self.pool, tuple(self._known.values()), BackendSpec.of(cache=self._cache)
                )
            return self._backend

    def close(self) -> None:
        """Close the backends this orchestrator created (cache connections, loaded models)."""
        with self._lock:
            backend, self._backend = self._backend, None
        close = getattr(backend, "close", None)
        if self._owns_backend and callable(close):
            close()

    def __enter__(self) -> Orchestrator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ answering
    def task_for(self, question: str, grader: str | None = None, answer: str = "") -> Task:
        """The suite item with this question, else a free task graded by ``grader``."""
        known = self._known.get(question.strip())
        if known is not None:
            return known
        digest = hashlib.blake2b(question.encode(), digest_size=6).hexdigest()
        return Task(
            id=f"{FREE_SUITE}/{digest}",
            question=question,
            answer=answer,
            suite=FREE_SUITE,
            domain=FREE_SUITE,
            grader=grader or self.grader,
        )

    def answer(
        self,
        question: str,
        *,
        grader: str | None = None,
        gold: str = "",
        seed: int | None = None,
        lam: float | None = None,
    ) -> OrchestratorResult:
        """Run the policy on one question; exceptions from backends propagate unchanged.

        Raises :class:`UnknownToSimulator` for a question outside the suite on a simulated pool.
        """
        if not question.strip():
            raise ValueError("the question is empty")
        question = encodable(question)  # lone surrogates would fail every UTF-8 encoder downstream
        refusal = self.refusal(question)
        if refusal is not None:
            raise UnknownToSimulator(refusal)
        return self.run_task(self.task_for(question, grader, gold), seed=seed, lam=lam)

    @property
    def simulated(self) -> bool:
        """Whether every agent runs on the simulator (it answers only items whose gold it knows); a
        backend given by the caller (a test double, a custom router) decides for itself."""
        return self._owns_backend and set(self.pool.backends()) == {"sim"}

    def refusal(self, question: str) -> str | None:
        """Why this question cannot be answered here (None: it can): a simulated pool knows the answers
        of its suite's items only, and would otherwise answer "unknown" and still charge every call."""
        if not self.simulated or question.strip() in self._known:
            return None
        where = (
            f"the {len(self._known)} items of the suite it was given"
            if self._known
            else "no items (no --suite)"
        )
        return (
            f"pool {self.pool.name!r} is simulated: it answers only questions it knows the answer to, "
            f"and it knows {where}; this question is not one of them (use a pool of real models, or "
            "ask a suite item)"
        )

    def run_task(
        self, task: Task, *, seed: int | None = None, lam: float | None = None
    ) -> OrchestratorResult:
        """Run the policy on one task (a suite item or :meth:`task_for`'s free task); ``lam``: this
        call's price of cost (see :meth:`episode_lam`)."""
        question = task.question
        run_seed = item_seed(self.seed if seed is None else seed, task.id)
        policy = self.policy.fork()  # per request: its own plans / record of calls, models shared
        episode_lam = self.episode_lam(lam)
        settings = EpisodeSettings(lam=episode_lam, max_steps=self.max_steps)
        config = policy.configure(settings, [task], [run_seed], self.pool)
        backend = self.backend()
        env = ConductorEnv(config, pool=self.pool, tasks=[task], backend=backend)
        policy.start(env, backend, self._cache)
        traj, _ = policy.episode(env, index=0, seed=run_seed)
        graded = bool(task.answer)
        return OrchestratorResult(
            question=question,
            final_answer=traj.final_answer,
            steps=traj.steps,
            prompt_tokens=traj.prompt_tokens,
            completion_tokens=traj.completion_tokens,
            cost_usd=traj.cost_usd,
            flops=traj.flops,
            policy=self.spec,
            pool=self.pool.name,
            task_id=task.id,
            correct=traj.correct if graded else None,
            parse_error=traj.parse_error,
            trajectory=traj,
            lam=episode_lam if self.lam_range is not None else None,
        )


__all__ = ["Orchestrator", "OrchestratorResult", "UnknownToSimulator"]
