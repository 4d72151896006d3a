"""fp32 against bf16 autocast for the conductor's GRPO work on CPU, side by side (ratios, not claims).

One GRPO step is generation (k sampled completions of one prompt) plus a forward and backward
pass over the k prompt+completion sequences. This times both for the same model, prompt and
shapes under ``torch.float32`` and under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (fp32
weights, bf16 matmuls: oneDNN uses AMX/AVX-512-BF16 where the CPU has them), and reports the
ratio and the max absolute difference of the mean token log-probability. Set ``OMP_NUM_THREADS``.

    OMP_NUM_THREADS=1 python benchmarks/bench_conductor_dtype.py --model smollm2-135m --k 8 --new 64
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch

from puppeteer.envs.env import ConductorEnv
from puppeteer.integrations.trl import conductor_rows
from puppeteer.train.conductor_model import ModelSpec, load_conductor_model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--k", type=int, default=8, help="completions per prompt (GRPO group)")
    p.add_argument("--new", type=int, default=64, help="new tokens generated / completion length trained")
    args = p.parse_args(argv)
    model, tok = load_conductor_model(ModelSpec(id=args.model))
    env = ConductorEnv(mode="workflow", pool="sim-paper", suite="arith", split="train", n_tasks=1)
    prompt = tok.apply_chat_template(
        conductor_rows(env, chat=True)[0]["prompt"], tokenize=False, add_generation_prompt=True
    )
    enc = tok([prompt], return_tensors="pt", add_special_tokens=False)
    report: dict[str, object] = {
        "model": args.model,
        "threads": torch.get_num_threads(),
        "prompt_tokens": int(enc["input_ids"].shape[1]),
        "k": args.k,
        "new": args.new,
    }
    seqs = None
    for name in ("float32", "bf16-autocast"):
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if name != "float32" else contextlib.nullcontext()
        with ctx:
            torch.manual_seed(0)
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(
                    **enc,
                    do_sample=True,
                    num_return_sequences=args.k,
                    max_new_tokens=args.new,
                    min_new_tokens=args.new,
                    pad_token_id=tok.pad_token_id,
                )
            gen_s = time.perf_counter() - t0
            seqs = out if seqs is None else seqs  # train both on the same sequences
            model.zero_grad()
            t0 = time.perf_counter()
            logits = model(input_ids=seqs).logits[:, -args.new - 1 : -1].float()
            logp = torch.log_softmax(logits, -1).gather(-1, seqs[:, -args.new :, None]).mean()
            logp.backward()
            train_s = time.perf_counter() - t0
        report[name] = {
            "generate_s": round(gen_s, 2),
            "forward_backward_s": round(train_s, 2),
            "mean_logp": float(logp),
        }
        print(json.dumps({name: report[name]}), flush=True)
    f32, b16 = report["float32"], report["bf16-autocast"]
    assert isinstance(f32, dict) and isinstance(b16, dict)
    report["speedup_generate"] = round(f32["generate_s"] / b16["generate_s"], 2)
    report["speedup_forward_backward"] = round(f32["forward_backward_s"] / b16["forward_backward_s"], 2)
    report["logp_abs_diff"] = abs(f32["mean_logp"] - b16["mean_logp"])
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
