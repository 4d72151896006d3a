"""What a shipped outcome table (:mod:`puppeteer.backends.replay`) says about its pool, with no model loaded.

- :func:`agent_rows`: every agent alone, overall and per kind of request (the item's domain):
  accuracy with its Wilson interval, single-stream model seconds, tokens, truncation and tool-call rates.
- :func:`matrix`: the items x agents :class:`~puppeteer.analytics.headroom.Outcomes` of one split, for
  the reference routers of :mod:`puppeteer.analytics.headroom` (the per-item oracle, the best agent per
  kind chosen on the training split).
- :func:`markdown`: both as the tables of a docs page.
- :func:`coverage`: how many items of a split each agent has, against the items the split's rows name;
  :func:`check_coverage` refuses a table whose agents do not cover the same items.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from puppeteer.analytics.headroom import Outcomes, best_index, domain_route, oracle_route, single_route
from puppeteer.backends.replay import Outcome
from puppeteer.errors import UserError
from puppeteer.evaluation.stats import wilson_interval

ALL = "all"


@dataclass(frozen=True)
class AgentRow:
    agent: str
    kind: str  # a domain, or "all"
    n: int
    correct: int
    model_s: float  # mean single-stream model seconds per item
    tokens: float  # mean prompt + completion tokens per item
    truncated: float  # share of items cut at max_tokens
    tool_calls: float  # share of items with at least one tool call (program of thought: the program ran)

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    @property
    def ci(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.n)


def _row(agent: str, kind: str, rows: Sequence[Outcome]) -> AgentRow:
    n = len(rows)
    return AgentRow(
        agent=agent,
        kind=kind,
        n=n,
        correct=sum(o.correct for o in rows),
        model_s=sum(o.model_s for o in rows) / n,
        tokens=sum(o.prompt_tokens + o.completion_tokens for o in rows) / n,
        truncated=sum(o.truncated for o in rows) / n,
        tool_calls=sum(o.tool_calls > 0 for o in rows) / n,
    )


def complete_items(outcomes: Sequence[Outcome], split: str, agents: Sequence[str]) -> list[str]:
    """The items of ``split`` that every one of ``agents`` has an outcome on (sorted)."""
    have: dict[str, set[str]] = defaultdict(set)
    for o in outcomes:
        if o.split == split:
            have[o.task_id].add(o.agent)
    return sorted(t for t, names in have.items() if set(agents) <= names)


@dataclass(frozen=True)
class Coverage:
    """Items of one split in a table: all that its rows name, and each agent's share of them."""

    split: str
    items: int  # distinct items of the split that any row names
    per_agent: tuple[tuple[str, int], ...]  # (agent, items it has a row for)
    of: str | None = None  # what the split holds, e.g. "of 1,319 in gsm8k/test" (None: unknown)

    @property
    def even(self) -> bool:
        return all(n == self.items for _, n in self.per_agent)

    def line(self) -> str:
        counts = ", ".join(f"{a} {n}" for a, n in self.per_agent)
        of = f" ({self.of})" if self.of else ""
        return f"split {self.split}: {self.items} items{of}; per agent: {counts}"


def coverage(outcomes: Sequence[Outcome], split: str, agents: Sequence[str]) -> Coverage:
    """The items of ``split`` that the rows name, and how many of them each of ``agents`` has."""
    have: dict[str, set[str]] = defaultdict(set)
    items: set[str] = set()
    for o in outcomes:
        if o.split == split:
            items.add(o.task_id)
            have[o.agent].add(o.task_id)
    return Coverage(split, len(items), tuple((a, len(have.get(a, ()))) for a in agents))


def check_coverage(cov: Coverage, where: str) -> None:
    """Refuse a table whose agents do not all cover every item of the split (lines lost or never built)."""
    if cov.items == 0:
        raise UserError(f"{where}: no rows for split {cov.split!r}")
    short = [(a, n) for a, n in cov.per_agent if n != cov.items]
    if short:
        a, n = short[0]
        raise UserError(
            f"{where}: the table does not add up on split {cov.split!r}: {a} has {n} of its {cov.items} "
            f"items ({len(short)} agent(s) short); rebuild it with `puppeteer outcomes build`, or pass "
            "--partial to show the items every agent has"
        )


