"""Baseline policies, runnable like any learned policy.

Most baselines are fixed workflows (the conductor's action space): a :class:`WorkflowPolicy`
plans a :class:`~puppeteer.types.Workflow` for a task and the environment runs it in
``mode="workflow"`` with the policy's ``aggregate`` rule. Two baselines act step by step
(:class:`RandomStep` and :class:`LearnedStep`, the trained puppeteer) and follow the
:class:`~puppeteer.policies.base.StepPolicy` contract.

:func:`puppeteer.policies.registry.make_policy` builds any of them from a short text spec (see
:data:`SPEC_FORMS`); :func:`~puppeteer.policies.protocol.as_policy` runs them.

Solver steps get the task's question itself as their subtask, so the first call of every
baseline on an item is the same request: a response cache reuses it across baselines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from puppeteer.agents.pool import Pool
from puppeteer.envs.aggregate import CASCADE
from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.workflow import CASCADE_TRIGGERS
from puppeteer.policies.base import StepPolicy
from puppeteer.policies.conductor import CONDUCTOR_SPEC_FORMS
from puppeteer.tasks.signals import LAST_ANSWERED
from puppeteer.types import Task, TrainItems, Workflow

if TYPE_CHECKING:
    from puppeteer.backends.sim import SimParams

REVISE_SUBTASK = "Review your earlier answer above: look for mistakes, then give your corrected final answer."
AGGREGATE_SUBTASK = (
    "Several independent solutions to the problem are shown above. Compare them, resolve any "
    "disagreement, and give the single best final answer."
)


@runtime_checkable
class WorkflowPolicy(Protocol):
    """Plans a whole workflow for a task; the environment runs it in workflow mode."""

    name: str
    aggregate: str  # "vote" or "last": how the steps' answers become the final answer

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow: ...


AgentRef = str | int


# --------------------------------------------------------------------------- helpers


def resolve_agent(pool: Pool, ref: AgentRef) -> int:
    """An agent id from a name or an id (an int or a string of digits); the Terminator is not an agent."""
    if isinstance(ref, str) and ref.strip().isdigit():
        ref = int(ref.strip())
    if isinstance(ref, int):
        pool.agent(ref)  # raises IndexError with the valid range
        return ref
    agent_id = pool.index(ref.strip())
    if agent_id == pool.terminator_id:
        raise KeyError("the terminator is not an agent that can answer")
    return agent_id


def strongest_agents(pool: Pool, k: int) -> tuple[int, ...]:
    """The ``k`` agents presumed strongest without looking at any task: independent solvers first.

    Order: agents whose pattern does not build on earlier work (solvers) before revisers and
    summarisers; within each group by model size (``params_b``) descending, then pool order.
    Domain-blind on purpose: a baseline must not use the skill table (that is the oracle's job).
    """
    if not 1 <= k <= len(pool):
        raise ValueError(f"k must be in 1..{len(pool)} for pool {pool.name!r}, got {k}")
    order = sorted(range(len(pool)), key=lambda i: (pool.reads_context(i), -pool.agent(i).model.params_b, i))
    return tuple(order[:k])


def default_chain(pool: Pool) -> tuple[int, ...]:
    """The strongest solver followed by the strongest reviser (verify/critique/refine/reflect) if any."""
    solver = strongest_agents(pool, 1)[0]
    revisers = [i for i in range(len(pool)) if pool.reads_context(i) and pool.agent(i).pattern != "summarize"]
    if revisers:
        return (solver, min(revisers, key=lambda i: (-pool.agent(i).model.params_b, i)))
    return strongest_agents(pool, min(2, len(pool)))


def default_aggregator(pool: Pool) -> int:
    """A summarising agent for mixture-of-agents if the pool has one, else the strongest agent."""
    summarizers = [i for i in range(len(pool)) if pool.agent(i).pattern == "summarize"]
    if summarizers:
        return min(summarizers, key=lambda i: (-pool.agent(i).model.params_b, i))
    return strongest_agents(pool, 1)[0]


def _names(pool: Pool, refs: Sequence[AgentRef]) -> str:
    return ",".join(pool.agent(resolve_agent(pool, r)).name for r in refs)


def _workflow(
    ids: Sequence[int], subtasks: Sequence[str], access: Sequence[str | tuple[int, ...]]
) -> Workflow:
    return Workflow(model_id=tuple(ids), subtasks=tuple(subtasks), access_list=tuple(access))


# --------------------------------------------------------------------------- workflow baselines


@dataclass(frozen=True)
class ByKind:
    """One call of the agent named for the task's kind (its domain: ``gsm8k``, ``mmlu`` ...), ``*`` for
    any other kind: the fixed router that a learned one is measured by on mixed traffic. It reads the
    kind from the task's label, which a learned router has to infer from the question text."""

    routes: tuple[tuple[str, str], ...]  # (kind, agent name)
    aggregate: str = "last"

    @property
    def name(self) -> str:
        return "bykind:" + ",".join(f"{k}={a}" for k, a in self.routes)

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow:
        table = dict(self.routes)
        agent = table.get(task.domain, table.get("*"))
        if agent is None:
            raise ValueError(f"{self.name} names no agent for kind {task.domain!r} (add *=AGENT)")
        return _workflow([pool.index(agent)], [task.question], [()])


@dataclass(frozen=True)
class SingleAgent:
    """One call of one agent."""

    agent: AgentRef
    aggregate: str = "last"

    @property
    def name(self) -> str:
        return f"single:{self.agent}"

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow:
        return _workflow([resolve_agent(pool, self.agent)], [task.question], [()])


@dataclass(frozen=True)
class RandomWorkflow:
    """Uniformly random agents, a uniformly random length in ``1..max_steps``, each step sees all earlier."""

    max_steps: int = 5
    aggregate: str = "last"
    name: str = "random"

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError("max_steps must be >= 1")

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow:
        length = int(rng.integers(1, self.max_steps + 1))
        ids = [int(a) for a in rng.integers(0, len(pool), size=length)]
        return _workflow(ids, [task.question] * length, ["all"] * length)


@dataclass(frozen=True)
class FixedChain:
    """The given agents in order, each seeing all earlier steps; the last answer counts."""

    agents: tuple[AgentRef, ...]
    aggregate: str = "last"

    def __post_init__(self) -> None:
        if not self.agents:
            raise ValueError("a chain needs at least one agent")

    @property
    def name(self) -> str:
        return "chain:" + ",".join(map(str, self.agents))

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow:
        ids = [resolve_agent(pool, a) for a in self.agents]
        return _workflow(ids, [task.question] * len(ids), ["all"] * len(ids))


@dataclass(frozen=True)
class Escalation:
    """A cascade plan (``final = 'cascade:TRIGGER'``, run under ``aggregate="cascade"``): the agents in
    order, each answering the question alone, each after the first only when the trigger fires on the
    answer before it; the last answer given stands (the workflow form of a rule's ``A>B@TRIGGER``)."""

    agents: tuple[AgentRef, ...]
    trigger: str
    aggregate: str = "cascade"

    def __post_init__(self) -> None:
        if len(self.agents) < 2:
            raise ValueError("an escalation needs two agents or more")
        if self.trigger not in CASCADE_TRIGGERS:
            raise ValueError(
                f"an escalation's trigger is one of {', '.join(CASCADE_TRIGGERS)}, got {self.trigger!r}"
            )

    @property
    def name(self) -> str:
        return "escalate:" + ",".join(map(str, self.agents)) + f"@{self.trigger}"

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow:
        ids = [resolve_agent(pool, a) for a in self.agents]
        alone = _workflow(ids, [task.question] * len(ids), [()] * len(ids))
        return replace(alone, final=f"{CASCADE}{self.trigger}")


@dataclass(frozen=True)
class MajorityVote:
    """Self-consistency across the pool: independent answers (access ``[]``), majority vote.

    Give ``agents`` explicitly, or ``k`` to take the ``k`` strongest (:func:`strongest_agents`).
    With a deterministic real backend (temperature 0) repeating one agent repeats one answer,
    so vote over distinct agents. Ties go to the first member listed (the strongest for ``k``):
    members run in reverse order because the vote breaks ties by the most recent answer.
    (Measured on the local pool before this rule: 14 of the 15 GSM8K items a 3-way vote lost
    against its first member alone were three-way ties won by the weakest, last member.)
    """

    agents: tuple[AgentRef, ...] = ()
    k: int | None = None
    aggregate: str = "vote"

    def __post_init__(self) -> None:
        if bool(self.agents) == (self.k is not None):
            raise ValueError("give either agents or k")
        if self.k is not None and self.k < 1:
            raise ValueError("k must be >= 1")

    @property
    def name(self) -> str:
        return f"vote:{self.k}" if self.k is not None else "vote:" + ",".join(map(str, self.agents))

    def members(self, pool: Pool) -> tuple[int, ...]:
        if self.k is not None:
            return strongest_agents(pool, self.k)
        return tuple(resolve_agent(pool, a) for a in self.agents)

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow:
        ids = self.members(pool)[::-1]  # first-listed member last: it wins ties
        return _workflow(ids, [task.question] * len(ids), [()] * len(ids))


@dataclass(frozen=True)
class MixtureOfAgents:
    """Independent proposers, then an aggregator that sees all of them; the aggregator's answer counts."""

    proposers: tuple[AgentRef, ...]
    aggregator: AgentRef
    aggregate: str = "last"

    def __post_init__(self) -> None:
        if not self.proposers:
            raise ValueError("mixture-of-agents needs at least one proposer")

    @property
    def name(self) -> str:
        return "moa:" + ",".join(map(str, self.proposers)) + f"|{self.aggregator}"

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow:
        ids = [resolve_agent(pool, a) for a in self.proposers]
        k = len(ids)
        return _workflow(
            [*ids, resolve_agent(pool, self.aggregator)],
            [task.question] * k + [AGGREGATE_SUBTASK],
            [()] * k + [tuple(range(k))],
        )


@dataclass(frozen=True)
class SelfReflection:
    """One agent answers, then revises its answer ``k`` times, each time seeing all earlier steps."""

    agent: AgentRef
    k: int = 2
    aggregate: str = "last"

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ValueError("k must be >= 0")

    @property
    def name(self) -> str:
        return f"reflect:{self.agent}:{self.k}"

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow:
        agent_id = resolve_agent(pool, self.agent)
        return _workflow(
            [agent_id] * (self.k + 1), [task.question] + [REVISE_SUBTASK] * self.k, ["all"] * (self.k + 1)
        )


@dataclass(frozen=True)
class OracleRouter:
    """Sim pools only: per task, the single agent with the best declared accuracy on the task's column.

    This is an upper bound for routing to one agent, not a fair baseline: it reads the skill table.
    Build it with :meth:`from_pool`.
    """

    columns: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    default_column: str | None = None
    params: SimParams | None = None
    aggregate: str = "last"
    name: str = "oracle"

    @classmethod
    def from_pool(cls, pool: Pool) -> OracleRouter:
        from puppeteer.backends.sim import SimBackend

        if "sim" not in pool.backends():
            raise ValueError(
                f"the oracle router needs a simulated pool (backend 'sim' with skill tables); "
                f"pool {pool.name!r} uses backend(s) {', '.join(pool.backends())}"
            )
        if not any("skills" in (a.model.options or {}) for a in pool.agents):
            raise ValueError(f"no agent of pool {pool.name!r} declares a skill table")
        options = dict(pool.backend_options.get("sim", {}))
        options.pop("answer_key", None)
        sim = SimBackend(**options)
        return cls(
            columns=MappingProxyType(dict(sim.columns)), default_column=sim.default_column, params=sim.params
        )

    def column(self, task: Task) -> str:
        return self.columns.get(task.domain) or self.default_column or task.domain

    def plan(self, task: Task, pool: Pool, rng: np.random.Generator) -> Workflow:
        from puppeteer.backends.sim import oracle_agent
        from puppeteer.envs.build import sim_answer_key

        kind = sim_answer_key([task])[task.id].kind
        agent_id = oracle_agent(pool.agents, self.column(task), self.params, kind=kind)
        return _workflow([agent_id], [task.question], [()])


# --------------------------------------------------------------------------- step-mode baselines


@dataclass(frozen=True)
class RandomStep:
    """A random available agent each step; after the first step, the Terminator with probability 1/max_steps.

    The Terminator is never drawn before any agent has acted (that episode would have no answer).
    """

    max_steps: int = 5
    name: str = "random-step"

    def reset(self, task_id: str) -> None:
        return None

    def act(self, obs: dict[str, Any], rng: np.random.Generator) -> int:
        mask = np.asarray(obs["mask"], dtype=bool)
        terminator = len(mask) - 1
        if int(obs["step"]) > 0 and rng.random() < 1.0 / self.max_steps:
            return terminator
        agents = np.flatnonzero(mask[:terminator])
        if agents.size == 0:
            return terminator
        return int(rng.choice(agents))


@dataclass(frozen=True)
class Cascade:
    """Step mode: the agents in order, stopping at the first whose answer was extracted.

    The fixed rule a learned cascade is measured by: call the cheap agent first, escalate only when
    it gave no answer (a crashed program, an unparsable reply). It reads ``obs["signals"]``
    (:mod:`puppeteer.tasks.signals`); after the last agent it stops whatever the answer. Each agent sees
    the earlier steps unless the pool has ``independent_solvers`` (then each member answers alone,
    as when it runs as a single agent).
    """

    agents: tuple[str, ...]
    ids: tuple[int, ...]  # the agents' ids in the pool it was built for
    name: str = "cascade"

    def __post_init__(self) -> None:
        if not self.agents or len(self.ids) != len(self.agents):
            raise ValueError("a cascade needs one id per agent, and at least one agent")

    def reset(self, task_id: str) -> None:
        return None

    def act(self, obs: dict[str, Any], rng: np.random.Generator) -> int:
        terminator = len(obs["mask"]) - 1
        step = int(obs["step"])
        if step >= len(self.agents) or (step > 0 and float(obs["signals"][LAST_ANSWERED]) > 0.5):
            return terminator
        return self.ids[step]


class LearnedStep:
    """The trained puppeteer (``PuppeteerPolicy.save`` directory) acting greedily, or sampling."""

    def __init__(self, path: str | Path, pool: Pool, greedy: bool = True) -> None:
        self.path = Path(path)
        if not (self.path / "policy.json").is_file():
            raise FileNotFoundError(f"no trained policy in {self.path} (expected policy.json and policy.pt)")
        from puppeteer.policies.puppeteer import PuppeteerPolicy  # torch: imported only when needed

        self.policy = PuppeteerPolicy.load(self.path, pool)
        self.greedy = greedy
        self.name = f"puppeteer:{self.path}"
        self.train_items = run_train_items(self.path)
        # the final answer as in training (the run's ``aggregate``; None: the step-mode vote)
        run = _training_run(self.path)
        self.aggregate: str | None = run[1].get("aggregate") if run is not None else None

    @property
    def lam_range(self) -> LamRange | None:
        """The lambdas a conditioned policy was trained over (None: one fixed lambda)."""
        return self.policy.lam_range

    @property
    def reads_checks(self) -> bool:
        """Whether it reads the visible checks' verdicts (a policy trained with the signals does)."""
        return self.policy.reads_checks

    def reset(self, task_id: str) -> None:
        self.policy.reset(task_id)

    def act(self, obs: dict[str, Any], rng: np.random.Generator) -> int:
        import torch

        generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
        return self.policy.choose(self.policy.features(obs), generator, greedy=self.greedy)


def _training_run(policy_dir: Path) -> tuple[Path, Mapping[str, Any]] | None:
    """The training run that saved ``policy_dir`` (the directory or the one above it: ``RUN/best``)
    and its ``config.json``; None where neither holds a training config."""
    import json

    for d in (policy_dir, policy_dir.parent):
        try:
            cfg = json.loads((d / "config.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(cfg, dict) and isinstance(cfg.get("suite"), Mapping) and "name" in cfg["suite"]:
            return d, cfg
    return None


def run_train_items(policy_dir: Path) -> TrainItems | None:
    """The training items of the run that saved ``policy_dir`` (its config's suite; the count its
    ``results.json`` recorded, else the configured one); None where no run says."""
    import json

    run = _training_run(policy_dir)
    if run is None:
        return None
    d, cfg = run
    suite = cfg["suite"]
    try:
        n = json.loads((d / "results.json").read_text()).get("n_train")  # what the split held
    except (OSError, ValueError, AttributeError):
        n = None
    n = n if isinstance(n, int) else suite.get("n_train")
    return TrainItems(str(suite["name"]), str(suite.get("train_split", "train")), n)


# --------------------------------------------------------------------------- the spec registry

Built = WorkflowPolicy | StepPolicy  # what a spec's parser builds (adapted by policies.protocol.as_policy)
Parser = Callable[[str, Pool, int], Built]

SPEC_FORMS: tuple[str, ...] = (
    "single:AGENT          one agent (name or id), e.g. single:qwen1.5b-cot or single:0",
    "bykind:K=A,...,*=B    one agent per kind of task (its domain label), e.g. bykind:mmlu=a,*=b",
    "random                random workflow: random agents, length 1..max_steps, each sees all earlier",
    "chain | chain:A,B,C   agents in order, each sees all earlier (bare: strongest solver -> a verifier)",
    "escalate:A,B@TRIGGER  A, then B alone only if TRIGGER (silent, not-integer, failed-check) fires on A",
    "vote:K | vote:A,B,C   independent answers, majority vote (K: the K strongest solvers)",
    "moa | moa:A,B|C       proposers A,B answer alone, aggregator C sees them (bare: 3 strongest|summarizer)",
    "reflect[:A[:K]]       agent A answers then revises K times (default: strongest, K=2)",
    "oracle                best single agent per task from the skill table (sim pools only)",
    "random-step           step mode: random agent each step, Terminator with probability 1/max_steps",
    "cascade:A,B[,C]       step mode: A, then B only if A gave no answer, and so on",
    "puppeteer:PATH        step mode: a trained PuppeteerPolicy directory, greedy",
    "sb3:PATH              step mode: an sb3/sb3-contrib model directory written by"
    " puppeteer.policies.external.save_sb3 (puppeteer.train.sb3.train_maskable_ppo writes one)",
    *CONDUCTOR_SPEC_FORMS,
)


class SpecError(ValueError):
    """A policy spec that cannot be parsed."""


def _split_list(arg: str, what: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in arg.split(",") if x.strip())
    if not items:
        raise SpecError(f"{what} needs a comma-separated list of agents")
    return items


def _canon(pool: Pool, refs: Sequence[AgentRef]) -> tuple[str, ...]:
    """Agent names for refs (validates them now, so a bad spec fails before any call)."""
    return tuple(_names(pool, refs).split(","))


def _single(arg: str, pool: Pool, max_steps: int) -> Built:
    if not arg:
        raise SpecError("single needs an agent: single:NAME or single:ID")
    return SingleAgent(_canon(pool, [arg])[0])


def _bykind(arg: str, pool: Pool, max_steps: int) -> Built:
    routes = []
    for part in _split_list(arg, "bykind"):
        kind, eq, agent = part.partition("=")
        if not eq or not kind.strip() or not agent.strip():
            raise SpecError(f"bykind takes KIND=AGENT pairs (e.g. bykind:mmlu=a,*=b), got {part!r}")
        routes.append((kind.strip(), _canon(pool, [agent.strip()])[0]))
    if len({k for k, _ in routes}) != len(routes):
        raise SpecError("bykind names a kind twice")
    return ByKind(tuple(routes))


def _random(arg: str, pool: Pool, max_steps: int) -> Built:
    return RandomWorkflow(max_steps=int(arg) if arg else max_steps)


def _chain(arg: str, pool: Pool, max_steps: int) -> Built:
    refs: Sequence[AgentRef] = _split_list(arg, "chain") if arg else default_chain(pool)
    return FixedChain(_canon(pool, refs))


def _escalate(arg: str, pool: Pool, max_steps: int) -> Built:
    agents, at, trigger = arg.partition("@")
    if not at:
        raise SpecError(f"escalate takes A,B@TRIGGER ({', '.join(CASCADE_TRIGGERS)}), got {arg!r}")
    try:
        return Escalation(_canon(pool, _split_list(agents, "escalate")), trigger.strip())
    except ValueError as e:
        raise SpecError(str(e)) from None


def _vote(arg: str, pool: Pool, max_steps: int) -> Built:
    if not arg or arg.strip().isdigit():
        vote = MajorityVote(k=int(arg) if arg else 3)
        vote.members(pool)  # checks k against the pool size now
        return vote
    return MajorityVote(agents=_canon(pool, _split_list(arg, "vote")))


def _moa(arg: str, pool: Pool, max_steps: int) -> Built:
    if not arg:
        return MixtureOfAgents(
            _canon(pool, strongest_agents(pool, min(3, len(pool)))),
            _canon(pool, [default_aggregator(pool)])[0],
        )
    if arg.count("|") != 1:
        raise SpecError("moa takes PROPOSERS|AGGREGATOR, e.g. moa:a,b|c")
    proposers, aggregator = arg.split("|")
    if not aggregator.strip():
        raise SpecError("moa needs an aggregator after '|'")
    return MixtureOfAgents(_canon(pool, _split_list(proposers, "moa")), _canon(pool, [aggregator])[0])


def _reflect(arg: str, pool: Pool, max_steps: int) -> Built:
    agent, _, k = arg.partition(":")
    if k and not k.strip().isdigit():
        raise SpecError(f"reflect:AGENT:K needs an integer K, got {k!r}")
    ref: AgentRef = agent if agent else strongest_agents(pool, 1)[0]
    return SelfReflection(_canon(pool, [ref])[0], k=int(k) if k else 2)


def _oracle(arg: str, pool: Pool, max_steps: int) -> Built:
    return OracleRouter.from_pool(pool)


def _random_step(arg: str, pool: Pool, max_steps: int) -> Built:
    return RandomStep(max_steps=int(arg) if arg else max_steps)


def _cascade(arg: str, pool: Pool, max_steps: int) -> Built:
    agents = _canon(pool, _split_list(arg, "cascade"))
    if len(agents) > max_steps:
        raise SpecError(f"cascade of {len(agents)} agents needs max_steps >= {len(agents)}, got {max_steps}")
    return Cascade(agents, tuple(pool.index(a) for a in agents), name=f"cascade:{','.join(agents)}")


def _puppeteer(arg: str, pool: Pool, max_steps: int) -> Built:
    if not arg:
        raise SpecError("puppeteer needs a directory: puppeteer:PATH")
    return LearnedStep(arg, pool)


def _sb3(arg: str, pool: Pool, max_steps: int) -> Built:
    if not arg:
        raise SpecError("sb3 needs a directory: sb3:PATH")
    from puppeteer.policies.external import load_sb3

    return load_sb3(arg, pool)


def _conductor(arg: str, pool: Pool, max_steps: int) -> Built:
    from puppeteer.policies.conductor import make_conductor

    return make_conductor(arg)  # type: ignore[return-value]


PARSERS: Mapping[str, Parser] = MappingProxyType(
    {
        "single": _single,
        "bykind": _bykind,
        "random": _random,
        "chain": _chain,
        "escalate": _escalate,
        "vote": _vote,
        "moa": _moa,
        "reflect": _reflect,
        "oracle": _oracle,
        "random-step": _random_step,
        "cascade": _cascade,
        "puppeteer": _puppeteer,
        "sb3": _sb3,
        "conductor": _conductor,
    }
)


def default_baseline_specs(pool: Pool) -> tuple[str, ...]:
    """Every single agent, then random, the default chain, vote:3, moa and reflect, as explicit specs."""
    specs = [f"single:{a.name}" for a in pool.agents]
    specs.append("random")
    specs.append("chain:" + _names(pool, default_chain(pool)))
    k = min(3, len(pool))
    specs.append(f"vote:{k}")
    moa = _moa("", pool, 5)
    assert isinstance(moa, MixtureOfAgents)
    specs.append(moa.name)
    reflect = _reflect("", pool, 5)
    assert isinstance(reflect, SelfReflection)
    specs.append(reflect.name)
    return tuple(specs)


__all__ = [
    "AGGREGATE_SUBTASK",
    "PARSERS",
    "REVISE_SUBTASK",
    "SPEC_FORMS",
    "Built",
    "FixedChain",
    "LearnedStep",
    "MajorityVote",
    "MixtureOfAgents",
    "OracleRouter",
    "RandomStep",
    "RandomWorkflow",
    "SelfReflection",
    "SingleAgent",
    "SpecError",
    "WorkflowPolicy",
    "default_aggregator",
    "default_baseline_specs",
    "default_chain",
    "resolve_agent",
    "strongest_agents",
]
