"""parse_python under threads: the CPython race that failed an evaluation item
(``SystemError: AST constructor recursion depth mismatch``) does not reach the package's parses."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from puppeteer.utils.pyparse import literal_python, parse_python

# four threads parse one module while a garbage collection callback hands the GIL over mid-construction
# (as a finalizer doing I/O does); a fresh interpreter each, since the race shows once per process
RACE = """
import ast, gc, sys, threading, time
parse = ast.parse
if sys.argv[1] == "package":
    from puppeteer.utils.pyparse import parse_python as parse
src = "\\n".join(f"def f{i}(x):\\n    return [y * {i} for y in range(x) if y % 3]\\n" for i in range(5))
gc.callbacks.append(lambda phase, info: time.sleep(0) if phase == "start" else None)
gc.set_threshold(5)
errors = []
def work():
    for _ in range(200):
        try:
            parse(src)
        except SystemError as e:
            errors.append(str(e))
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(errors))
"""


def _errors(which: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", RACE, which], capture_output=True, text=True, timeout=120, check=True
    )
    return int(out.stdout.strip())


def test_threads_parsing_at_once_never_fail_through_the_package_parse() -> None:
    plain = sum(_errors("plain") for _ in range(2))
    if plain == 0:
        pytest.skip(f"Python {sys.version.split()[0]} shows no AST recursion-depth race here")
    assert sum(_errors("package") for _ in range(2)) == 0


def test_parse_python_parses_as_ast_parse_does() -> None:
    tree = parse_python("1 + 2", mode="eval")
    assert isinstance(tree, ast.Expression) and isinstance(tree.body, ast.BinOp)
    with pytest.raises(SyntaxError):
        parse_python("def (")
    assert literal_python("[1, 'a', (2,)]") == [1, "a", (2,)]
    with pytest.raises(ValueError):
        literal_python("__import__('os')")
