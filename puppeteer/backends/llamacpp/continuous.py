"""Continuous batching: one decoding loop per model serves every pending generation.

A :class:`ContinuousBatcher` owns one model context (an :class:`Engine`) and one thread.
Callers :meth:`~ContinuousBatcher.submit` a :class:`GenerationJob` (prompt tokens, budget,
stop strings, sampling settings) and get a ``concurrent.futures.Future``. The loop gives each
admitted job its own sequence id in the engine's shared (unified) KV cache and, every step,
decodes one batch that holds the next token of every generating sequence plus as many
prompt tokens of newly admitted sequences as fit in ``n_batch`` (chunked prefill). Jobs are
admitted and retired as they start and finish; each one samples from its own sampler.

What a job returns follows llama-cpp-python 0.3.36's one-at-a-time completion loop
(``Llama._create_completion``) token for token: an end-of-generation token stops with
``"stop"`` and is not counted, the text is re-detokenized after every token, an incomplete
UTF-8 character defers the stop-string check, the first stop string found cuts the text,
``max_tokens`` stops with ``"length"``, and the budget is clipped to the context size.

Prefix reuse (``reuse_prefix=True``): a sequence slot keeps its tokens in the KV cache after
its job ends; a new job goes to the free slot whose kept tokens share the longest prefix
with its prompt, and only the rest of the prompt is evaluated (what llama.cpp's server does).

Prefix sharing across sequences (``share_prefix=True``, with ``reuse_prefix``): before a
prefilling job evaluates its next chunk, the KV cells of the longest prefix of its prompt that
any other sequence has already evaluated are copied to it (``Engine.seq_cp``; in llama.cpp's
unified cache the cells are shared, not duplicated), and a job waits while an earlier
prefilling job is still evaluating at least ``min_share`` tokens of the same prefix. Jobs that
arrive together with one system prompt (an eval's items, a vote's members, a group of plans)
therefore evaluate it once instead of once per sequence.

Timing: every result carries ``queue_s`` (submitted -> admitted to a sequence slot: the wait for a
free slot or KV room) and ``run_s`` (admitted -> finished: prefill, decoding, and turns waiting for
the compute lock that batchers of other models share), measured with the batcher's ``clock``.

Admission control: a job reserves ``prompt + budget`` KV cells; it waits while the reservations
of running jobs and the kept prefixes (evicted first) leave no room, so decoding never runs
out of cache. A job that fails (bad prompt, sampler error, a decode that fails even alone)
gets its exception; the other jobs of the batch go on.

The engine is a :class:`typing.Protocol` so the scheduling logic is tested with a fake one;
:mod:`puppeteer.backends.llamacpp.batch` implements it with llama.cpp's ``llama_batch``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Protocol

log = logging.getLogger(__name__)

StoppingCriteria = Callable[[Sequence[int]], bool]


class DecodeError(RuntimeError):
    """``Engine.decode`` failed for a batch (llama.cpp's non-zero ``llama_decode`` status)."""


@dataclass(frozen=True)
class SamplingParams:
    """Sampler settings of one job; the defaults are llama-cpp-python's ``create_completion`` ones."""

    temperature: float = 0.0
    seed: int = 0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    grammar: str | None = None  # GBNF text: the sampler keeps the completion inside it


@dataclass(frozen=True)
class GenerationJob:
    prompt: tuple[int, ...]
    max_tokens: int
    stop: tuple[bytes, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    # called with the tokens evaluated so far before each new token is used (llama-cpp-python's
    # ``stopping_criteria`` minus the logits); True ends the job with finish reason "stop"
    stopping_criteria: StoppingCriteria | None = None


@dataclass(frozen=True)
class GenerationResult:
    text: bytes
    prompt_tokens: int
    completion_tokens: tuple[int, ...]
    finish_reason: str  # "stop" | "length"
    reused_prefix: int  # prompt tokens whose KV entries came from an earlier or a concurrent job
    queue_s: float = 0.0  # submitted -> admitted to a sequence slot
    run_s: float = 0.0  # admitted -> finished


@dataclass(frozen=True)
class BatchEntry:
    """Tokens of one sequence in one decode call, at positions ``pos0 ..``; logits for the last if asked."""

    seq: int
    tokens: tuple[int, ...]
    pos0: int
    logits: bool


class Sampler(Protocol):
    def sample(self, index: int) -> int:
        """A token from the logits of batch position ``index`` of the last decode (and accept it)."""
        ...

    def close(self) -> None: ...


class Engine(Protocol):
    """One model context with ``n_seq_max`` sequences sharing ``kv_size`` KV cells."""

    n_seq_max: int
    kv_size: int
    n_batch: int
    n_ctx: int  # longest sequence (prompt + completion) one job may use

    def decode(self, entries: Sequence[BatchEntry]) -> None: ...

    def seq_rm(self, seq: int, start: int) -> None:
        """Forget positions ``start ..`` of sequence ``seq``."""
        ...

    def seq_cp(self, src: int, dst: int, start: int, end: int) -> None:
        """Give sequence ``dst`` the KV cells of positions ``start .. end - 1`` of sequence ``src``."""
        ...

    def new_sampler(self, params: SamplingParams) -> Sampler: ...

    def is_eog(self, token: int) -> bool: ...

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int]) -> bytes: ...


