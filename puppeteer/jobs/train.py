"""The training job behind ``puppeteer train``: config in, run directory out."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import configured_pool
from puppeteer.backends.cache import resolve_cache
from puppeteer.envs.build import BackendSpec, EnvConfig
from puppeteer.envs.encoders import ENCODERS
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.reward import AUTO, COST_MODELS, auto_cost_model
from puppeteer.errors import UserError
from puppeteer.jobs.builder import StepJob, heldout
from puppeteer.jobs.replay_check import check_replay_coverage
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_config import STATE_ENCODERS, PolicyConfig, without_removed
from puppeteer.train.config_schema import fit_to_split
from puppeteer.train.logging import JsonlLogger, MetricLogger, MultiLogger, WandbLogger
from puppeteer.train.reinforce import ReinforceConfig, check_resume, check_training, train
from puppeteer.utils.checks import check_env_settings, integer
from puppeteer.utils.redaction import redact
from puppeteer.utils.rundir import check_owner, claim

log = logging.getLogger(__name__)

MAX_STEPS_LIMIT = 256  # the scorer has one input per step index: a bound keeps its layers sane
HELDOUT_LAMS = 5  # a lambda-conditioned run's held-out grid (results.json heldout_by_lam)


def _get(cfg: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = cfg.get(key, default)
    return default if value is None else value


def validate_config(cfg: Mapping[str, Any]) -> None:
    """Check the values of a composed training config; ``ValueError`` naming the first bad key."""
    for key in ("lam", "gamma", "max_steps", "cost_model", "seed", "pool", "suite", "policy", "trainer"):
        if key not in cfg:
            raise ValueError(f"the training config lacks {key!r}")
    check_env_settings(
        lam=cfg["lam"],
        gamma=cfg["gamma"],
        phi=cfg.get("phi"),
        workflow_lam=0.0,
        temperature=_get(cfg, "temperature", 0.0),
        samples_per_item=cfg.get("samples_per_item"),
    )
    max_steps = integer("max_steps", cfg["max_steps"], low=1, high=MAX_STEPS_LIMIT)
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
    if cfg["cost_model"] not in (*COST_MODELS, AUTO):
        known = ", ".join((AUTO, *COST_MODELS))
        raise ValueError(f"cost_model: unknown {cfg['cost_model']!r}; known: {known}")
    encoder = (cfg.get("policy") or {}).get("encoder")
    if encoder is not None and encoder not in ENCODERS:
        raise ValueError(f"policy.encoder: unknown {encoder!r}; known: {', '.join(ENCODERS)}")
    state_encoder = (cfg.get("policy") or {}).get("state_encoder")
    if state_encoder is not None and state_encoder not in STATE_ENCODERS:
        known = ", ".join(STATE_ENCODERS)
        raise ValueError(f"policy.state_encoder: unknown {state_encoder!r}; known: {known}")
    k = cfg.get("k_available")
    if k is not None:
        n_agents = len(configured_pool(cfg["pool"]).agents)
        if not 1 <= integer("k_available", k) <= n_agents:
            raise ValueError(f"k_available={k}: must offer 1..{n_agents} agents (the pool's size)")
    held = _holdout(cfg)
    if held:
        n_agents = len(configured_pool(cfg["pool"]).agents)
        EnvConfig(mode="step", k_available=k, holdout_subsets=held)  # sizes, distinct ids
        if any(i >= n_agents for subset in held for i in subset):
            raise ValueError(f"holdout_subsets: agent ids must be in 0..{n_agents - 1}")
    _check_backend_options(cfg["pool"])
    check_replay_coverage(cfg)
    lam_range = _lam_range(cfg)
    if lam_range is not None and trainer.get("baseline") == "ema":
        raise ValueError(
            "trainer.baseline=ema: one number for every lambda; with lam_range use group or prefix"
        )


def _lam_range(cfg: Mapping[str, Any]) -> LamRange | None:
    """``lam_range`` of a training config (a Hydra list) as a checked range, or None."""
    value = cfg.get("lam_range")
    if value is None:
        return None
    return LamRange.of(list(value) if hasattr(value, "__iter__") and not isinstance(value, str) else value)


def cost_model_of(cfg: Mapping[str, Any]) -> str:
    """The config's cost model, ``auto`` resolved by what the pool declares (prices, speeds)."""
    name = str(cfg["cost_model"])
    if name != AUTO:
        return name
    return auto_cost_model(agent.model for agent in configured_pool(cfg["pool"]).agents)


def env_settings(cfg: Mapping[str, Any]) -> EnvConfig:
    """The step-mode env settings of a training config (its top-level keys)."""
    return EnvConfig(
        mode="step",
        lam=float(cfg["lam"]),
        gamma=float(cfg["gamma"]),
        phi=cfg.get("phi"),
        max_steps=int(cfg["max_steps"]),
        min_steps=int(_get(cfg, "min_steps", 0)),
        cost_model=cost_model_of(cfg),
        temperature=float(_get(cfg, "temperature", 0.0)),
        samples_per_item=cfg.get("samples_per_item"),
        aggregate=cfg.get("aggregate"),  # the final answer: None = vote
        k_available=cfg.get("k_available"),  # random k-of-n agent subsets while training only
        holdout_subsets=_holdout(cfg),  # never drawn in training
        lam_range=_bounds(cfg),  # lambda drawn per episode while training only
        # a policy that reads the answer signals also gets the visible checks' verdicts among them
        visible_checks=bool(_get(cfg["policy"], "signals", False)),
    )


