"""The prompt a conductor LM sees in workflow mode: the pool, the output format, few-shot examples."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import yaml

from puppeteer.agents.cards import AgentCard
from puppeteer.agents.pool import Pool
from puppeteer.envs.workflow import format_workflow
from puppeteer.types import Message, Workflow
from puppeteer.utils.resources import find_yaml

DEFAULT_PROMPT = "prompt-v1"

# What the prompt adds after the output format about how the final answer is chosen (the env's
# ``aggregate``); the format's own line says the last step's answer is final, so "last" adds nothing.
FINAL_LINES: Mapping[str, str] = MappingProxyType(
    {
        "vote": "The final answer is the majority vote of the steps' answers (a tie goes to the later step).",
        "plan": "You may add a fourth line to choose the final answer: final = k (step k's answer, counting "
        "from 0), final = 'vote' (the majority vote of the steps' answers) or final = 'last'. Without it "
        "the last step's answer is final.",
        "cascade": "You may add a fourth line to choose the final answer: final = k (step k's answer, "
        "counting from 0), final = 'vote' (the majority vote of the steps' answers) or final = 'last'; or "
        "make the plan a cascade, where each step after the first runs only if the answer before it looks "
        "wrong and the last step run gives the answer: final = 'cascade:failed-check' (the answer fails "
        "what the question shows, such as a function's docstring examples), final = 'cascade:silent' (no "
        "answer was given) or final = 'cascade:not-integer' (the answer is not a whole number). Without "
        "the line the last step's answer is final.",
    }
)


@dataclass(frozen=True)
class Example:
    domain: str
    question: str
    thought: str
    # (preferred pattern, subtask, access): agent ids are chosen from the pool at render time
    plan: tuple[tuple[str, str, str | tuple[int, ...]], ...]


EXAMPLES: tuple[Example, ...] = (
    Example(
        "math",
        "A train travels 120 km in 1.5 hours and then 80 km in 0.5 hours. What is its average speed in km/h?",
        "Arithmetic with a trap (average of speeds is wrong); one solver, then an independent check.",
        (
            ("cot", "Compute the total distance and total time, then the average speed.", ()),
            ("verify", "Verify the average speed computed before; recompute it if wrong.", "all"),
        ),
    ),
    Example(
        "mmlu",
        "Which organelle is the site of oxidative phosphorylation? (A) ribosome (B) mitochondrion "
        "(C) Golgi apparatus (D) lysosome",
        "Factual recall; two independent answers and a conclusion.",
        (
            ("direct", "Answer the multiple-choice question about cell biology.", ()),
            ("cot", "Reason about each option and pick the correct organelle.", ()),
            ("summarize", "Compare the two earlier answers and give the final option.", (0, 1)),
        ),
    ),
    Example(
        "code",
        "Write a Python function is_palindrome(s) that ignores case and non-alphanumeric characters.",
        "A short coding task; write it, then review it.",
        (
            ("plan", "Write is_palindrome(s) ignoring case and non-alphanumerics.", ()),
            (
                "critique",
                "Review the function for edge cases (empty string, punctuation) and give a fixed version.",
                "all",
            ),
        ),
    ),
    Example(
        "logic",
        "Alice says Bob lies. Bob says Carol lies. Carol says both Alice and Bob lie. Who tells the truth?",
        "A logic puzzle; solve, reflect, conclude.",
        (
            ("cot", "Enumerate truth assignments and find the consistent one.", ()),
            ("reflect", "Check the assignment against every statement.", "all"),
        ),
    ),
)


# A one-step example: an easy question is worth one call (prompt-v2's examples differ in length).
ONE_STEP = Example(
    "trivia",
    "What is the capital of Australia?",
    "A single fact any agent knows; one cheap call is enough.",
    (("direct", "Answer with the capital city of Australia.", ()),),
)

EXAMPLE_SETS: dict[str, tuple[Example, ...]] = {"v1": EXAMPLES, "v2": (ONE_STEP, *EXAMPLES)}


# Task domains (suite names) -> the example family they belong to, so that few-shot
# examples never come from the question's own kind of task.
DOMAIN_FAMILIES: dict[str, str] = {
    **dict.fromkeys(
        ("arith", "gsm8k", "math500", "aime25", "rg-basic_arithmetic", "rg-gsm_symbolic"), "math"
    ),
    **dict.fromkeys(("mmlu", "gpqa-diamond"), "mmlu"),
    **dict.fromkeys(("humaneval",), "code"),
    **dict.fromkeys(("rg-knights_knaves",), "logic"),
}


def _pick(pool: Pool, pattern: str, fallback: int, ids: Sequence[int]) -> int:
    for i in ids:
        if pool.agents[i].pattern == pattern:
            return i
    return ids[fallback % len(ids)]


def example_workflow(
    pool: Pool,
    example: Example,
    available: Sequence[bool] | None = None,
    order: Sequence[int] | None = None,
) -> Workflow:
    """The example's plan on this pool: for each step the first agent with the step's pattern, in
    ``order`` (the agents table's row order; default the pool's), among the ``available`` ones."""
    rows = order if order is not None else range(len(pool.agents))
    offered = [i for i in rows if available is None or available[i]] or list(range(len(pool)))
    ids = tuple(_pick(pool, pat, k, offered) for k, (pat, _, _) in enumerate(example.plan))
    return Workflow(
        model_id=ids,
        subtasks=tuple(s for _, s, _ in example.plan),
        access_list=tuple(a for _, _, a in example.plan),
    )


@dataclass(frozen=True)
class Valued:
    """Price each agent's card for one question: its expected reward for one call on the
    question's ``domain`` at ``lam`` points per unit of cost (``cost_model``: usd or minutes)."""

    domain: str
    lam: float
    cost_model: str


