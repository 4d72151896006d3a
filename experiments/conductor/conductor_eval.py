"""Evaluate a prompted conductor on pools x suites and write
experiments/conductor/results/conductor-results.md.

Each (pool, suite) run goes through ``puppeteer.evaluation.evaluate.evaluate_policy`` (the same items,
item seeds and files as ``puppeteer eval``) into ``OUT_DIR/<pool>_<suite>/``; its
``trajectories.jsonl`` grows one line per finished item, so the table (``--table-only``) can be
made from partial runs. Every model call goes through the shared response cache: re-running the
same command replays finished items in seconds and goes on where it stopped.

    python experiments/conductor/conductor_eval.py --pools sim-paper --suites gsm8k mmlu --n 50
    python experiments/conductor/conductor_eval.py --table-only
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import load_pool
from puppeteer.backends.cache import default_response_cache
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.evaluation.stats import wilson_interval

ROOT = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="conductor")
    p.add_argument("--pools", nargs="+", default=["sim-paper", "local"])
    p.add_argument("--suites", nargs="+", default=["gsm8k", "mmlu"])
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=5)
    p.add_argument("--max-depth", type=int, default=0)
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="items in flight (default: 16 when the conductor or the workers call models, so calls batch)",
    )
    p.add_argument("--available", default=None, help="comma-separated agent names (a fixed subset)")
    p.add_argument("--cache", default=None, help="response cache (default: the user's shared cache)")
    p.add_argument("--out-dir", default=str(ROOT / "experiments" / "conductor" / "results"))
    p.add_argument(
        "--table", default=str(ROOT / "experiments" / "conductor" / "results" / "conductor-results.md")
    )
    p.add_argument("--table-only", action="store_true", help="only rewrite the table from the run files")
    return p.parse_args(argv)


def run_dir(out_dir: Path, policy: str, pool: str, suite: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in policy)
    tag = "" if policy == "conductor" else "_" + safe
    return out_dir / f"{pool}_{suite}{tag}"


def finished(path: Path, n: int) -> bool:
    """A run in ``path`` that completed ``n`` items and kept a trajectory line for each."""
    results, lines = path / "results.json", path / "trajectories.jsonl"
    if not (results.is_file() and lines.is_file()):
        return False
    meta = json.loads(results.read_text())
    kept = sum(1 for line in lines.read_text().splitlines() if line.strip())
    return bool(meta.get("completed")) and meta.get("n") == n and kept == n


def summarize(path: Path) -> dict[str, Any] | None:
    """Summary of a (possibly partial) run from its trajectories.jsonl."""
    file = path / "trajectories.jsonl"
    if not file.is_file():
        return None
    lines = [json.loads(x) for x in file.read_text().splitlines() if x.strip()]
    if not lines:
        return None
    n = len(lines)
    correct = sum(bool(d["correct"]) for d in lines)
    lo, hi = wilson_interval(correct, n)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else math.nan

    conductor = [d.get("conductor") or [] for d in lines]
    results = path / "results.json"
    meta = json.loads(results.read_text()) if results.is_file() else {}
    return dict(
        n=n,
        correct=correct,
        acc=correct / n,
        lo=lo,
        hi=hi,
        parse_fail=sum(bool(d["parse_error"]) for d in lines),
        errors=sum(bool(d.get("error")) for d in lines),
        calls=mean([len(d["steps"]) for d in lines]),
        tokens=mean([d["prompt_tokens"] + d["completion_tokens"] for d in lines]),
        usd=mean([d["cost_usd"] for d in lines]),
        worker_s=mean([sum(s["completion"]["latency_s"] for s in d["steps"]) for d in lines]),
        c_tokens=mean([sum(c["prompt_tokens"] + c["completion_tokens"] for c in cs) for cs in conductor]),
        c_out=mean([sum(c["completion_tokens"] for c in cs) for cs in conductor]),
        c_s=mean([sum(c["latency_s"] for c in cs) for cs in conductor]),
        c_trunc=sum(any(c["truncated"] for c in cs) for cs in conductor),
        backends=", ".join(meta.get("backends") or load_pool(path.name.split("_")[0]).backends()),
        completed=bool(meta.get("completed")) and meta.get("n") == n,
    )


def table(rows: list[tuple[str, str, str, dict[str, Any]]]) -> str:
    head = (
        "| policy | pool | suite | items done | parse failures | accuracy (95% CI) | worker calls | "
        "worker tokens | worker USD | worker model s | conductor tokens (out) | conductor s | "
        "worker backend |\n|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"
    )
    out = [head]
    for policy, pool, suite, s in rows:
        done = f"{s['n']}" + ("" if s["completed"] else " (partial)")
        out.append(
            f"| `{policy}` | {pool} | {suite} | {done} | "
            f"{s['parse_fail']} ({s['parse_fail'] / s['n']:.0%}) | "
            f"{s['acc']:.3f} [{s['lo']:.3f}, {s['hi']:.3f}] | {s['calls']:.2f} | {s['tokens']:.0f} | "
            f"{s['usd']:.5f} | {s['worker_s']:.1f} | {s['c_tokens']:.0f} ({s['c_out']:.0f}) | "
            f"{s['c_s']:.1f} | {s['backends']} |"
        )
    return "\n".join(out)


def write_table(args: argparse.Namespace, command: str) -> None:
    out_dir = Path(args.out_dir)
    rows = []
    for pool in args.pools:
        for suite in args.suites:
            s = summarize(run_dir(out_dir, args.policy, pool, suite))
            if s is not None:
                rows.append((args.policy, pool, suite, s))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    runs = " and ".join(
        f"`python experiments/conductor/conductor_eval.py --policy {args.policy} --pools {pool} --suites "
        f"{' '.join(args.suites)} --n {args.n}`"
        for pool in args.pools
    )
    text = (
        f"<!-- written by experiments/conductor/conductor_eval.py at {stamp} -->\n"
        f"# Conductor results\n\nTable made {stamp} by `{command} --table-only` from the runs of {runs} "
        f"(split test, seed 0; a rerun of a run command replays finished items from the response "
        f"cache and goes on). Conductor backend: llamacpp (policy `{args.policy}`). Means are per item "
        f"over the items done; `(partial)` marks runs that had not finished all {args.n} items."
        f"\n\n{table(rows)}\n"
    )
    Path(args.table).write_text(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    command = "python experiments/conductor/conductor_eval.py " + shlex.join(
        a for a in argv if a != "--table-only"
    )
    if not args.table_only:
        cache = Path(args.cache).expanduser() if args.cache else default_response_cache()
        available = [a.strip() for a in args.available.split(",")] if args.available else None
        for pool_name in args.pools:
            pool = load_pool(pool_name)
            for suite in args.suites:
                out = run_dir(Path(args.out_dir), args.policy, pool_name, suite)
                if finished(out, args.n):
                    logging.info("%s on %s/%s: finished in %s, skipped", args.policy, pool_name, suite, out)
                    continue
                logging.info("conductor %s on %s/%s -> %s", args.policy, pool_name, suite, out)
                evaluate_policy(
                    args.policy,
                    pool,
                    suite,
                    n=args.n,
                    seed=args.seed,
                    out_dir=out,
                    cache=cache,
                    max_steps=args.max_steps,
                    progress=False,
                    available=available,
                    max_depth=args.max_depth,
                    concurrency=args.concurrency,
                    overwrite=True,
                )  # an unfinished run: finished items replay from the cache
                write_table(args, command)
    write_table(args, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
