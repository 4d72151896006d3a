"""Cost-weight sweeps, the analysis side: read the finished runs of a sweep, evaluate baselines beside
them, and tabulate and plot cost against accuracy.

A *track* (:class:`SweepTrack`) says where one trained configuration's held-out numbers are and how
its runs are evaluated. Two are defined here: :class:`PuppeteerTrack` (the step-wise policy trained
with REINFORCE, ``puppeteer train``, swept over ``lam``) and :class:`ConductorTrack` (the
plan-all-at-once conductor trained with GRPO, ``puppeteer train track=conductor``, swept over
``workflow_lam``: the reward is ``base - workflow_lam * cost`` of the workflow). Training the runs
(Hydra multirun) is the job :mod:`puppeteer.jobs.sweep`, which adds the launch to each track.

Trained runs are scored by the held-out evaluation their training job wrote; every baseline is
evaluated with :func:`puppeteer.evaluation.evaluate.evaluate_policy` on the same split, pool and number of
items, so accuracy and cost (tokens or USD per item) are comparable between them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from puppeteer.analytics.plots import CostPoint, _title, pareto_front, save

log = logging.getLogger(__name__)

# x axes: means per item; model_s is single-stream model seconds at the pool's declared speeds
# (EvalResult.mean_model_s), which only per-item evaluations have (--reevaluate for trained runs)
COST_COLUMNS = {"tokens": "mean_tokens", "usd": "mean_usd", "calls": "mean_calls", "model_s": "mean_model_s"}


class SweepTrack(Protocol):
    """How the finished runs of one policy track are read and evaluated."""

    name: str
    param: str  # the Hydra key that carries the cost weight
    reevaluable: bool  # whether evaluate_policy(policy_spec(run)) reproduces the run's own evaluation

    def policy_spec(self, run_dir: Path) -> str:
        """The policy spec that evaluates (where not reevaluable: names) the policy trained in ``run_dir``."""
        ...

    def eval_settings(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """``evaluate_policy`` keywords (pool, suite, split, n, max_steps) of a run's held-out evaluation."""
        ...

    def heldout_row(self, run: TrainedRun) -> dict[str, Any]:
        """A sweep row from the held-out evaluation the training job of ``run`` wrote."""
        ...


