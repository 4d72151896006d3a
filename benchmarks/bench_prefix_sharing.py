"""Prefix sharing across sequences, side by side in one run (backend: llamacpp).

``--requests`` conductor prompts (the real prompt-v1 of ``Conductor-v0`` in workflow mode on
``--pool``/``--suite``: one system prompt with the agent table and few-shot examples, then each
item's question) are sent at once to the batched llama.cpp backend, greedy, ``--tokens`` tokens
each, with ``share_prefix`` on and off. Each arm gets a fresh backend (model load and one
warm-up call are not timed). Arms alternate, the first arm flips every round; the table shows
per-round wall times and the ratio off/on within each round, then medians.

    python benchmarks/bench_prefix_sharing.py --model qwen2.5-coder-0.5b --requests 8 --reps 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from puppeteer.backends.llamacpp import LlamaCppBackend
from puppeteer.backends.models import EMBEDDED_MODELS
from puppeteer.envs.env import ConductorEnv
from puppeteer.policies.conductor import conductor_model
from puppeteer.types import CompletionRequest, Message


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b", choices=sorted(EMBEDDED_MODELS))
    p.add_argument("--pool", default="sim-paper")
    p.add_argument("--suite", default="gsm8k")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--n-threads", type=int, default=None)
    p.add_argument("--json", type=Path, default=None, help="append one JSON line per arm and round")
    return p.parse_args(argv)


def conductor_requests(args: argparse.Namespace) -> list[CompletionRequest]:
    env = ConductorEnv(mode="workflow", pool=args.pool, suite=args.suite, split="test", n_tasks=args.requests)
    spec = conductor_model(args.model)  # the embedded model, as `--policy conductor:KEY` names it
    reqs = []
    for task in env.tasks[: args.requests]:
        _, info = env.reset(options={"task": task})
        reqs.append(
            CompletionRequest(model=spec, messages=info["conductor_prompt"].messages, max_tokens=args.tokens)
        )
    return reqs


def run_arm(share: bool, reqs: list[CompletionRequest], args: argparse.Namespace) -> dict[str, Any]:
    backend = LlamaCppBackend(n_threads=args.n_threads, share_prefix=share, n_parallel=max(16, len(reqs)))
    try:
        warm = CompletionRequest(model=reqs[0].model, messages=(Message("user", "Hi"),), max_tokens=1)
        backend.complete(warm)  # loads the model; not timed
        before = backend.batcher(args.model)[1].stats

        async def all_at_once() -> list[Any]:
            return await asyncio.gather(*(backend.acomplete(r) for r in reqs))

        t0 = time.perf_counter()
        got = asyncio.run(all_at_once())
        wall = time.perf_counter() - t0
        after = backend.batcher(args.model)[1].stats
    finally:
        backend.close()
    return {
        "share_prefix": share,
        "wall_s": wall,
        "evaluated_tokens": after.tokens - before.tokens,
        "shared_tokens": after.shared_tokens - before.shared_tokens,
        "prompt_tokens": sum(c.prompt_tokens for c in got),
        "completion_tokens": sum(c.completion_tokens for c in got),
        "texts": [c.text for c in got],
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    reqs = conductor_requests(args)
    rounds = []
    for rep in range(args.reps):
        order = (False, True) if rep % 2 == 0 else (True, False)
        arms = {share: run_arm(share, reqs, args) for share in order}
        rounds.append(arms)
        if args.json:
            with args.json.open("a") as f:
                for a in arms.values():
                    f.write(json.dumps({"model": args.model, "round": rep, **a}) + "\n")
    print(
        f"model {args.model}, {len(reqs)} conductor prompts ({args.pool}/{args.suite}) at once, "
        f"{args.tokens} tokens each, greedy; backend llamacpp"
    )
    print("| round | wall s, sharing off | wall s, sharing on | off / on | tokens evaluated off / on |")
    print("|---:|---:|---:|---:|---|")
    ratios = []
    for i, arms in enumerate(rounds):
        off, on = arms[False], arms[True]
        ratios.append(off["wall_s"] / on["wall_s"])
        print(
            f"| {i} | {off['wall_s']:.1f} | {on['wall_s']:.1f} | {ratios[-1]:.2f} | "
            f"{off['evaluated_tokens']} / "
            f"{on['evaluated_tokens']} |"
        )
    same = sum(a == b for a, b in zip(rounds[0][False]["texts"], rounds[0][True]["texts"], strict=True))
    median = statistics.median(ratios)
    print(f"\nmedian off/on {median:.2f}; identical greedy texts (round 0): {same}/{len(reqs)}")


if __name__ == "__main__":
    main()
