"""Tokens/s of the embedded models: through LlamaCppBackend vs a raw llama_cpp.Llama.

Both sides load the same GGUF with the same settings (threads, n_ctx, n_batch, extra
buffer types) and get the same prompts. Runs are interleaved A/B, then B/A, so drift
in machine load hits both sides alike. Every prompt starts with a fresh nonce, so
no run reuses another's KV cache: prefill numbers are full prefills.

Reported per side (medians over --reps):
  prefill tok/s  llama.cpp's prompt-eval rate on a long prompt
  decode tok/s   llama.cpp's generation rate (tokens after the first)
  e2e tok/s      completion tokens / wall-clock seconds of the whole call
and the backend/raw ratio of each.

    python scripts/bench_local_models.py --reps 5
    python scripts/bench_local_models.py --models smollm2-135m --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import llama_cpp

from puppeteer.backends.llamacpp import LlamaCppBackend, default_threads, load_llama
from puppeteer.backends.models import EMBEDDED_MODELS, model_path
from puppeteer.types import CompletionRequest, Message, ModelSpec

FILLER = ("Agents in a team share notes, check each other's arithmetic and report a final answer. "
          "Each note names the step, the inputs, the result and how it was checked. ")


@dataclass(frozen=True)
class Run:
    prompt_tokens: int
    completion_tokens: int
    wall_s: float
    p_eval_tokens: int
    p_eval_ms: float
    eval_tokens: int
    eval_ms: float


def prefill_messages(words: int) -> list[dict[str, str]]:
    body = (FILLER * (words // len(FILLER.split()) + 1))
    return [{"role": "system", "content": f"Session {uuid.uuid4().hex}. {body}"},
            {"role": "user", "content": "Reply with OK."}]


def decode_messages() -> list[dict[str, str]]:
    nonce = uuid.uuid4().hex[:8]
    return [{"role": "user", "content": f"[{nonce}] Count from 1 to 400, separated by commas."}]


def measured(llm: llama_cpp.Llama, call: Callable[[], tuple[int, int]]) -> Run:
    ctx = llm._ctx.ctx  # llama.cpp's own timers for the context
    llama_cpp.llama_perf_context_reset(ctx)
    start = time.perf_counter()
    prompt_tokens, completion_tokens = call()
    wall = time.perf_counter() - start
    perf = llama_cpp.llama_perf_context(ctx)
    return Run(prompt_tokens, completion_tokens, wall, perf.n_p_eval, perf.t_p_eval_ms, perf.n_eval,
               perf.t_eval_ms)


def via_backend(backend: LlamaCppBackend, key: str) -> Callable[[list[dict[str, str]], int], Run]:
    spec = ModelSpec(name=key, backend="llamacpp", target=key, params_b=EMBEDDED_MODELS[key].params_b)
    llm = backend.llama(key)

    def run(messages: list[dict[str, str]], max_tokens: int) -> Run:
        msgs = tuple(Message(m["role"], m["content"]) for m in messages)
        request = CompletionRequest(model=spec, messages=msgs, max_tokens=max_tokens, temperature=0.0)

        def call() -> tuple[int, int]:
            c = backend.complete(request)
            return c.prompt_tokens, c.completion_tokens

        return measured(llm, call)

    return run


def via_raw(llm: llama_cpp.Llama, seed: int) -> Callable[[list[dict[str, str]], int], Run]:
    def run(messages: list[dict[str, str]], max_tokens: int) -> Run:
        def call() -> tuple[int, int]:
            r = llm.create_chat_completion(messages=messages, max_tokens=max_tokens, temperature=0.0,
                                           seed=seed, stop=None)
            return r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"]

        return measured(llm, call)

    return run


def rates(prefill: list[Run], decode: list[Run]) -> dict[str, float]:
    return {
        "prefill_tok_s": statistics.median(r.p_eval_tokens / (r.p_eval_ms / 1e3) for r in prefill),
        "decode_tok_s": statistics.median(r.eval_tokens / (r.eval_ms / 1e3) for r in decode if r.eval_tokens),
        "e2e_tok_s": statistics.median(r.completion_tokens / r.wall_s for r in decode),
        "prompt_tokens": statistics.median(r.prompt_tokens for r in prefill),
        "completion_tokens": statistics.median(r.completion_tokens for r in decode),
    }


def bench_model(key: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    backend = LlamaCppBackend(n_threads=args.n_threads, n_ctx=args.n_ctx, n_batch=args.n_batch, seed=0)
    raw = load_llama(model_path(key), n_ctx=args.n_ctx, n_threads=backend.n_threads, n_batch=args.n_batch,
                     seed=0, extra_buffers=backend.extra_buffers)
    sides = {"backend": via_backend(backend, key), "raw": via_raw(raw, seed=0)}
    for run in sides.values():  # warm-up: page the weights in, build graphs
        run(decode_messages(), 8)
    runs: dict[str, dict[str, list[Run]]] = {name: {"prefill": [], "decode": []} for name in sides}
    for rep in range(args.reps):
        order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
        for name in order:
            runs[name]["prefill"].append(sides[name](prefill_messages(args.prefill_words), 1))
            runs[name]["decode"].append(sides[name](decode_messages(), args.decode_tokens))
    backend.close()
    raw.close()
    return {name: rates(r["prefill"], r["decode"]) for name, r in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(EMBEDDED_MODELS), help="comma-separated model keys")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--prefill-words", type=int, default=300)
    parser.add_argument("--n-threads", type=int, default=None, help="default: half the CPUs available")
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--n-batch", type=int, default=512)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()

    system = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    threads = args.n_threads or default_threads()
    print(f"llama-cpp-python {llama_cpp.__version__}; threads={threads}; {system}")
    header = f"{'model':<20} {'side':<8} {'prefill tok/s':>13} {'decode tok/s':>12} {'e2e tok/s':>10}"
    print(header)
    print("-" * len(header))
    results: dict[str, dict[str, dict[str, float]]] = {}
    for key in args.models.split(","):
        res = results[key] = bench_model(key, args)
        for side in ("backend", "raw"):
            r = res[side]
            print(f"{key:<20} {side:<8} {r['prefill_tok_s']:>13.1f} {r['decode_tok_s']:>12.1f} "
                  f"{r['e2e_tok_s']:>10.1f}")
        ratio = {m: res["backend"][m] / res["raw"][m] for m in ("prefill_tok_s", "decode_tok_s", "e2e_tok_s")}
        res["ratio"] = ratio
        print(f"{key:<20} {'ratio':<8} {ratio['prefill_tok_s']:>13.3f} {ratio['decode_tok_s']:>12.3f} "
              f"{ratio['e2e_tok_s']:>10.3f}", flush=True)
        print(f"{'':<20} (prompt {res['raw']['prompt_tokens']:.0f} tokens, "
              f"{res['raw']['completion_tokens']:.0f} generated, medians of {args.reps})", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "system": system, "results": results}, fh, indent=2)


if __name__ == "__main__":
    main()