def _holdout(cfg: Mapping[str, Any]) -> tuple[tuple[int, ...], ...]:
    """``holdout_subsets`` of a training config as tuples of agent ids (none: ``()``)."""
    value = cfg.get("holdout_subsets")
    if value is None:
        return ()
    if isinstance(value, str) or not all(hasattr(v, "__iter__") and not isinstance(v, str) for v in value):
        raise ValueError(f"holdout_subsets={value!r}: must be a list of lists of agent ids")
    return tuple(tuple(integer("holdout_subsets", i, low=0) for i in subset) for subset in value)


def _bounds(cfg: Mapping[str, Any]) -> tuple[float, float] | None:
    lam_range = _lam_range(cfg)
    return lam_range.bounds if lam_range is not None else None


def _n(suite: Mapping[str, Any], part: str) -> int | None:
    """``suite.n_<part>`` capped at what the ``<part>_split`` holds (the sizes are upper bounds)."""
    return fit_to_split(suite["name"], suite[f"{part}_split"], suite.get(f"n_{part}"))


def job_of(cfg: Mapping[str, Any]) -> StepJob:
    """The job a composed training config describes."""
    pc = without_removed(cfg["policy"])  # a saved run's config.json may name them, off
    pool = configured_pool(cfg["pool"])
    # like `puppeteer eval`: pools that call models share the user's response cache unless told
    # otherwise (cache=off), so training replays every call an evaluation or earlier run made
    given = cfg.get("cache")
    cache = resolve_cache(pool, given, no_cache=str(given).lower() == "off")
    return StepJob(
        settings=env_settings(cfg),
        pool=pool,
        policy_config=PolicyConfig(
            encoder=pc["encoder"],
            encoder_options=tuple(dict(pc.get("encoder_options") or {}).items()),
            state_encoder=str(_get(pc, "state_encoder", "same")),
            hidden=int(pc["hidden"]),
            max_steps=int(cfg["max_steps"]),
            min_steps=int(_get(cfg, "min_steps", 0)),
            signals=bool(_get(pc, "signals", False)),
            surface=bool(_get(pc, "surface", False)),
            task_dims=int(pc["task_dims"]) if _get(pc, "task_dims", None) is not None else None,
            by_kind=bool(_get(pc, "by_kind", False)),
            cards=bool(_get(pc, "cards", False)),
            cards_linear=bool(_get(pc, "cards_linear", False)),
            cards_text=bool(_get(pc, "cards_text", True)),
            step_heads=bool(_get(pc, "step_heads", False)),
            one_call_first=bool(_get(pc, "one_call_first", False)),
            later_inputs=str(_get(pc, "later_inputs", "all")),
            lam_range=_bounds(cfg),
        ),
        trainer=ReinforceConfig(**{**dict(cfg["trainer"]), "seed": int(cfg["seed"])}),
        suite=cfg["suite"]["name"],
        seed=int(cfg["seed"]),
        backend=BackendSpec.of(_backend_options(cfg["pool"]), cache=cache),
    )


def _check_backend_options(node: Mapping[str, Any]) -> None:
    """``pool.options`` names backends of the pool, and the simulator accepts its values."""
    options = _backend_options(node)
    if not options:
        return
    pool = configured_pool(node)
    unknown = sorted(set(options) - set(pool.backends()))
    if unknown:
        has = ", ".join(pool.backends())
        raise ValueError(f"pool.options.{unknown[0]}: the pool has no {unknown[0]} backend (it has {has})")
    if "sim" in options:
        from puppeteer.backends.sim import SimBackend

        try:
            SimBackend(**{**dict(pool.backend_options.get("sim") or {}), **options["sim"]})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"pool.options.sim: {exc}") from exc