def agent_rows(outcomes: Sequence[Outcome], split: str, agents: Sequence[str]) -> list[AgentRow]:
    """Each agent overall (kind ``all``) and per kind, on the items of ``split`` that every agent ran."""
    items = set(complete_items(outcomes, split, agents))
    groups: dict[tuple[str, str], list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.split == split and o.task_id in items and o.agent in agents:
            groups[(o.agent, ALL)].append(o)
            groups[(o.agent, o.domain)].append(o)
    kinds = sorted({k for _, k in groups if k != ALL})
    return [_row(a, k, groups[(a, k)]) for k in (ALL, *kinds) for a in agents if groups.get((a, k))]


def matrix(outcomes: Sequence[Outcome], split: str, agents: Sequence[str]) -> Outcomes:
    """Items x agents correctness and model seconds on the items of ``split`` that every agent ran."""
    runs: dict[str, dict[str, tuple[bool, float]]] = {a: {} for a in agents}
    for o in outcomes:
        if o.split == split and o.agent in runs:
            runs[o.agent][o.task_id] = (o.correct, o.model_s)
    return Outcomes.from_runs(runs)


def best(rows: Sequence[AgentRow], kind: str = ALL) -> AgentRow:
    """The most accurate agent on ``kind`` (the cheaper one on a tie)."""
    return max((r for r in rows if r.kind == kind), key=lambda r: (r.correct, -r.model_s))


def _fmt(r: AgentRow) -> str:
    lo, hi = r.ci
    return (
        f"| `{r.agent}` | {r.n} | {r.accuracy:.3f} [{lo:.3f}, {hi:.3f}] | {r.model_s:.1f} | {r.tokens:.0f} "
        f"| {r.truncated:.0%} | {r.tool_calls:.0%} |"
    )


def markdown(
    outcomes: Sequence[Outcome], split: str, agents: Sequence[str], train_split: str = "train"
) -> str:
    """The per-agent tables (overall, then per kind) and the reference routers, as markdown."""
    rows = agent_rows(outcomes, split, agents)
    if not rows:
        return f"No split `{split}` items that all of {', '.join(agents)} ran.\n"
    head = [
        "| agent | n | accuracy [95% Wilson] | model s / item | tokens / item | truncated | tool calls |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    out: list[str] = []
    kinds = [ALL, *sorted({r.kind for r in rows} - {ALL})]
    for kind in kinds:
        top = best(rows, kind)
        out += [f"### {'all kinds' if kind == ALL else kind}", "", *head]
        out += [_fmt(r) for r in rows if r.kind == kind]
        out += ["", f"Best alone: `{top.agent}`, {top.accuracy:.3f} at {top.model_s:.1f} s per item.", ""]
    test = matrix(outcomes, split, agents)
    refs = [single_route(test, best(rows).agent), oracle_route(test)]
    spec = None
    if complete_items(outcomes, train_split, agents):
        train = matrix(outcomes, train_split, agents)
        refs.insert(1, domain_route(train, test))
        spec = bykind_spec(train)
    out += [
        "### Reference routers (one agent per item)",
        "",
        "| router | accuracy | model s / item | agents used |",
        "|---|---:|---:|---|",
    ]
    for r in refs:
        shares = ", ".join(f"`{a}` {s:.0%}" for a, s in r.shares(test).items())
        out.append(f"| {r.name} | {r.accuracy(test):.3f} | {r.model_s(test):.1f} | {shares} |")
    if spec:
        out += ["", f"The best agent per kind as a policy spec (for `eval`, `ab`): `{spec}`"]
    return "\n".join(out) + "\n"


def bykind_spec(train: Outcomes) -> str:
    """``bykind:KIND=AGENT,...`` of the most accurate agent per kind on ``train`` (the cheaper on a tie):
    the same choice as :func:`~puppeteer.analytics.headroom.domain_route` at no penalty."""
    pairs = []
    for kind in sorted(set(train.domains)):
        rows = train.domains == kind
        acc, cost = train.correct[rows].mean(axis=0), train.model_s[rows].mean(axis=0)
        pairs.append(f"{kind}={train.agents[best_index(acc, cost)]}")
    return "bykind:" + ",".join(pairs)
