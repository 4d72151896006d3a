"""Single-stream prefill and decode speed of the embedded models (backend: llamacpp), the job behind
``puppeteer pool calibrate``.

The per-item "model seconds" of a batched run are not a property of the agent: a call that shares
a batch with 15 others takes several times longer than alone, and a loaded machine slows every
call. A pool can instead declare each model's single-stream speed (``prefill_tps``, ``decode_tps``
in ``agents/<pool>.yaml``), and every call is then also priced as
``prompt_tokens / prefill_tps + completion_tokens / decode_tps`` seconds: the time the call takes
alone on the machine that measured the rates, whatever batch or load it actually ran under.

:func:`measure` measures those rates for one model, one request at a time, greedy, on the threads
given: prefill from a ``max_tokens=1`` request on a long prompt, decode from the extra time of
``tokens`` completion tokens on the same prompt, median over ``reps`` rounds with a fresh nonce each
time (no prompt reuse). Run it on an idle machine.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from puppeteer.errors import UserError

DEFAULT_MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m")

FILLER = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "Weng earns $12 an hour for babysitting; yesterday she did 50 minutes of babysitting. "
)


def messages(nonce: str, repeat: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"[{nonce}] {FILLER * repeat} Count from 1 to 400, separated by commas."}
    ]


def measure(key: str, threads: int, reps: int, tokens: int, repeat: int) -> dict[str, float]:
    """``prefill_tps`` and ``decode_tps`` (medians over ``reps``) of embedded model ``key``, with the
    prompt's length in tokens and the threads it ran on."""
    from puppeteer.backends.llamacpp import load_llama
    from puppeteer.backends.models import model_path

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


def calibrate(
    models: Sequence[str] = DEFAULT_MODELS,
    threads: int | None = None,
    reps: int = 3,
    tokens: int = 64,
    repeat: int = 6,
    out: str | Path | None = None,
    on_model: Callable[[str, dict[str, float]], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Measure each embedded model in turn (``threads``: every CPU unless given); ``on_model`` sees
    each result as it comes; ``out``: also write them all as JSON. Unknown keys fail before any load."""
    from puppeteer.backends.llamacpp import available_cpus
    from puppeteer.backends.models import EMBEDDED_MODELS

    unknown = [m for m in models if m not in EMBEDDED_MODELS]
    if unknown:
        raise UserError(f"unknown embedded model {unknown[0]!r}; known: {', '.join(EMBEDDED_MODELS)}")
    # decode speed is timed over the tokens after the first: it needs at least two
    for name, value, least in (("reps", reps, 1), ("tokens", tokens, 2), ("repeat", repeat, 1)):
        if value < least:
            raise UserError(f"--{name} {value}: at least {least}")
    if threads is not None and threads < 0:
        raise UserError(f"--threads {threads}: a number of threads (0 or none: every CPU)")
    n_threads = threads or available_cpus()
    results: dict[str, dict[str, Any]] = {}
    for key in models:
        results[key] = measure(key, n_threads, reps, tokens, repeat)
        if on_model is not None:
            on_model(key, results[key])
    if out is not None:
        Path(out).write_text(json.dumps(results, indent=2))
    return results