@dataclass(frozen=True)
class PuppeteerTrack:
    """The step-wise puppeteer trained with REINFORCE (``puppeteer train``), swept over ``lam``."""

    name: str = "puppeteer"
    param: str = "lam"
    checkpoint: str = "final"
    reevaluable: bool = True

    def policy_spec(self, run_dir: Path) -> str:
        return f"puppeteer:{run_dir / self.checkpoint}"

    def eval_settings(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        from puppeteer.agents.pool import configured_pool

        suite, pool = cfg["suite"], cfg["pool"]
        return dict(
            # a name, or the subset of agents the policy was trained on (``pool.agents``)
            pool=configured_pool(pool) if pool.get("agents") else pool["name"],
            suite=suite["name"],
            split=suite["eval_split"],
            n=suite.get("n_eval"),
            max_steps=int(cfg["max_steps"]),
        )

    def heldout_row(self, run: TrainedRun) -> dict[str, Any]:
        """``results.json`` ``heldout``: accuracy, tokens, usd, calls, return over ``n_eval`` items."""
        from puppeteer.evaluation.stats import wilson_interval

        res = json.loads((run.run_dir / "results.json").read_text())
        h, n = res["heldout"], int(res["n_eval"])
        lo, hi = wilson_interval(round(h["accuracy"] * n), n)
        return {
            "policy": self.policy_spec(run.run_dir),
            "n": n,
            "accuracy": h["accuracy"],
            "ci_low": lo,
            "ci_high": hi,
            "mean_tokens": h["tokens"],
            "mean_usd": h["usd"],
            "mean_calls": h["calls"],
            "mean_reward": h["return"],
            "backend": res["backend"],
        }


# a conductor run's ``cost`` per item is in cost-model units (puppeteer.envs.reward.COST_MODELS: thousands
# of tokens, US cents); for runs whose held-out summary has no ``tokens``/``usd`` it gives one of them
_COST_UNITS = {"tokens": ("tokens", 1000.0), "usd": ("usd", 0.01), "minutes": ("model_s", 60.0)}


@dataclass(frozen=True)
class ConductorTrack:
    """The conductor trained with GRPO (``puppeteer train track=conductor``), swept over ``workflow_lam``.

    Each run's row is its ``results.json`` ``heldout_after``: greedy workflows of the trained
    conductor on ``n_eval`` held-out items, executed by the pool's workers. Cost per item counts the
    workers' calls (what ``workflow_lam`` prices), not the conductor's own plan. With ``reevaluate``
    each run is evaluated as ``conductor:grpo:RUN`` (:mod:`puppeteer.train.grpo.policy`: the run's own
    prompt, answer prefix and agents) for per-item trajectories with the baselines' reset seeds.
    """

    name: str = "conductor"
    param: str = "workflow_lam"
    checkpoint: str = "final"
    reevaluable: bool = True

    def policy_spec(self, run_dir: Path) -> str:
        return f"conductor:grpo:{run_dir}"  # the run's final/ model with its run's settings

    def eval_settings(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        suite = cfg["suite"]
        return dict(
            pool=cfg["pool"]["name"],
            suite=suite["name"],
            split=suite.get("eval_split", "test"),
            n=cfg.get("n_eval") or suite.get("n_eval"),
            max_steps=int(cfg["workflow_max_steps"]),
        )

    def heldout_row(self, run: TrainedRun) -> dict[str, Any]:
        res = json.loads((run.run_dir / "results.json").read_text())
        h = res["heldout_after"]
        lo, hi = h["accuracy_ci95"]
        row = {
            "policy": self.policy_spec(run.run_dir),
            "n": int(h["n"]),
            "accuracy": h["accuracy"],
            "ci_low": lo,
            "ci_high": hi,
            "mean_tokens": h.get("tokens", np.nan),
            "mean_usd": h.get("usd", np.nan),
            "mean_calls": h["calls"],
            "mean_reward": h["reward"],
            "parse_rate": h["parse_rate"],
            "backend": res["backend"],
        }
        key, scale = _COST_UNITS.get(str(run.config.get("cost_model", "tokens")), ("", 0.0))
        if key and key not in h:
            row[f"mean_{key}"] = h["cost"] * scale
        return row


@dataclass(frozen=True)
class TrainedRun:
    run_dir: Path
    value: float  # the cost weight
    seed: int
    config: Mapping[str, Any]


def find_trained(out: Path, param: str = "lam") -> list[TrainedRun]:
    """Finished runs under ``out`` (those with ``results.json`` and ``config.json``)."""
    runs = []
    for cfg_path in sorted(out.glob("*/config.json")):
        d = cfg_path.parent
        if not (d / "results.json").exists():
            log.warning("%s has no results.json (unfinished?), left out", d)
            continue
        cfg = json.loads(cfg_path.read_text())
        runs.append(TrainedRun(d, float(cfg[param]), int(cfg["seed"]), cfg))
    return runs


def _eval_row(result: Any, **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        "policy": result.policy,
        "n": result.n,
        "accuracy": result.accuracy,
        "ci_low": result.ci_low,
        "ci_high": result.ci_high,
        "mean_tokens": result.mean_tokens,
        "mean_usd": result.mean_usd,
        "mean_calls": result.mean_calls,
        "mean_model_s": np.nan if result.mean_model_s is None else result.mean_model_s,
        "mean_reward": result.mean_reward,
        "backend": ",".join(result.backends),
    }


def heldout_row(run: TrainedRun, track: SweepTrack, **extra: Any) -> dict[str, Any]:
    """A sweep row from the held-out evaluation the training job already ran."""
    return {**extra, **track.heldout_row(run)}


def _cache(settings: Mapping[str, Any], cfg: Mapping[str, Any]) -> Path | None:
    """The response cache the runs trained with (``cache``: the shared default unless a path or
    ``off``), so re-evaluations and baselines on model-calling pools replay their calls."""
    from puppeteer.agents.pool import Pool, load_pool
    from puppeteer.backends.cache import resolve_cache

    pool = settings["pool"] if isinstance(settings["pool"], Pool) else load_pool(settings["pool"])
    given = cfg.get("cache")
    return resolve_cache(pool, given, no_cache=str(given).lower() == "off")


def gather(
    out: Path,
    track: SweepTrack,
    baselines: Sequence[str] = (),
    n_eval: int | None = None,
    evaluate: Callable[..., Any] | None = None,
    reevaluate: bool = False,
) -> pd.DataFrame:
    """One row per trained run and per baseline spec, all on the held-out split.

    Trained runs: the held-out numbers the training job wrote (:meth:`SweepTrack.heldout_row`), or
    with ``reevaluate`` (tracks that are ``reevaluable``) a fresh
    :func:`~puppeteer.evaluation.evaluate.evaluate_policy` run of ``track.policy_spec`` (per-item
    trajectories, the baselines' sample indices; slower). Baselines: ``evaluate_policy`` once each;
    a fitted rule (``best-rule``, ``best-single``, ...) once per swept value, chosen at that lambda.
    """
    if evaluate is None:
        from puppeteer.evaluation.evaluate import evaluate_policy as evaluate
    if reevaluate and not track.reevaluable:
        raise ValueError(
            f"the {track.name} track's runs are scored by their own held-out evaluation; "
            "--reevaluate is not available for it"
        )
    runs = find_trained(out, track.param)
    if not runs:
        raise FileNotFoundError(f"no finished runs under {out}")
    cfg = runs[0].config
    settings = track.eval_settings(cfg)
    common = {**settings, "n": n_eval or settings["n"], "progress": False, "cache": _cache(settings, cfg)}
    rows = []
    for r in runs:
        extra = dict(kind="trained", lam=r.value, seed=r.seed, run_dir=str(r.run_dir))
        if reevaluate:
            res = evaluate(
                track.policy_spec(r.run_dir),
                out_dir=r.run_dir / "eval",
                lam=r.value,
                overwrite=True,
                **common,
            )
            rows.append(_eval_row(res, **extra))
        else:
            rows.append(heldout_row(r, track, **extra))
    from puppeteer.evaluation.evaluate import slug
    from puppeteer.policies.rules import is_fitted

    values = sorted({r.value for r in runs})
    for spec in baselines:
        # a fitted rule (best-rule, best-single, ...) is chosen at a lambda: one point per swept value
        at = values if is_fitted(spec) else [float(cfg[track.param])]
        for lam in at:
            folder = slug(spec) if len(at) == 1 else f"{slug(spec)}_lam{lam:g}"
            res = evaluate(spec, out_dir=out / "baselines" / folder, lam=lam, overwrite=True, **common)
            row = _eval_row(res, kind="baseline", lam=lam if len(at) > 1 else np.nan, seed=np.nan, run_dir="")
            if len(at) > 1:
                row["policy"] = f"{res.policy} (lam {lam:g})"
            rows.append(row)
    df = pd.DataFrame(rows)
    df.to_csv(out / "sweep.csv", index=False)
    return df


def summarize(df: pd.DataFrame, cost: str = "tokens") -> pd.DataFrame:
    """Mean and standard deviation over seeds per lambda."""
    col = COST_COLUMNS[cost]
    trained = df[df["kind"] == "trained"]
    g = trained.groupby("lam")
    return pd.DataFrame(
        {
            "seeds": g.size(),
            "accuracy_mean": g["accuracy"].mean(),
            "accuracy_std": g["accuracy"].std(ddof=1).fillna(0.0),
            f"{cost}_mean": g[col].mean(),
            f"{cost}_std": g[col].std(ddof=1).fillna(0.0),
            "calls_mean": g["mean_calls"].mean(),
            "reward_mean": g["mean_reward"].mean(),
        }
    ).reset_index()


def pareto_labels(df: pd.DataFrame, cost: str = "tokens") -> list[str]:
    """Labels of the points (lambda means and baselines) on the cost-accuracy Pareto front."""
    return [p.label for p in pareto_front(_points(df, cost))]


def _points(df: pd.DataFrame, cost: str) -> list[CostPoint]:
    s = summarize(df, cost)
    pts = [
        CostPoint(
            f"lambda={r.lam:g}",
            float(getattr(r, f"{cost}_mean")),
            float(r.accuracy_mean),
            float(r.accuracy_mean - r.accuracy_std),
            float(r.accuracy_mean + r.accuracy_std),
        )
        for r in s.itertuples()
    ]
    col = COST_COLUMNS[cost]
    pts += [
        CostPoint(str(r.policy), float(getattr(r, col)), float(r.accuracy), float(r.ci_low), float(r.ci_high))
        for r in df[df["kind"] == "baseline"].itertuples()
    ]
    return pts


def plot_sweep(
    df: pd.DataFrame, path: Path, title: str, cost: str = "tokens", label: str = "puppeteer lambda"
) -> Path:
    """Cost vs accuracy: each seed faint, each lambda's mean with +-1 sd bars, baselines, Pareto front."""
    col = COST_COLUMNS[cost]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    trained = df[df["kind"] == "trained"]
    s = summarize(df, cost)
    cmap = plt.get_cmap("viridis")
    for i, r in enumerate(s.itertuples()):
        c = cmap(i / max(len(s) - 1, 1))
        seeds = trained[trained["lam"] == r.lam]
        ax.scatter(seeds[col], seeds["accuracy"], color=c, alpha=0.35, s=18)
        ax.errorbar(
            getattr(r, f"{cost}_mean"),
            r.accuracy_mean,
            xerr=getattr(r, f"{cost}_std"),
            yerr=r.accuracy_std,
            fmt="o",
            color=c,
            capsize=3,
            markersize=8,
            label=f"{label}={r.lam:g} (n seeds={r.seeds})",
        )
    for j, r in enumerate(df[df["kind"] == "baseline"].itertuples()):
        ax.errorbar(
            getattr(r, col),
            r.accuracy,
            yerr=[[r.accuracy - r.ci_low], [r.ci_high - r.accuracy]],
            fmt="sD^vP*Xh<>"[j % 10],
            color=plt.get_cmap("tab10")(j % 10),
            capsize=2,
            label=str(r.policy),
        )
    front = pareto_front(_points(df, cost))
    ax.plot([p.cost for p in front], [p.accuracy for p in front], "k--", linewidth=0.9, label="Pareto front")
    ax.scatter([p.cost for p in front], [p.accuracy for p in front], s=160, facecolors="none", edgecolors="k")
    positive = df[col] > 0
    if positive.all() and df[col].max() / max(df[col].min(), 1e-12) > 20:
        ax.set_xscale("log")
    ax.set_xlabel(f"{cost} per item (held-out)")
    ax.set_ylabel("accuracy (held-out)")
    ax.set_title(_title(title), fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return save(fig, path)


def markdown(df: pd.DataFrame, cost: str = "tokens") -> str:
    s = summarize(df, cost)
    front = set(pareto_labels(df, cost))
    lines = [
        f"| lambda | seeds | accuracy (mean +- sd) | {cost}/item (mean +- sd) | calls | Pareto |",
        "|---:|---:|---|---|---:|:-:|",
    ]
    for r in s.itertuples():
        label = f"lambda={r.lam:g}"
        lines.append(
            f"| {r.lam:g} | {r.seeds} | {r.accuracy_mean:.3f} +- {r.accuracy_std:.3f} | "
            f"{getattr(r, f'{cost}_mean'):.4g} +- {getattr(r, f'{cost}_std'):.3g} | {r.calls_mean:.2f} | "
            f"{'*' if label in front else ''} |"
        )
    col = COST_COLUMNS[cost]
    for r in df[df["kind"] == "baseline"].itertuples():
        lines.append(
            f"| baseline `{r.policy}` | - | {r.accuracy:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] | "
            f"{getattr(r, col):.4g} | {r.mean_calls:.2f} | {'*' if r.policy in front else ''} |"
        )
    return "\n".join(lines) + "\n"


def write_report(df: pd.DataFrame, out: Path, track: SweepTrack, cost: str = "tokens") -> None:
    """``sweep.png`` and ``sweep.md`` under ``out`` from the rows :func:`gather` made."""
    col = COST_COLUMNS[cost]
    if col not in df or df[col].isna().any():
        missing = df.loc[df[col].isna(), "policy"].tolist() if col in df else list(df["policy"])
        raise ValueError(
            f"no {cost} per item for {', '.join(map(str, missing))}: model_s needs speeds declared in the "
            "pool (prefill_tps, decode_tps) and per-item evaluations (--reevaluate for trained runs)"
        )
    backend = ",".join(sorted(set(df["backend"])))
    suite = json.loads(next(out.glob("*/config.json")).read_text())["suite"]["name"]
    plot_sweep(
        df,
        out / "sweep.png",
        f"{track.name}: cost vs accuracy over {track.param} on {suite} [backend: {backend}]",
        cost,
        label=f"{track.name} {track.param}",
    )
    (out / "sweep.md").write_text(
        f"Backend: {backend}. Suite {suite} (held-out split).\n\n" + markdown(df, cost)
    )
