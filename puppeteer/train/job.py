"""The training job behind ``scripts/train.py`` and ``puppeteer train``: config in, run directory out."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from puppeteer.checks import check_env_settings, integer
from puppeteer.env import ConductorEnv
from puppeteer.policies.puppeteer import PolicyConfig, PuppeteerPolicy
from puppeteer.pool import load_pool
from puppeteer.redaction import redact
from puppeteer.train.config_schema import fit_to_split
from puppeteer.train.logging import JsonlLogger, MetricLogger, MultiLogger, WandbLogger
from puppeteer.train.reinforce import ReinforceConfig, evaluate, train

log = logging.getLogger(__name__)


def _get(cfg: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = cfg.get(key, default)
    return default if value is None else value


def validate_config(cfg: Mapping[str, Any]) -> None:
    """Check the values of a composed training config; ``ValueError`` naming the first bad key."""
    for key in ("lam", "gamma", "max_steps", "cost_model", "seed", "pool", "suite", "policy", "trainer"):
        if key not in cfg:
            raise ValueError(f"the training config lacks {key!r}")
    check_env_settings(lam=cfg["lam"], gamma=cfg["gamma"], phi=cfg.get("phi"), workflow_lam=0.0,
                       temperature=_get(cfg, "temperature", 0.0),
                       samples_per_item=cfg.get("samples_per_item"))
    max_steps = integer("max_steps", cfg["max_steps"], low=1)
    min_steps = integer("min_steps", _get(cfg, "min_steps", 0), low=0)
    if min_steps > max_steps:
        raise ValueError(f"min_steps={min_steps}: must be <= max_steps ({max_steps})")
    integer("seed", cfg["seed"])
    trainer = cfg["trainer"]
    if not isinstance(trainer, Mapping):
        raise ValueError("trainer: must be a mapping of REINFORCE settings")
    known = set(ReinforceConfig.__dataclass_fields__)
    unknown = sorted(set(trainer) - known)
    if unknown:
        raise ValueError(f"trainer.{unknown[0]}: unknown setting; known: {', '.join(sorted(known))}")
    ReinforceConfig(**{**dict(trainer), "seed": int(cfg["seed"])})  # checks each value


def env_kwargs(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "mode": "step",
        "lam": float(cfg["lam"]),
        "gamma": float(cfg["gamma"]),
        "phi": cfg.get("phi"),
        "max_steps": int(cfg["max_steps"]),
        "min_steps": int(_get(cfg, "min_steps", 0)),
        "cost_model": str(cfg["cost_model"]),
        "temperature": float(_get(cfg, "temperature", 0.0)),
        "samples_per_item": cfg.get("samples_per_item"),
        "cache": cfg.get("cache"),
    }


def _n(suite: Mapping[str, Any], part: str) -> int | None:
    """``suite.n_<part>`` capped at what the ``<part>_split`` holds (the sizes are upper bounds)."""
    return fit_to_split(suite["name"], suite[f"{part}_split"], suite.get(f"n_{part}"))


def build(cfg: Mapping[str, Any]) -> tuple[ConductorEnv, ConductorEnv, PuppeteerPolicy, ReinforceConfig]:
    pool = load_pool(cfg["pool"]["name"])
    suite = cfg["suite"]
    kw = env_kwargs(cfg)
    env = ConductorEnv(
        pool=pool, suite=suite["name"], split=suite["train_split"], n_tasks=_n(suite, "train"),
        k_available=cfg.get("k_available"), **kw,  # random k-of-n agent subsets while training only
    )
    eval_env = ConductorEnv(
        pool=pool, suite=suite["name"], split=suite["eval_split"], n_tasks=_n(suite, "eval"), **kw
    )
    pc = cfg["policy"]
    policy = PuppeteerPolicy(
        pool,
        PolicyConfig(
            encoder=pc["encoder"],
            encoder_options=tuple(dict(pc.get("encoder_options") or {}).items()),
            hidden=int(pc["hidden"]),
            max_steps=int(cfg["max_steps"]),
            min_steps=int(_get(cfg, "min_steps", 0)),
        ),
        seed=int(cfg["seed"]),
    )
    tcfg = ReinforceConfig(**{**dict(cfg["trainer"]), "seed": int(cfg["seed"])})
    return env, eval_env, policy, tcfg


def run_training(cfg: Mapping[str, Any], run_dir: str | Path, console: Any | None = None) -> dict[str, Any]:
    """Train, evaluate on held-out items; write ``results.json``, curves and the policy."""
    from puppeteer.analytics.plots import learning_curve

    validate_config(cfg)
    env, eval_env, policy, tcfg = build(cfg)  # everything is checked before anything is written
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps(redact(cfg), indent=2, default=str))
    loggers: list[MetricLogger] = [JsonlLogger(run / "metrics.jsonl")]
    wb = cfg.get("wandb") or {}
    if wb.get("enabled"):
        loggers.append(WandbLogger(run, wb.get("project", "puppeteer"), cfg, mode=wb.get("mode")))
    logger = MultiLogger(*loggers)
    start = time.perf_counter()
    progress_cb, stop = _progress(console, tcfg.episodes) if cfg.get("progress", True) else (None, None)
    try:
        # model selection ("best/") on the validation split; the reported numbers come from the test split
        val_env = ConductorEnv(
            pool=env.pool,
            suite=cfg["suite"]["name"],
            split=cfg["suite"].get("val_split", "validation"),
            n_tasks=_n({"val_split": "validation", **cfg["suite"]}, "val"),
            **env_kwargs(cfg),
        )
        state = train(env, policy, tcfg, run, eval_env=val_env, logger=logger, progress=progress_cb)
    finally:
        if stop:
            stop()
        logger.close()
    final = evaluate([eval_env, *(eval_env.clone() for _ in range(tcfg.parallel_envs - 1))], policy)
    backend = ",".join(env.pool.backends())
    results = {
        "heldout": final,
        "best_update": state.best_update,
        "best_validation_return": state.best,
        "episodes": state.episodes,
        "updates": state.update,
        "wall_s": time.perf_counter() - start,
        "backend": backend,
        "pool": env.pool.name,
        "suite": cfg["suite"]["name"],
        "n_train": len(env.tasks),
        "n_eval": len(eval_env.tasks),
        "lam": cfg["lam"],
        "baseline": tcfg.baseline,
        "seed": cfg["seed"],
    }
    (run / "results.json").write_text(json.dumps(results, indent=2))
    learning_curve(
        state.history,
        run / "learning_curve.png",
        f"puppeteer REINFORCE ({tcfg.baseline} baseline) on {results['suite']}, pool {env.pool.name} "
        f"[backend: {backend}]",
    )
    return results


def _progress(console: Any | None, total: int):
    from puppeteer.progress import ProgressReporter

    bar = ProgressReporter("train", total, console=console).start()

    def update(done: int, total_: int, metrics: Mapping[str, float]) -> None:
        info = f"return {metrics['train/return']:.3f} acc {metrics['train/accuracy']:.2f}"
        if "eval/return" in metrics:
            info += f" | validation return {metrics['eval/return']:.3f}"
        bar.update(done, info=info)

    return update, bar.stop
