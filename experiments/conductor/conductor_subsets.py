"""The prompted conductor on agent subsets it was never shown together (issue 31, section 4).

The step track's subset study (experiments/sim-routing/sim_routing_study.py ``--subsets``) trains a router
on random
k-of-n subsets and evaluates it on ``--holdout`` subsets never drawn in training. This script puts the
conductor on the same held-out subsets (``holdout_subsets(n, k, count, seed=0)``): for each subset, the
conductor plans on the first ``--n`` held-out items with only those k agents in its table, beside each
of the subset's agents alone and the subset's per-item optimum (the agent with the best expected
accuracy given what the question shows; sim pools only) on the same items.

    python experiments/conductor/conductor_subsets.py --pool sim-routing --suite mix-routing --n 24 \
        --concurrency 8 \
        --cache runs/conductor-subsets/responses.sqlite --out runs/conductor-subsets

Resumable: each finished subset's results.json is kept; the response cache replays finished plans.
Writes ``report.md`` and ``subsets.json`` (no question text: the items include GPQA).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from puppeteer.agents.availability import holdout_subsets
from puppeteer.agents.pool import load_pool
from puppeteer.analytics.optimum import visible_optimum
from puppeteer.envs.build import EnvConfig, build_env
from puppeteer.evaluation.evaluate import evaluate_policy

log = logging.getLogger("conductor_subsets")


def _plans(run: Path) -> Counter[str]:
    """How often each plan (its agents in order) was written, over the run's items."""
    plans: Counter[str] = Counter()
    for line in (run / "trajectories.jsonl").read_text().splitlines():
        d = json.loads(line)
        plans[" > ".join(s["agent_name"] for s in d["steps"]) or "(none)"] += 1
    return plans


def subset_row(
    pool_name: str, suite: str, subset: tuple[int, ...], args: argparse.Namespace
) -> dict[str, Any]:
    """The conductor, each agent alone and the optimum on one subset (its row of the report)."""
    pool = load_pool(pool_name)
    names = [pool.agents[i].name for i in subset]
    run = args.out / ("subset-" + "-".join(str(i) for i in subset))
    # overwrite: a subset that stopped half way runs again (the response cache replays its plans)
    common: dict[str, Any] = dict(n=args.n, lam=args.lam, progress=False, available=names, overwrite=True)
    conductor = evaluate_policy(
        "conductor",
        pool,
        suite,
        **common,
        out_dir=run / "conductor",
        cache=args.cache,
        max_steps=args.max_steps,
        prompt=args.prompt,
        cost_model="usd",
        concurrency=args.concurrency,
    )
    singles = {
        name: evaluate_policy(f"single:{name}", pool, suite, **common, max_steps=1, out_dir=run / name)
        for name in names
    }
    off = tuple(i for i in range(len(pool)) if i not in subset)
    step = EnvConfig(mode="step", lam=0.0, max_steps=1, min_steps=1, cost_model="usd", unavailable=off)
    env = build_env(step, pool=pool, suite=suite, split="test", n_tasks=args.n)
    optimum = visible_optimum(env, available=subset)
    best = max(names, key=lambda a: (singles[a].accuracy, -singles[a].mean_usd))
    return {
        "subset": names,
        "n": conductor.n,
        "conductor": {
            "accuracy": conductor.accuracy,
            "parse_errors": conductor.n_parse_errors,
            "usd": conductor.mean_usd,
            "calls": conductor.mean_calls,
            "plans": dict(_plans(run / "conductor").most_common()),
        },
        "singles": {a: {"accuracy": r.accuracy, "usd": r.mean_usd} for a, r in singles.items()},
        "best_single": best,
        "optimum": {"accuracy": optimum.optimum.accuracy, "usd": optimum.optimum.cost},
        "optimum_expected_accuracy": optimum.expected_return,
        "hindsight": {"accuracy": optimum.hindsight.accuracy},
    }


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"# The prompted conductor on {len(rows)} held-out agent subsets (k = {args.k})",
        "",
        f"Pool `{args.pool}`, suite `{args.suite}`, first {args.n} held-out items per subset; conductor "
        f"Qwen2.5-Coder-1.5B (llama.cpp, greedy, under its grammar), prompt `{args.prompt}`, at most "
        f"{args.max_steps} steps. Backends: conductor llamacpp, workers sim.",
        "",
        "Subsets: `holdout_subsets(n_agents, k, count, seed=0)`, the ones the step track's subset study "
        "keeps out of training. Optimum: per item, the subset's agent with the best expected accuracy given "
        "what the question shows (lambda 0); hindsight: any agent of the subset right.",
        "",
        "| subset | conductor acc | cents / item | calls | best single (acc, cents) | optimum acc | "
        "conductor / best single | conductor / optimum | most frequent plan |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        c, best = r["conductor"], r["singles"][r["best_single"]]
        plan, count = next(iter(c["plans"].items()))
        lines.append(
            f"| {', '.join(r['subset'])} | {c['accuracy']:.3f} | {100 * c['usd']:.3f} | {c['calls']:.2f} | "
            f"`{r['best_single']}` ({best['accuracy']:.3f}, {100 * best['usd']:.3f}) | "
            f"{r['optimum']['accuracy']:.3f} | {c['accuracy'] / max(best['accuracy'], 1e-9):.0%} | "
            f"{c['accuracy'] / max(r['optimum']['accuracy'], 1e-9):.0%} | {plan} ({count}/{r['n']}) |"
        )
    acc = np.mean([r["conductor"]["accuracy"] for r in rows])
    best = np.mean([r["singles"][r["best_single"]]["accuracy"] for r in rows])
    opt = np.mean([r["optimum"]["accuracy"] for r in rows])
    lines += [
        "",
        f"Mean over subsets: conductor {acc:.3f}, best single agent of each subset {best:.3f}, "
        f"optimum {opt:.3f}; parse errors {sum(r['conductor']['parse_errors'] for r in rows)} of "
        f"{sum(r['n'] for r in rows)} plans.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pool", default="sim-routing")
    p.add_argument("--suite", default="mix-routing")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--holdout", type=int, default=10)
    p.add_argument("--n", type=int, default=24, help="held-out items per subset")
    p.add_argument("--max-steps", type=int, default=3)
    p.add_argument("--lam", type=float, default=0.0)
    p.add_argument("--prompt", default="prompt-v2")
    p.add_argument("--cache", type=Path, default=None)
    p.add_argument("--concurrency", type=int, default=8, help="conductor plans in flight (batched decoding)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    pool = load_pool(args.pool)
    if "sim" not in pool.backends():
        raise SystemExit(f"the optimum needs simulated workers; {args.pool!r} uses {pool.backends()}")
    saved = args.out / "subsets.json"
    done = {tuple(r["subset"]): r for r in json.loads(saved.read_text())} if saved.exists() else {}
    rows = []
    for subset in holdout_subsets(len(pool), args.k, args.holdout, seed=0):
        names = tuple(pool.agents[i].name for i in subset)
        row = done.get(names) or subset_row(args.pool, args.suite, subset, args)
        rows.append(row)
        c, opt = row["conductor"]["accuracy"], row["optimum"]["accuracy"]
        log.info("subset %s: conductor %.3f, optimum %.3f", ", ".join(names), c, opt)
        saved.write_text(json.dumps(rows, indent=1))
        (args.out / "report.md").write_text(report(rows, args))


if __name__ == "__main__":
    main()
