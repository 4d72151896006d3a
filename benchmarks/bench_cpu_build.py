"""Prefill and decode speed of one llama-cpp-python build: for comparing CPU builds side by side.

Standalone (needs only ``llama_cpp`` and ``numpy``), so the same file runs in venvs with
different builds of llama-cpp-python. One process measures one build on the given GGUF files
with llama.cpp's low-level API (2 threads by default, greedy, one context with a unified KV cache):

  prefill      tokens/s of one ``llama_decode`` of a ``--prompt``-token prompt
  decode b=1   tokens/s of one sequence generating ``--tokens`` tokens, one decode per token
  decode b=B   aggregate tokens/s of B sequences generating ``--tokens`` tokens each, one decode
               per step holding the next token of every sequence (B in ``--batches``)

Each figure is the median of ``--reps`` repetitions. Prints one JSON object (also written to
``--json``): the build's ``llama_print_system_info()``, the CPU backend variant it loaded, and the
figures per model. Builds made with ``-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON`` ship their
CPU backends as ``libggml-cpu-<variant>.so`` files that llama-cpp-python 0.3.36 does not load
(abetlen/llama-cpp-python#2069): ``--variant auto`` loads ggml's choice for this CPU,
``--variant NAME`` loads ``libggml-cpu-NAME.so`` (``puppeteer/backends/llamacpp/ggml_dl.py``, loaded by
file path so this script needs nothing of the project). Run it alternately from each venv:

    /work/venv-dl/bin/python benchmarks/bench_cpu_build.py --variant auto MODEL.gguf ...
    .venv/bin/python benchmarks/bench_cpu_build.py MODEL.gguf ...
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

TEXT = (
    "The history of computing is a story of abstraction. Early machines were programmed by rewiring "
    "panels; stored programs replaced the wires with numbers, assemblers replaced the numbers with "
    "mnemonics, and compilers replaced the mnemonics with expressions that a person could read. "
)


def load_ggml_dl() -> Any:
    """``puppeteer/backends/llamacpp/ggml_dl.py`` by file path: it needs only ctypes and llama_cpp, not the
    project."""
    path = Path(__file__).resolve().parents[1] / "puppeteer" / "backends" / "llamacpp" / "ggml_dl.py"
    spec = importlib.util.spec_from_file_location("ggml_dl", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ggml_dl"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class Bench:
    def __init__(
        self,
        path: str,
        threads: int,
        n_ctx: int,
        n_seq: int,
        extra_buffers: bool,
        *,
        kv_unified: bool = True,
        flash_attn_type: int | None = None,  # None: llama.cpp's default (auto)
    ) -> None:
        mparams = llama_cpp.llama_model_default_params()
        if not extra_buffers:
            mparams.use_extra_bufts = False
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
        if not self.model:
            raise SystemExit(f"could not load {path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = 512
        cparams.n_seq_max = n_seq
        cparams.kv_unified = kv_unified
        if flash_attn_type is not None:
            cparams.flash_attn_type = flash_attn_type
        cparams.n_threads = cparams.n_threads_batch = threads
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(512, 0, 1)

    def tokenize(self, text: str, n: int) -> list[int]:
        raw = text.encode()
        buf = (llama_cpp.llama_token * (len(raw) + 8))()
        k = llama_cpp.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), True, False)
        return list(buf[:k])[:n]

    def decode(self, rows: list[tuple[int, list[int], int]]) -> None:
        """rows: (sequence id, tokens, first position); logits for the last token of each row."""
        b, n = self.batch, 0
        for seq, tokens, pos0 in rows:
            for j, tok in enumerate(tokens):
                b.token[n], b.pos[n], b.n_seq_id[n] = tok, pos0 + j, 1
                b.seq_id[n][0] = seq
                b.logits[n] = j == len(tokens) - 1
                n += 1
        b.n_tokens = n
        if llama_cpp.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")

    def argmax(self, index: int) -> int:
        logits = llama_cpp.llama_get_logits_ith(self.ctx, index)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(self.n_vocab,))))

    def prefill(self, n_prompt: int) -> float:
        tokens = self.tokenize(TEXT * 40, n_prompt)
        llama_cpp.llama_memory_clear(self.mem, True)
        start = time.perf_counter()
        self.decode([(0, tokens, 0)])
        return len(tokens) / (time.perf_counter() - start)

    def generate(self, n_seq: int, n_tokens: int) -> float:
        llama_cpp.llama_memory_clear(self.mem, True)
        prompts = [self.tokenize(f"Story {s}: " + TEXT, 48) for s in range(n_seq)]
        nxt, pos = [], []
        for s, p in enumerate(prompts):  # prefill, not timed
            self.decode([(s, p, 0)])
            nxt.append(self.argmax(len(p) - 1))
            pos.append(len(p))
        start = time.perf_counter()
        for _ in range(n_tokens):
            self.decode([(s, [nxt[s]], pos[s]) for s in range(n_seq)])
            nxt = [self.argmax(s) for s in range(n_seq)]
            pos = [p + 1 for p in pos]
        return n_seq * n_tokens / (time.perf_counter() - start)

    def close(self) -> None:
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)


def median_of(reps: int, fn: Callable[[], float]) -> float:
    return round(statistics.median(fn() for _ in range(reps)), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="GGUF files")
    ap.add_argument("--variant", default="auto", help="BACKEND_DL builds: auto or a variant (icelake ...)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batches", default="4", help="comma-separated batch sizes besides 1")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--extra-buffers",
        choices=("auto", "on", "off"),
        default="auto",
        help="AMX / repacked weight buffers; auto: off when the CPU backend has AMX kernels, as "
        "puppeteer's llamacpp backend does (they crash in this ggml version)",
    )
    ap.add_argument("--label", default="")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)  # llama.cpp's load chatter
    llama_cpp.llama_log_set(quiet, None)
    llama_cpp.llama_backend_init()
    loaded = load_ggml_dl().ensure_cpu_backend(None if args.variant == "auto" else args.variant).describe()
    batches = [int(b) for b in args.batches.split(",") if b]
    info = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    extra = {"on": True, "off": False}.get(args.extra_buffers, "AMX_INT8 = 1" not in info)
    out: dict[str, Any] = {
        "label": args.label,
        "python": sys.executable,
        "llama_cpp": llama_cpp.__version__,
        "cpu_backend": loaded,
        "system_info": info,
        "threads": args.threads,
        "extra_buffers": extra,
        "models": {},
    }
    for path in args.models:
        bench = Bench(path, args.threads, 4096, max([1, *batches]), extra)
        try:
            row = {
                "prefill": median_of(args.reps, lambda b=bench: b.prefill(args.prompt)),
                "decode_b1": median_of(args.reps, lambda b=bench: b.generate(1, args.tokens)),
            }
            for n in batches:
                row[f"decode_b{n}"] = median_of(args.reps, lambda b=bench, n=n: b.generate(n, args.tokens))
        finally:
            bench.close()
        out["models"][Path(path).name] = row
        print(json.dumps({Path(path).name: row}), file=sys.stderr, flush=True)
    text = json.dumps(out)
    print(text, flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
