"""Train sb3-contrib's MaskablePPO on step-mode ``Conductor-v0`` and compare it with random routing.

The env is wrapped by :class:`puppeteer.envs.wrappers.EncodedObservation`; the trained model is
saved as an ``sb3:DIR`` policy and evaluated on held-out items with the project's own
:func:`puppeteer.evaluation.evaluate.evaluate_policy` (same seeds, same metrics as every baseline).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import load_pool
from puppeteer.envs.lam_range import LamRange
from puppeteer.envs.wrappers import make_encoded_env
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.evaluation.results import EvalResult
from puppeteer.policies.external import MaskableModelPolicy, save_sb3
from puppeteer.tasks import load_suite

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaskablePPOConfig:
    pool: str = "sim-paper"
    suite: str = "mix-paper"
    n_train: int | None = None  # train-split items (None: all)
    n_eval: int | None = None  # test-split items (None: all; mix-paper has 150)
    steps: int = 4096
    n_steps: int = 512  # rollout length per PPO update
    batch_size: int = 64
    learning_rate: float = 3e-4
    ent_coef: float = 0.01
    encoder: str = "hashing"
    signals: bool = False  # append the answer signals (puppeteer.tasks.signals) to the observation
    max_steps: int = 5
    min_steps: int = 1  # agents that act before the Terminator is offered (0: it may stop at once)
    lam: float = 0.1
    cost_model: str = "tokens"  # as in `puppeteer train`: tokens | flops | usd | minutes
    seed: int = 0
    # the order the train and test items are taken in (their first n_train / n_eval); None: ``seed``, so
    # each seed sees other items. 0 keeps every seed on the items a shipped outcome table holds
    item_seed: int | None = None
    # [low, high]: each training episode draws its lambda (log-uniform, puppeteer.envs.lam_range) and the
    # observation carries it, so one model routes at any price in the range; ``lam`` is then
    # only the held-out evaluation's price
    lam_range: tuple[float, float] | None = None
    eval_lams: tuple[float, ...] = ()  # also evaluate the trained model at each of these lambdas

    def __post_init__(self) -> None:
        trained = LamRange.of(self.lam_range)
        object.__setattr__(self, "lam_range", trained.bounds if trained is not None else None)
        object.__setattr__(self, "eval_lams", tuple(float(x) for x in self.eval_lams))
        if any(x < 0 for x in (self.lam, *self.eval_lams)):
            raise ValueError(f"lambdas must be >= 0, got lam={self.lam} eval_lams={self.eval_lams}")


@dataclass(frozen=True)
class MaskablePPOReport:
    trained: EvalResult
    random: EvalResult
    out_dir: Path
    at_lams: tuple[EvalResult, ...] = ()  # the trained model at each of ``eval_lams``


def train_maskable_ppo(cfg: MaskablePPOConfig, out_dir: str | Path) -> MaskablePPOReport:
    try:
        from sb3_contrib import MaskablePPO
    except ImportError as e:
        raise ImportError("MaskablePPO needs the rl extra: pip install 'puppeteer-orchestra[rl]'") from e

    out = Path(out_dir)
    pool = load_pool(cfg.pool)
    items = cfg.seed if cfg.item_seed is None else cfg.item_seed
    tasks = load_suite(cfg.suite, "train", n=cfg.n_train, seed=items)
    env = make_encoded_env(
        cfg.encoder,
        signals=cfg.signals,
        pool=pool,
        tasks=tasks,
        max_steps=cfg.max_steps,
        min_steps=cfg.min_steps,
        lam=cfg.lam,
        cost_model=cfg.cost_model,
        lam_range=cfg.lam_range,
    )
    model: Any = MaskablePPO(
        "MlpPolicy",
        env,
        n_steps=cfg.n_steps,
        batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        ent_coef=cfg.ent_coef,
        seed=cfg.seed,
        device="cpu",
        verbose=0,
    )
    log.info(
        "training MaskablePPO for %d steps on %s/%s (train split, %d items, lambda %s)",
        cfg.steps,
        cfg.pool,
        cfg.suite,
        len(tasks),
        f"drawn from {list(cfg.lam_range)}" if cfg.lam_range else f"{cfg.lam:g}",
    )
    model.learn(total_timesteps=cfg.steps)
    save_sb3(
        model,
        out / "model",
        pool,
        cfg.encoder,
        cfg.max_steps,
        signals=cfg.signals,
        min_steps=cfg.min_steps,
        lam_range=cfg.lam_range,
    )
    policy = MaskableModelPolicy(model, env.encoder, name=f"sb3:{out / 'model'}", min_steps=cfg.min_steps)
    common: dict[str, Any] = dict(
        pool=pool,
        suite=cfg.suite,
        split="test",
        tasks=load_suite(cfg.suite, "test", n=cfg.n_eval, seed=items),
        seed=cfg.seed,
        max_steps=cfg.max_steps,
        lam=cfg.lam,
        progress=False,
    )
    trained = evaluate_policy(policy, out_dir=out / "eval_trained", **common)
    random = evaluate_policy("random-step", out_dir=out / "eval_random", **common)
    at_lams = tuple(
        evaluate_policy(policy, out_dir=out / f"eval_lam{x:g}", **{**common, "lam": x}) for x in cfg.eval_lams
    )
    env.close()
    return MaskablePPOReport(trained, random, out, at_lams)


__all__ = ["MaskablePPOConfig", "MaskablePPOReport", "train_maskable_ppo"]
