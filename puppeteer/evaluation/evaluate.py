"""Evaluate any policy (baseline spec, baseline object or trained puppeteer) on a suite split.

Every item runs once. Workflow policies plan a workflow per item and the environment runs it
in ``mode="workflow"``; step policies run the step loop until the Terminator or ``max_steps``.
Each episode is appended to ``DIR/trajectories.jsonl`` as soon as it ends (readable by
:func:`puppeteer.envs.trajectories.read_trajectories`; extra keys ``index``, ``policy``, ``error``,
``gold``, ``wall_s``); an item that raises is recorded with its ``error`` and counts as wrong,
and the evaluation goes on. ``DIR/results.json`` holds the :class:`EvalResult`; it is written
also when the run is interrupted (``"completed": false``).

Accuracy counts every item (errors as wrong) with a 95% Wilson interval; the cost means
(calls, tokens, USD, FLOPs, summed step latency) are over the episodes that finished.
Per item, the environment is reset with a seed derived from ``(seed, task id)``, so an item
gets the same sample index under every policy and a response cache shares identical calls.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.parallel import default_concurrency, map_as_completed
from puppeteer.errors import RunStopped, UserError
from puppeteer.policies.protocol import EpisodeSettings, Policy, as_policy, train_items
from puppeteer.policies.registry import make_policy
from puppeteer.tasks import load_suite
from puppeteer.types import Task
from puppeteer.utils.rundir import check_owner, claim
from puppeteer.utils.seeding import item_seed

if TYPE_CHECKING:
    from puppeteer.backends.base import Backend
from puppeteer.evaluation.executors import evaluate_on_ray, item_workers
from puppeteer.evaluation.results import (
    EvalResult,
    _conductor_fields,
    _Record,
    _record_line,
    _summary,
    _write_results,
)
from puppeteer.evaluation.settings import EvalSettings, RayExecutor

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- cache statistics


def _cached_backends(env: ConductorEnv, pool: Pool) -> list[Any]:
    from puppeteer.backends.base import Router
    from puppeteer.backends.cache import CachedBackend
    from puppeteer.backends.replay import ReplayBackend

    counted = (CachedBackend, ReplayBackend)  # a replay layer counts the cache behind it too
    backend = env.executor.backend
    found: list[Any] = []
    if isinstance(backend, counted):
        found.append(backend)
    elif isinstance(backend, Router):
        for name in pool.backends():
            try:
                inner = backend.backend(name)
            except Exception:  # a backend that cannot even be created has no cache statistics
                continue
            if isinstance(inner, counted):
                found.append(inner)
    return found


def _sort_lines(path: Path) -> None:
    """Rewrite a finished run's trajectories in item order (they were written in finishing order)."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    lines.sort(key=lambda line: json.loads(line)["index"])
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.replace(path)


# --------------------------------------------------------------------------- progress


@contextmanager
def _progress(enabled: bool, total: int, label: str) -> Iterator[Any]:
    """Yields ``advance(correct_so_far, done)`` for :class:`~puppeteer.utils.progress.ProgressReporter`."""
    from puppeteer.utils.progress import ProgressReporter

    with ProgressReporter(label, total, enabled=enabled) as bar:

        def advance(correct: int, done: int) -> None:
            bar.update(done, info=f"acc {correct / done:.3f}" if done else "")

        yield advance


# --------------------------------------------------------------------------- the evaluation


class ResultExists(UserError, FileExistsError):
    """The output directory already holds a finished result."""


