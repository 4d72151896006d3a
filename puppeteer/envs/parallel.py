"""Run independent items concurrently so that model calls overlap (and local models batch them).

Each worker is a state (an environment clone, a policy copy) used by one thread at a time;
results come back as they finish, with their index, so callers keep item order themselves.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TypeVar

W = TypeVar("W")
R = TypeVar("R")

# items in flight when a pool calls models: enough to fill the llama.cpp backend's batches
DEFAULT_CONCURRENCY = 16


def default_concurrency(backends: Sequence[str]) -> int:
    """``DEFAULT_CONCURRENCY`` for pools that call models, 1 for the simulator (threads only cost there)."""
    from puppeteer.backends import CACHEABLE

    return DEFAULT_CONCURRENCY if set(backends) & CACHEABLE else 1


def map_as_completed(fn: Callable[[W, int], R], n: int, workers: Sequence[W]) -> Iterator[tuple[int, R]]:
    """``(i, fn(worker, i))`` for ``i`` in ``range(n)``, in finishing order, ``len(workers)`` at a time.

    With one worker everything runs in the calling thread, in order. ``fn`` should handle its
    own errors; an exception it raises propagates here and cancels the items not yet started.
    """
    if not workers:
        raise ValueError("need at least one worker")
    if len(workers) == 1 or n <= 1:
        for i in range(n):
            yield i, fn(workers[0], i)
        return
    free: queue.SimpleQueue[W] = queue.SimpleQueue()
    for w in workers:
        free.put(w)

    def run(i: int) -> R:
        worker = free.get()
        try:
            return fn(worker, i)
        finally:
            free.put(worker)

    with ThreadPoolExecutor(max_workers=min(len(workers), n), thread_name_prefix="item") as pool:
        futures = {pool.submit(run, i): i for i in range(n)}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            for future in futures:
                future.cancel()
