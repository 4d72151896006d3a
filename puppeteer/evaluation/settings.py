"""What one evaluation needs besides the policy (:class:`EvalSettings`), and the Ray executor it may
run its items on (:class:`RayExecutor`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.agents.pool import Pool
from puppeteer.policies.protocol import EpisodeSettings
from puppeteer.types import Task

if TYPE_CHECKING:
    from puppeteer.backends.base import Backend


@dataclass(frozen=True)
class RayExecutor:
    """Run the items on a Ray cluster (the ``ray`` extra), in contiguous shards, one task per shard.

    ``workers`` shards (default: the cluster's CPU count). ``address=None`` starts a local Ray
    instance with ``num_cpus`` CPUs; ``"auto"`` joins this machine's cluster; ``"ray://HEAD:10001"``
    connects a client. ``worker_cpus`` is each shard's CPU request (below 1 for API-bound work).
    Every item's reset seed depends only on ``(seed, task id)``, so the gathered files equal the
    single-process run's (up to the wall-clock fields, :data:`puppeteer.envs.distributed.WALL_FIELDS`).
    """

    address: str | None = None
    workers: int | None = None
    num_cpus: int | None = 2
    runtime_env: Mapping[str, Any] | None = None
    worker_cpus: float = 1.0


@dataclass(frozen=True)
class EvalSettings:
    """Everything one evaluation needs besides the policy: where, what, how many, how.

    ``tasks`` replaces the suite's items (``suite`` is then only a label); ``backend`` replaces the
    pool's backends (a test double or a custom router); ``cache`` is a SQLite response cache for
    model-calling backends. ``available`` (agent names) fixes the agents of every episode;
    ``episode.k_available`` draws a random k-of-n subset per item instead (seeded per item).
    ``concurrency`` items run at once in this process, each on its own env clone and policy fork
    (default: 16 for pools that call models, so the local backend can batch their calls; 1 for the
    simulator); ``ray`` runs them on Ray workers instead. Results do not depend on either.
    A finished ``results.json`` in ``out_dir`` is never replaced unless ``overwrite``.
    """

    pool: str | Path | Pool
    suite: str
    split: str = "test"
    n: int | None = None
    seed: int = 0
    out_dir: str | Path | None = None
    cache: str | Path | None = None
    episode: EpisodeSettings = field(default_factory=EpisodeSettings)
    available: tuple[str, ...] | None = None
    progress: bool = True
    overwrite: bool = False
    concurrency: int | None = None
    tasks: tuple[Task, ...] | None = None
    backend: Backend | None = None
    ray: RayExecutor | None = None
