"""Analysis commands: ``ab``, ``sweep`` (trains with :mod:`puppeteer.jobs.sweep`; ``--conditioned``:
:mod:`puppeteer.jobs.lam_front`), ``graph``, ``query``."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from puppeteer.cli.command import Command
from puppeteer.envs.aggregate import FINAL_CHOICES
from puppeteer.errors import UserError

if TYPE_CHECKING:
    from rich.console import Console


DEFAULT_LAMS = (0.0, 0.05, 0.1, 0.2, 0.5)  # sweep --lam's default


def lam_list(text: str) -> list[float]:
    """Comma-separated cost weights: each a finite number >= 0 (checked before any run is launched)."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    bad = [v for v in values if not math.isfinite(v) or v < 0]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"cost weights must be finite numbers >= 0, got {text!r}")
    return values


# ----------------------------------------------------------------------------- ab
def configure_ab(p: argparse.ArgumentParser) -> None:
    from puppeteer.policies.registry import REGISTRY

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "Each arm: a policy spec or a finished eval run directory. Two arms: the paired A/B (ab.md, "
        "ab.json, ab.png). Three or more: each against the first (arms.md, arms.json, arms.png, and "
        "A_vs_<label>/ab.*). Policy specs:\n  " + "\n  ".join(REGISTRY.spec_forms())
    )
    p.add_argument("arms", nargs="+", metavar="ARM", help="arms A B [C ...]: policy specs or run directories")
    p.add_argument("--pool", default="sim-paper", help="pool name or YAML path (for spec arms)")
    p.add_argument("--suite", default="mix-paper")
    p.add_argument("--split", default="test")
    p.add_argument("--n", type=int, default=None, help="first N items (default: all)")
    p.add_argument("--seed", type=int, default=0, help="run seed: fixes each item's sample index")
    p.add_argument("--max-steps", type=int, default=5)
    p.add_argument("--lam", type=float, default=0.1)
    p.add_argument("--cache", default=None, help="SQLite response cache (model-calling pools)")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--out", default=None, help="output directory (default runs/ab/<A>_vs_<B>)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="run again the arms whose folder in --out holds a finished run (without it: refused), and "
        "remove the arms, pairs and reports an earlier A/B wrote there that this one does not write again",
    )
    p.add_argument(
        "--final-answer",
        choices=FINAL_CHOICES,
        default=None,
        help="how every arm chooses its final answer (default: each policy's own): last (the last step's), "
        "vote (majority over the steps' answers) or plan (workflow policies: the plan's own final line)",
    )
    p.add_argument(
        "--rules",
        action="store_true",
        help="also run the best rule and the best single agent (best-rule, best-single: chosen on the "
        "suite's training items at --lam) as arms after the given ones, each compared with the first arm",
    )
    p.add_argument(
        "--rule-items", type=int, default=200, help="with --rules: training items they are chosen on"
    )
    p.add_argument(
        "--rule-cost",
        default=None,
        help="with --rules: the cost model lambda prices when choosing them (tokens, minutes, ...; "
        "default the run's, tokens)",
    )


def rule_arms(items: int, cost: str | None) -> list[str]:
    """The rule arms ``--rules`` adds: the best rule, then the best single agent."""
    tail = f":{items}" + (f":{cost}" if cost else "")
    return [f"best-rule{tail}", f"best-single{tail}"]


def ab_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.agents.pool import load_pool
    from puppeteer.analytics.ab import markdown, run_ab
    from puppeteer.analytics.arms import arms_markdown, run_arms
    from puppeteer.backends.cache import resolve_cache
    from puppeteer.evaluation.evaluate import slug

    if args.rules:
        args.arms = [
            *args.arms,
            *(a for a in rule_arms(args.rule_items, args.rule_cost) if a not in args.arms),
        ]
    if len(args.arms) < 2:
        raise UserError(
            f"ab needs at least two arms (policy specs), got {len(args.arms)}: {' '.join(args.arms)}"
        )
    cache = resolve_cache(load_pool(args.pool), args.cache, args.no_cache)
    out = Path(args.out) if args.out else Path("runs") / "ab" / slug("_vs_".join(args.arms))
    kw = dict(
        n=args.n,
        split=args.split,
        seed=args.seed,
        max_steps=args.max_steps,
        lam=args.lam,
        cache=cache,
        final_answer=args.final_answer,
        overwrite=args.overwrite,
    )
    if len(args.arms) == 2:
        result = run_ab(args.arms[0], args.arms[1], args.pool, args.suite, out, **kw)
        console.print(markdown(result), markup=False, soft_wrap=True)
        console.print(f"written: {out / 'ab.md'}, {out / 'ab.json'}, {out / 'ab.png'}")
        return 0
    arms = run_arms(args.arms, args.pool, args.suite, out, **kw)
    console.print(arms_markdown(arms), markup=False, soft_wrap=True)
    console.print(f"written: {out / 'arms.md'}, {out / 'arms.json'}, {out / 'arms.png'}")
    return 0


