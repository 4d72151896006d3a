"""Workflow parsing on hostile text: the per-candidate scanner (before issue 10) against the linear one.

Both find the end of every ``name = [`` list literal in a text that repeats an opener; run side by
side in one process, median of ``--repeats``. Backend: none (pure parsing, no model).

    python benchmarks/bench_parse.py [--sizes 20000,50000,200000] [--repeats 3] [--plain-max 50000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from puppeteer.envs.listscan import match_lists
from puppeteer.envs.workflow import _ASSIGN, MAX_LIST_CHARS


def plain_span(text: str, start: int) -> int | None:
    """The scanner as it was: one independent scan per candidate (quadratic on repeated openers)."""
    depth = 0
    i, n = start, min(len(text), start + MAX_LIST_CHARS)
    while i < n:
        c = text[i]
        if c in "\"'":
            quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else c
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                i += 2 if text[i] == "\\" else 1
            i += len(quote)
            continue
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def plain(text: str) -> list[int | None]:
    return [plain_span(text, m.end()) for m in _ASSIGN.finditer(text)]


def linear(text: str) -> list[int | None]:
    return match_lists(text, [m.end() for m in _ASSIGN.finditer(text)], MAX_LIST_CHARS).ends


def timed(fn, text: str, repeats: int) -> tuple[float, list[int | None]]:
    times, out = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="20000,50000,200000")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--plain-max", type=int, default=50_000, help="skip the old scanner above this size")
    args = p.parse_args()
    print("| text (repeats `model_id=[`) | before (per-candidate) s | linear s | ratio |")
    print("|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        text = "model_id=[" * (size // 10)
        new_s, new_out = timed(linear, text, args.repeats)
        if size <= args.plain_max:
            old_s, old_out = timed(plain, text, args.repeats)
            assert old_out == new_out
            print(f"| {size:,} | {old_s:.3f} | {new_s:.3f} | {old_s / new_s:.0f}x |")
        else:
            print(f"| {size:,} | (skipped) | {new_s:.3f} | - |")


if __name__ == "__main__":
    main()
