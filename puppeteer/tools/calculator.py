"""The ``calculator`` tool: ``<calc>EXPR</calc>`` evaluated by walking the AST (never ``eval``)."""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from puppeteer.tools.base import ToolResult
from puppeteer.utils.pyparse import parse_python

_CALL = re.compile(r"<calc>(.*?)</calc>", re.DOTALL | re.IGNORECASE)

Number = int | float


class CalcError(ValueError):
    """The expression is not something the calculator evaluates."""


def _log(x: Number, base: Number | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


def _factorial(n: Number) -> int:
    if not isinstance(n, int) or n < 0 or n > 1000:
        raise CalcError("factorial needs an integer between 0 and 1000")
    return math.factorial(n)


def _round(x: Number, digits: int | None = None) -> Number:
    if digits is not None and (not isinstance(digits, int) or abs(digits) > 100):
        raise CalcError("round() digits must be an integer of at most 100")
    return round(x) if digits is None else round(x, digits)


FUNCTIONS: Mapping[str, Callable[..., Number]] = MappingProxyType(
    {
        "sqrt": math.sqrt,
        "log": _log,
        "ln": math.log,
        "log2": math.log2,
        "log10": math.log10,
        "exp": math.exp,
        "sin": math.sin,
        "cos": math.cos,
        "tan": math.tan,
        "asin": math.asin,
        "acos": math.acos,
        "atan": math.atan,
        "atan2": math.atan2,
        "hypot": math.hypot,
        "degrees": math.degrees,
        "radians": math.radians,
        "abs": abs,
        "round": _round,
        "min": min,
        "max": max,
        "floor": math.floor,
        "ceil": math.ceil,
        "factorial": _factorial,
        "gcd": math.gcd,
        "lcm": math.lcm,
        "comb": math.comb,
        "perm": math.perm,
    }
)
CONSTANTS: Mapping[str, float] = MappingProxyType({"pi": math.pi, "e": math.e, "tau": math.tau})

_BINARY: Mapping[type[ast.operator], Callable[[Any, Any], Number]] = MappingProxyType(
    {
        ast.Add: operator.add,
        ast.Sub: operator.sub,
        ast.Mult: operator.mul,
        ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod,
        ast.Pow: operator.pow,
    }
)


@dataclass(frozen=True)
class Evaluator:
    """Arithmetic on ints and floats with bounds on size, so no expression can eat the machine."""

    max_chars: int = 500
    max_nodes: int = 200
    max_int_bits: int = 4096
    max_args: int = 64

    def __call__(self, expression: str) -> Number:
        text = expression.strip().rstrip("=").strip().replace("^", "**").replace("×", "*").replace("÷", "/")
        if not text:
            raise CalcError("empty expression")
        if len(text) > self.max_chars:
            raise CalcError(f"expression longer than {self.max_chars} characters")
        try:
            tree = parse_python(text, mode="eval")
        except SyntaxError:
            raise CalcError(f"not an arithmetic expression: {text!r}") from None
        if sum(1 for _ in ast.walk(tree)) > self.max_nodes:
            raise CalcError(f"expression has more than {self.max_nodes} parts")
        return self._eval(tree.body)

    def _eval(self, node: ast.AST) -> Number:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return self._checked(node.value)
        if isinstance(node, ast.Name) and node.id in CONSTANTS:
            return CONSTANTS[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = self._eval(node.operand)
            return -value if isinstance(node.op, ast.USub) else +value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self._eval(node.left), self._eval(node.right)
            if isinstance(node.op, ast.Pow):
                self._check_power(left, right)
            elif isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
                self._check_bits(abs(left).bit_length() + abs(right).bit_length())
            return self._checked(_BINARY[type(node.op)](left, right))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
            if node.keywords or len(node.args) > self.max_args:
                raise CalcError(f"{node.func.id}() takes up to {self.max_args} positional arguments")
            args = [self._eval(a) for a in node.args]
            if node.func.id in ("comb", "perm", "lcm") and any(abs(int(a)) > 10_000 for a in args):
                raise CalcError(f"{node.func.id}() arguments must be at most 10000")
            return self._checked(FUNCTIONS[node.func.id](*args))
        raise CalcError(f"unsupported: {ast.unparse(node)!r}")

    def _check_power(self, base: Number, exponent: Number) -> None:
        if (
            isinstance(base, int)
            and isinstance(exponent, int)
            and exponent > 0
            and abs(base) > 1
            and exponent * math.log2(abs(base)) > self.max_int_bits + 1
        ):
            raise CalcError(f"result too large (more than {self.max_int_bits} bits)")

    def _check_bits(self, bits: int) -> None:
        if bits > self.max_int_bits:
            raise CalcError(f"result too large (more than {self.max_int_bits} bits)")

    def _checked(self, value: Any) -> Number:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CalcError(f"result is not a real number: {value!r}")
        if isinstance(value, int):
            self._check_bits(value.bit_length())
        elif not math.isfinite(value):
            raise CalcError("result is not finite")
        return value


def format_number(value: Number) -> str:
    """Integers exactly; floats with 12 significant digits, integral floats without '.0'."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".12g")


@dataclass(frozen=True)
class Calculator:
    """Finds the last ``<calc>...</calc>`` in a completion and evaluates it safely."""

    evaluator: Evaluator = Evaluator()
    name: str = "calculator"
    description: str = (
        "arithmetic: write <calc>EXPR</calc>, e.g. <calc>(17*23 + 4) / 3</calc>; "
        "+ - * / // % ** (or ^), sqrt, log, exp, sin, cos, abs, round, min, max, "
        "factorial, pi, e"
    )

    def find_call(self, text: str) -> str | None:
        calls = _CALL.findall(text)
        return calls[-1] if calls else None

    def run(self, call: str) -> ToolResult:
        try:
            value = self.evaluator(call)
        except (CalcError, ArithmeticError, ValueError, TypeError) as exc:
            reason = "division by zero" if isinstance(exc, ZeroDivisionError) else str(exc)
            return ToolResult(output=f"error: {reason}", ok=False, status="error")
        return ToolResult(output=format_number(value), ok=True, status="ok")
