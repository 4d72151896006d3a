"""Offline vs online training of the step-wise puppeteer on a simulated pool.

Three arms per seed, all measured in online episodes to reach 90% of the known optimum's
held-out return (the better of the oracle router and the best single agent):

- ``offline``: reward-weighted regression on logs of a random policy (no new model calls);
- ``offline+online``: the offline policy, then REINFORCE;
- ``online``: REINFORCE from scratch.

The logs are written by :func:`puppeteer.evaluation.evaluate.evaluate_policy` running ``random-step``
on the train split (one eval run per log seed), as production logs would be.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from offline import OfflineConfig, train_offline

from puppeteer.analytics.plots import _title, save
from puppeteer.analytics.references import oracle_router, run_plan
from puppeteer.envs.env import ConductorEnv
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.jobs.builder import StepJob, env_copies
from puppeteer.train.reinforce import ReinforceConfig, evaluate, train

# experiments/_shared/: the modules that several studies use (not installed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from study import SimSetting, episodes_to_reach

log = logging.getLogger(__name__)

ARMS = ("offline", "offline+online", "online")


@dataclass(frozen=True)
class OfflineStudyConfig(SimSetting):
    encoder: str = "hashing"
    log_seeds: tuple[int, ...] = (0, 1, 2, 3)
    seeds: tuple[int, ...] = (0, 1, 2)
    online_episodes: int = 1024
    batch_episodes: int = 64
    n_eval: int | None = None
    offline: OfflineConfig = field(default_factory=OfflineConfig)


def _job(cfg: OfflineStudyConfig) -> StepJob:
    trainer = ReinforceConfig(episodes=cfg.online_episodes, batch_episodes=cfg.batch_episodes, eval_every=1)
    return StepJob.on_simulator(
        cfg.pool,
        cfg.suite,
        lam=cfg.lam,
        max_steps=cfg.max_steps,
        encoder=cfg.encoder,
        trainer=trainer,
        policy_min_steps=1,
    )


def optimum(env: ConductorEnv) -> tuple[float, str]:
    """The better of the oracle router and the best single agent (then the Terminator)."""
    refs = [oracle_router(env)]
    refs += [run_plan(env, lambda _t, a=a: [a], env.pool.agent(a).name) for a in range(len(env.pool))]
    best = max(refs, key=lambda r: r.ret)
    return best.ret, best.name


def run_offline_study(
    cfg: OfflineStudyConfig, out: str | Path, say: Callable[[str], None] = lambda _m: None
) -> dict[str, Any]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    base = _job(cfg)
    train_env, test_env = base.env("train"), base.env("test", cfg.n_eval)
    test_envs = env_copies(test_env, 32)
    best, best_name = optimum(test_env)
    target = 0.9 * best
    say(f"optimum {best:.3f} ({best_name}); target {target:.3f}")

    logs = []
    for s in cfg.log_seeds:
        d = out / "logs" / f"random-step-seed{s}"
        evaluate_policy(
            "random-step",
            cfg.pool,
            cfg.suite,
            split="train",
            seed=s,
            out_dir=d,
            lam=cfg.lam,
            max_steps=cfg.max_steps,
            progress=False,
            tasks=train_env.tasks,  # the same items under every log seed (other seeds: other sample indices)
        )
        logs.append(d)
    random_ret = float(np.mean([json.loads((d / "results.json").read_text())["mean_reward"] for d in logs]))
    say(f"logs: {len(logs)} random-step runs, mean return {random_ret:.3f}")

    rows: list[dict[str, Any]] = []
    for seed in cfg.seeds:
        for arm in ARMS:
            say(f"seed {seed}: {arm}")
            job = base.seeded(seed)
            policy = job.policy()
            n_logged = 0
            if arm != "online":
                data, _ = train_offline(
                    logs, train_env, policy, OfflineConfig(**{**asdict(cfg.offline), "seed": seed})
                )
                n_logged = len({t.episode for t in data})
            start = evaluate(test_envs, policy)["return"]
            curve = [(0.0, start)]
            if arm != "offline":
                state = train(
                    train_env,
                    policy,
                    job.trainer,
                    out / f"{arm}-s{seed}",
                    eval_env=test_env,
                )
                curve += [(h["episodes"], h["eval/return"]) for h in state.history if "eval/return" in h]
            final = evaluate(test_envs, policy)
            rows.append(
                {
                    "arm": arm,
                    "seed": seed,
                    "logged_episodes": n_logged,
                    "start_return": start,
                    "final_return": final["return"],
                    "final_accuracy": final["accuracy"],
                    "episodes_to_90": episodes_to_reach(curve, target),
                    "curve": curve,
                }
            )
    results = {
        "config": asdict(cfg),
        "backend": ",".join(train_env.pool.backends()),
        "optimum": best,
        "optimum_policy": best_name,
        "target": target,
        "random_log_return": random_ret,
        "runs": rows,
    }
    (out / "offline_study.json").write_text(json.dumps(results, indent=2, default=str))
    plot_curves(results, out / "offline_study.png")
    (out / "offline_study.md").write_text(report(results))
    return results


def plot_curves(results: dict[str, Any], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, arm in enumerate(ARMS):
        for k, r in enumerate(x for x in results["runs"] if x["arm"] == arm):
            xs, ys = zip(*r["curve"], strict=True)
            ax.plot(
                xs,
                ys,
                color=f"C{i}",
                alpha=0.8,
                marker="." if len(xs) < 3 else None,
                label=arm if k == 0 else None,
            )
    ax.axhline(results["optimum"], color="k", linestyle="--", linewidth=1, label="optimum")
    ax.axhline(results["target"], color="grey", linestyle=":", linewidth=1, label="90% of optimum")
    ax.axhline(results["random_log_return"], color="r", linestyle=":", linewidth=1, label="random logs")
    ax.set_xlabel("online episodes")
    ax.set_ylabel("held-out return (greedy)")
    c = results["config"]
    ax.set_title(
        _title(
            f"offline (RWR on random logs) vs online on {c['suite']}, pool {c['pool']} "
            f"[backend: {results['backend']}]"
        ),
        fontsize=9,
    )
    ax.legend(fontsize=7)
    return save(fig, path)


def report(results: dict[str, Any]) -> str:
    lines = [
        f"Backend: {results['backend']}. Optimum {results['optimum']:.3f} ({results['optimum_policy']}), "
        f"target (90%) {results['target']:.3f}; random logs' mean return {results['random_log_return']:.3f}.",
        "",
        "| arm | seed | logged episodes used | return at 0 online episodes | final return | final accuracy "
        "| online episodes to 90% of optimum |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["runs"]:
        reach = "not reached" if r["episodes_to_90"] is None else f"{r['episodes_to_90']:.0f}"
        lines.append(
            f"| {r['arm']} | {r['seed']} | {r['logged_episodes']} | {r['start_return']:.3f} | "
            f"{r['final_return']:.3f} | {r['final_accuracy']:.3f} | {reach} |"
        )
    for arm in ARMS:
        reached = [r["episodes_to_90"] for r in results["runs"] if r["arm"] == arm]
        ok = [x for x in reached if x is not None]
        mean = f"{np.mean(ok):.0f}" if ok else "-"
        lines.append(
            f"| **{arm} (mean)** | {len(reached)} seeds | | | | | {mean} ({len(ok)}/{len(reached)} reached) |"
        )
    return "\n".join(lines) + "\n"