@dataclass(frozen=True)
class BatcherStats:
    steps: int = 0
    tokens: int = 0  # tokens evaluated (prompt + generated)
    sampled: int = 0  # tokens sampled
    max_sequences: int = 0  # most sequences in one decode call
    jobs: int = 0
    failed: int = 0
    reused_tokens: int = 0  # prompt tokens not evaluated: kept in the job's slot or shared by another
    shared_tokens: int = 0  # of those, the ones copied from another sequence

    @property
    def mean_sequences(self) -> float:
        return self.sampled / self.steps if self.steps else 0.0


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class _Generation:
    """One job's text state, updated token by token exactly like llama-cpp-python's loop."""

    def __init__(self, job: GenerationJob, engine: Engine) -> None:
        self.job = job
        self.engine = engine
        self.completion: list[int] = []
        self.text = b""
        self.finish_reason: str | None = None
        self._multibyte_fix = 0
        self.max_tokens = job.max_tokens if job.max_tokens > 0 else engine.n_ctx - len(job.prompt)
        if self.max_tokens + len(job.prompt) >= engine.n_ctx:
            self.max_tokens = engine.n_ctx - len(job.prompt)

    def _detokenize(self) -> bytes:
        return self.engine.detokenize(self.completion, self.job.prompt)

    def criteria_stop(self, evaluated: Sequence[int]) -> bool:
        crit = self.job.stopping_criteria
        if crit is not None and crit(evaluated):
            self.text, self.finish_reason = self._detokenize(), "stop"
            return True
        return False

    def push(self, token: int) -> bool:
        """Take one sampled token; True when the generation is over."""
        if self.engine.is_eog(token):
            self.text, self.finish_reason = self._detokenize(), "stop"
            return True
        self.completion.append(token)
        all_text = self._detokenize()
        for k, char in enumerate(all_text[-3:]):  # an incomplete multi-byte UTF-8 character at the end
            k = 3 - k
            for num, pattern in ((2, 192), (3, 224), (4, 240)):
                if num > k and pattern & char == pattern:
                    self._multibyte_fix = num - k
        if self._multibyte_fix > 0:
            self._multibyte_fix -= 1
            return False
        found = [s for s in self.job.stop if s in all_text]
        if found:
            self.text, self.finish_reason = all_text[: all_text.index(found[0])], "stop"
            return True
        if len(self.completion) >= self.max_tokens:
            self.text, self.finish_reason = all_text, "length"
            return True
        return False


@dataclass
class _Slot:
    """A sequence id: the tokens its KV cells hold and, while busy, its job."""

    seq: int
    history: list[int] = field(default_factory=list)
    job: GenerationJob | None = None
    future: Future[GenerationResult] | None = None
    gen: _Generation | None = None
    sampler: Sampler | None = None
    pending: list[int] = field(default_factory=list)  # tokens still to evaluate
    reserved: int = 0
    reused: int = 0
    queue_s: float = 0.0  # how long the running job waited before admission
    admitted_at: float = 0.0

    @property
    def busy(self) -> bool:
        return self.job is not None