# ----------------------------------------------------------------------------- sweep
def configure_sweep(p: argparse.ArgumentParser) -> None:
    from puppeteer.jobs.sweep import TRACKS

    p.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides for every run, e.g. pool=sim-paper "
        "suite=mix-paper trainer.episodes=256 policy.encoder=hashing",
    )
    p.add_argument(
        "--lam",
        type=lam_list,
        default=None,
        help="comma-separated cost weights: lam (puppeteer track), workflow_lam (conductor); default "
        f"{','.join(f'{x:g}' for x in DEFAULT_LAMS)}. With --conditioned: the lambdas of the separately "
        "trained policies (default: both ends and the middle of the grid)",
    )
    p.add_argument(
        "--conditioned",
        action="store_true",
        help="one policy per seed trained over --lam-range (lambda drawn per episode, an input of the "
        "policy), evaluated on a fine grid of lambdas on the held-out split, beside fixed-lambda policies "
        "and (simulated pools) the per-item optimum: front.md, front.csv, front.png",
    )
    p.add_argument(
        "--lam-range", type=lam_list, default=None, metavar="LOW,HIGH", help="with --conditioned: the range"
    )
    p.add_argument("--points", type=int, default=9, help="with --conditioned: lambdas on the grid")
    p.add_argument(
        "--conditioned-episodes",
        type=int,
        default=None,
        help="with --conditioned: training episodes of the conditioned runs (default: trainer.episodes)",
    )
    p.add_argument(
        "--lam-relabel",
        type=int,
        default=0,
        metavar="K",
        help="with --conditioned: each group's first decision also learned at K more lambdas, its calls "
        "re-priced (trainer.lam_relabel of the conditioned runs; needs trainer.first_step=all, max_steps=1)",
    )
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per value")
    p.add_argument(
        "--track",
        choices=sorted(TRACKS),
        default="puppeteer",
        help="puppeteer: REINFORCE (puppeteer train), over lam; "
        "conductor: GRPO (puppeteer train track=conductor), over workflow_lam",
    )
    p.add_argument(
        "--baselines",
        default="",
        help="comma-free list separated by ';' of baseline specs "
        "evaluated as points (e.g. 'oracle;vote:3;single:gpt-5')",
    )
    p.add_argument(
        "--rules",
        action="store_true",
        help="also the best rule and the best single agent at every swept lambda (best-rule, "
        "best-single: chosen on the suite's first 200 training items at that lambda, no learning)",
    )
    p.add_argument(
        "--cost",
        choices=("tokens", "usd", "calls", "model_s"),
        default="tokens",
        help="x axis (model_s: single-stream model seconds at the declared speeds; needs --reevaluate)",
    )
    p.add_argument(
        "--n-eval", type=int, default=None, help="held-out items (default: the suite config's n_eval)"
    )
    p.add_argument("--out", default="runs/sweep/latest")
    p.add_argument(
        "--gather-only", action="store_true", help="do not train; gather the runs already in --out"
    )
    p.add_argument(
        "--reevaluate",
        action="store_true",
        help="evaluate each trained policy again with evaluate_policy (per-item trajectories, the baselines' "
        "sample indices) instead of reading the held-out numbers its training job wrote",
    )
    p.epilog = "added unless given: " + "; ".join(
        f"{name}: " + " ".join(f"{k}={v}" for k, v in t.defaults.items())
        for name, t in sorted(TRACKS.items())
    )