def _backend_options(node: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    """``pool.options``: per backend, options merged over the pool file's (``{sim: {repeat_corr: 1}}``)."""
    options = node.get("options")
    if not options:
        return None
    if not isinstance(options, Mapping) or not all(isinstance(v, Mapping) for v in options.values()):
        raise ValueError(f"pool.options: expected {{backend: {{option: value}}}}, got {options!r}")
    return {str(k): dict(v) for k, v in options.items()}


def build(
    cfg: Mapping[str, Any], job: StepJob | None = None
) -> tuple[ConductorEnv, ConductorEnv, PuppeteerPolicy, ReinforceConfig]:
    """The training env, the held-out env, the policy and the trainer settings of a training config."""
    job, suite = job or job_of(cfg), cfg["suite"]
    env = job.env(suite["train_split"], _n(suite, "train"), training=True)
    return env, heldout_env(cfg, job), job.policy(), job.trainer


def heldout_env(cfg: Mapping[str, Any], job: StepJob | None = None) -> ConductorEnv:
    """The held-out env of a training config: ``suite.n_eval`` items of its ``eval_split``."""
    suite = cfg["suite"]
    return (job or job_of(cfg)).env(suite["eval_split"], _n(suite, "eval"))


def run_training(cfg: Mapping[str, Any], run_dir: str | Path, console: Any | None = None) -> dict[str, Any]:
    """Train, evaluate on held-out items; write ``results.json``, curves and the policy.

    ``run_dir`` is held by this run alone (``run_dir/.lock``) and is refused, before anything is
    written, when another run holds it, another command wrote it, or its checkpoint is of other settings.
    """
    validate_config(cfg)
    job = job_of(cfg)
    env, eval_env, policy, tcfg = build(cfg, job)  # everything is checked before anything is written
    check_training(env, policy, tcfg)
    with claim(run_dir) as run:  # one writer at a time; the lock goes with the process
        check_owner(run, "train")  # never over another command's results
        check_resume(run, env, policy, tcfg)  # a checkpoint of other settings is refused here
        _write_json(run / "config.json", redact(cfg))
        return _train_and_report(cfg, job, run, (env, eval_env, policy, tcfg), console)


def _write_json(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, written whole or not at all (the old file stays on failure)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, default=str))
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"could not write {path}: {exc.strerror or exc}") from None


def _train_and_report(
    cfg: Mapping[str, Any],
    job: StepJob,
    run: Path,
    built: tuple[ConductorEnv, ConductorEnv, PuppeteerPolicy, ReinforceConfig],
    console: Any | None,
) -> dict[str, Any]:
    from puppeteer.analytics.plots import learning_curve

    env, eval_env, policy, tcfg = built
    loggers: list[MetricLogger] = [JsonlLogger(run / "metrics.jsonl")]
    wb = cfg.get("wandb") or {}
    if wb.get("enabled"):
        loggers.append(WandbLogger(run, wb.get("project", "puppeteer"), cfg, mode=wb.get("mode")))
    logger = MultiLogger(*loggers)
    start = time.perf_counter()
    progress_cb, stop = _progress(console, tcfg.episodes) if cfg.get("progress", True) else (None, None)
    try:
        # model selection ("best/") on the validation split; the reported numbers come from the test split
        val_env = job.env(
            cfg["suite"].get("val_split", "validation"),
            _n({"val_split": "validation", **cfg["suite"]}, "val"),
        )
        state = train(env, policy, tcfg, run, eval_env=val_env, logger=logger, progress=progress_cb)
        train_s = time.perf_counter() - start  # training with its validation, before the held-out evaluation
    finally:
        if stop:
            stop()
        logger.close()
    lam_range = _lam_range(cfg)
    # a conditioned policy is reported at lam (clamped into its range) and on a grid across the range
    at = lam_range.clamp(float(cfg["lam"])) if lam_range is not None else None
    final = heldout(eval_env, policy, tcfg.parallel_envs, lam=at)
    backend = ",".join(env.pool.backends())
    results: dict[str, Any] = {
        "heldout": final,
        "best_update": state.best_update,
        "best_validation_return": state.best,
        "episodes": state.episodes,
        "updates": state.update,
        "wall_s": time.perf_counter() - start,
        "train_s": train_s,
        "backend": backend,
        "pool": env.pool.name,
        "suite": cfg["suite"]["name"],
        "n_train": len(env.tasks),
        "n_eval": len(eval_env.tasks),
        "lam": cfg["lam"],
        "cost_model": env.config.cost_model,
        "baseline": tcfg.baseline,
        "seed": cfg["seed"],
    }
    if lam_range is not None:
        results["lam"] = at
        results["lam_range"] = list(lam_range.bounds)
        results["heldout_by_lam"] = [
            {"lam": x, **heldout(eval_env, policy, tcfg.parallel_envs, lam=x)}
            for x in lam_range.grid(HELDOUT_LAMS)
        ]
    _write_json(run / "results.json", results)
    learning_curve(
        state.history,
        run / "learning_curve.png",
        f"puppeteer REINFORCE ({tcfg.baseline} baseline) on {results['suite']}, pool {env.pool.name} "
        f"[backend: {backend}]",
    )
    if final["calls"] == 0:
        raise UserError(
            f"training ended with a degenerate policy: it calls no agent on the {len(eval_env.tasks)} "
            f"held-out items (accuracy {final['accuracy']:.3f}); results in {run}. Set min_steps=1 "
            "(at least one agent per item) or lower lam"
        )
    return results


def _progress(console: Any | None, total: int):
    from puppeteer.utils.progress import ProgressReporter

    bar = ProgressReporter("train", total, console=console).start()

    def update(done: int, total_: int, metrics: Mapping[str, float]) -> None:
        info = f"return {metrics['train/return']:.3f} acc {metrics['train/accuracy']:.2f}"
        if "eval/return" in metrics:
            info += f" | validation return {metrics['eval/return']:.3f}"
        bar.update(done, info=info, total=total_)

    return update, bar.stop