# a card's cost per call in each cost model's unit (see puppeteer.envs.reward.COST_UNITS)
_CARD_COST: Mapping[str, Callable[[AgentCard], float | None]] = MappingProxyType(
    {
        "usd": lambda c: c.cents_per_call,
        "minutes": lambda c: None if c.seconds_per_call is None else c.seconds_per_call / 60,
    }
)


def card_value(card: AgentCard, valued: Valued) -> float | None:
    """0.5 + 0.5 x share right on the domain - lam x cost per call: the conductor reward's expectation
    for a one-step plan by this agent (None where the card lacks the domain or the cost)."""
    cost = _CARD_COST[valued.cost_model](card)
    right = card.accuracy.get(valued.domain)
    return None if cost is None or right is None else 0.5 + 0.5 * right - valued.lam * cost


def value_order(pool: Pool, valued: Valued) -> tuple[int, ...]:
    """The pool's agent ids by :func:`card_value` at ``valued``, best first (agents without a value
    last, each group in pool order): the table's row order under ``order_by_value``."""
    known = {c.name: c for c in pool.cards.cards} if pool.cards is not None else {}

    def key(i: int) -> tuple[bool, float, int]:
        card = known.get(pool.agents[i].name)
        value = card_value(card, valued) if card is not None else None
        return (value is None, -(value or 0.0), i)

    return tuple(sorted(range(len(pool.agents)), key=key))


