"""Would a larger token budget fix an agent's cut-off answers? Re-run only the items it truncated.

Reads a finished ``single:AGENT`` run (``runs/baselines/<pool>/<suite>/single_<agent>/``), takes
the items whose generation hit ``max_tokens``, and runs them again with ``--max-tokens``.
Greedy decoding (temperature 0) makes the other items' outputs independent of the budget
(they stopped on their own before it), so the accuracy on all items with the larger budget is
the old run's correct untruncated items plus the re-run's correct items. The script checks
that assumption where it can: each new generation must start with the old cut-off text.

    python experiments/baselines-local-v2/budget_probe.py --agent qwen1.5b-cot --suite gsm8k --max-tokens 512
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.backends import make_router
from puppeteer.backends.cache import resolve_cache
from puppeteer.backends.llamacpp import available_cpus
from puppeteer.envs.trajectories import read_trajectories
from puppeteer.evaluation.evaluate import evaluate_policy, slug
from puppeteer.evaluation.stats import wilson_interval
from puppeteer.tasks import load_suite


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="local")
    p.add_argument("--agent", required=True)
    p.add_argument("--suite", required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--runs-dir", default="runs/baselines")
    p.add_argument("--cache", default=None)
    return p.parse_args(argv)


def with_budget(pool: Pool, agent: str, max_tokens: int) -> Pool:
    i = pool.index(agent)
    agents = list(pool.agents)
    agents[i] = replace(agents[i], max_tokens=max_tokens)
    return replace(pool, agents=tuple(agents))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pool = load_pool(args.pool)
    old_budget = pool.agent(pool.index(args.agent)).max_tokens
    if args.max_tokens <= old_budget:
        raise SystemExit(f"--max-tokens must exceed the agent's budget ({old_budget})")
    run = Path(args.runs_dir) / pool.name / args.suite / slug(f"single:{args.agent}")
    records = list(read_trajectories(run / "trajectories.jsonl"))
    cut = {
        t.task_id: t.steps[0].completion.text for t in records if t.steps and t.steps[0].completion.truncated
    }
    kept = sum(t.correct for t in records if t.task_id not in cut)
    items = [t for t in load_suite(args.suite, args.split) if t.id in cut]
    probe_pool = with_budget(pool, args.agent, args.max_tokens)
    options = {k: dict(v) for k, v in probe_pool.backend_options.items()}
    options.setdefault("llamacpp", {})["n_threads"] = available_cpus()
    backend = make_router(options, cache=resolve_cache(probe_pool, args.cache, False))
    out = run.parent / f"{slug(f'single:{args.agent}')}_max{args.max_tokens}_truncated"
    result = evaluate_policy(
        f"single:{args.agent}",
        probe_pool,
        args.suite,
        split=args.split,
        tasks=items,
        out_dir=out,
        backend=backend,
        progress=True,
        overwrite=True,
    )  # regenerates
    new = [t for t in read_trajectories(out / "trajectories.jsonl") if t.steps]
    prefix_ok = sum(t.steps[0].completion.text.startswith(cut[t.task_id].rstrip()) for t in new)
    still_cut = sum(t.steps[0].completion.truncated for t in new)
    n, correct = len(records), kept + result.correct
    lo, hi = wilson_interval(correct, n)
    sys.stdout.write(
        f"{args.agent} on {args.suite}/{args.split}: {len(cut)} of {n} items cut at {old_budget} tokens\n"
        f"  re-run at {args.max_tokens}: {result.correct} of {len(cut)} now correct, {still_cut} still cut, "
        f"{prefix_ok} of {len(new)} start with the old cut-off text, "
        f"{result.mean_latency_s:.1f} model s per re-run item\n"
        f"  accuracy with max_tokens={args.max_tokens}: {correct}/{n} = {correct / n:.3f} "
        f"[{lo:.3f}, {hi:.3f}] "
        f"(was {sum(t.correct for t in records)}/{n})\n  trajectories: {out}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
