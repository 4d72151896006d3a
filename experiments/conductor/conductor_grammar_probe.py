"""Parse rate and decoding speed of a prompted conductor with and without the plan grammar.

The same items, prompts and model; only the decoding differs (``conductor:free:KEY`` against
``conductor:KEY``, whose plans are decoded under :mod:`puppeteer.envs.conductor_grammar`). Only the
conductor runs (parsing a plan needs no worker), items concurrently so the llama.cpp backend
batches them; the two arms alternate in rounds of ``--round`` items so machine load hits both
alike. Writes counts, parse errors, plan shapes and tokens per second (no item text) as JSON.
Calls go through the shared response cache, so a re-run replays (its speeds are then meaningless).

    python experiments/conductor/conductor_grammar_probe.py --pool local-v2 --suite mix-math-mmlu --n 40 \\
        --out experiments/conductor/results/grammar-probe-local-v2.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from puppeteer.backends import make_router
from puppeteer.backends.cache import default_response_cache
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.workflow import PlanSpace, WorkflowError, WorkflowLimits, parse_workflow
from puppeteer.policies.conductor import make_conductor
from puppeteer.utils.seeding import item_seed


def _plan(env: ConductorEnv, policy: Any, index: int) -> dict[str, Any]:
    item = env.clone()
    obs, info = item.reset(seed=item_seed(0, item.tasks[index].id), options={"task_index": index})
    own = policy.fork()
    t0 = time.perf_counter()
    text = own.act(obs, info)
    wall = time.perf_counter() - t0
    space: PlanSpace = info["plan_space"]
    n = len(item.pool) + (1 if space.self_id is not None else 0)
    mask = [i in space.available or i == space.self_id for i in range(n)]
    call = own.calls[-1]
    row: dict[str, Any] = {
        "index": index,
        "completion_tokens": call.completion_tokens,
        "truncated": call.truncated,
        "cached": call.cached,
        "wall_s": wall,
    }
    try:
        workflow = parse_workflow(text, n, mask, WorkflowLimits(max_steps=space.max_steps))
        row.update(parsed=True, model_id=list(workflow.model_id), error=None)
    except WorkflowError as e:
        row.update(parsed=False, model_id=None, error=str(e))
    return row


def _summary(rows: list[dict[str, Any]], rounds: list[tuple[float, int, int]]) -> dict[str, Any]:
    """``rounds``: (wall seconds, completion tokens, cached calls) of each of the arm's rounds; the speed
    counts only rounds in which no call was replayed from the cache."""
    tokens = sum(r["completion_tokens"] for r in rows)
    fresh = [(w, t) for w, t, cached in rounds if cached == 0]
    wall = sum(w for w, _ in fresh)
    plans = Counter(str(r["model_id"]) for r in rows if r["parsed"])
    return {
        "n": len(rows),
        "parsed": sum(r["parsed"] for r in rows),
        "truncated": sum(r["truncated"] for r in rows),
        "cached": sum(r["cached"] for r in rows),
        "errors": Counter(str(r["error"]).split(":")[0] for r in rows if not r["parsed"]),
        "mean_completion_tokens": tokens / len(rows),
        "completion_tok_per_s": sum(t for _, t in fresh) / wall if wall else None,
        "timed_rounds": len(fresh),
        "distinct_plans": len(plans),
        "top_plans": plans.most_common(5),
        "steps": Counter(len(r["model_id"]) for r in rows if r["parsed"]),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="an embedded model key")
    p.add_argument("--pool", default="local-v2")
    p.add_argument("--suite", default="mix-math-mmlu")
    p.add_argument("--split", default="test")
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--max-steps", type=int, default=5)
    p.add_argument("--round", type=int, default=8, help="items per round; the arms alternate by round")
    p.add_argument("--workers", type=int, default=8, help="items in flight at once (batched)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    env = ConductorEnv(
        mode="workflow",
        pool=args.pool,
        suite=args.suite,
        split=args.split,
        n_tasks=args.n,
        max_steps=args.max_steps,
    )
    backend = make_router({"llamacpp": {"n_ctx": 4096}}, cache=default_response_cache())
    arms = {"free": make_conductor(f"free:{args.model}"), "grammar": make_conductor(args.model)}
    for policy in arms.values():
        policy.backend = backend
    rows: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    rounds: dict[str, list[tuple[float, int, int]]] = {a: [] for a in arms}
    with ThreadPoolExecutor(args.workers) as pool:
        for lo in range(0, args.n, args.round):
            batch = range(lo, min(lo + args.round, args.n))
            order = list(arms) if (lo // args.round) % 2 == 0 else list(reversed(arms))
            for arm in order:
                t0 = time.perf_counter()
                got = list(pool.map(lambda i, a=arm: _plan(env, arms[a], i), batch))
                wall = time.perf_counter() - t0
                rows[arm] += got
                tokens = sum(r["completion_tokens"] for r in got)
                rounds[arm].append((wall, tokens, sum(r["cached"] for r in got)))
            done = {a: sum(r["parsed"] for r in rows[a]) for a in arms}
            sys.stderr.write(f"{len(rows['free'])}/{args.n} items, parsed {done}\n")
            report = {
                "model": args.model,
                "pool": args.pool,
                "suite": f"{args.suite}/{args.split}",
                "max_steps": args.max_steps,
                "max_tokens": {a: arms[a].token_budget for a in arms},
                "backend": "llamacpp (conductor only; parsing needs no worker)",
                "complete": len(rows["free"]) == args.n,
                **{a: _summary(rows[a], rounds[a]) for a in arms},
                "items": rows,
            }
            if args.out:  # after every round: a killed run keeps what it measured
                Path(args.out).write_text(json.dumps(report, indent=2, default=str) + "\n")
    sys.stdout.write(json.dumps({a: report[a] for a in arms}, indent=2, default=str) + "\n")
    backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