def check_out_dir(out: Path, overwrite: bool) -> None:
    """Refuse an output path that is a file, or that holds a finished result (unless ``overwrite``)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a directory")
    results = out / "results.json"
    if overwrite or not results.exists():
        return
    try:
        finished = bool(json.loads(results.read_text()).get("completed", True))
    except (OSError, ValueError, AttributeError):
        finished = True  # unreadable: keep it, the user decides
    if finished:
        raise ResultExists(
            f"{results} holds a finished result; pass --overwrite to replace it, or choose another --out"
        )


def _model_backends(pool: Pool, policy: Policy) -> list[str]:
    """Backends that generate during an episode: the pool's, and a policy's own model's (a conductor's)."""
    return [*pool.backends(), *getattr(policy, "model_backends", ())]


def evaluate(policy_or_spec: str | Any, settings: EvalSettings) -> EvalResult:
    """Run every item of the settings' suite/split (first ``n``) once under a policy and summarise.

    ``policy_or_spec``: a spec (see ``puppeteer eval --help``), a
    :class:`~puppeteer.policies.protocol.Policy`, or a step / workflow policy object.
    ``settings.out_dir`` is held by this run alone while it runs (:func:`puppeteer.utils.rundir.claim`) and
    is refused when a training run wrote it.
    """
    if settings.out_dir is None:
        return _evaluate(policy_or_spec, settings)
    out = Path(settings.out_dir)
    check_out_dir(out, settings.overwrite)
    with claim(out):
        check_owner(out, "eval")
        return _evaluate(policy_or_spec, settings)


def _evaluate(policy_or_spec: str | Any, settings: EvalSettings) -> EvalResult:
    c = settings.concurrency
    if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
        raise ValueError(f"concurrency={c!r}: at least 1 item at a time")
    pool = settings.pool if isinstance(settings.pool, Pool) else load_pool(settings.pool)
    settings = replace(settings, pool=pool)
    if settings.available:
        from puppeteer.agents.availability import resolve_available

        resolve_available(pool, settings.available)  # an unknown agent fails here, not on every item
    items = _items(settings)
    out = Path(settings.out_dir) if settings.out_dir is not None else None
    if out is not None:
        check_out_dir(out, settings.overwrite)  # before any work: never replace a finished result
    if settings.ray is not None:
        if not isinstance(policy_or_spec, str):
            raise TypeError("Ray workers build their own policy: pass a spec, not a policy object")
        if settings.backend is not None:
            raise ValueError("Ray workers build their own backends: evaluate on Ray without backend=")
        return evaluate_on_ray(policy_or_spec, items, settings, settings.ray, _eval_shard)
    if isinstance(policy_or_spec, str):
        spec = policy_or_spec
        policy = as_policy(make_policy(spec, pool, settings.episode.max_steps))
    else:
        policy = as_policy(policy_or_spec)
        spec = policy.name
    seeds = [item_seed(settings.seed, t.id) for t in items]
    config = policy.configure(settings.episode, items, seeds, pool)  # bad settings fail here ...
    env = ConductorEnv(config, pool=pool, tasks=items, cache=settings.cache, backend=settings.backend)
    if out is not None:  # ... before anything is written
        out.mkdir(parents=True, exist_ok=True)
    # one backend for the policy's own model and the workers (the same response cache)
    policy.start(env, env.executor.backend if settings.backend is None else None, settings.cache)
    reset_options: dict[str, Any] = {"available": list(settings.available)} if settings.available else {}
    fields: dict[str, Any] = dict(
        policy=spec,
        policy_name=policy.name,
        pool=pool.name,
        suite=settings.suite,
        split=settings.split,
        seed=settings.seed,
        mode=config.mode,
        backends=(*pool.backends(), *getattr(policy, "model_backends", ())),
        max_steps=config.max_steps,
        lam=config.workflow_lam if config.mode == "workflow" else config.lam,
        cache_path=str(settings.cache) if settings.cache is not None else None,
        out_dir=str(out) if out is not None else None,
        available=settings.available or _offered(env),
        max_depth=config.max_depth,
        recursion=config.recursion,
        final_answer=config.final_answer,
        train_items=_train_items(policy),
    )

    records: dict[int, _Record] = {}
    cached = _cached_backends(env, pool)
    # a shared backend (``backend=``) keeps counting across runs: report this run's share only
    hits0, misses0 = sum(c.stats.hits for c in cached), sum(c.stats.misses for c in cached)
    concurrency = settings.concurrency
    workers = item_workers(
        env,
        policy,
        concurrency if concurrency is not None else default_concurrency(_model_backends(pool, policy)),
        len(items),
    )

    def run_item(worker: tuple[ConductorEnv, Policy], i: int) -> tuple[_Record, float]:
        item_env, item_policy = worker
        t0 = time.perf_counter()
        try:
            traj, extra = item_policy.episode(item_env, index=i, seed=seeds[i], options=reset_options)
            return _Record(traj.correct, None, traj, extra), time.perf_counter() - t0
        except RunStopped:
            raise  # e.g. a strict replay's first missing call: the run stops, results say not completed
        except Exception as e:
            log.warning("item %d (%s) failed: %s: %s", i, items[i].id, type(e).__name__, e)
            return _Record(False, f"{type(e).__name__}: {e}", None), time.perf_counter() - t0

    start = time.perf_counter()
    sink: TextIO | None = (out / "trajectories.jsonl").open("w") if out is not None else None
    write_error: OSError | None = None
    good = 0  # bytes of trajectories.jsonl known to be whole lines
    try:
        label = f"{spec} on {settings.suite}/{settings.split}"
        with _progress(settings.progress, len(items), label) as advance:
            for i, (record, wall) in map_as_completed(run_item, len(items), workers):
                records[i] = record  # lines are written as items finish, each with its index
                if sink is not None:
                    line = _record_line(i, items[i], spec, record, config.mode, wall)
                    try:
                        sink.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
                        sink.flush()
                        good = sink.tell()
                    except OSError as e:  # e.g. a full disk: stop, keep what is whole
                        del records[i]
                        write_error = e
                        break
                advance(sum(r.correct for r in records.values()), len(records))
    finally:
        if sink is not None:
            with contextlib.suppress(OSError):
                sink.close()
            if write_error is not None and out is not None:
                with contextlib.suppress(OSError):
                    os.truncate(out / "trajectories.jsonl", good)
            elif out is not None and len(records) == len(items) and len(workers) > 1:
                _sort_lines(out / "trajectories.jsonl")
        if cached:
            fields.update(
                cache_hits=sum(c.stats.hits for c in cached) - hits0,
                cache_misses=sum(c.stats.misses for c in cached) - misses0,
            )
        if settings.backend is None:  # the caches were opened here: close their SQLite connections
            for c in cached:
                c.close()
        fields.update(_conductor_fields([records[i] for i in sorted(records)], config.max_depth))
        result = _summary(
            [records[i] for i in sorted(records)],
            len(items),
            speeds=pool,
            wall_s=time.perf_counter() - start,
            completed=len(records) == len(items),
            **fields,
        )
        _write_results(out, result)
    if write_error is not None:
        why = write_error.strerror or write_error
        raise UserError(
            f"could not write {out / 'trajectories.jsonl'} ({why}); the first {len(records)} "
            "items are kept, results.json says completed: false"
        )
    return result


def _items(settings: EvalSettings) -> tuple[Task, ...]:
    if settings.tasks is not None:
        items = tuple(settings.tasks)[: settings.n] if settings.n is not None else tuple(settings.tasks)
    else:
        items = tuple(load_suite(settings.suite, settings.split, n=settings.n, seed=settings.seed))
    if not items:
        raise ValueError(f"no items to evaluate in {settings.suite}/{settings.split}")
    return items


def _train_items(policy: Policy) -> dict[str, Any] | None:
    items = train_items(policy)
    return asdict(items) if items is not None else None


def _offered(env: ConductorEnv) -> tuple[str, ...] | None:
    """The agents the env offers when its settings withhold some (None: all of the pool's)."""
    if not env.config.unavailable:
        return None
    return tuple(a.name for i, a in enumerate(env.pool.agents) if i not in set(env.config.unavailable))


def evaluate_policy(
    spec_or_policy: str | Any,
    pool: str | Path | Pool,
    suite: str,
    split: str = "test",
    n: int | None = None,
    seed: int = 0,
    out_dir: str | Path | None = None,
    cache: str | Path | None = None,
    max_steps: int = 5,
    lam: float = 0.1,
    progress: bool = True,
    *,
    tasks: Sequence[Task] | None = None,
    backend: Backend | None = None,
    overwrite: bool = False,
    available: Sequence[str] | None = None,
    k_available: int | None = None,
    max_depth: int = 0,
    recursion: str = "offer",
    concurrency: int | None = None,
    ray: RayExecutor | None = None,
    price_in_prompt: bool = False,
    prompt: str | None = None,
    cost_model: str | None = None,
    final_answer: str | None = None,
) -> EvalResult:
    """:func:`evaluate` with its settings as keywords (see :class:`EvalSettings`)."""
    return evaluate(
        spec_or_policy,
        EvalSettings(
            pool=pool,
            suite=suite,
            split=split,
            n=n,
            seed=seed,
            out_dir=out_dir,
            cache=cache,
            episode=EpisodeSettings(
                lam=lam,
                max_steps=max_steps,
                max_depth=max_depth,
                recursion=recursion,
                k_available=k_available,
                price_in_prompt=price_in_prompt,
                prompt=prompt,
                cost_model=cost_model,
                final_answer=final_answer,
            ),
            available=tuple(available) if available else None,
            progress=progress,
            overwrite=overwrite,
            concurrency=concurrency,
            tasks=tuple(tasks) if tasks is not None else None,
            backend=backend,
            ray=ray,
        ),
    )


# --------------------------------------------------------------------------- one Ray shard


def _eval_shard(spec: str, settings: EvalSettings) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One shard, run by a Ray worker: the evaluation's own loop on a few items."""
    with tempfile.TemporaryDirectory(prefix="puppeteer-shard-") as tmp:
        result = evaluate(spec, replace(settings, out_dir=tmp, progress=False, ray=None, overwrite=True))
        lines = [json.loads(line) for line in (Path(tmp) / "trajectories.jsonl").read_text().splitlines()]
    return result.to_dict(), lines


def slug(text: str) -> str:
    """A file-name-safe form of a policy spec."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "policy"
