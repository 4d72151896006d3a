"""Single-stream prefill and decode speed of the embedded models (backend: llamacpp).

The per-item "model seconds" of a batched run are not a property of the agent: a call that shares
a batch with 15 others takes several times longer than alone, and a loaded machine slows every
call. A pool can instead declare each model's single-stream speed (``prefill_tps``, ``decode_tps``
in ``agents/<pool>.yaml``), and every call is then also priced as
``prompt_tokens / prefill_tps + completion_tokens / decode_tps`` seconds: the time the call takes
alone on the machine that measured the rates, whatever batch or load it actually ran under.

This script measures those rates, one model at a time, one request at a time, greedy, on the
threads given (default: every CPU): prefill from a ``max_tokens=1`` request on a long prompt,
decode from the extra time of ``--tokens`` completion tokens on the same prompt, median over
``--reps`` rounds with a fresh nonce each time (no prompt reuse). Run it on an idle machine.

    python scripts/calibrate_local_speed.py --json runs/speed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

from puppeteer.backends.llamacpp import available_cpus, load_llama
from puppeteer.backends.models import EMBEDDED_MODELS, model_path

FILLER = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "Weng earns $12 an hour for babysitting; yesterday she did 50 minutes of babysitting. "
)


def messages(nonce: str, repeat: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"[{nonce}] {FILLER * repeat} Count from 1 to 400, separated by commas."}
    ]


def measure(key: str, threads: int, reps: int, tokens: int, repeat: int) -> dict[str, float]:
    llm = load_llama(model_path(key), n_ctx=2048, n_threads=threads, seed=0)
    llm.create_chat_completion(messages=messages("warm", 1), max_tokens=4, temperature=0.0)
    prefill, decode, prompt_tokens = [], [], 0
    for _ in range(reps):
        msgs = messages(uuid.uuid4().hex[:8], repeat)
        start = time.perf_counter()
        r = llm.create_chat_completion(messages=msgs, max_tokens=1, temperature=0.0)
        t_prefill = time.perf_counter() - start
        prompt_tokens = r["usage"]["prompt_tokens"]
        llm.reset()  # the second request must prefill again, not reuse the first one's KV cache
        start = time.perf_counter()
        r = llm.create_chat_completion(messages=msgs, max_tokens=tokens, temperature=0.0)
        t_full = time.perf_counter() - start
        n_new = r["usage"]["completion_tokens"]
        llm.reset()
        prefill.append(prompt_tokens / t_prefill)
        decode.append((n_new - 1) / max(t_full - t_prefill, 1e-9))
    llm.close()
    return {
        "prefill_tps": round(statistics.median(prefill), 1),
        "decode_tps": round(statistics.median(decode), 1),
        "prompt_tokens": prompt_tokens,
        "threads": threads,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="qwen2.5-coder-1.5b,qwen2.5-coder-0.5b,smollm2-135m")
    p.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: every CPU)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64, help="completion tokens of the decode request")
    p.add_argument("--repeat", type=int, default=6, help="filler repeats in the prompt (~6: ~300 tokens)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    threads = args.threads or available_cpus()
    out = {}
    for key in args.models.split(","):
        if key not in EMBEDDED_MODELS:
            raise SystemExit(f"unknown embedded model {key!r}; known: {', '.join(EMBEDDED_MODELS)}")
        out[key] = measure(key, threads, args.reps, args.tokens, args.repeat)
        print(f"{key}: {json.dumps(out[key])}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
