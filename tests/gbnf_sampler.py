"""A small random generator of strings from a GBNF grammar (the subset the project writes).

Handles rules ``name ::= body`` with alternatives ``|``, sequences, string literals, character
classes (ranges, ``\\xNN`` escapes, negation), rule references, groups and the repetitions
``*``, ``+``, ``?`` and ``{m,n}``. Enough to test that every string a grammar accepts has the
properties it promises, without a language model.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "[": "[", "]": "]", "-": "-"}


@dataclass
class _Parser:
    text: str
    pos: int = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip(self) -> None:
        while self.peek() in (" ", "\t"):
            self.pos += 1

    def char(self) -> str:
        c = self.text[self.pos]
        self.pos += 1
        if c != "\\":
            return c
        e = self.text[self.pos]
        self.pos += 1
        if e == "x":
            code = self.text[self.pos : self.pos + 2]
            self.pos += 2
            return chr(int(code, 16))
        return _ESCAPES[e]

    def alternatives(self) -> Any:
        options = [self.sequence()]
        while True:
            self.skip()
            if self.peek() != "|":
                return ("alt", options)
            self.pos += 1
            options.append(self.sequence())

    def sequence(self) -> Any:
        items = []
        while True:
            self.skip()
            c = self.peek()
            if c in ("", "|", ")"):
                return ("seq", items)
            items.append(self.postfix(self.atom()))

    def atom(self) -> Any:
        c = self.peek()
        if c == '"':
            self.pos += 1
            out = []
            while self.peek() != '"':
                out.append(self.char())
            self.pos += 1
            return ("lit", "".join(out))
        if c == "[":
            self.pos += 1
            negate = self.peek() == "^"
            self.pos += negate
            ranges = []
            while self.peek() != "]":
                lo = self.char()
                hi = lo
                if self.peek() == "-" and self.text[self.pos + 1] != "]":
                    self.pos += 1
                    hi = self.char()
                ranges.append((lo, hi))
            self.pos += 1
            return ("cls", negate, ranges)
        if c == "(":
            self.pos += 1
            inner = self.alternatives()
            self.skip()
            assert self.peek() == ")", self.text[self.pos :]
            self.pos += 1
            return inner
        name = re.match(r"[A-Za-z0-9_-]+", self.text[self.pos :])
        assert name, self.text[self.pos :]
        self.pos += len(name.group())
        return ("ref", name.group())

    def postfix(self, node: Any) -> Any:
        c = self.peek()
        if c and c in "*+?":
            self.pos += 1
            return ("rep", node, {"*": 0, "+": 1, "?": 0}[c], {"*": None, "+": None, "?": 1}[c])
        if c == "{":
            end = self.text.index("}", self.pos)
            lo, _, hi = self.text[self.pos + 1 : end].partition(",")
            self.pos = end + 1
            return ("rep", node, int(lo), int(hi) if hi else None)
        return node


def parse_gbnf(text: str) -> dict[str, Any]:
    rules = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, body = line.partition("::=")
        rules[name.strip()] = _Parser(body.strip()).alternatives()
    return rules


# printable ASCII and a few others, for negated classes
_UNIVERSE = [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t", "é", "→"]


def _generate(rules: dict[str, Any], node: Any, rng: random.Random, out: list[str], depth: int) -> None:
    kind = node[0]
    if kind == "alt":
        _generate(rules, rng.choice(node[1]), rng, out, depth)
    elif kind == "seq":
        for item in node[1]:
            _generate(rules, item, rng, out, depth)
    elif kind == "lit":
        out.append(node[1])
    elif kind == "cls":
        _, negate, ranges = node
        inside = [c for c in _UNIVERSE if any(lo <= c <= hi for lo, hi in ranges)]
        allowed = [c for c in _UNIVERSE if c not in inside] if negate else inside
        out.append(rng.choice(allowed))
    elif kind == "ref":
        _generate(rules, rules[node[1]], rng, out, depth + 1)
    elif kind == "rep":
        _, inner, lo, hi = node
        n = rng.randint(lo, hi if hi is not None else lo + 6)
        if rng.random() < 0.3:  # the extremes, often: the longest strings test the budget
            n = hi if hi is not None and rng.random() < 0.5 else lo
        for _ in range(n):
            _generate(rules, inner, rng, out, depth)


def sample(grammar: str, rng: random.Random, root: str = "root") -> str:
    """One random string the grammar accepts."""
    rules = parse_gbnf(grammar)
    out: list[str] = []
    _generate(rules, rules[root], rng, out, 0)
    return "".join(out)
