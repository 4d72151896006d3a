"""``arith``: a built-in procedural suite of multi-step integer arithmetic with exact answers.

Item ``i`` depends only on ``(seed, i)`` (its own ``random.Random``), so any slice of the
suite is cheap and identical on every machine. Level 1 has two operations on small
numbers, level 2 three or four with division, level 3 five or six with larger numbers;
about ``word_fraction`` of the items are short word problems instead of bare expressions.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_OPS = ("+", "-", "*", "/")
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


@dataclass(frozen=True)
class Level:
    n_ops: tuple[int, int]
    max_operand: int
    max_factor: int
    division: bool
    max_value: int = 100_000


LEVELS: dict[int, Level] = {
    1: Level(n_ops=(2, 2), max_operand=20, max_factor=9, division=False),
    2: Level(n_ops=(3, 4), max_operand=100, max_factor=12, division=True),
    3: Level(n_ops=(5, 6), max_operand=999, max_factor=25, division=True, max_value=1_000_000),
}


@dataclass(frozen=True)
class Expr:
    """A binary expression tree; a leaf has ``op == ''`` and its value in ``value``."""

    value: int
    op: str = ""
    left: Expr | None = None
    right: Expr | None = None

    def render(self) -> str:
        if self.left is None or self.right is None:
            return str(self.value) if self.value >= 0 else f"({self.value})"
        left, right = self.left.render(), self.right.render()
        if self.left.op and _PRECEDENCE[self.left.op] < _PRECEDENCE[self.op]:
            left = f"({left})"
        if self.right.op and (
            _PRECEDENCE[self.right.op] < _PRECEDENCE[self.op]
            or (_PRECEDENCE[self.right.op] == _PRECEDENCE[self.op] and self.op in "-/")
        ):
            right = f"({right})"
        return f"{left} {self.op} {right}"


def _combine(rng: random.Random, left: Expr, level: Level) -> Expr:
    op = rng.choice(_OPS if level.division else _OPS[:3])
    if op == "/":
        divisors = [d for d in range(2, level.max_factor + 1) if left.value != 0 and left.value % d == 0]
        if divisors:
            d = rng.choice(divisors)
            return Expr(left.value // d, "/", left, Expr(d))
        op = "*"
    if op == "*" and abs(left.value) * level.max_factor > level.max_value:
        op = rng.choice("+-")
    if op == "*":
        k = rng.randint(2, level.max_factor)
        return (
            Expr(left.value * k, "*", left, Expr(k))
            if rng.random() < 0.5
            else Expr(k * left.value, "*", Expr(k), left)
        )
    b = rng.randint(1, level.max_operand)
    if op == "+":
        return (
            Expr(left.value + b, "+", left, Expr(b))
            if rng.random() < 0.5
            else Expr(b + left.value, "+", Expr(b), left)
        )
    if rng.random() < 0.5:
        return Expr(left.value - b, "-", left, Expr(b))
    return Expr(b - left.value, "-", Expr(b), left)


def random_expression(rng: random.Random, level: Level) -> Expr:
    """Grow an expression one operation at a time, occasionally grouping two sub-expressions."""
    expr = Expr(rng.randint(1, level.max_operand))
    for _ in range(rng.randint(*level.n_ops)):
        if rng.random() < 0.2:
            other = _combine(
                rng,
                Expr(rng.randint(1, level.max_operand)),
                Level((1, 1), level.max_operand, 9, False, level.max_value),
            )
            op = rng.choice("+-")
            expr = Expr(expr.value + other.value if op == "+" else expr.value - other.value, op, expr, other)
        else:
            expr = _combine(rng, expr, level)
    return expr


_VERBS = ("Compute {}.", "What is {}?", "Evaluate {}.", "Calculate the value of {}.")
_NAMES = ("Ava", "Ben", "Chloe", "Diego", "Emma", "Farid", "Grace", "Hiro", "Isla", "Jonas", "Keira", "Liam")
_THINGS = ("apples", "marbles", "stickers", "books", "pencils", "cookies", "stamps", "shells")


def _word_collect(rng: random.Random, scale: int) -> tuple[str, int]:
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    a, packs, per, gone = rng.randint(3, 10 * scale), rng.randint(2, 3 + 2 * scale), rng.randint(3, 12), 0
    total = a + packs * per
    gone = rng.randint(1, total - 1)
    return (
        f"{name} has {a} {thing}. {name} buys {packs} packs with {per} {thing} in each pack, "
        f"then gives away {gone} {thing}. How many {thing} does {name} have now?",
        total - gone,
    )


def _word_change(rng: random.Random, scale: int) -> tuple[str, int]:
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS[:4])
    price, qty = rng.randint(2, 5 * scale + 5), rng.randint(2, 4 + scale)
    bill = next(b for b in (10, 20, 50, 100, 200, 500, 1000) if b >= price * qty)
    return (
        f"A shop sells {thing} for ${price} each. {name} buys {qty} of them and pays with a ${bill} bill. "
        f"How many dollars of change does {name} get?",
        bill - price * qty,
    )


def _hours(h: int) -> str:
    return "1 hour" if h == 1 else f"{h} hours"


def _word_travel(rng: random.Random, scale: int) -> tuple[str, int]:
    s1, h1, s2, h2 = rng.randint(30, 90), rng.randint(1, 2 + scale), rng.randint(20, 80), rng.randint(1, 3)
    return (
        f"A train travels at {s1} km per hour for {_hours(h1)}, then at {s2} km per hour for {_hours(h2)}. "
        "How many kilometres does it travel in total?",
        s1 * h1 + s2 * h2,
    )


def _word_pages(rng: random.Random, scale: int) -> tuple[str, int]:
    name = rng.choice(_NAMES)
    per, days, extra = rng.randint(5, 20 + 5 * scale), rng.randint(2, 6 + scale), rng.randint(1, 15)
    total = per * days + extra + rng.randint(1, 200)
    return (
        f"{name}'s book has {total} pages. {name} reads {per} pages every day for {days} days and then "
        f"{extra} more pages. How many pages are left to read?",
        total - per * days - extra,
    )


def _word_chairs(rng: random.Random, scale: int) -> tuple[str, int]:
    rows, per = rng.randint(3, 8 + 4 * scale), rng.randint(5, 15 + 5 * scale)
    removed = rng.randint(1, per - 1)
    added = rng.randint(0, 3 * scale)
    return (
        f"A hall has {rows} rows of {per} chairs. {removed} chairs are removed from every row, and then "
        f"{added} new rows of {per - removed} chairs are added. How many chairs are in the hall now?",
        (rows + added) * (per - removed),
    )


def _word_share(rng: random.Random, scale: int) -> tuple[str, int]:
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    friends, each, kept = rng.randint(2, 4 + scale), rng.randint(3, 8 + 4 * scale), rng.randint(0, 9)
    return (
        f"{name} had some {thing}, kept {kept} and shared the rest equally among {friends} friends. "
        f"Each friend got {each} {thing}. How many {thing} did {name} have at first?",
        friends * each + kept,
    )


WORD_TEMPLATES: tuple[Callable[[random.Random, int], tuple[str, int]], ...] = (
    _word_collect,
    _word_change,
    _word_travel,
    _word_pages,
    _word_chairs,
    _word_share,
)


def arith_problem(
    index: int, seed: int = 0, levels: Sequence[int] = (1, 2, 3), word_fraction: float = 0.4
) -> tuple[str, int, dict[str, object]]:
    """(question, exact integer answer, meta) of item ``index``."""
    rng = random.Random(f"arith:{seed}:{index}")
    level = rng.choice(tuple(levels))
    if rng.random() < word_fraction:
        template = rng.choice(WORD_TEMPLATES)
        question, answer = template(rng, level)
        return question, answer, {"level": level, "kind": "word", "template": template.__name__.lstrip("_")}
    expr = random_expression(rng, LEVELS[level])
    return rng.choice(_VERBS).format(expr.render()), expr.value, {"level": level, "kind": "expression"}
