"""Choose rules (:mod:`puppeteer.policies.rules`) on a suite's training items at a run's lambda.

Every solver (an agent that does not read earlier work) answers each training item alone, through the
ordinary evaluation (a pool's shipped outcome table replays these calls without a model; the simulator
draws them). A rule's outcome on an item is then composed from those answers: its agents answer
independently, as they do in step mode on a pool of independent solvers (``independent_solvers``: a
later step's call is the single call, replayed, so the composition is exact; on the simulator a later
step draws fresh per-call noise around the same skill, so it is right in distribution). Chains whose
second agent reads the first answer (a verifier) come from the table's recorded two-step chains
(``steps.jsonl.gz``) and enter the space only for kinds whose training items all have them.

A rule's value is accuracy - lambda x mean cost per item in the run's cost model (:func:`rule_value`);
the best of each kind wins, ties going to the cheaper, then to the fewer agents, then by name.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic, TypeVar

from puppeteer.agents.pool import Pool
from puppeteer.backends.replay import read_steps
from puppeteer.envs.aggregate import majority_vote
from puppeteer.envs.reward import COST_MODELS
from puppeteer.policies.protocol import EpisodeSettings
from puppeteer.policies.rules import TRIGGERS, KindRules, Rule, RulePolicy, kind_rules
from puppeteer.tasks.signals import answer_signals
from puppeteer.tasks.visible import VISIBLE_CHECKS
from puppeteer.types import Completion, Task


@dataclass(frozen=True)
class Answer:
    """One agent's answer alone on one item (or a chain's second answer: ``correct`` grades the chain)."""

    correct: bool
    answer: str | None
    cost: float
    check: bool | None = None  # the visible check's verdict (None: the kind has nothing to check)


Singles = Mapping[str, Mapping[str, Answer]]  # task id -> solver -> its answer alone
Chains = Mapping[tuple[str, str], Mapping[str, Answer]]  # (first, second) -> task id -> the second step


def fires(trigger: str, a: Answer) -> bool:
    return TRIGGERS[trigger](answer_signals([a.answer], [a.check]))


def outcome(rule: Rule, task_id: str, singles: Singles, chains: Chains) -> tuple[bool, float] | None:
    """(correct, cost) of ``rule`` on one item; None where the answers it needs were not recorded."""
    row = singles.get(task_id, {})
    if any(a not in row for a in rule.agents if (rule.agents[0], a) not in chains):
        return None
    if rule.form == "one":
        a = row[rule.agents[0]]
        return a.correct, a.cost
    if rule.form == "escalate":
        first, second = rule.agents
        a = row[first]
        if not fires(rule.trigger or "", a):
            return a.correct, a.cost
        if (first, second) in chains:
            b = chains[(first, second)].get(task_id)
            if b is None:
                return None
            return b.correct, a.cost + b.cost
        b = row[second]
        return (b.correct if b.answer is not None else a.correct), a.cost + b.cost
    members = [row[m] for m in rule.calls()]
    winner = majority_vote([m.answer for m in members])
    correct = next((m.correct for m in members if winner is not None and m.answer == winner), False)
    return correct, sum(m.cost for m in members)


def rule_value(
    rule: Rule, items: Sequence[str], singles: Singles, chains: Chains, lam: float
) -> tuple[float, float] | None:
    """(accuracy - lam x mean cost, mean cost) over ``items``; None where any item lacks an answer."""
    got = [outcome(rule, t, singles, chains) for t in items]
    if not items or any(g is None for g in got):
        return None
    correct = sum(g[0] for g in got if g is not None) / len(items)
    cost = sum(g[1] for g in got if g is not None) / len(items)
    return correct - lam * cost, cost


def rule_space(
    solvers: Sequence[str], chains: Iterable[tuple[str, str]] = (), vote_k: int = 3, forms: str = "rule"
) -> list[Rule]:
    """``single``/``kind``: every solver alone; ``rule``: also every solver escalating to another on
    each trigger but ``always``, each recorded chain (``always``, and on each trigger), and every vote
    of ``vote_k`` solvers (members in ``solvers`` order: the first listed wins ties)."""
    space = [Rule("one", (a,)) for a in solvers]
    if forms != "rule":
        return space
    triggers = [t for t in TRIGGERS if t != "always"]
    space += [Rule("escalate", (a, b), t) for a, b in itertools.permutations(solvers, 2) for t in triggers]
    space += [Rule("escalate", pair, t) for pair in chains for t in ("always", *triggers)]
    if 2 <= vote_k <= len(solvers):
        space += [Rule("vote", c) for c in itertools.combinations(solvers, vote_k)]
    return space


def choose(
    space: Sequence[Rule], items: Sequence[str], singles: Singles, chains: Chains, lam: float
) -> tuple[Rule, float]:
    """The best rule of ``space`` on ``items`` and its value (ties: cheaper, fewer agents, name)."""
    scored = []
    for rule in space:
        v = rule_value(rule, items, singles, chains, lam)
        if v is not None:
            scored.append(((-v[0], v[1], len(rule.agents), rule.text), rule, v[0]))
    if not scored:
        raise ValueError("no rule of the space has an answer on every training item")
    _, best, value = min(scored, key=lambda s: s[0])
    return best, value


def _cost_of(pool: Pool, agent: str, completion: Completion, cost_model: str) -> float:
    return COST_MODELS[cost_model](completion, pool.agent(pool.index(agent)).model)


def solver_names(pool: Pool) -> list[str]:
    return [a.name for i, a in enumerate(pool.agents) if not pool.reads_context(i)]


def training_answers(
    pool: Pool, tasks: Sequence[Task], cost_model: str, seed: int = 0
) -> dict[str, dict[str, Answer]]:
    """Every solver's answer alone on every item, run through the ordinary evaluation (replayed from
    the pool's table where it holds the calls), with the visible checks' verdicts where a kind has one."""
    from puppeteer.envs.trajectories import read_trajectories
    from puppeteer.evaluation.evaluate import evaluate_policy

    by_id = {t.id: t for t in tasks}
    answers: dict[str, dict[str, Answer]] = {t.id: {} for t in tasks}
    with tempfile.TemporaryDirectory(prefix="rule-fit-") as tmp:
        for agent in solver_names(pool):
            out = Path(tmp) / agent
            evaluate_policy(
                f"single:{agent}", pool, tasks[0].suite, tasks=tasks, max_steps=1, progress=False,
                out_dir=out, seed=seed,
            )  # fmt: skip
            for t in read_trajectories(out / "trajectories.jsonl"):
                cost = sum(_cost_of(pool, agent, s.completion, cost_model) for s in t.steps)
                check = VISIBLE_CHECKS.get(by_id[t.task_id].grader)
                verdict = None if check is None else check.check(t.final_answer, by_id[t.task_id])
                answers[t.task_id][agent] = Answer(bool(t.correct), t.final_answer, cost, verdict)
    return answers


def recorded_chains(
    pool: Pool, tasks: Sequence[Task], split: str, cost_model: str
) -> dict[tuple[str, str], dict[str, Answer]]:
    """The second steps the pool's table recorded on these items (cost: the second call's alone)."""
    if pool.replay is None:
        return {}
    ids = {t.id for t in tasks}
    suite = tasks[0].suite if tasks else ""
    agents = {a.name for a in pool.agents}  # a table may serve several pools: this pool's chains only
    out: dict[tuple[str, str], dict[str, Answer]] = {}
    for o in read_steps(pool.replay):
        if o.split != split or o.suite != suite or o.task_id not in ids or o.error is not None:
            continue
        if o.first not in agents or o.agent not in agents:
            continue
        completion = Completion("", o.prompt_tokens, o.completion_tokens, 0.0, 0.0, 0.0, "")
        cost = _cost_of(pool, o.agent, completion, cost_model)
        out.setdefault((o.first, o.agent), {})[o.task_id] = Answer(o.correct, o.answer, cost)
    return out


def fit_from_answers(
    tasks: Sequence[Task],
    singles: Singles,
    chains: Chains,
    solvers: Sequence[str],
    lam: float,
    forms: str,
    vote_k: int = 3,
) -> tuple[tuple[str, Rule], ...]:
    """Per kind of ``tasks``, the best rule of the ``forms`` space (``single``: one agent for every
    kind, as ``*``; ``kind``: one agent per kind; ``rule``: the whole space) on recorded answers."""
    if forms == "single":
        best, _ = choose(rule_space(solvers, forms=forms), [t.id for t in tasks], singles, chains, lam)
        return (("*", best),)
    kinds: dict[str, list[str]] = {}
    for t in tasks:
        kinds.setdefault(t.domain, []).append(t.id)
    routes = []
    for kind, items in sorted(kinds.items()):
        usable = [pair for pair, rows in chains.items() if all(i in rows for i in items)]
        space = rule_space(solvers, usable, vote_k, forms)
        routes.append((kind, choose(space, items, singles, chains, lam)[0]))
    return tuple(routes)


R = TypeVar("R")


@dataclass(frozen=True)
class Chosen(Generic[R]):
    """Rules chosen on one item set and valued on another: the rule per kind (or bin; a :class:`Rule`,
    or a candidate's text where the space holds more than rules), and each valued item's (correct,
    cost) in the order of the items valued."""

    routes: tuple[tuple[str, R], ...]
    outcomes: tuple[tuple[bool, float], ...]

    @property
    def correct(self) -> tuple[bool, ...]:
        return tuple(c for c, _ in self.outcomes)

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / len(self.outcomes)

    @property
    def cost(self) -> float:
        return sum(x for _, x in self.outcomes) / len(self.outcomes)

    def value(self, lam: float) -> float:
        """Accuracy - lam x mean cost on the items valued."""
        return self.accuracy - lam * self.cost


def choose_and_value(
    choose_on: Sequence[Task],
    choose_answers: Singles,
    value_on: Sequence[Task],
    value_answers: Singles,
    solvers: Sequence[str],
    lam: float,
    forms: str = "rule",
    bins: Mapping[str, str] | None = None,
    chains: Chains | None = None,
) -> Chosen[Rule]:
    """The best rules of the ``forms`` space chosen on ``choose_on`` (:func:`fit_from_answers`) and
    valued on ``value_on``: pass the same items and answers twice for the in-sample optimum, the
    training items then the held-out ones for its out-of-sample counterpart.

    ``bins`` (task id -> label, e.g. ``gsm8k:hard``) chooses a rule per label instead of per kind; a
    valued item whose label the choosing items lack takes its kind's rule, chosen on the same items.
    """
    chains = chains or {}
    by_kind = dict(fit_from_answers(choose_on, choose_answers, chains, solvers, lam, forms))
    routes = by_kind
    if bins is not None:
        binned = [replace(t, domain=bins[t.id]) for t in choose_on]
        routes = dict(fit_from_answers(binned, choose_answers, chains, solvers, lam, forms))
    outcomes = []
    for t in value_on:
        key = bins[t.id] if bins is not None else t.domain
        rule = routes.get(key) or by_kind.get(t.domain) or by_kind["*"]
        got = outcome(rule, t.id, value_answers, chains)
        if got is None:
            raise ValueError(f"rule {rule.text!r} lacks an answer on {t.id!r}")
        outcomes.append(got)
    if not outcomes:
        raise ValueError("no items to value the rules on")
    return Chosen(tuple(sorted(routes.items())), tuple(outcomes))


def fit_rules(
    pool: Pool,
    tasks: Sequence[Task],
    lam: float,
    forms: str,
    cost_model: str = "tokens",
    split: str = "train",
    vote_k: int = 3,
) -> tuple[tuple[str, Rule], ...]:
    """:func:`fit_from_answers` on every solver's answers to ``tasks`` (the training items) and the
    chains the pool's table recorded on them."""
    if cost_model not in COST_MODELS:
        raise ValueError(f"unknown cost model {cost_model!r}; known: {', '.join(COST_MODELS)}")
    singles = training_answers(pool, tasks, cost_model)
    chains = recorded_chains(pool, tasks, split, cost_model) if forms == "rule" else {}
    return fit_from_answers(tasks, singles, chains, solver_names(pool), lam, forms, vote_k)


# --------------------------------------------------------------------------- specs

DEFAULT_TRAIN_ITEMS = 200


def _fitted(forms: str) -> Callable[[str, Pool, int], RulePolicy]:
    kind = f"best-{forms}"

    def parse(arg: str, pool: Pool, max_steps: int) -> RulePolicy:
        n_text, _, cost_model = arg.partition(":")
        if n_text and not n_text.isdigit():
            raise ValueError(f"{kind}:N[:COST] needs a whole number N of training items, got {n_text!r}")
        if cost_model and cost_model not in COST_MODELS:
            raise ValueError(f"unknown cost model {cost_model!r}; known: {', '.join(COST_MODELS)}")
        n = int(n_text) if n_text else DEFAULT_TRAIN_ITEMS

        def fit(settings: EpisodeSettings, tasks: Sequence[Task], pool: Pool) -> KindRules:
            from puppeteer.tasks import load_suite

            if not tasks:
                raise ValueError(f"{kind}: no items to run")
            train = load_suite(tasks[0].suite, "train", n=n)
            if not train:
                raise ValueError(f"{kind}: suite {tasks[0].suite!r} has no training items")
            cost = cost_model or settings.cost_model or "tokens"
            routes = fit_rules(pool, train, settings.lam, forms, cost)
            return kind_rules(routes, pool)

        return RulePolicy(kind + (f":{arg}" if arg else ""), fit=fit, fit_items=n)

    return parse


# the registry's ``best-*`` kinds, imported on first use (they run evaluations of their own)
best_single = _fitted("single")
best_kind = _fitted("kind")
best_rule = _fitted("rule")
