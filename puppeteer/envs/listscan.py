"""Find where each candidate list literal ends, in time linear in the text length.

A candidate is a ``[`` that follows ``name =`` in free text. From there the text is read
as Python-ish code: brackets nest and string literals (``'``, ``"``, ``'''``, ``\"\"\"``,
with backslash escapes) hide brackets. The literal ends at the ``]`` that brings the depth
back to zero, if that ``]`` lies within ``window`` characters of the opener.

Scanning each candidate on its own costs ``candidates x window``: quadratic for a text
that repeats an opener. Here every scan is a *thread* over (position, lexer state); the
future of a thread depends only on its position and state (depth is relative), so two
threads that meet at the same position in the same state are merged and the text is read
once per lexer state: at most ``len(STATES) x len(text)`` character visits in all.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

CODE = ""
STATES = (CODE, '"', "'", '"""', "'''")


@dataclass
class _Thread:
    state: str
    depth: int = 0
    # base depth -> candidate indices waiting for the depth to fall back to it
    waiting: dict[int, list[int]] = field(default_factory=dict)
    # (start, candidate index): to expire candidates whose window has passed
    starts: list[tuple[int, int]] = field(default_factory=list)
    alive: int = 0

    def add(self, index: int, start: int, base: int) -> None:
        self.waiting.setdefault(base, []).append(index)
        heapq.heappush(self.starts, (start, index))
        self.alive += 1

    def absorb(self, other: _Thread) -> None:
        """Take over ``other``'s waiting candidates (same position and state from now on)."""
        shift = self.depth - other.depth
        for base, idx in other.waiting.items():
            self.waiting.setdefault(base + shift, []).extend(idx)
        for item in other.starts:
            heapq.heappush(self.starts, item)
        self.alive += other.alive


@dataclass
class ScanResult:
    ends: list[int | None]
    visits: int  # characters read by all threads together (the work done)


def match_lists(text: str, starts: Sequence[int], window: int) -> ScanResult:
    """For each ``starts[k]`` (an index of ``[``, ascending), one past its matching ``]`` or None."""
    ends: list[int | None] = [None] * len(starts)
    done = [False] * len(starts)
    n = len(text)
    # threads keyed by (position, state); the heap orders the positions to visit
    threads: dict[tuple[int, str], _Thread] = {}
    heap: list[tuple[int, str]] = []
    next_start = 0
    visits = 0

    def put(pos: int, thread: _Thread) -> None:
        key = (pos, thread.state)
        other = threads.get(key)
        if other is None:
            threads[key] = thread
            heapq.heappush(heap, key)
        elif len(other.starts) >= len(thread.starts):  # merge the smaller into the larger
            other.absorb(thread)
        else:
            thread.absorb(other)
            threads[key] = thread

    def resolve(thread: _Thread, base: int, end: int) -> None:
        for k in thread.waiting.pop(base, ()):
            if not done[k]:
                done[k] = True
                thread.alive -= 1
                if end - starts[k] <= window:
                    ends[k] = end

    def expire(thread: _Thread, pos: int) -> None:
        while thread.starts and (thread.starts[0][0] + window <= pos or done[thread.starts[0][1]]):
            _, k = heapq.heappop(thread.starts)
            if not done[k]:
                done[k] = True
                thread.alive -= 1

    while heap or next_start < len(starts):
        if next_start < len(starts) and (not heap or starts[next_start] <= heap[0][0]):
            pos = starts[next_start]
            fresh = _Thread(CODE)
            fresh.add(next_start, pos, 0)
            next_start += 1
            put(pos, fresh)
            continue
        pos, state = heapq.heappop(heap)
        thread = threads.pop((pos, state))
        expire(thread, pos)
        if thread.alive <= 0 or pos >= n:
            for k in [k for _, k in thread.starts if not done[k]]:
                done[k] = True
            continue
        visits += 1
        c = text[pos]
        if state == CODE:
            if c in "\"'":
                quote = text[pos : pos + 3] if text[pos : pos + 3] in ('"""', "'''") else c
                thread.state = quote
                put(pos + len(quote), thread)
                continue
            if c == "[":
                thread.depth += 1
            elif c == "]":
                thread.depth -= 1
                resolve(thread, thread.depth, pos + 1)
            put(pos + 1, thread)
        elif text.startswith(state, pos):
            thread.state = CODE
            put(pos + len(state), thread)
        else:
            put(pos + (2 if c == "\\" else 1), thread)
    return ScanResult(ends=ends, visits=visits)
