"""Decode speed of raw llama-cpp-python with 1 thread vs all CPUs, alternating (backend: llamacpp).

Shows the cost of oversubscription: llama.cpp threads spin at barriers, so on a busy machine
more threads can be far slower. Prints tokens/s per run and the 1-minute load average.

    python benchmarks/bench_threads.py --model qwen2.5-coder-0.5b --rounds 2
"""

from __future__ import annotations

import argparse
import os
import time

from puppeteer.backends.llamacpp import available_cpus, load_llama
from puppeteer.backends.models import model_path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=24)
    args = parser.parse_args()
    path = model_path(args.model)
    question = [{"role": "user", "content": "Count from 1 to 100, separated by commas."}]
    for _ in range(args.rounds):
        for threads in sorted({1, available_cpus()}):
            llm = load_llama(path, n_ctx=512, n_threads=threads)
            llm.create_chat_completion(
                messages=[{"role": "user", "content": "hi"}], max_tokens=2, temperature=0
            )  # warm-up
            start = time.perf_counter()
            r = llm.create_chat_completion(messages=question, max_tokens=args.tokens, temperature=0, seed=0)
            rate = r["usage"]["completion_tokens"] / (time.perf_counter() - start)
            print(
                f"{args.model}: {threads} threads {rate:.2f} tok/s (load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )
            llm.close()


if __name__ == "__main__":
    main()
