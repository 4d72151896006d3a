"""Decode step time of many sequences: one unified KV cache against one stream per sequence.

The batched engine keeps every sequence in one unified KV cache (``kv_unified=True``), which prefix
sharing across sequences needs; ``llama-server --parallel N`` gives each sequence its own stream.
llama.cpp's CPU flash-attention kernel visits every cell of the unified cache for every query row
and skips the cells of other sequences through the mask, so a step's attention grows with the cells
of all sequences together, not with each sequence's own. This measures what that costs: ``--seqs``
sequences, each prefilled with a ``--ctx``-token prompt (not timed), then ``--steps`` decode steps
that hold the next token of every sequence (timed), with flash attention on, for both layouts.

    python benchmarks/bench_kv_layout.py --seqs 16 --ctx 32 600 MODEL.gguf ...

Standalone (llama-cpp-python and numpy only), like ``bench_cpu_build.py`` whose loader it uses.
Prints one JSON line per (model, context length, layout): milliseconds per decode step.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_cpu_build as base


class LayoutBench(base.Bench):
    """``bench_cpu_build.Bench`` with 1,024 cells a sequence, flash attention and a chosen layout."""

    def __init__(self, path: str, threads: int, n_seq: int, unified: bool) -> None:
        # flash_attn_type 1: LLAMA_FLASH_ATTN_TYPE_ENABLED, the engine's default
        super().__init__(path, threads, 1024 * n_seq, n_seq, True, kv_unified=unified, flash_attn_type=1)

    def step_ms(self, n_seq: int, ctx: int, steps: int) -> float:
        llama_cpp.llama_memory_clear(self.mem, True)
        nxt, pos = [], []
        for s in range(n_seq):  # prefill, not timed
            prompt = self.tokenize(f"Story {s}: " + base.TEXT * 40, ctx)
            for i in range(0, len(prompt), 512):
                chunk = prompt[i : i + 512]
                self.decode([(s, chunk, i)])
            nxt.append(self.argmax(len(chunk) - 1))  # the batch position of the chunk's last token
            pos.append(len(prompt))
        start = time.perf_counter()
        for _ in range(steps):
            self.decode([(s, [nxt[s]], pos[s]) for s in range(n_seq)])
            nxt = [self.argmax(s) for s in range(n_seq)]
            pos = [p + 1 for p in pos]
        return (time.perf_counter() - start) / steps * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--ctx", type=int, nargs="+", default=[32, 600], help="prompt tokens a sequence")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if any(c + args.steps > 1024 for c in args.ctx):
        ap.error("--ctx plus --steps must fit the 1,024 cells of a sequence")
    quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(quiet, None)
    llama_cpp.llama_backend_init()
    for path in args.models:
        for unified in (True, False):
            bench = LayoutBench(path, args.threads, args.seqs, unified)
            try:
                for ctx in args.ctx:
                    ms = bench.step_ms(args.seqs, ctx, args.steps)
                    row = {"model": Path(path).name, "seqs": args.seqs, "ctx": ctx, "unified": unified}
                    print(json.dumps({**row, "ms_per_step": round(ms, 1)}), flush=True)
            finally:
                bench.close()


if __name__ == "__main__":
    main()
