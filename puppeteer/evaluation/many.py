"""Several evaluations at once, through one backend (the baselines table's `--jobs`).

A baselines table or a quickstart evaluates one policy after another. :func:`evaluate_many` runs
``jobs`` evaluations at a time in threads, each one the ordinary :func:`puppeteer.evaluation.evaluate`
(its own env clones, policy forks and output folder), through the backend their settings share: the
pending calls of every run in flight reach the backend together, and the response cache's single
flight makes two runs that need the same call wait for one computation. That pays where calls wait
on something else (a provider's API); on llama.cpp with 2 cores it was measured no faster than one
run after another (docs/benchmarks.md, "Policies at once"), so the table's default is 1.

Results do not depend on ``jobs`` except where batched decoding itself does (greedy texts can
differ in their last bits between batch compositions, as between batched and one-at-a-time
runs). Per-call model times recorded in trajectories include the calls a call shared a batch
with; single-stream model seconds (the pool's declared speeds) do not depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from puppeteer.envs.parallel import map_as_completed
from puppeteer.evaluation.evaluate import evaluate
from puppeteer.evaluation.results import EvalResult
from puppeteer.evaluation.settings import EvalSettings
from puppeteer.utils.progress import ProgressReporter


@dataclass(frozen=True)
class EvalRun:
    """One evaluation: a policy (spec or object) and its settings."""

    policy: str | Any
    settings: EvalSettings


def evaluate_many(
    runs: Sequence[EvalRun],
    jobs: int = 1,
    *,
    on_done: Callable[[int, EvalResult], None] | None = None,
    label: str = "evaluations",
    progress: bool = True,
) -> list[EvalResult]:
    """Evaluate every run, ``jobs`` at a time; the results in the order of ``runs``.

    ``on_done(index, result)`` is called in the calling thread as each run finishes (in finishing
    order), e.g. to rewrite a table. With ``jobs == 1`` the runs go one after another in the calling
    thread, each with its own progress bar (as its settings say); with more, the runs' own bars are
    off (two live bars cannot share a terminal) and one bar counts finished runs. An exception in a
    run propagates after the runs already started have finished; runs not started are skipped.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if not runs:
        return []
    together = jobs > 1 and len(runs) > 1
    todo = [EvalRun(r.policy, replace(r.settings, progress=False)) if together else r for r in runs]
    results: dict[int, EvalResult] = {}

    def run(_: None, i: int) -> EvalResult:
        return evaluate(todo[i].policy, todo[i].settings)

    with ProgressReporter(label, len(runs), enabled=progress and together) as bar:
        for i, result in map_as_completed(run, len(runs), [None] * min(jobs, len(runs))):
            results[i] = result
            bar.update(advance=1, info=f"last: {result.policy} {result.accuracy:.3f}")
            if on_done is not None:
                on_done(i, result)
    return [results[i] for i in range(len(runs))]