def pool_table(
    pool: Pool,
    available: Sequence[bool] | None = None,
    self_id: int | None = None,
    cards: bool = False,
    valued: Valued | None = None,
    order: Sequence[int] | None = None,
) -> str:
    """The agents table; with ``available`` only the available agents (ids stay the pool's ids). With
    ``cards`` and a pool that has them (:mod:`puppeteer.agents.cards`), each agent's measured card too: US
    cents per call and the share right per domain on the calibration items (``-`` for an agent
    without a card). With ``valued`` (and cards), a last column: each agent's :func:`card_value` for
    this question's domain at this price. ``order``: the rows' order (agent ids; default the pool's)."""
    measured = pool.cards if cards else None
    if valued is not None and valued.cost_model not in _CARD_COST:
        raise ValueError(
            f"priced cards need a card cost in the cost model's unit: {', '.join(_CARD_COST)}; "
            f"got {valued.cost_model!r}"
        )
    header = "id | agent | model | pattern | tools | $/1M in | $/1M out"
    if measured is not None:
        header += " | cents/call | " + " | ".join(f"right {d}" for d in measured.domains)
        if valued is not None:
            header += " | value here"
    lines = [header]
    known = {c.name: c for c in measured.cards} if measured is not None else {}
    for i in order if order is not None else range(len(pool.agents)):
        a = pool.agents[i]
        if available is not None and not available[i]:
            continue
        tools = ",".join(a.tools) or "-"
        row = (
            f"{i} | {a.name} | {a.model.name} | {a.pattern} | {tools} | "
            f"{a.model.price_in:g} | {a.model.price_out:g}"
        )
        if measured is not None:
            card = known.get(a.name)
            cells = (
                [f"{card.cents_per_call:.3g}", *(f"{card.accuracy[d]:.2f}" for d in measured.domains)]
                if card is not None
                else ["-"] * (1 + len(measured.domains))
            )
            if valued is not None:
                value = card_value(card, valued) if card is not None else None
                cells.append("-" if value is None else f"{value:.3f}")
            row += " | " + " | ".join(cells)
        lines.append(row)
    if self_id is not None:
        dashes = len(measured.domains) + (valued is not None) if measured is not None else 0
        tail = " | 0 | " + " | ".join("-" for _ in range(dashes)) if measured is not None else ""
        lines.append(f"{self_id} | conductor | (you) | plan again | - | 0 | 0{tail}")
    return "\n".join(lines)


@dataclass(frozen=True)
class PromptConfig:
    """A versioned prompt (``configs/conductor/<name>.yaml``)."""

    version: str
    intro: str
    format: str
    recursion: str
    followup: str
    n_examples: int = 2
    thought_as_comment: bool = True
    example_set: str = "v1"  # a key of EXAMPLE_SETS
    # the price of cost: a line with {lam} and {unit}, shown when the env states the price
    price: str = ""
    # the agents table also shows each agent's measured card where the pool has cards: US cents per
    # call and the share right per domain on calibration items
    cards: bool = False
    # with cards and a stated price: a "value here" column, each agent's expected reward
    # for one call on this question's domain at this price (card_value)
    priced_cards: bool = False
    # with priced cards: the table's rows (and the agents the examples name) in order of value at
    # this price, best first, instead of the pool's order
    order_by_value: bool = False

    def __post_init__(self) -> None:
        if self.example_set not in EXAMPLE_SETS:
            raise ValueError(f"example_set must be one of {sorted(EXAMPLE_SETS)}, got {self.example_set!r}")
        if self.priced_cards and not (self.cards and self.price):
            raise ValueError("priced_cards needs cards: true and a price line")
        if self.order_by_value and not self.priced_cards:
            raise ValueError("order_by_value needs priced_cards: true")


def load_prompt_config(name: str = DEFAULT_PROMPT) -> PromptConfig:
    """Load ``configs/conductor/<name>.yaml`` (or a YAML path) through :mod:`puppeteer.utils.resources`."""
    path = find_yaml("configs", name if name.endswith((".yaml", ".yml")) else f"conductor/{name}")
    raw = yaml.safe_load(path.read_text())
    fields = {f.name for f in dataclasses.fields(PromptConfig)}
    unknown = set(raw) - fields
    if unknown:
        raise ValueError(f"unknown keys in {path}: {sorted(unknown)}")
    return PromptConfig(**raw)


@dataclass(frozen=True)
class Price:
    """The price of cost the conductor is told: ``lam`` reward points per ``unit`` of cost
    (``cost_model``: the env's, which a priced card's cost column must match)."""

    lam: float
    unit: str
    cost_model: str = "tokens"


