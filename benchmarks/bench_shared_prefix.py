"""Shared-prefix generation against plain ``generate``, side by side (ratios, not claims).

The two batch shapes a conductor's GRPO run generates: a group (one question's prompt repeated
``--k`` times, sampled) and a held-out batch (``--k`` different questions, greedy). Each is
generated with the same model, prompts, seed and length, once plainly and once through
:func:`puppeteer.train.shared_prefix.install_shared_prefix`, alternating ``--reps`` times; the
script prints the median seconds of each, the ratio, and whether the greedy tokens agree. Then
the training pass of a group (forward + backward of the completion log-probs through trl's fused
LM head): trl's full forward against :func:`~puppeteer.train.shared_prefix.shared_prompt_logps`.
Conductor: transformers on CPU (an embedded GGUF key, HF id or local directory). Set
``OMP_NUM_THREADS`` yourself.

    OMP_NUM_THREADS=2 python benchmarks/bench_shared_prefix.py --model qwen2.5-coder-0.5b --k 8 --new 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from puppeteer.integrations.trl import conductor_rows, prefixed_rows
from puppeteer.train.conductor_model import ModelSpec, load_conductor_model
from puppeteer.train.grpo import GRPOJob
from puppeteer.train.shared_prefix import install_shared_prefix, shared_prompt_logps

AVAILABLE = ("gpt5-cot", "qwen3-32b-cot", "gemma3-27b-cot", "qwen3-32b-verify")  # the CPU presets' subset


def _time(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _alternate(runs: dict[str, Any], reps: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Each run ``reps`` times, alternating, from the same seed: median seconds and the last outputs."""
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    outs: dict[str, Any] = {}
    for _ in range(reps):
        for name, fn in runs.items():
            torch.manual_seed(0)
            dt, outs[name] = _time(fn)
            seconds[name].append(dt)
    return {k: statistics.median(v) for k, v in seconds.items()}, outs


def _training(model: Any, tok: Any, prompt: str, args: argparse.Namespace) -> dict[str, Any]:
    """trl's full forward+backward of a group against the shared-prompt one (trl's fused LM head on both)."""
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids = tok([prompt], return_tensors="pt", add_special_tokens=False)["input_ids"]
    completion = torch.randint(0, len(tok), (args.k, args.train_completion))
    full = torch.cat([ids.repeat(args.k, 1), completion], dim=1)
    mask = torch.ones_like(full)
    c = args.train_completion

    def plain() -> float:
        labels = full.masked_fill(mask == 0, -100)
        labels[:, :-c] = -100
        out = model(input_ids=full, attention_mask=mask, labels=labels, fused_lm_head=True)
        loss = out.log_probs[:, -c:].sum()
        loss.backward()
        return float(loss.detach())

    def shared() -> float:
        logps, _ = shared_prompt_logps(model, full, mask, c)  # type: ignore[misc]
        loss = logps.sum()
        loss.backward()
        return float(loss.detach())

    med, outs = _alternate({"plain": plain, "shared": shared}, args.reps)
    model.zero_grad(set_to_none=True)
    return {
        "tokens": f"{args.k} x ({ids.shape[1]} prompt + {c} completion)",
        "plain_s": med["plain"],
        "shared_s": med["shared"],
        "speedup": med["plain"] / med["shared"],
        "loss_rel_diff": abs(outs["plain"] - outs["shared"]) / max(abs(outs["plain"]), 1e-12),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--k", type=int, default=8, help="rows per batch: samples of a group / held-out questions")
    p.add_argument("--new", type=int, default=32, help="new tokens per row (forced: min = max)")
    p.add_argument("--train-completion", type=int, default=96, help="completion tokens in the training pass")
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args(argv)
    plain, tok = load_conductor_model(ModelSpec(id=args.model))
    shared, _ = load_conductor_model(ModelSpec(id=args.model))
    install_shared_prefix(shared)
    job = GRPOJob(prompt="prompt-v1-short", available=AVAILABLE)  # the CPU presets' prompt and subset
    env = job.env("test", args.k)
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
        runs = {
            name: lambda m=model, e=enc, s=sampling: m.generate(**e, **s, **common)
            for name, model in (("plain", plain), ("shared", shared))
        }
        med, outs = _alternate(runs, args.reps)
        report[label] = {
            "prompt_tokens": int(enc["input_ids"].shape[1]),
            "plain_s": med["plain"],
            "shared_s": med["shared"],
            "speedup": med["plain"] / med["shared"],
            "same_tokens": None
            if sampling["do_sample"]
            else bool(torch.equal(outs["plain"], outs["shared"])),
        }
    report["training forward+backward (group)"] = _training(plain, tok, texts[0], args)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
