"""Hand-written rules as baselines, and the best rule of a small declared space chosen on training items.

A *rule* says, for one kind of request (a task's ``domain``), who answers:

- ``A``: one call of agent A;
- ``A>B@TRIGGER``: A, then B when :data:`TRIGGERS` ``[TRIGGER]`` fires on A's answer (``silent``: A gave
  no answer; ``not-integer``: it is not a whole number; ``failed-check``: it fails what the question
  shows, a HumanEval function run on its docstring's examples; ``always``: a fixed two-step chain, for
  a verifier or reviser B that reads A's answer). The last answer given stands;
- ``vote(A+B+C)``: each answers alone, the majority answer stands (ties: the first listed).

:class:`KindRules` runs one rule per kind in step mode (``rules:gsm8k=A>B@silent,mmlu=C,*=D``). The
fitted rules (``best-single``, ``best-kind``, ``best-rule``) choose theirs when the run starts, on the
*training* items of the run's suite at the run's lambda, by value = accuracy - lambda x mean cost per
item in the run's cost model (the workflow-mode return, :func:`rule_value`), from every solver's
answer alone on each item (:mod:`puppeteer.policies.rule_fit`). So a rule needs no training and no
look at the items it is measured on, and a learned policy has to beat it to show that it learned.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from puppeteer.agents.pool import Pool
from puppeteer.envs.build import EnvConfig
from puppeteer.policies.protocol import EpisodeRecord, EpisodeSettings, StepRunner
from puppeteer.tasks.signals import TRIGGERS
from puppeteer.types import Task, TrainItems

if TYPE_CHECKING:
    from puppeteer.backends.base import Backend
    from puppeteer.envs.env import ConductorEnv

_VOTE = re.compile(r"^vote\((.+)\)$")


@dataclass(frozen=True)
class Rule:
    """One kind's rule: ``form`` is ``one``, ``escalate`` or ``vote``."""

    form: str
    agents: tuple[str, ...]
    trigger: str | None = None

    def __post_init__(self) -> None:
        sizes = {"one": (1, 1), "escalate": (2, 2), "vote": (2, 99)}
        if self.form not in sizes:
            raise ValueError(f"a rule is one, escalate or vote, got {self.form!r}")
        low, high = sizes[self.form]
        if not low <= len(self.agents) <= high:
            raise ValueError(f"a {self.form} rule takes {low}-{high} agents, got {list(self.agents)}")
        if (self.form == "escalate") != (self.trigger is not None):
            raise ValueError("an escalate rule, and only it, names a trigger")
        if self.trigger is not None and self.trigger not in TRIGGERS:
            raise ValueError(f"unknown trigger {self.trigger!r}; known: {', '.join(TRIGGERS)}")
        if self.form == "vote" and len(set(self.agents)) != len(self.agents):
            raise ValueError(f"a vote needs distinct agents, got {list(self.agents)}")

    @property
    def text(self) -> str:
        if self.form == "one":
            return self.agents[0]
        if self.form == "escalate":
            return f"{self.agents[0]}>{self.agents[1]}@{self.trigger}"
        return "vote(" + "+".join(self.agents) + ")"

    @classmethod
    def parse(cls, text: str) -> Rule:
        """``A``, ``A>B@TRIGGER`` or ``vote(A+B+C)``."""
        text = text.strip()
        vote = _VOTE.match(text)
        if vote:
            return cls("vote", tuple(a.strip() for a in vote.group(1).split("+")))
        if ">" in text:
            first, _, rest = text.partition(">")
            second, at, trigger = rest.partition("@")
            if not at:
                raise ValueError(f"an escalation is A>B@TRIGGER ({', '.join(TRIGGERS)}), got {text!r}")
            return cls("escalate", (first.strip(), second.strip()), trigger.strip())
        if not text or any(c in text for c in "()@+"):
            raise ValueError(f"a rule is A, A>B@TRIGGER or vote(A+B+...), got {text!r}")
        return cls("one", (text,))

    def calls(self) -> tuple[str, ...]:
        """The agents in the order they are called (a vote's first-listed member last: it wins ties)."""
        return self.agents[::-1] if self.form == "vote" else self.agents


@dataclass
class KindRules:
    """Step mode: the rule of each item's kind (``*``: any other kind). Reads the kind of each item
    from the tasks it is configured with (:class:`RulePolicy`), so one rule runs per episode."""

    routes: tuple[tuple[str, Rule], ...]
    ids: Mapping[str, int]  # agent name -> id in the pool it was built for
    name: str = ""
    kinds: dict[str, str] = field(default_factory=dict)  # task id -> kind
    aggregate: str = "vote"  # with one or two answers a tie goes to the later: the last answer stands
    episode_state: bool = True  # the current rule: each concurrent episode gets its own copy
    _rule: Rule | None = None

    def __post_init__(self) -> None:
        if not self.name:
            self.name = "rules:" + ",".join(f"{k}={r.text}" for k, r in self.routes)

    @property
    def reads_checks(self) -> bool:
        return any(r.trigger == "failed-check" for _, r in self.routes)

    def rule(self, kind: str) -> Rule:
        table = dict(self.routes)
        found = table.get(kind, table.get("*"))
        if found is None:
            raise ValueError(f"{self.name} names no rule for kind {kind!r} (add *=RULE)")
        return found

    def reset(self, task_id: str) -> None:
        kind = self.kinds.get(task_id)
        if kind is None:
            raise RuntimeError(f"{self.name}: item {task_id!r} was not configured")
        self._rule = self.rule(kind)

    def act(self, obs: dict[str, Any], rng: np.random.Generator) -> int:
        rule = self._rule
        if rule is None:
            raise RuntimeError(f"{self.name}: act() before reset()")
        terminator = len(obs["mask"]) - 1
        step = int(obs["step"])
        calls = rule.calls()
        if step >= len(calls):
            return terminator
        if (
            step == 1
            and rule.form == "escalate"
            and not TRIGGERS[rule.trigger or ""](np.asarray(obs["signals"]))
        ):
            return terminator
        return self.ids[calls[step]]


