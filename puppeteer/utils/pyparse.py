"""``ast.parse`` and ``ast.literal_eval`` that threads can share.

CPython 3.11 keeps the AST constructor's recursion depth in per-interpreter state: when a thread
switch lands inside one ``ast.parse`` (a garbage collection whose callback or finalizer releases the
GIL) and another thread parses meanwhile, the first fails with ``SystemError: AST constructor recursion
depth mismatch`` (python/cpython#106905). Evaluation and rule fitting run items on threads and the
answer extractors and the workflow parser parse model output, so an item failed that way and counted
as wrong. Every parse of the package goes through one lock; a parse that still fails that way (one
nested in the same thread) is tried again.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar

_PARSE_LOCK = threading.RLock()  # the interpreter's AST state is process-wide, so is its guard
_MISMATCH = "recursion depth mismatch"
_TRIES = 3
T = TypeVar("T")


def _locked(parse: Callable[[], T]) -> T:
    for _ in range(_TRIES - 1):
        try:
            with _PARSE_LOCK:
                return parse()
        except SystemError as e:
            if _MISMATCH not in str(e):
                raise
    with _PARSE_LOCK:
        return parse()


def parse_python(source: str, mode: Literal["exec", "eval"] = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)`` under the package's parse lock (``SyntaxError`` as usual)."""
    return _locked(lambda: ast.parse(source, mode=mode))


def literal_python(source: str) -> Any:
    """``ast.literal_eval(source)`` under the package's parse lock (its errors as usual)."""
    return _locked(lambda: ast.literal_eval(source))
