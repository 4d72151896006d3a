"""One policy for every price, the job behind ``puppeteer sweep --conditioned``.

Per seed, one step policy is trained over a range of lambdas (``puppeteer train lam_range=[LOW,HIGH]``)
and evaluated greedily on the held-out split at every lambda of a fine grid; beside it, policies
trained for one lambda each (``puppeteer train lam=X``) at a few points of the grid (default: both
ends and the middle) and, where the pool is simulated, the per-item optimum
(:func:`~puppeteer.analytics.optimum.visible_optimum`) at every lambda of the grid. Every number
comes from the same items with the same reset seeds (:func:`~puppeteer.train.reinforce.evaluate`),
so the comparisons are paired. The tables and the plot are :mod:`puppeteer.analytics.lam_front`.

Runs live in ``OUT/conditioned/seed{S}/`` and ``OUT/fixed/lam{X}_seed{S}/``; a run whose
``results.json`` exists is not trained again, and the conditioned policy's grid evaluation is kept in
``OUT/conditioned/seed{S}/front_eval.json`` (recomputed when the grid changes), so an interrupted
front resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from puppeteer.analytics.lam_front import write_front_report
from puppeteer.envs.lam_range import LamRange

log = logging.getLogger(__name__)

# added to every run's overrides unless given (as ``puppeteer sweep`` does): a greedy policy cannot
# stop before anyone acts, and no wandb or progress bars in a batch of runs
FRONT_DEFAULTS: Mapping[str, str] = {"min_steps": "1", "wandb.enabled": "false", "progress": "false"}
_COST_LABELS = {"tokens": "thousand tokens", "usd": "US cents", "flops": "TFLOPs", "minutes": "model minutes"}


@dataclass(frozen=True)
class FrontPlan:
    """What a conditioned front trains and evaluates.

    ``points``: the fine grid (evenly spaced on the draw's log scale, :meth:`LamRange.grid`);
    ``fixed``: lambdas of the separately trained policies (empty: the grid's ends and middle; values
    off the grid are added to it); ``conditioned_episodes``: the conditioned runs' episodes (None: the
    trainer's, as the fixed runs); ``relabel``: the conditioned runs' ``trainer.lam_relabel`` (more
    lambdas per group from the same calls; one-call episodes with ``first_step=all``).
    """

    lam_range: tuple[float, float]
    seeds: tuple[int, ...] = (0,)
    points: int = 9
    fixed: tuple[float, ...] = ()
    conditioned_episodes: int | None = None
    relabel: int = 0

    def __post_init__(self) -> None:
        lam_range = LamRange.of(self.lam_range)
        if lam_range is None:
            raise ValueError("a conditioned front needs lam_range=[low, high]")
        object.__setattr__(self, "lam_range", lam_range.bounds)
        if self.points < 2:
            raise ValueError(f"--points {self.points}: a front needs at least 2 lambdas")
        if not self.seeds:
            raise ValueError("a conditioned front needs at least one seed")

    @property
    def range(self) -> LamRange:
        return LamRange(*self.lam_range)

    def fixed_lams(self) -> tuple[float, ...]:
        """The fixed policies' lambdas; a value within 0.1% of a grid point is that point (``0.0266``
        names the grid's 0.02659...)."""
        grid = self.range.grid(self.points)
        if not self.fixed:
            return (grid[0], grid[len(grid) // 2], grid[-1])
        snapped = {
            next((g for g in grid if abs(g - x) <= 1e-3 * max(abs(g), 1e-12)), float(x)) for x in self.fixed
        }
        return tuple(sorted(snapped))

    def grid(self) -> tuple[float, ...]:
        """The fine grid plus the fixed policies' lambdas (each compared at its own lambda)."""
        return tuple(sorted({*self.range.grid(self.points), *self.fixed_lams()}))


def _given(overrides: Sequence[str]) -> set[str]:
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides}


def _with_defaults(overrides: Sequence[str]) -> list[str]:
    given = _given(overrides)
    return [*overrides, *(f"{k}={v}" for k, v in FRONT_DEFAULTS.items() if k not in given)]


def _lam_name(lam: float) -> str:
    return f"{lam:.4g}"


def conditioned_dir(out: Path, seed: int) -> Path:
    return out / "conditioned" / f"seed{seed}"


def fixed_dir(out: Path, lam: float, seed: int) -> Path:
    return out / "fixed" / f"lam{_lam_name(lam)}_seed{seed}"


def _train(run_dir: Path, overrides: Sequence[str]) -> None:
    """One ``puppeteer train`` run into ``run_dir`` unless it has finished already."""
    if (run_dir / "results.json").exists():
        log.info("%s: finished, not trained again", run_dir)
        return
    from puppeteer.jobs.hydra_entry import hydra_main

    hydra_main([*overrides, f"out={run_dir}", f"hydra.run.dir={run_dir}"])


def train_front(plan: FrontPlan, out: Path, overrides: Sequence[str] = ()) -> None:
    """Train the conditioned run and the fixed-lambda runs of every seed (finished runs are kept)."""
    for key in ("lam", "lam_range", "seed", "out"):
        if key in _given(overrides):
            raise ValueError(f"{key}= is set by the conditioned front itself; leave it out of the overrides")
    common = _with_defaults(overrides)
    low, high = plan.lam_range
    for seed in plan.seeds:
        extra = [f"trainer.episodes={plan.conditioned_episodes}"] if plan.conditioned_episodes else []
        extra += [f"trainer.lam_relabel={plan.relabel}"] if plan.relabel else []
        _train(conditioned_dir(out, seed), [*common, *extra, f"seed={seed}", f"lam_range=[{low},{high}]"])
        for lam in plan.fixed_lams():
            _train(fixed_dir(out, lam, seed), [*common, f"seed={seed}", f"lam={lam}"])


def evaluate_conditioned(run_dir: Path, grid: Sequence[float]) -> list[dict[str, Any]]:
    """The conditioned run's final policy, greedy on its held-out items at every lambda of ``grid``."""
    cache = run_dir / "front_eval.json"
    if cache.exists():
        kept = json.loads(cache.read_text())
        if [round(r["lam"], 10) for r in kept] == [round(x, 10) for x in grid]:
            return kept
    from puppeteer.jobs.builder import heldout
    from puppeteer.jobs.train import heldout_env, job_of
    from puppeteer.policies.puppeteer import PuppeteerPolicy

    cfg = json.loads((run_dir / "config.json").read_text())
    job = job_of(cfg)
    env = heldout_env(cfg, job)
    policy = PuppeteerPolicy.load(run_dir / "final", job.pool)
    policy.config = replace(policy.config, greedy=True)
    rows = [{"lam": x, **heldout(env, policy, job.trainer.parallel_envs, lam=x)} for x in grid]
    cache.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def optimum_front(cfg: Mapping[str, Any], grid: Sequence[float], out: Path) -> list[dict[str, Any]]:
    """The per-item optimum (one call, given what the question shows) at every lambda of ``grid``, on
    the runs' held-out items; empty where the pool is not simulated."""
    cache = out / "optimum.json"
    if cache.exists():
        kept = json.loads(cache.read_text())
        if [round(r["lam"], 10) for r in kept] == [round(x, 10) for x in grid]:
            return kept
    from puppeteer.analytics.optimum import visible_optimum
    from puppeteer.envs.build import build_env
    from puppeteer.jobs.train import heldout_env, job_of

    job = job_of(cfg)
    if set(job.pool.backends()) != {"sim"}:
        return []
    env = heldout_env(cfg, job)
    rows = []
    for x in grid:
        at = build_env(replace(env.config, lam=x), pool=job.pool, tasks=env.tasks)
        opt = visible_optimum(at)
        best = opt.best_single
        rows.append(
            {
                "lam": x,
                "accuracy": opt.optimum.accuracy,
                "return": opt.optimum.ret,
                "cost": opt.optimum.cost,
                "expected_return": opt.expected_return,
                "best_single": best.name,
                "best_single_return": best.ret,
                "shares": opt.shares([a.name for a in job.pool.agents]),
            }
        )
    cache.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def gather_front(plan: FrontPlan, out: Path) -> dict[str, Any]:
    """The front file's content from the finished runs under ``out``."""
    grid = plan.grid()
    conditioned, fixed, train_s = [], [], {"conditioned": [], "fixed": []}
    cfg: Mapping[str, Any] | None = None
    results: Mapping[str, Any] = {}
    fixed_episodes = None
    for seed in plan.seeds:
        run = conditioned_dir(out, seed)
        if not (run / "results.json").exists():
            log.warning("%s has not finished: left out", run)
            continue
        cfg = json.loads((run / "config.json").read_text())
        results = json.loads((run / "results.json").read_text())
        train_s["conditioned"].append(results.get("train_s"))
        conditioned += [{"seed": seed, **r} for r in evaluate_conditioned(run, grid)]
        for lam in plan.fixed_lams():
            d = fixed_dir(out, lam, seed)
            if not (d / "results.json").exists():
                log.warning("%s has not finished: left out", d)
                continue
            res = json.loads((d / "results.json").read_text())
            fixed.append({"lam": lam, "seed": seed, **res["heldout"]})
            train_s["fixed"].append(res.get("train_s"))
            fixed_episodes = res["episodes"]
    if cfg is None:
        raise FileNotFoundError(f"no finished conditioned run under {out / 'conditioned'}")
    from puppeteer.jobs.train import cost_model_of

    cost_model = cost_model_of(cfg)
    return {
        "lam_range": list(plan.lam_range),
        "grid": list(grid),
        "pool": results["pool"],
        "suite": results["suite"],
        "split": cfg["suite"]["eval_split"],
        "n_eval": results["n_eval"],
        "backend": results["backend"],
        "cost_model": cost_model,
        "cost_label": _COST_LABELS.get(cost_model, cost_model),
        "episodes": {"conditioned": results["episodes"], "fixed": fixed_episodes},
        "lam_relabel": int(cfg["trainer"].get("lam_relabel") or 0),
        "conditioned": conditioned,
        "fixed": fixed,
        "optimum": optimum_front(cfg, grid, out),
        "train_s": train_s,
    }


def run_front(
    plan: FrontPlan, out: str | Path, overrides: Sequence[str] = (), train: bool = True
) -> dict[str, Any]:
    """Train (unless ``train=False``: gather only), evaluate, and write front.json/.csv/.md/.png."""
    out = Path(out).resolve()
    if train:
        train_front(plan, out, overrides)
    front = gather_front(plan, out)
    write_front_report(front, out)
    return front


__all__ = [
    "FRONT_DEFAULTS",
    "FrontPlan",
    "conditioned_dir",
    "evaluate_conditioned",
    "fixed_dir",
    "gather_front",
    "optimum_front",
    "run_front",
    "train_front",
]