def kind_rules(routes: Sequence[tuple[str, Rule]], pool: Pool, name: str = "") -> KindRules:
    """Rules checked against ``pool`` (every agent named exists)."""
    ids = {a: pool.index(a) for _, r in routes for a in r.agents}
    if any(i == pool.terminator_id for i in ids.values()):
        raise ValueError("the terminator is not an agent that can answer")
    return KindRules(tuple(routes), ids, name=name)


class RulePolicy:
    """A :class:`KindRules` under the policy contract: learns each item's kind when configured. With a
    ``fit`` function, the rules themselves are chosen then (on the suite's training items)."""

    def __init__(
        self,
        name: str,
        rules: KindRules | None = None,
        fit: Callable[[EpisodeSettings, Sequence[Task], Pool], KindRules] | None = None,
        fit_items: int | None = None,
    ) -> None:
        if (rules is None) == (fit is None):
            raise ValueError("give rules or a fit, not both")
        self.name = name
        self.rules = rules
        self._fit = fit
        self._runner: StepRunner | None = None
        self.fit_items = fit_items  # how many of the suite's training items a fit chooses on
        self.train_items: TrainItems | None = None  # set when a fit has chosen the rules

    def configure(
        self, settings: EpisodeSettings, tasks: Sequence[Task], seeds: Sequence[int], pool: Pool
    ) -> EnvConfig:
        if self._fit is not None:
            self.rules = self._fit(settings, tasks, pool)
            if tasks:
                self.train_items = TrainItems(tasks[0].suite, "train", self.fit_items)
        assert self.rules is not None
        for kind in {t.domain for t in tasks}:
            self.rules.rule(kind)  # a kind without a rule fails the run now, not item by item
        self.rules.kinds.update({t.id: t.domain for t in tasks})
        self._runner = StepRunner(self.rules)
        return self._runner.configure(settings, tasks, seeds, pool)

    def start(self, env: ConductorEnv, shared: Backend | None, cache: str | Path | None = None) -> None:
        return None

    def episode(
        self, env: ConductorEnv, *, index: int, seed: int, options: Mapping[str, Any] | None = None
    ) -> EpisodeRecord:
        if self._runner is None:
            raise RuntimeError(f"{self.name}: configure() first")
        trajectory, extra = self._runner.fork().episode(env, index=index, seed=seed, options=options)
        return trajectory, {
            **extra,
            "rule": self.rules.rule(env.tasks[index].domain).text if self.rules else "",
        }

    def fork(self) -> RulePolicy:
        twin = copy.copy(self)  # the runner forks a fresh copy of the rules per episode
        return twin


# --------------------------------------------------------------------------- specs

RULE_SPEC_FORMS: tuple[str, ...] = (
    "rules:K=RULE,...,*=RULE  step mode: a rule per kind; RULE is A, A>B@TRIGGER (B when TRIGGER fires on"
    " A's answer: " + ", ".join(TRIGGERS) + ") or vote(A+B+C)",
    "best-single[:N[:COST]]  the best single agent on the first N training items (default 200) at the"
    " run's lambda (COST: the cost model, default the run's)",
    "best-kind[:N[:COST]]    the best single agent per kind, chosen the same way",
    "best-rule[:N[:COST]]    per kind the best rule (one agent, an escalation on a trigger, a recorded"
    " chain, a vote of 3), chosen the same way",
)


def _rules(arg: str, pool: Pool, max_steps: int) -> RulePolicy:
    routes = []
    for part in (p.strip() for p in arg.split(",") if p.strip()):
        kind, eq, text = part.partition("=")
        if not eq or not kind.strip():
            raise ValueError(f"rules takes KIND=RULE pairs, got {part!r}")
        rule = Rule.parse(text)
        if len(rule.agents) > max_steps:
            raise ValueError(f"{rule.text} calls {len(rule.agents)} agents; max_steps is {max_steps}")
        routes.append((kind.strip(), rule))
    if not routes or len({k for k, _ in routes}) != len(routes):
        raise ValueError("rules needs KIND=RULE pairs, each kind once")
    rules = kind_rules(routes, pool)
    return RulePolicy(rules.name, rules=rules)


FITTED_FORMS = ("single", "kind", "rule")
FITTED_RULES = tuple(f"best-{f}" for f in FITTED_FORMS)
"""The rule specs chosen on a suite's training items at the run's lambda (``best-rule[:N[:COST]]``)."""


def is_fitted(spec: str) -> bool:
    """Whether a policy spec is a rule fitted at the run's lambda (so each lambda has its own)."""
    return spec.split(":", 1)[0] in FITTED_RULES


RULE_KINDS: Mapping[str, Callable[[str, Pool, int], RulePolicy] | str] = MappingProxyType(
    {
        "rules": _rules,
        **{f"best-{f}": f"puppeteer.policies.rule_fit:best_{f}" for f in FITTED_FORMS},
    }
)
"""The registry's rule kinds (the fitted ones by ``module:function``: imported on first use)."""
