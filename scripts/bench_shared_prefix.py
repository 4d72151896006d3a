"""Shared-prefix generation against plain ``generate``, side by side (ratios, not claims).

The two batch shapes a conductor's GRPO run generates: a group (one question's prompt repeated
``--k`` times, sampled) and a held-out batch (``--k`` different questions, greedy). Each is
generated with the same model, prompts, seed and length, once plainly and once through
:func:`puppeteer.train.shared_prefix.install_shared_prefix`, alternating ``--reps`` times; the
script prints the median seconds of each, the ratio, and whether the greedy tokens agree.
Conductor: transformers on CPU (an embedded GGUF key, HF id or local directory). Set
``OMP_NUM_THREADS`` yourself.

    OMP_NUM_THREADS=2 python scripts/bench_shared_prefix.py --model qwen2.5-coder-0.5b --k 8 --new 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from puppeteer.env import ConductorEnv
from puppeteer.integrations.trl import conductor_rows, prefixed_rows
from puppeteer.train.conductor_model import ModelSpec, load_conductor_model
from puppeteer.train.shared_prefix import install_shared_prefix

AVAILABLE = ["gpt5-cot", "qwen3-32b-cot", "gemma3-27b-cot", "qwen3-32b-verify"]  # the CPU presets' subset


def _time(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--k", type=int, default=8, help="rows per batch: samples of a group / held-out questions")
    p.add_argument("--new", type=int, default=32, help="new tokens per row (forced: min = max)")
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args(argv)
    plain, tok = load_conductor_model(ModelSpec(id=args.model))
    shared, _ = load_conductor_model(ModelSpec(id=args.model))
    install_shared_prefix(shared)
    pool_env = ConductorEnv(mode="workflow", pool="sim-paper", suite="arith", split="test", n_tasks=args.k)
    names = [a.name for a in pool_env.pool.agents]
    env = ConductorEnv(
        mode="workflow",
        pool=pool_env.pool,
        suite="arith",
        split="test",
        n_tasks=args.k,
        prompt="prompt-v1-short",
        unavailable=[i for i, n in enumerate(names) if n not in AVAILABLE],
    )
    texts = [r["prompt"] for r in prefixed_rows(conductor_rows(env, chat=True), tok, "model_id = [")]
    tok.padding_side = "left"
    common = {"max_new_tokens": args.new, "min_new_tokens": args.new, "pad_token_id": tok.pad_token_id}
    shapes = {
        "group (1 question x k, sampled)": (
            tok([texts[0]] * args.k, return_tensors="pt", padding=True, add_special_tokens=False),
            {"do_sample": True, "temperature": 1.0, "top_k": 0},
        ),
        "held-out (k questions, greedy)": (
            tok(texts, return_tensors="pt", padding=True, add_special_tokens=False),
            {"do_sample": False},
        ),
    }
    report: dict[str, Any] = {"model": args.model, "threads": torch.get_num_threads(), "k": args.k}
    for label, (enc, sampling) in shapes.items():
        seconds: dict[str, list[float]] = {"plain": [], "shared": []}
        outs: dict[str, Any] = {}
        for _ in range(args.reps):
            for name, model in (("plain", plain), ("shared", shared)):
                torch.manual_seed(0)
                with torch.no_grad():
                    dt, outs[name] = _time(lambda m=model: m.generate(**enc, **sampling, **common))
                seconds[name].append(dt)
        med = {k: statistics.median(v) for k, v in seconds.items()}
        report[label] = {
            "prompt_tokens": int(enc["input_ids"].shape[1]),
            "plain_s": med["plain"],
            "shared_s": med["shared"],
            "speedup": med["plain"] / med["shared"],
            "same_tokens": bool(torch.equal(outs["plain"], outs["shared"])) if not sampling["do_sample"] else None,
        }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