class ContinuousBatcher:
    """The decoding loop of one model. Thread-safe ``submit``; ``close`` stops the loop.

    ``compute_lock`` is held around every decode and sampling call: batchers of different
    models that share one lock take turns, so each can use all the threads without the
    models oversubscribing the cores. ``clock`` (seconds, monotonic) times queueing and running.
    """

    def __init__(
        self,
        engine: Engine,
        compute_lock: threading.Lock | None = None,
        name: str = "model",
        reuse_prefix: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        share_prefix: bool = True,
        min_share: int = 16,
    ) -> None:
        if engine.kv_size < engine.n_ctx:
            raise ValueError(f"kv_size {engine.kv_size} must be at least n_ctx {engine.n_ctx}")
        if min_share < 1:
            raise ValueError(f"min_share must be at least 1, got {min_share}")
        self.engine = engine
        self.name = name
        self.reuse_prefix = reuse_prefix
        self.share_prefix = share_prefix and reuse_prefix
        self.min_share = min_share
        self._clock = clock
        self._compute = compute_lock or threading.Lock()
        self._cv = threading.Condition()
        self._queue: deque[tuple[GenerationJob, Future[GenerationResult], float]] = deque()
        self._slots = [_Slot(i) for i in range(engine.n_seq_max)]
        self._closed = False
        self._stats = BatcherStats()
        self._thread = threading.Thread(target=self._run, name=f"decode-{name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public

    def submit(self, job: GenerationJob) -> Future[GenerationResult]:
        future: Future[GenerationResult] = Future()
        if not job.prompt:
            future.set_exception(ValueError("empty prompt"))
            return future
        if len(job.prompt) >= self.engine.n_ctx:
            future.set_exception(
                ValueError(
                    f"Requested tokens ({len(job.prompt)}) exceed context window of {self.engine.n_ctx}"
                )
            )
            return future
        with self._cv:
            if self._closed:
                raise RuntimeError(f"the decoding loop of {self.name} is closed")
            self._queue.append((job, future, self._clock()))
            self._cv.notify()
        return future

    @property
    def stats(self) -> BatcherStats:
        with self._cv:
            return self._stats

    def close(self, timeout: float | None = None) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout)

    # ------------------------------------------------------------------ loop

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and not self._queue and not any(s.busy for s in self._slots):
                    self._cv.wait()
                if self._closed:
                    dropped = list(self._queue)
                    self._queue.clear()
                    break
                admitted = self._admit()
            for slot in admitted:
                self._start(slot)
            try:
                self._step()
            except Exception as e:  # a bug in the loop itself: fail the running jobs, keep serving
                log.exception("decoding loop of %s failed", self.name)
                for slot in self._slots:
                    if slot.busy:
                        self._fail(slot, e)
        error = RuntimeError(f"the decoding loop of {self.name} was closed")
        for _, fut, _ in dropped:
            fut.set_exception(error)
        for slot in self._slots:
            if slot.busy:
                self._fail(slot, error)

    def _kv_used(self) -> int:
        return sum(s.reserved if s.busy else len(s.history) for s in self._slots)

    def _admit(self) -> list[_Slot]:
        """Move queued jobs into free slots while their reservations fit (caller holds ``_cv``)."""
        admitted: list[_Slot] = []
        while self._queue:
            job, future, submitted = self._queue[0]
            if future.cancelled():
                self._queue.popleft()
                continue
            free = [s for s in self._slots if not s.busy]
            if not free:
                break
            slot = max(free, key=lambda s: (common_prefix(s.history, job.prompt), -len(s.history)))
            keep = min(common_prefix(slot.history, job.prompt), len(job.prompt) - 1)
            if not self.reuse_prefix:
                keep = 0
            budget = job.max_tokens if job.max_tokens > 0 else self.engine.n_ctx
            # +4: a split UTF-8 character can defer the budget check by up to 3 tokens
            reserve = min(len(job.prompt) + budget + 4, self.engine.n_ctx)
            need = reserve - len(slot.history)  # the slot's own kept tokens are freed or reused
            others = sorted((s for s in free if s is not slot and s.history), key=lambda s: len(s.history))
            while self._kv_used() + need > self.engine.kv_size and others:
                victim = others.pop(0)
                self.engine.seq_rm(victim.seq, 0)
                victim.history.clear()
            if self._kv_used() + need > self.engine.kv_size:
                break  # wait for running jobs to finish
            self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            self.engine.seq_rm(slot.seq, keep)
            del slot.history[keep:]
            slot.job, slot.future, slot.reserved, slot.reused = job, future, reserve, keep
            slot.admitted_at = self._clock()
            slot.queue_s = slot.admitted_at - submitted
            slot.pending = list(job.prompt[keep:])
            admitted.append(slot)
        return admitted

    def _start(self, slot: _Slot) -> None:
        assert slot.job is not None
        try:
            slot.gen = _Generation(slot.job, self.engine)
            slot.sampler = self.engine.new_sampler(slot.job.sampling)
        except Exception as e:
            self._fail(slot, e)

    def _batch(self) -> list[tuple[_Slot, BatchEntry]]:
        """Next token of every generating sequence, then prompt chunks up to ``n_batch`` tokens."""
        busy = [s for s in self._slots if s.busy]
        entries: list[tuple[_Slot, BatchEntry]] = []
        room = self.engine.n_batch
        generating = [s for s in busy if len(s.pending) == 1 and s.gen is not None and s.gen.completion]
        prefilling = [s for s in busy if s not in generating]
        if self.share_prefix:
            prefilling = self._share(prefilling)
        for slot in generating + prefilling:
            if room <= 0:
                break
            take = slot.pending[:room]
            done = len(take) == len(slot.pending)
            entries.append((slot, BatchEntry(slot.seq, tuple(take), len(slot.history), done)))
            room -= len(take)
        return entries

    def _share(self, prefilling: list[_Slot]) -> list[_Slot]:
        """Copy already-evaluated prefixes into prefilling slots; hold back slots whose prefix an
        earlier one is still evaluating. Returns the slots that evaluate prompt tokens this step."""
        go: list[_Slot] = []
        for slot in prefilling:
            job = slot.job
            assert job is not None
            limit = len(job.prompt) - 1  # the last prompt token is evaluated here, for its logits
            have = len(slot.history)
            donor = max(
                (s for s in self._slots if s is not slot),
                key=lambda s: common_prefix(s.history, job.prompt),
                default=None,
            )
            upto = 0 if donor is None else min(common_prefix(donor.history, job.prompt), limit)
            if donor is not None and upto > have:
                try:  # this loop is the only user of the engine's context: no lock needed
                    self.engine.seq_cp(donor.seq, slot.seq, have, upto)
                except Exception as e:
                    log.warning("sharing a prefix on %s failed (%s); evaluating it", self.name, e)
                else:
                    slot.history.extend(job.prompt[have:upto])
                    del slot.pending[: upto - have]
                    slot.reused += upto - have
                    with self._cv:
                        st = self._stats
                        self._stats = replace(st, shared_tokens=st.shared_tokens + upto - have)
                    have = upto
            if not any(self._will_evaluate(o, job.prompt[:limit], have) for o in go):
                go.append(slot)
        return go

    def _will_evaluate(self, leader: _Slot, prefix: Sequence[int], have: int) -> bool:
        """Whether ``leader`` (prefilling) has still to evaluate ``min_share`` or more tokens of
        ``prefix`` beyond the first ``have``: then waiting for it beats evaluating them again."""
        assert leader.job is not None
        shared = common_prefix(leader.job.prompt, prefix)
        return shared - have >= self.min_share and len(leader.history) < shared

    def _commit(
        self, entries: Sequence[tuple[_Slot, BatchEntry]]
    ) -> tuple[list[tuple[_Slot, int]], list[tuple[_Slot, Exception]]]:
        """After a successful decode of ``entries``: record the tokens, sample where logits were asked."""
        sampled: list[tuple[_Slot, int]] = []
        failed: list[tuple[_Slot, Exception]] = []
        index = 0
        for slot, entry in entries:
            index += len(entry.tokens)
            slot.history.extend(entry.tokens)
            del slot.pending[: len(entry.tokens)]
            if entry.logits:
                assert slot.sampler is not None
                try:
                    sampled.append((slot, slot.sampler.sample(index - 1)))
                except Exception as e:
                    failed.append((slot, e))
        return sampled, failed

    def _decode_alone(
        self, entries: Sequence[tuple[_Slot, BatchEntry]]
    ) -> tuple[list[tuple[_Slot, int]], list[tuple[_Slot, Exception]]]:
        """The batch failed: retry each sequence alone; the ones that fail alone fail."""
        sampled: list[tuple[_Slot, int]] = []
        failed: list[tuple[_Slot, Exception]] = []
        for slot, entry in entries:
            try:
                with self._compute:
                    self.engine.decode([entry])
                    s, f = self._commit([(slot, entry)])
                sampled += s
                failed += f
            except Exception as e:
                self.engine.seq_rm(entry.seq, entry.pos0)
                failed.append((slot, e))
        return sampled, failed

    def _step(self) -> None:
        entries = self._batch()
        if not entries:
            return
        try:
            with self._compute:
                self.engine.decode([e for _, e in entries])
                sampled, failed = self._commit(entries)
        except Exception as e:
            for _, entry in entries:
                self.engine.seq_rm(entry.seq, entry.pos0)
            if len(entries) == 1:
                sampled, failed = [], [(entries[0][0], e)]
            else:
                log.warning(
                    "decode of %d sequences on %s failed (%s); retrying them one by one",
                    len(entries),
                    self.name,
                    e,
                )
                sampled, failed = self._decode_alone(entries)
        for slot, error in failed:
            self._fail(slot, error)
        for slot, token in sampled:
            try:
                self._advance(slot, token)
            except Exception as e:
                self._fail(slot, e)
        evaluated = sum(len(e.tokens) for s, e in entries if s.busy or s.history)
        with self._cv:
            s = self._stats
            self._stats = replace(
                s,
                steps=s.steps + 1,
                tokens=s.tokens + evaluated,
                sampled=s.sampled + len(sampled),
                max_sequences=max(s.max_sequences, len(entries) - len(failed)),
            )

    def _advance(self, slot: _Slot, token: int) -> None:
        gen = slot.gen
        assert gen is not None
        if gen.criteria_stop(slot.history) or gen.push(token):
            self._finish(slot)
        elif len(slot.history) + 1 >= self.engine.n_ctx:  # no room for one more token
            gen.text, gen.finish_reason = gen._detokenize(), "length"
            self._finish(slot)
        else:
            slot.pending = [token]

    def _finish(self, slot: _Slot) -> None:
        gen, future = slot.gen, slot.future
        assert gen is not None and future is not None and gen.finish_reason is not None
        gen.criteria_stop(slot.history)  # llama-cpp-python checks the criteria once more at the end
        result = GenerationResult(
            gen.text,
            len(gen.job.prompt),
            tuple(gen.completion),
            gen.finish_reason,
            slot.reused,
            queue_s=slot.queue_s,
            run_s=self._clock() - slot.admitted_at,
        )
        self._release(slot)
        with self._cv:
            s = self._stats
            self._stats = replace(s, jobs=s.jobs + 1, reused_tokens=s.reused_tokens + result.reused_prefix)
        future.set_result(result)

    def _fail(self, slot: _Slot, error: BaseException) -> None:
        future = slot.future
        log.warning(
            "generation on %s (sequence %d) failed: %s: %s", self.name, slot.seq, type(error).__name__, error
        )
        try:
            self.engine.seq_rm(slot.seq, 0)
        except Exception:  # pragma: no cover - the engine is already broken
            log.exception("could not clear sequence %d", slot.seq)
        slot.history.clear()
        self._release(slot)
        with self._cv:
            s = self._stats
            self._stats = replace(s, failed=s.failed + 1)
        if future is not None and not future.done():
            future.set_exception(error)

    def _release(self, slot: _Slot) -> None:
        if slot.sampler is not None:
            try:
                slot.sampler.close()
            except Exception:  # pragma: no cover
                log.exception("closing a sampler failed")
        slot.job = slot.future = slot.gen = slot.sampler = None
        slot.pending = []
        slot.reserved = slot.reused = 0
        slot.queue_s = slot.admitted_at = 0.0
