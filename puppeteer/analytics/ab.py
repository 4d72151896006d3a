"""Paired A/B comparison of two policies on the same items, sample indices and pool.

Each arm is a policy spec (run here with :func:`puppeteer.evaluation.evaluate.evaluate_policy`, which
seeds every item from ``(seed, task id)``, so both arms see the same sample index per item) or a
finished eval run directory. Items are paired by task id. Accuracy: exact McNemar test on the
discordant pairs; cost, tokens, calls and reward: paired bootstrap 95% intervals of B - A. Where
the pool declares its models' single-stream speeds (local llama.cpp pools), also the workers'
model seconds per item at those speeds (:meth:`puppeteer.agents.pool.Pool.model_seconds`): what the calls
cost alone, whatever the batching or the machine's load. USD is left out where neither arm spent any.

Where the arms differ in how the final answer is chosen, in whether a conductor's own tokens are in
the cost, in their training items or in their evaluation items (:mod:`puppeteer.analytics.fairness`),
each difference is logged as a warning and listed under "Fairness" in ``ab.md`` and ``ab.json``.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import string
from collections.abc import Sequence
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.analytics.fairness import fairness_warnings, run_terms
from puppeteer.analytics.store import TrajectoryStore, find_runs, run_metadata
from puppeteer.evaluation.stats import McNemar, PairedDiff, mcnemar_exact, paired_bootstrap, wilson_interval

log = logging.getLogger(__name__)

# (column of the episodes table, label); accuracy is handled by McNemar
PAIRED_METRICS: tuple[tuple[str, str], ...] = (
    ("cost_usd", "USD per item"),
    ("tokens", "tokens per item"),
    ("model_s", "model s per item (single-stream)"),
    ("calls", "calls per item"),
    ("reward", "reward"),
)
METRIC_LABELS = dict(PAIRED_METRICS)
LABELS = string.ascii_uppercase  # the arms' labels, in the order given


@dataclass(frozen=True)
class Arm:
    label: str  # "A" or "B"
    spec: str  # the policy spec or run directory given
    run_dir: str
    backend: str
    n: int
    accuracy: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class ABResult:
    a: Arm
    b: Arm
    pool: str
    suite: str
    n_pairs: int
    accuracy: McNemar
    metrics: dict[str, PairedDiff]
    # where the arms differ in the terms of a fair A/B (puppeteer.analytics.fairness), one line each
    fairness: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["accuracy"]["diff"] = self.accuracy.diff
        return d


def is_run_dir(source: str) -> bool:
    p = Path(source)
    return p.is_dir() and (p / "trajectories.jsonl").exists()


REPORT_FILES = ("ab.md", "ab.json", "ab.png", "arms.md", "arms.json", "arms.png")
_ARM_DIR = re.compile(r"[A-Z]_.+")  # an arm run here: <label>_<slug of its spec>
_PAIR_DIR = re.compile(r"A_vs_[A-Z]")  # a pair's report of a run of three arms or more


def clear_earlier(out: Path, sources: Sequence[str]) -> list[Path]:
    """Remove what an earlier A/B wrote into ``out`` and this one will not write again: its reports,
    the folders of arms it ran that are not among ``sources`` at their label now, and its pairs'
    folders. Anything else in ``out`` stays. Returns what was removed (for ``--overwrite``, so that
    the folder holds this A/B alone)."""
    from puppeteer.evaluation.evaluate import slug

    if not out.is_dir():
        return []
    now = {f"{LABELS[i]}_{slug(s)}" for i, s in enumerate(sources) if not is_run_dir(s)}
    removed = []
    for path in sorted(out.iterdir()):
        earlier_arm = _ARM_DIR.fullmatch(path.name) and path.name not in now and is_run_dir(str(path))
        if path.is_file() and path.name in REPORT_FILES:
            path.unlink()
        elif path.is_dir() and (_PAIR_DIR.fullmatch(path.name) or earlier_arm):
            shutil.rmtree(path)
        else:
            continue
        removed.append(path)
    if removed:
        log.info("removed what an earlier A/B wrote in %s: %s", out, ", ".join(p.name for p in removed))
    return removed


def run_arm(source: str, label: str, out: Path, pool: str, suite: str, **eval_kwargs: Any) -> Path:
    """The run directory of one arm: given, or produced now by ``evaluate_policy``."""
    if is_run_dir(source):
        return Path(source)
    from puppeteer.evaluation.evaluate import evaluate_policy, slug

    run_dir = out / f"{label}_{slug(source)}"
    evaluate_policy(source, pool, suite, out_dir=run_dir, progress=False, **eval_kwargs)
    return run_dir


def make_arm(label: str, spec: str, run_dir: Path, df: pd.DataFrame) -> Arm:
    """The accuracy (Wilson interval) and metadata of one arm over the items of ``df``."""
    k, n = int(df["correct"].sum()), len(df)
    lo, hi = wilson_interval(k, n)
    meta = run_metadata(run_dir)
    return Arm(label, spec, str(run_dir), str(meta.get("backend") or "?"), n, k / n if n else 0.0, lo, hi)


def episodes_of(run_dir: str | Path, speeds: Pool | None = None) -> pd.DataFrame:
    """One row per item of a finished eval run (the first, where an item was written twice). With
    ``speeds``, a pool that declares its models' speeds and has every agent the run called, also a
    ``model_s`` column: the episode's single-stream model seconds at those speeds."""
    with closing(TrajectoryStore()) as store:  # the run is read once for both levels
        for run in find_runs([run_dir]):  # FileNotFoundError for a path that does not exist
            store.ingest(run)
        episodes = store.episodes()
        seconds = _model_seconds(store.steps(), speeds) if speeds is not None and speeds.has_speeds else None
    if seconds is not None:
        episodes = episodes.merge(seconds, on=["run_id", "episode"], how="left")
        episodes["model_s"] = episodes["model_s"].fillna(0.0)  # an episode without calls costs none
    return episodes.drop_duplicates("task_id")


