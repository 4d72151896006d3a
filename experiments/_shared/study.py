"""The step-mode study on a simulated pool: learning vs known optima, baseline ablation, lambda sweep.

Everything here runs on the simulator backend, and every table and figure says so.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from puppeteer.analytics.plots import save
from puppeteer.analytics.references import Reference, best_fixed_sequence, oracle_router
from puppeteer.envs.env import ConductorEnv
from puppeteer.jobs.builder import StepJob, heldout
from puppeteer.train.reinforce import ReinforceConfig, train

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimSetting:
    """Where a simulator study runs: pool, suite, cost weight and step limit (shared by the studies)."""

    pool: str = "sim-paper"
    suite: str = "mix-paper"
    lam: float = 0.1
    max_steps: int = 5


@dataclass(frozen=True)
class StudyConfig(SimSetting):
    episodes: int = 3000
    seeds: tuple[int, ...] = (0, 1, 2)
    baselines: tuple[str, ...] = ("group", "none")
    lams: tuple[float, ...] = (0.0, 0.1, 0.3, 1.0)
    encoder: str = "minilm"
    eval_every: int = 1
    trainer: Mapping[str, Any] | None = None


def _job(cfg: StudyConfig, lam: float, baseline: str | None = None, seed: int = 0) -> StepJob:
    trainer = {
        **dict(cfg.trainer or {}),
        "episodes": cfg.episodes,
        "seed": seed,
        "eval_every": cfg.eval_every,
    }
    if baseline is not None:
        trainer["baseline"] = baseline
    return StepJob.on_simulator(
        cfg.pool,
        cfg.suite,
        lam=lam,
        max_steps=cfg.max_steps,
        encoder=cfg.encoder,
        trainer=ReinforceConfig(**trainer),
        seed=seed,
    )


def _env(cfg: StudyConfig, lam: float, split: str) -> ConductorEnv:
    return _job(cfg, lam).env(split)


def train_one(
    cfg: StudyConfig, lam: float, baseline: str, seed: int, run_dir: Path, encoder: Any = None
) -> dict[str, Any]:
    job = _job(cfg, lam, baseline, seed)
    env, test_env = job.env("train"), job.env("test")
    policy = job.policy(encoder)
    state = train(env, policy, job.trainer, run_dir, eval_env=test_env)
    final = heldout(test_env, policy, 32)
    curve = [(h["episodes"], h["eval/return"]) for h in state.history if "eval/return" in h]
    return {"lam": lam, "baseline": baseline, "seed": seed, "final": final, "curve": curve}


def episodes_to_reach(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    for episodes, value in curve:
        if value >= target:
            return episodes
    return None


def episodes_to_stay(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """The episodes after which every later point of ``curve`` is at least ``target`` (the first point
    of the last run above it); None when the curve ends below. Unlike :func:`episodes_to_reach`, a
    policy that touches the target once and falls back does not count."""
    since = None
    for episodes, value in curve:
        if value < target:
            since = None
        elif since is None:
            since = episodes
    return since


def run_study(
    cfg: StudyConfig, out: str | Path, page: str | Path, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    out, page = Path(out), Path(page)
    out.mkdir(parents=True, exist_ok=True)
    (page / "results").mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _m: None)
    encoder = None
    if cfg.encoder != "hashing":
        from puppeteer.envs.encoders import make_encoder

        encoder = make_encoder(cfg.encoder)  # load once, share its cache across runs

    test_env = _env(cfg, cfg.lam, "test")
    say("references: oracle router and brute-force sequences")
    oracle = oracle_router(test_env)
    best_seq, _ = best_fixed_sequence(test_env, max_len=2)
    optimum = max(oracle.ret, best_seq.ret)

    runs = []
    for baseline in cfg.baselines:
        for seed in cfg.seeds:
            say(f"train baseline={baseline} seed={seed}")
            runs.append(train_one(cfg, cfg.lam, baseline, seed, out / f"{baseline}-s{seed}", encoder))
    sweep = []
    for lam in cfg.lams:
        lam_env = _env(cfg, lam, "test")
        say(f"lambda sweep lam={lam}")
        same = [
            x
            for x in runs
            if x["lam"] == lam and x["baseline"] == cfg.baselines[0] and x["seed"] == cfg.seeds[0]
        ]
        r = (
            dict(same[0])
            if same
            else train_one(cfg, lam, cfg.baselines[0], cfg.seeds[0], out / f"lam{lam}", encoder)
        )
        r["oracle"] = asdict(oracle_router(lam_env))
        sweep.append(r)

    results = {
        "config": asdict(cfg),
        "backend": "sim",
        "oracle": asdict(oracle),
        "best_sequence": asdict(best_seq),
        "optimum": optimum,
        "runs": runs,
        "sweep": sweep,
    }
    (out / "study.json").write_text(json.dumps(results, indent=2))
    _plot_curves(runs, oracle, best_seq, page / "results" / "sim-learning-curves.png", cfg)
    _plot_sweep(sweep, page / "results" / "sim-lambda-sweep.png", cfg)
    (page / "README.md").write_text(report(results))
    return results


def _plot_curves(
    runs: list[dict[str, Any]], oracle: Reference, best_seq: Reference, path: Path, cfg: StudyConfig
) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    colors = {"group": "tab:blue", "ema": "tab:green", "none": "tab:red"}
    for r in runs:
        xs, ys = zip(*r["curve"], strict=True) if r["curve"] else ((), ())
        label = f"{r['baseline']} baseline" if r["seed"] == cfg.seeds[0] else None
        ax.plot(xs, ys, color=colors.get(r["baseline"], "gray"), alpha=0.7, label=label)
    ax.axhline(
        oracle.ret, color="black", linestyle="--", linewidth=1, label=f"oracle router {oracle.ret:.3f}"
    )
    ax.axhline(
        best_seq.ret,
        color="gray",
        linestyle=":",
        linewidth=1,
        label=f"best fixed sequence ({best_seq.name}) {best_seq.ret:.3f}",
    )
    ax.set_xlabel("training episodes")
    ax.set_ylabel("held-out mean return (greedy)")
    ax.set_title(
        f"REINFORCE on {cfg.suite}, pool {cfg.pool}, lambda={cfg.lam}, {len(cfg.seeds)} seeds [backend: sim]",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="lower right")
    save(fig, path)


def _plot_sweep(sweep: list[dict[str, Any]], path: Path, cfg: StudyConfig) -> None:
    lams = [r["lam"] for r in sweep]
    fig, ax1 = plt.subplots(figsize=(6.5, 4))
    ax1.plot(lams, [r["final"]["accuracy"] for r in sweep], marker="o", color="tab:blue", label="accuracy")
    ax1.set_xlabel("lambda")
    ax1.set_ylabel("held-out accuracy", color="tab:blue")
    ax2 = ax1.twinx()
    ax2.plot(lams, [r["final"]["calls"] for r in sweep], marker="s", color="tab:red", label="calls")
    ax2.plot(
        lams, [r["final"]["cost"] for r in sweep], marker="^", color="tab:orange", label="cost F (k tokens)"
    )
    ax2.set_ylabel("calls / cost per episode")
    ax1.set_xscale("symlog", linthresh=0.1)
    fig.legend(fontsize=8, loc="center left", bbox_to_anchor=(0.12, 0.45))
    ax1.set_title(f"lambda sweep on {cfg.suite}, pool {cfg.pool} [backend: sim]", fontsize=9)
    save(fig, path)


def report(results: Mapping[str, Any]) -> str:
    cfg = results["config"]
    opt = results["optimum"]
    lines = [
        "# Puppeteer (step mode) on the simulated paper pool: the first study",
        "",
        f"Backend: **sim** (pool `{cfg['pool']}`, calibrated to the Conductor paper's skill table). "
        f"Suite `{cfg['suite']}`: train split for training, test split (held-out) for every number below. "
        f"lambda={cfg['lam']}, max_steps={cfg['max_steps']}, cost model tokens/1000, "
        f"encoder `{cfg['encoder']}`, "
        f"{cfg['episodes']} training episodes per run.",
        "",
        "Reproduce: `python experiments/sim-study/sim_study.py` (see `--help`).",
        "",
        "## References (held-out)",
        "",
        "| policy | accuracy | mean return | cost F | calls |",
        "|---|---|---|---|---|",
    ]
    for key in ("oracle", "best_sequence"):
        r = results[key]
        lines.append(
            f"| {'oracle router' if key == 'oracle' else 'best fixed sequence: ' + r['name']} | "
            f"{r['accuracy']:.3f} | {r['ret']:.3f} | {r['cost']:.2f} | {r['calls']:.2f} |"
        )
    lines += [
        "",
        f"Optimum (the better of the two): **{opt:.3f}**.",
        "",
        "## Trained policy vs optimum",
        "",
        "| baseline | seed | accuracy | mean return | % of optimum | cost F | calls | "
        "episodes to 90% of optimum |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        f = r["final"]
        reach = episodes_to_reach(r["curve"], 0.9 * opt)
        lines.append(
            f"| {r['baseline']} | {r['seed']} | {f['accuracy']:.3f} | {f['return']:.3f} | "
            f"{100 * f['return'] / opt:.1f}% | {f['cost']:.2f} | {f['calls']:.2f} | "
            f"{'not reached' if reach is None else int(reach)} |"
        )
    for b in cfg["baselines"]:
        rs = [r for r in results["runs"] if r["baseline"] == b]
        reach = [episodes_to_reach(r["curve"], 0.9 * opt) for r in rs]
        ok = [x for x in reach if x is not None]
        pct = np.mean([r["final"]["return"] / opt for r in rs]) * 100
        lines.append(
            f"| **{b} (mean)** | {len(rs)} seeds | | | {pct:.1f}% | | | "
            f"{(f'{np.mean(ok):.0f}' if ok else 'n/a')} ({len(ok)}/{len(rs)} reached) |"
        )
    lines += [
        "",
        "![learning curves](results/sim-learning-curves.png)",
        "",
        "## The cost side: lambda sweep",
        "",
        "| lambda | accuracy | mean return | cost F | calls | oracle router return |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["sweep"]:
        f = r["final"]
        lines.append(
            f"| {r['lam']} | {f['accuracy']:.3f} | {f['return']:.3f} | {f['cost']:.2f} | {f['calls']:.2f} | "
            f"{r['oracle']['ret']:.3f} |"
        )
    lines += ["", "![lambda sweep](results/sim-lambda-sweep.png)", ""]
    return "\n".join(lines)