@dataclass(frozen=True)
class Followup:
    """What a recursive (inner) planning round sees: its parent's workflow and the last answer."""

    parent: str
    answer: str
    agent: str
    depth: int
    max_depth: int


@dataclass(frozen=True)
class ConductorPrompt:
    """The conductor's prompt as chat messages; :attr:`text` is the same content as one flat text."""

    messages: tuple[Message, ...]

    @property
    def text(self) -> str:
        parts = [self.messages[0].content]
        if len(self.messages) > 2:
            parts.append("Examples:")
        parts += [m.content for m in self.messages[1:]]
        return "\n\n".join(parts) + "\n"


def _shot(example: Example, workflow: Workflow, comment: bool) -> str:
    body = format_workflow(workflow)
    return f"# {example.thought}\n{body}" if comment else body


def build_prompt(
    pool: Pool,
    question: str,
    domain: str,
    max_steps: int = 5,
    *,
    available: Sequence[bool] | None = None,
    self_id: int | None = None,
    followup: Followup | None = None,
    config: PromptConfig | None = None,
    n_examples: int | None = None,
    price: Price | None = None,
    final: str = "last",
) -> ConductorPrompt:
    """The conductor prompt: only ``available`` agents, examples from other domains than ``domain``.

    ``self_id`` offers the conductor itself as a worker (recursion); ``followup`` makes this an
    inner planning round that sees its parent's workflow and last answer; ``price`` adds the
    config's price line (the episode's lambda per unit of cost) after the output format; ``final``
    (the env's final-answer choice) adds its line of :data:`FINAL_LINES` after the format.
    """
    cfg = config or load_prompt_config()
    valued = Valued(domain, price.lam, price.cost_model) if cfg.priced_cards and price is not None else None
    order = value_order(pool, valued) if cfg.order_by_value and valued is not None else None
    family = DOMAIN_FAMILIES.get(domain, domain)
    k = cfg.n_examples if n_examples is None else n_examples
    examples = [e for e in EXAMPLE_SETS[cfg.example_set] if e.domain != family][:k]
    system = [
        cfg.intro.format(max_steps=max_steps),
        f"Agents:\n{pool_table(pool, available, self_id, cards=cfg.cards, valued=valued, order=order)}",
        cfg.format,
    ]
    if final in FINAL_LINES:
        system.append(FINAL_LINES[final])
    if self_id is not None:
        system.append(cfg.recursion.format(self_id=self_id))
    if price is not None:
        if not cfg.price:
            raise ValueError(f"prompt {cfg.version} has no price line: use a prompt config with 'price'")
        system.append(cfg.price.format(lam=f"{price.lam:g}", unit=price.unit))
    messages = [Message("system", "\n\n".join(s.strip() for s in system))]
    for e in examples:
        messages.append(Message("user", f"Question: {e.question}"))
        messages.append(
            Message(
                "assistant", _shot(e, example_workflow(pool, e, available, order), cfg.thought_as_comment)
            )
        )
    user = f"Question: {question}"
    if followup is not None:
        user += (
            "\n\n"
            + cfg.followup.format(
                depth=followup.depth,
                max_depth=followup.max_depth,
                parent=followup.parent,
                agent=followup.agent,
                answer=followup.answer,
            ).strip()
        )
    messages.append(Message("user", user))
    return ConductorPrompt(tuple(messages))


def conductor_prompt(
    pool: Pool,
    question: str,
    domain: str,
    max_steps: int = 5,
    n_examples: int = 2,
    *,
    available: Sequence[bool] | None = None,
    self_id: int | None = None,
    followup: Followup | None = None,
    config: PromptConfig | None = None,
    price: Price | None = None,
) -> str:
    """The ready-to-use conductor prompt as one text (see :func:`build_prompt`)."""
    return build_prompt(
        pool,
        question,
        domain,
        max_steps,
        available=available,
        self_id=self_id,
        followup=followup,
        config=config,
        n_examples=n_examples,
        price=price,
    ).text