def _model_seconds(steps: pd.DataFrame, pool: Pool) -> pd.DataFrame | None:
    """``run_id, episode, model_s`` of a run's steps priced at ``pool``'s speeds; None where a step's
    agent is not in the pool (its speed is unknown)."""
    models = {a.name: a.model for a in pool.agents}
    if steps.empty or not set(steps["agent_name"]) <= set(models):
        return None
    tokens = zip(steps["agent_name"], steps["prompt_tokens"], steps["completion_tokens"], strict=True)
    steps = steps.assign(
        model_s=[models[name].model_seconds(int(p or 0), int(c or 0)) for name, p, c in tokens]
    )
    return steps.groupby(["run_id", "episode"], as_index=False)["model_s"].sum()


def shown_metrics(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """The paired metrics both arms' episodes have: ``model_s`` only where both were priced, USD only
    where either arm spent some, reward only where both arms ran in the same mode (workflow mode
    scores 0 / 0.5 / 1, step mode quality minus lambda * cost: not one scale)."""
    cols = [c for c, _ in PAIRED_METRICS if c in a.columns and c in b.columns]
    if "cost_usd" in cols and not (a["cost_usd"].fillna(0).any() or b["cost_usd"].fillna(0).any()):
        cols.remove("cost_usd")
    modes_differ = (
        "mode" in a.columns and "mode" in b.columns and set(a["mode"].dropna()) != set(b["mode"].dropna())
    )
    if "reward" in cols and modes_differ:
        cols.remove("reward")
    return cols


def same_price(meta_a: dict[str, Any], meta_b: dict[str, Any]) -> bool:
    """Whether two runs' rewards were paid at one lambda (a run that does not say is taken at its word)."""
    lam_a, lam_b = meta_a.get("lam"), meta_b.get("lam")
    return lam_a is None or lam_b is None or float(lam_a) == float(lam_b)


def compare_runs(
    run_a: str | Path, run_b: str | Path, spec_a: str = "", spec_b: str = "", speeds: Pool | None = None
) -> ABResult:
    """Pair two finished eval runs by task id and compare them (``speeds``: see :func:`episodes_of`)."""
    return compare_episodes(
        run_a, run_b, episodes_of(run_a, speeds), episodes_of(run_b, speeds), spec_a, spec_b
    )


def compare_episodes(
    run_a: str | Path,
    run_b: str | Path,
    da: pd.DataFrame,
    db: pd.DataFrame,
    spec_a: str = "",
    spec_b: str = "",
) -> ABResult:
    """:func:`compare_runs` on the runs' episodes already loaded (:func:`episodes_of`)."""
    ma, mb = run_metadata(run_a), run_metadata(run_b)
    if ma.get("seed") != mb.get("seed"):
        log.warning(
            "the runs used different seeds (%s, %s): sample indices differ per item",
            ma.get("seed"),
            mb.get("seed"),
        )
    both = da.merge(db, on="task_id", suffixes=("_a", "_b"))
    if both.empty:
        raise ValueError(f"{run_a} and {run_b} share no items")
    fairness = fairness_warnings(run_terms(run_a), run_terms(run_b), da["task_id"], db["task_id"])
    for line in fairness:
        log.warning("unfair A/B (%s vs %s): %s", spec_a or run_a, spec_b or run_b, line)
    mc = mcnemar_exact(both["correct_a"].to_numpy(), both["correct_b"].to_numpy())
    cols = shown_metrics(da, db)
    if "reward" in cols and not same_price(ma, mb):  # quality - lambda * cost at two lambdas: two scales
        cols.remove("reward")
    metrics = {
        col: paired_bootstrap(both[f"{col}_a"].fillna(0).to_numpy(), both[f"{col}_b"].fillna(0).to_numpy())
        for col in cols
    }
    a = make_arm("A", spec_a or str(run_a), Path(run_a), da[da["task_id"].isin(both["task_id"])])
    b = make_arm("B", spec_b or str(run_b), Path(run_b), db[db["task_id"].isin(both["task_id"])])
    return ABResult(a, b, str(ma.get("pool")), str(ma.get("suite")), len(both), mc, metrics, fairness)


def run_ab(
    a: str,
    b: str,
    pool: str,
    suite: str,
    out: str | Path,
    n: int | None = None,
    split: str = "test",
    seed: int = 0,
    max_steps: int = 5,
    lam: float = 0.1,
    cache: str | Path | None = None,
    final_answer: str | None = None,
    overwrite: bool = False,
) -> ABResult:
    """Run (or read) both arms on the same items and write ``ab.md``, ``ab.json`` and ``ab.png``
    (``final_answer``: every arm run here chooses its final answer so; None: each policy's own).
    ``overwrite``: also remove what an earlier A/B wrote in ``out`` (:func:`clear_earlier`)."""
    out = Path(out)
    if overwrite:
        clear_earlier(out, (a, b))
    out.mkdir(parents=True, exist_ok=True)
    kw = dict(n=n, split=split, seed=seed, max_steps=max_steps, lam=lam, cache=cache)
    kw["final_answer"] = final_answer
    kw["overwrite"] = overwrite  # an arm's folder holding a finished run: refused unless overwrite
    run_a = run_arm(a, "A", out, pool, suite, **kw)
    run_b = run_arm(b, "B", out, pool, suite, **kw)
    result = compare_runs(run_a, run_b, a, b, speeds=load_pool(pool))
    write_report(result, out)
    return result


# --------------------------------------------------------------------------- reporting


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def markdown(result: ABResult) -> str:
    a, b, mc = result.a, result.b, result.accuracy
    backends = a.backend if a.backend == b.backend else f"{a.backend} / {b.backend}"
    lines = [
        f"A = `{a.spec}`, B = `{b.spec}`; pool {result.pool}, suite {result.suite}, "
        f"{result.n_pairs} paired items; backend: {backends}",
        "",
        "| metric | A | B | B - A | 95% interval / test |",
        "|---|---:|---:|---:|---|",
        f"| accuracy | {a.accuracy:.3f} [{a.ci_low:.3f}, {a.ci_high:.3f}] | "
        f"{b.accuracy:.3f} [{b.ci_low:.3f}, {b.ci_high:.3f}] | {mc.diff:+.3f} | "
        f"exact McNemar p = {mc.p_value:.3g} (A only {mc.only_a}, B only {mc.only_b}, "
        f"both {mc.both}, neither {mc.neither}) |",
    ]
    for col, d in result.metrics.items():
        lines.append(
            f"| {METRIC_LABELS[col]} | {_fmt(d.mean_a)} | {_fmt(d.mean_b)} | {d.diff:+.3g} | "
            f"[{d.ci_low:+.3g}, {d.ci_high:+.3g}] paired bootstrap |"
        )
    if result.fairness:
        lines += ["", "Fairness: the arms differ in the terms of a fair A/B:"]
        lines += [f"- {w}" for w in result.fairness]
    return "\n".join(lines) + "\n"


def plot(result: ABResult, path: str | Path) -> Path:
    """One panel per metric: B - A with its interval (accuracy: Wilson intervals of both arms)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from puppeteer.analytics.plots import _title, save

    k = 1 + len(result.metrics)
    fig, axes = plt.subplots(1, k, figsize=(3.2 * k, 3.6))
    a, b = result.a, result.b
    ax = axes[0]
    for i, arm in enumerate((a, b)):
        ax.errorbar(
            i,
            arm.accuracy,
            yerr=[[arm.accuracy - arm.ci_low], [arm.ci_high - arm.accuracy]],
            fmt="o",
            capsize=4,
            color=f"C{i}",
        )
    ax.set_xticks([0, 1], ["A", "B"])
    ax.set_xlim(-0.5, 1.5)
    ax.set_title(f"accuracy (McNemar p={result.accuracy.p_value:.2g})", fontsize=9)
    for ax, (col, d) in zip(axes[1:], result.metrics.items(), strict=True):
        ax.errorbar(
            0, d.diff, yerr=[[d.diff - d.ci_low], [d.ci_high - d.diff]], fmt="s", capsize=4, color="k"
        )
        ax.axhline(0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xticks([0], ["B - A"])
        ax.set_title(METRIC_LABELS[col], fontsize=9)
    fig.suptitle(
        _title(
            f"A/B on {result.suite} ({result.n_pairs} items, backend {a.backend}): A={a.spec}  B={b.spec}"
        ),
        fontsize=9,
    )
    return save(fig, path)


def write_report(result: ABResult, out: str | Path) -> tuple[Path, Path, Path]:
    out = Path(out)
    md, js, png = out / "ab.md", out / "ab.json", out / "ab.png"
    md.write_text(markdown(result))
    js.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    plot(result, png)
    return md, js, png
