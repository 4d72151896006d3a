"""Embedded llama.cpp backend: runs the GGUF models of :mod:`puppeteer.backends.models` on CPU.

``request.model.target`` is an embedded model key (``qwen2.5-coder-1.5b`` ...). Each
model is loaded lazily, once per backend instance, and shared by every agent that
uses it. A ``Llama`` object is not thread-safe, so calls are serialised per model;
calls to different models run concurrently. Because one ``Llama`` object keeps its
KV cache between calls, a prompt that shares a prefix with the previous prompt on
the same model (a long common system prompt) only evaluates the new suffix.

Options worth knowing:

- ``seed``: sampling uses ``seed + request.sample_index``; greedy decoding
  (``temperature=0``) ignores it.
- ``reuse_prefix`` (default True): keep the KV cache between calls. A reused prefix
  is evaluated in a different batch shape than a fresh prefill, which changes logits
  in the last bits; at ``temperature > 0`` that can change the sampled text. Pass
  ``reuse_prefix=False`` for samples that are bit-reproducible from the seed alone.
- ``batching`` (default True): every model gets one decoding loop
  (:class:`~puppeteer.backends.llamacpp.continuous.ContinuousBatcher`) that serves all pending calls
  in batches, one sequence id per call in one unified KV cache of ``kv_size`` cells (default
  :func:`default_kv_size`: 1,024 a sequence, at least ``2 * n_ctx``), at most ``n_parallel`` at
  once. Prompts, stop strings, ``max_tokens``, seeds, finish reasons and token counts are those
  of the one-at-a-time path; greedy texts agree with it for the first tokens and can then
  diverge (llama.cpp's batched kernels round differently), so accuracy is re-measured in
  docs/benchmarks.md. The loops of all models take turns on one compute lock, so each may use
  every free core: the default ``n_threads`` is the CPUs not busy when the backend is made
  (:func:`default_threads`).
  A completion's ``queue_s`` is the time the call waited for a sequence slot (or KV room) and
  ``latency_s`` the rest of the call (chat template, tokenization, prefill, decoding), so
  ``latency_s`` no longer grows with the queue in front of a call; with ``batching=False``,
  ``queue_s`` is the wait for the model's lock.
  ``batching=False`` is the previous path (one ``create_chat_completion`` at a time per
  model, half the CPUs by default). When ``n_threads`` is more than half the CPUs, its calls
  also take the compute lock, so two models never spin more threads than there are cores.
- ``share_prefix`` (default True, batching with ``reuse_prefix``): calls in flight together
  evaluate their common prompt prefix (a system prompt, the few-shot examples) once; the
  other sequences get its KV cells from the one that evaluated it
  (:class:`~puppeteer.backends.llamacpp.continuous.ContinuousBatcher`).
- ``flash_attn`` (default True): llama.cpp's fused attention kernel, on both paths (so a batch
  of one still runs the one-at-a-time path's kernels). With 16 sequences in one unified cache it
  is what lets the engine match ``llama-server`` (docs/benchmarks.md, "Against llama-server");
  greedy texts differ from ``flash_attn=False`` after the first tokens, as batched ones do.
- ``kv_unified`` (default True): one KV cache that all sequences share, which prefix sharing
  needs; ``False`` gives each of the ``n_parallel`` sequences its own stream of
  ``kv_size / n_parallel`` cells (what ``llama-server --parallel N`` does), and turns sharing off.
- ``extra_buffers``: llama.cpp's extra weight buffer types (AMX, CPU repack). The
  ggml in llama-cpp-python 0.3.36 compiled with ``-march=native`` on an AMX CPU
  crashes with SIGILL in its AMX matmul (tile config bug, ggml-org/llama.cpp PR
  26954), so ``None`` (auto) turns them off when the build reports ``AMX_INT8 = 1``.
- ``cpu_variant``: for a build with runtime CPU dispatch (``-DGGML_BACKEND_DL=ON
  -DGGML_CPU_ALL_VARIANTS=ON``), the CPU backend to load (``icelake``, ``haswell`` ...); ``None``
  lets ggml pick the best for this CPU (:mod:`puppeteer.backends.llamacpp.ggml_dl`). Ignored by builds
  with the CPU backend linked in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.backends.base import SyncBackend
from puppeteer.backends.llamacpp.continuous import ContinuousBatcher
from puppeteer.backends.models import EMBEDDED_MODELS, EmbeddedModel, get_model, model_path
from puppeteer.types import Completion, CompletionRequest

if TYPE_CHECKING:
    from llama_cpp import Llama

log = logging.getLogger(__name__)

# ModelSpec.options keys forwarded to ``create_chat_completion``.
SAMPLING_OPTIONS = frozenset(
    {"top_p", "top_k", "min_p", "typical_p", "repeat_penalty", "presence_penalty", "frequency_penalty"}
)


# Loading a model changes process-wide state for a moment, so loads take turns (``load_llama``):
# - ``Llama.__init__`` (verbose=False) points fds 1 and 2 and ``sys.stdout`` / ``sys.stderr`` at
#   /dev/null while it loads and restores what it saw on entry. Two loads at once in two threads
#   (the batched backend loads each model on first use, from whichever thread asks) interleave so
#   that the later one "restores" /dev/null: every later line of the process's stdout was lost (the
#   quickstart's result table, in about half of the runs with stdout in a file).
# - llama-cpp-python builds its model parameters inside ``Llama.__init__`` and exposes no
#   ``use_extra_bufts`` argument, so the one way to set it is to wrap the defaults factory for the
#   duration of a load (``_extra_buffers_disabled``).
_LOAD_LOCK = threading.Lock()


@contextlib.contextmanager
def _extra_buffers_disabled() -> Iterator[None]:
    """Load without extra buffer types; patches a module attribute, so only under ``_LOAD_LOCK``."""
    import llama_cpp.llama as llama_module

    low = llama_module.llama_cpp
    original = low.llama_model_default_params

    def defaults() -> object:
        params = original()
        params.use_extra_bufts = False
        return params

    low.llama_model_default_params = defaults
    try:
        yield
    finally:
        low.llama_model_default_params = original


def build_has_amx() -> bool:
    """True when the installed llama.cpp was compiled with AMX kernels (``-march=native`` on AMX CPUs)."""
    import llama_cpp

    return "AMX_INT8 = 1" in llama_cpp.llama_print_system_info().decode(errors="replace")


def load_llama(
    path: Path,
    *,
    n_ctx: int,
    n_threads: int,
    n_batch: int = 512,
    seed: int = 0,
    verbose: bool = False,
    extra_buffers: bool | None = None,
    cpu_variant: str | None = None,
    flash_attn: bool = True,
) -> Llama:
    """A ``llama_cpp.Llama`` for ``path`` with the settings the backend uses (see module notes)."""
    from llama_cpp import Llama  # heavy import, only when a model is actually used

    from puppeteer.backends.llamacpp.ggml_dl import ensure_cpu_backend

    cpu = ensure_cpu_backend(cpu_variant)
    if cpu.dynamic:
        log.info("llama.cpp build with runtime CPU dispatch: %s", cpu.describe())

    if extra_buffers is None:
        extra_buffers = not build_has_amx()
        if not extra_buffers:
            log.info(
                "llama.cpp was built with AMX kernels, which crash (SIGILL) in this ggml version; "
                "loading %s without extra buffer types (pass extra_buffers=True to override)",
                path.name,
            )
    with _LOAD_LOCK, contextlib.nullcontext() if extra_buffers else _extra_buffers_disabled():
        return Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            n_batch=n_batch,
            seed=seed,
            verbose=verbose,
            flash_attn=flash_attn,
        )


# KV cells a sequence of the batched engine may hold by default: a call reserves its prompt plus its
# whole budget before it is admitted, and calls of ~450 prompt tokens with a 256-token budget (a chain's
# second step) fitted 11 at a time into the old 2 * n_ctx = 8,192 cells, not 16 (docs/benchmarks.md,
# "Sixteen at a time"). 1,024 is what the comparison with llama-server gives both engines.
KV_CELLS_PER_SEQUENCE = 1024


def default_kv_size(n_ctx: int, n_parallel: int) -> int:
    """KV cells of the batched engine: ``KV_CELLS_PER_SEQUENCE`` a sequence, at least ``2 * n_ctx``."""
    return max(2 * n_ctx, KV_CELLS_PER_SEQUENCE * n_parallel)


def available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def default_threads(batching: bool = False) -> int:
    """Threads for a model: with batching, the cores not busy at load time; else half the CPUs.

    llama.cpp's threads spin at barriers: when more threads run than cores are free (other
    processes, or two models generating at once) a preempted thread stalls all others and
    throughput collapses (measured here: Qwen2.5-Coder-0.5B, 2 threads 0.11-0.14 tok/s vs
    1 thread 3.8-4.1 tok/s on 2 cores at load average ~20; ``benchmarks/bench_threads.py``).
    With batching, all models share one compute lock, so this process never runs two at once;
    the default is then the CPUs minus the busy ones (:func:`busy_cpus`; at least one), which is
    every core on an idle machine and one on a busy one. Without batching it is half the CPUs
    (llama-cpp-python's own default). Pass ``n_threads`` explicitly to override.
    """
    cpus = available_cpus()
    if not batching:
        return max(1, cpus // 2)
    return max(1, min(cpus, round(cpus - busy_cpus())))


def _cpu_times(path: str = "/proc/stat") -> tuple[int, int] | None:
    """(total, idle) jiffies of all CPUs since boot, or None where /proc/stat cannot be read."""
    try:
        with open(path) as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    return sum(fields), fields[3] + fields[4]  # idle + iowait


def busy_cpus(window_s: float = 0.2) -> float:
    """CPUs busy now: the smaller of the 1-minute load average and the busy share measured over
    ``window_s`` from /proc/stat. The load average alone still counts, for a minute, the threads
    of a run that just ended (an earlier evaluation in the same process), and then a new backend
    would take one thread of two; the short measurement alone would mistake a burst for load."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average on this platform
        load = 0.0
    first = _cpu_times()
    if first is None:
        return load
    time.sleep(window_s)
    second = _cpu_times()
    if second is None or second[0] <= first[0]:
        return load
    share = 1.0 - (second[1] - first[1]) / (second[0] - first[0])
    return min(load, max(0.0, share) * (os.cpu_count() or 1))


@dataclass
class _Slot:
    """One model's state: the lock serialising its calls and, once loaded, the Llama (and its batcher)."""

    lock: threading.Lock
    llama: Llama | None = None
    batcher: ContinuousBatcher | None = None
    engine: Any = None


class LlamaCppBackend(SyncBackend):
    """Backend ``llamacpp``: local GGUF models through ``llama_cpp.Llama.create_chat_completion``."""

    name = "llamacpp"

    def __init__(
        self,
        n_threads: int | None = None,
        n_ctx: int = 4096,
        cache_dir: Path | str | None = None,
        seed: int = 0,
        verbose: bool = False,
        n_batch: int = 512,
        extra_buffers: bool | None = None,
        reuse_prefix: bool = True,
        models: Mapping[str, EmbeddedModel] = EMBEDDED_MODELS,
        batching: bool = True,
        n_parallel: int = 16,
        kv_size: int | None = None,
        cpu_variant: str | None = None,
        share_prefix: bool = True,
        flash_attn: bool = True,
        kv_unified: bool = True,
    ) -> None:
        self.batching = batching
        self.flash_attn = flash_attn
        self.kv_unified = kv_unified
        # llama.cpp copies KV cells between streams only whole: sharing a prefix needs one unified cache
        self.share_prefix = share_prefix and kv_unified
        self.cpu_variant = cpu_variant
        self.n_parallel = n_parallel
        self.kv_size = kv_size or default_kv_size(n_ctx, n_parallel)
        self.n_threads = n_threads or default_threads(batching)
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.seed = seed
        self.verbose = verbose
        self.extra_buffers = extra_buffers
        self.reuse_prefix = reuse_prefix
        self._models = models
        self._slots: dict[str, _Slot] = {}
        self._slots_lock = threading.Lock()
        self._compute = threading.Lock()  # one model decodes at a time, with all the threads
        # one-at-a-time path: two models at once would oversubscribe the cores (see default_threads)
        self._exclusive = not batching and 2 * self.n_threads > available_cpus()
        # async callers wait for the decoding loops in these threads (asyncio's default pool is small)
        self._waiters = ThreadPoolExecutor(max_workers=4 * n_parallel, thread_name_prefix="llamacpp-wait")

    # ------------------------------------------------------------------ models

    def _slot(self, key: str) -> _Slot:
        get_model(key, self._models)  # unknown keys fail here, before any lock or load
        with self._slots_lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot(threading.Lock())
            return slot

    def _load(self, key: str) -> Llama:
        path = model_path(key, self.cache_dir, self._models)
        start = time.perf_counter()
        llama = load_llama(
            path,
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            n_batch=self.n_batch,
            seed=self.seed,
            verbose=self.verbose,
            extra_buffers=self.extra_buffers,
            cpu_variant=self.cpu_variant,
            flash_attn=self.flash_attn,
        )
        log.info(
            "loaded %s from %s in %.1fs (%d threads, n_ctx=%d)",
            key,
            path,
            time.perf_counter() - start,
            self.n_threads,
            self.n_ctx,
        )
        return llama

    def llama(self, key: str) -> Llama:
        """The shared ``Llama`` for ``key``, loaded on first use. Use it under :meth:`lock`."""
        slot = self._slot(key)
        with slot.lock:
            if slot.llama is None:
                slot.llama = self._load(key)
            return slot.llama

    def lock(self, key: str) -> threading.Lock:
        """The lock that serialises calls on model ``key``."""
        return self._slot(key).lock

    def batcher(self, key: str) -> tuple[Llama, ContinuousBatcher]:
        """The ``Llama`` for ``key`` and its decoding loop, both started on first use."""
        slot = self._slot(key)
        with slot.lock:
            if slot.llama is None:
                slot.llama = self._load(key)
            if slot.batcher is None:
                from puppeteer.backends.llamacpp.batch import LlamaCppEngine

                slot.engine = LlamaCppEngine(
                    slot.llama,
                    n_seq_max=self.n_parallel,
                    kv_size=self.kv_size,
                    n_ctx=self.n_ctx,
                    n_batch=max(self.n_batch, self.n_parallel),
                    n_threads=self.n_threads,
                    kv_unified=self.kv_unified,
                )
                slot.batcher = ContinuousBatcher(
                    slot.engine,
                    self._compute,
                    name=key,
                    reuse_prefix=self.reuse_prefix,
                    share_prefix=self.share_prefix,
                )
            return slot.llama, slot.batcher

    def loaded(self) -> tuple[str, ...]:
        with self._slots_lock:
            return tuple(k for k, s in self._slots.items() if s.llama is not None)

    def close(self) -> None:
        with self._slots_lock:
            slots = list(self._slots.values())
            self._slots.clear()
        for slot in slots:
            with slot.lock:
                if slot.batcher is not None:
                    slot.batcher.close()
                    slot.engine.close()
                    slot.batcher = slot.engine = None
                if slot.llama is not None:
                    slot.llama.close()
                    slot.llama = None

    # ------------------------------------------------------------------ calls

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return await asyncio.get_running_loop().run_in_executor(self._waiters, self.complete, request)

    def _call_kwargs(self, request: CompletionRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "messages": [m.as_dict() for m in request.messages],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "seed": self.seed + request.sample_index,
            "stop": list(request.stop) or None,
        }
        kwargs.update({k: v for k, v in request.model.options.items() if k in SAMPLING_OPTIONS})
        if request.grammar is not None:
            from llama_cpp import LlamaGrammar

            kwargs["grammar"] = LlamaGrammar.from_string(request.grammar, verbose=False)
        return kwargs

    def complete(self, request: CompletionRequest) -> Completion:
        key = request.model.target
        kwargs = self._call_kwargs(request)
        if self.batching:
            from puppeteer.backends.llamacpp.batch import batched_chat_completion

            llama, batcher = self.batcher(key)
            start = time.perf_counter()
            response = batched_chat_completion(llama, batcher.submit, **kwargs)
            wall = time.perf_counter() - start
            queue = float((response.get("timings") or {}).get("queue_s", 0.0))
            return self._completion(request, response, wall - queue, queue)
        slot = self._slot(key)
        waiting = time.perf_counter()
        with slot.lock, self._compute if self._exclusive else contextlib.nullcontext():
            queue = time.perf_counter() - waiting
            if slot.llama is None:
                slot.llama = self._load(key)
            if not self.reuse_prefix:
                slot.llama.reset()  # full prefill every call: bit-reproducible samples, slower
            start = time.perf_counter()
            response = slot.llama.create_chat_completion(**kwargs)
            latency = time.perf_counter() - start
        return self._completion(request, response, latency, queue)

    @staticmethod
    def _completion(
        request: CompletionRequest, response: Mapping[str, Any], latency: float, queue: float = 0.0
    ) -> Completion:
        key = request.model.target
        text = response["choices"][0]["message"].get("content") or ""
        usage = response.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens", 0))
        completion_tokens = int(usage.get("completion_tokens", 0))
        return Completion(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=request.model.usd(prompt_tokens, completion_tokens),
            flops=request.model.flops(prompt_tokens, completion_tokens),
            latency_s=latency,
            model=key,
            queue_s=queue,
            truncated=response["choices"][0].get("finish_reason") == "length",
        )