def sweep_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.analytics.sweep import markdown
    from puppeteer.jobs.sweep import run_sweep

    if args.conditioned:
        return _front_command(args, console)
    if args.lam_range is not None:
        raise UserError("--lam-range trains a conditioned policy: add --conditioned")
    baselines = [s.strip() for s in args.baselines.split(";") if s.strip()]
    if args.rules:
        baselines += [r for r in ("best-rule", "best-single") if r not in baselines]
    df = run_sweep(
        args.lam if args.lam is not None else DEFAULT_LAMS,
        args.seeds,
        args.out,
        args.overrides,
        baselines,
        track=args.track,
        cost=args.cost,
        n_eval=args.n_eval,
        train=not args.gather_only,
        reevaluate=args.reevaluate,
    )
    console.print(markdown(df, args.cost), markup=False, soft_wrap=True)
    out = Path(args.out)
    console.print(f"written: {out / 'sweep.csv'}, {out / 'sweep.md'}, {out / 'sweep.png'}")
    return 0


def _front_command(args: argparse.Namespace, console: Console) -> int:
    """``sweep --conditioned``: one policy for every lambda in the range, and its front."""
    from puppeteer.analytics.lam_front import markdown
    from puppeteer.jobs.lam_front import FrontPlan, run_front

    if args.track != "puppeteer":
        raise UserError("--conditioned trains the step-wise puppeteer (--track puppeteer)")
    if args.lam_range is None or len(args.lam_range) != 2:
        raise UserError("--conditioned needs --lam-range LOW,HIGH")
    if args.baselines.strip() or args.reevaluate:
        raise UserError("--baselines and --reevaluate are not available with --conditioned")
    overrides = list(args.overrides)
    if args.n_eval is not None:
        overrides.append(f"suite.n_eval={args.n_eval}")
    try:
        plan = FrontPlan(
            lam_range=(args.lam_range[0], args.lam_range[1]),
            seeds=tuple(range(args.seeds)),
            points=args.points,
            fixed=tuple(args.lam or ()),
            conditioned_episodes=args.conditioned_episodes,
            relabel=args.lam_relabel,
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    front = run_front(plan, args.out, overrides, train=not args.gather_only)
    out = Path(args.out)
    console.print(markdown(front), markup=False, soft_wrap=True)
    console.print(
        f"written: {out / 'front.md'}, {out / 'front.csv'}, {out / 'front.png'}, {out / 'front.json'}"
    )
    return 0


# ----------------------------------------------------------------------------- graph
def configure_graph(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="run directories (eval or training) or folders of runs")
    p.add_argument(
        "--out", default="runs/graph", help="output directory (report.html, PNGs, metrics.csv, evolution.csv)"
    )
    p.add_argument("--checkpoints", type=int, default=6, help="stretches of training updates to compare")


def graph_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.analytics.graph_report import build_report

    report = build_report(args.runs, args.out, n_bins=args.checkpoints)
    console.print(report.metrics.to_string(index=False), markup=False, soft_wrap=True)
    console.print(f"report: {report.html}")
    return 0


# ----------------------------------------------------------------------------- query
def configure_query(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="*", help="run directories or folders of runs to index first")
    p.add_argument("--db", default="runs/store.sqlite", help="the SQLite trajectory store")
    p.add_argument(
        "--sql",
        default="SELECT r.policy, e.suite, COUNT(*) AS episodes, AVG(e.correct) AS accuracy, "
        "AVG(e.tokens) AS tokens, AVG(e.calls) AS calls FROM episodes e JOIN runs r USING (run_id) "
        "GROUP BY r.policy, e.suite",
        help="a query over tables runs, episodes, steps",
    )


def query_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.analytics.store import TrajectoryStore, find_runs

    with TrajectoryStore(args.db) as store:
        added = sum(store.ingest(r) for r in find_runs(args.runs))
        console.print(f"{args.db}: {added} new episodes indexed")
        console.print(store.query(args.sql).to_string(index=False), markup=False, soft_wrap=True)
    return 0


COMMANDS = (
    Command(
        "ab",
        "paired A/B test of two policies (specs or run dirs) on the same items",
        configure_ab,
        ab_command,
    ),
    Command(
        "sweep",
        "train and evaluate one policy per (lambda, seed); cost-accuracy plot",
        configure_sweep,
        sweep_command,
    ),
    Command(
        "graph",
        "emergent collaboration graphs of runs: PNGs and an HTML report",
        configure_graph,
        graph_command,
    ),
    Command(
        "query",
        "index runs into the SQLite trajectory store and run SQL",
        configure_query,
        query_command,
    ),
)
