"""Local-model throughput, side by side in one run (backend: llamacpp).

Part 1, per model: completion tokens per second (wall clock, prompt included) of
  raw        a plain ``llama_cpp.Llama.create_chat_completion`` loop, one request at a time
  seq        the backend's one-at-a-time path (``batching=False``), one request at a time
  batch=1    the batched backend, one request at a time
  batch=B    the batched backend with B requests in flight (B in --batches)
  ... @1t    the same with one thread (is the all-cores default right here?)
Every request asks for a long count with a fresh nonce and gets ``--tokens`` tokens, greedy.
Configurations run in a rotated order in each of ``--reps`` rounds; each one's ratio to raw
is taken within a round, and the table shows medians.

Part 2, on the ``local`` pool with every agent's budget capped at ``--cap`` tokens and no
response cache: episodes per second of one REINFORCE batch of 16 (an untrained puppeteer,
hashing encoder, GSM8K, ``max_steps=2``) and of an eval of 32 GSM8K items
(``single:qwen0.5b-cot``), each one-at-a-time (``batching=False``, no concurrency) and batched
(``batching=True``, episodes/items in flight at once).

    python benchmarks/bench_local_models.py --json runs/bench_local.json
    python benchmarks/bench_local_models.py --models qwen2.5-coder-0.5b --reps 1 --skip-episodes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import llama_cpp

from puppeteer.backends.llamacpp import LlamaCppBackend, default_threads, load_llama
from puppeteer.backends.models import EMBEDDED_MODELS, model_path
from puppeteer.types import CompletionRequest, Message, ModelSpec

Run = Callable[[int], int]  # n requests at once -> completion tokens produced


def messages() -> list[dict[str, str]]:
    nonce = uuid.uuid4().hex[:8]
    return [{"role": "user", "content": f"[{nonce}] Count from 1 to 400, separated by commas."}]


def raw_runner(llm: llama_cpp.Llama, tokens: int) -> Run:
    def run(n: int) -> int:
        total = 0
        for _ in range(n):
            r = llm.create_chat_completion(messages=messages(), max_tokens=tokens, temperature=0.0, seed=0)
            total += r["usage"]["completion_tokens"]
        return total

    return run


def backend_runner(backend: LlamaCppBackend, key: str, tokens: int, concurrent: bool) -> Run:
    spec = ModelSpec(name=key, backend="llamacpp", target=key, params_b=EMBEDDED_MODELS[key].params_b)

    def request() -> CompletionRequest:
        msgs = tuple(Message(m["role"], m["content"]) for m in messages())
        return CompletionRequest(model=spec, messages=msgs, max_tokens=tokens, temperature=0.0)

    def run(n: int) -> int:
        reqs = [request() for _ in range(n)]
        if not concurrent:
            return sum(backend.complete(r).completion_tokens for r in reqs)
        with ThreadPoolExecutor(max_workers=n) as pool:
            return sum(c.completion_tokens for c in pool.map(backend.complete, reqs))

    return run


def bench_model(key: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    threads = args.n_threads
    common = dict(n_ctx=args.n_ctx, seed=0)
    path = model_path(key)
    raw = load_llama(path, n_ctx=args.n_ctx, n_threads=threads, seed=0)
    seq = LlamaCppBackend(n_threads=threads, batching=False, **common)
    bat = LlamaCppBackend(n_threads=threads, batching=True, n_parallel=max(args.batches), **common)
    bat1 = LlamaCppBackend(n_threads=1, batching=True, n_parallel=max(args.batches), **common)
    raw1 = load_llama(path, n_ctx=args.n_ctx, n_threads=1, seed=0) if threads > 1 else raw
    configs: dict[str, tuple[Run, int]] = {
        "raw": (raw_runner(raw, args.tokens), 1),
        "seq": (backend_runner(seq, key, args.tokens, concurrent=False), 1),
        "batch=1": (backend_runner(bat, key, args.tokens, concurrent=False), 1),
        **{f"batch={b}": (backend_runner(bat, key, args.tokens, concurrent=True), b) for b in args.batches},
    }
    if threads > 1:
        configs["raw @1t"] = (raw_runner(raw1, args.tokens), 1)
        configs[f"batch={args.thread_batch} @1t"] = (
            backend_runner(bat1, key, args.tokens, concurrent=True),
            args.thread_batch,
        )
    for run, _ in configs.values():  # warm-up: load, page the weights in, build graphs
        run(1)
    rates: dict[str, list[float]] = {name: [] for name in configs}
    ratios: dict[str, list[float]] = {name: [] for name in configs}
    names = list(configs)
    for rep in range(args.reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            run, n = configs[name]
            start = time.perf_counter()
            produced = run(n)
            rates[name].append(produced / (time.perf_counter() - start))
            print(f"  {key} rep {rep} {name:<14} {rates[name][-1]:7.1f} tok/s", flush=True)
        for name in names:
            ratios[name].append(rates[name][-1] / rates["raw"][-1])
    for closing in (seq, bat, bat1):
        closing.close()
    raw.close()
    if raw1 is not raw:
        raw1.close()
    return {
        name: {
            "tok_s": statistics.median(rates[name]),
            "vs_raw": statistics.median(ratios[name]),
            "in_flight": configs[name][1],
        }
        for name in names
    }


# --------------------------------------------------------------------------- episodes


def capped_pool(cap: int) -> Any:
    from puppeteer.agents.pool import load_pool

    pool = load_pool("local")
    return replace(pool, agents=tuple(replace(a, max_tokens=min(a.max_tokens, cap)) for a in pool.agents))


def training_batch(batching: bool, args: argparse.Namespace) -> float:
    import torch

    from puppeteer.envs.env import ConductorEnv
    from puppeteer.envs.rollout import run_lockstep
    from puppeteer.policies.puppeteer import PuppeteerPolicy
    from puppeteer.policies.puppeteer_config import PolicyConfig
    from puppeteer.tasks import load_suite

    pool = capped_pool(args.cap)
    tasks = load_suite("gsm8k", "test", n=16, seed=0)
    options = {"llamacpp": {"n_ctx": args.n_ctx, "batching": batching, "n_threads": args.n_threads}}
    env = ConductorEnv(pool=pool, tasks=tasks, mode="step", max_steps=2, backend_options=options)
    policy = PuppeteerPolicy(pool, PolicyConfig(encoder="hashing", max_steps=2), seed=0)
    specs = [(1000 + i, i) for i in range(16)]
    n_envs = 16 if batching else 1  # one env: episodes one after another, as before this change
    envs = [env, *(env.clone() for _ in range(n_envs - 1))]
    start = time.perf_counter()
    eps = run_lockstep(envs, policy, specs, generator=torch.Generator().manual_seed(0))
    wall = time.perf_counter() - start
    env.executor.backend.backend("llamacpp").close()  # type: ignore[attr-defined]
    return len(eps) / wall


def eval_items(batching: bool, args: argparse.Namespace) -> float:
    from puppeteer.backends import make_router
    from puppeteer.evaluation.evaluate import evaluate_policy

    pool = capped_pool(args.cap)
    options = {"llamacpp": {"n_ctx": args.n_ctx, "batching": batching, "n_threads": args.n_threads}}
    router = make_router(options)
    result = evaluate_policy(
        "single:qwen0.5b-cot",
        pool,
        "gsm8k",
        n=32,
        backend=router,
        progress=False,
        concurrency=32 if batching else 1,
    )
    router.backend("llamacpp").close()  # type: ignore[attr-defined]
    return result.n / result.wall_s


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32, help="completion tokens per request")
    parser.add_argument("--batches", default="2,4,8,16")
    parser.add_argument("--thread-batch", type=int, default=8, help="batch size of the one-thread comparison")
    parser.add_argument(
        "--n-threads",
        type=int,
        default=None,
        help="default: the batched backend's default (CPUs minus the load average)",
    )
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--cap", type=int, default=48, help="agents' max_tokens cap in part 2")
    parser.add_argument("--skip-episodes", action="store_true")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.n_threads = args.n_threads or default_threads(batching=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    system = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    print(f"llama-cpp-python {llama_cpp.__version__}; threads={args.n_threads}; {system}")
    print(f"load average at start: {os.getloadavg()}", flush=True)
    results: dict[str, Any] = {"models": {}, "episodes": {}}
    for key in [m for m in args.models.split(",") if m]:  # --models "" runs part 2 only
        res = results["models"][key] = bench_model(key, args)
        print(f"\n{key}: {'config':<14} {'in flight':>9} {'tok/s':>8} {'vs raw':>7}")
        for name, r in res.items():
            pad = " " * (len(key) + 2)
            print(f"{pad}{name:<14} {r['in_flight']:>9} {r['tok_s']:>8.1f} {r['vs_raw']:>7.2f}")
        print(flush=True)
    if not args.skip_episodes:
        for name, fn in (("training batch of 16", training_batch), ("eval of 32 items", eval_items)):
            one = fn(False, args)
            many = fn(True, args)
            results["episodes"][name] = {"sequential_eps": one, "batched_eps": many, "ratio": many / one}
            print(
                f"{name}: one at a time {one:.3f} episodes/s, batched {many:.3f} episodes/s, "
                f"ratio {many / one:.2f}",
                flush=True,
            )
    results["load_average_end"] = os.getloadavg()
    print(f"load average at end: {results['load_average_end']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "system": system, "results": results}, fh, indent=2)


if __name__ == "__main__":
    main()
