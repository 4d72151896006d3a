"""The continuous batcher on a fake engine: batching, stop handling, budgets, failures, KV accounting."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future

import pytest

from puppeteer.backends.llamacpp.continuous import (
    BatchEntry,
    ContinuousBatcher,
    DecodeError,
    GenerationJob,
    GenerationResult,
    SamplingParams,
)

SEP = 900  # prompt = question bytes, SEP, scripted reply tokens, SEP
EOG = 1000
POISON = 666  # a prompt holding this token makes any decode that contains it fail
BAD_SEED = -7  # a job with this seed gets a sampler that raises


class FakeEngine:
    """A 'model' that replies with the tokens scripted in the prompt, then an end-of-generation token.

    It checks what a real KV cache needs: every sequence is fed at the next free position and
    the cells in use never exceed ``kv_size``.
    """

    def __init__(
        self,
        n_seq_max: int = 4,
        kv_size: int = 4096,
        n_batch: int = 64,
        n_ctx: int = 512,
        gate: threading.Event | None = None,
    ) -> None:
        self.n_seq_max, self.kv_size, self.n_batch, self.n_ctx = n_seq_max, kv_size, n_batch, n_ctx
        self.kv: dict[int, list[int]] = {i: [] for i in range(n_seq_max)}
        self.rows: dict[int, list[int]] = {}  # batch index -> context that produced its logits
        self.batches: list[tuple[int, ...]] = []  # sequence ids of each successful decode
        self.evaluated = 0
        self.max_cells = 0
        self.gate = gate  # decoding waits for it, so tests can queue jobs first
        self.copied = 0  # KV cells copied between sequences (seq_cp)

    def decode(self, entries: Sequence[BatchEntry]) -> None:
        if self.gate is not None:
            self.gate.wait()
        assert sum(len(e.tokens) for e in entries) <= self.n_batch
        assert len({e.seq for e in entries}) == len(entries)
        if any(POISON in e.tokens for e in entries):
            raise DecodeError("poisoned batch")
        rows, index = {}, 0
        for e in entries:
            assert e.pos0 == len(self.kv[e.seq]), "tokens must go to the next free position"
            self.kv[e.seq].extend(e.tokens)
            index += len(e.tokens)
            if e.logits:
                rows[index - 1] = list(self.kv[e.seq])
        cells = sum(len(v) for v in self.kv.values())
        assert cells <= self.kv_size, f"{cells} KV cells in use > {self.kv_size}"
        self.max_cells = max(self.max_cells, cells)
        self.rows = rows
        self.batches.append(tuple(e.seq for e in entries))
        self.evaluated += index

    def seq_rm(self, seq: int, start: int) -> None:
        del self.kv[seq][start:]

    def seq_cp(self, src: int, dst: int, start: int, end: int) -> None:
        assert src != dst and len(self.kv[dst]) == start, "a copy must continue the sequence"
        assert end <= len(self.kv[src]), "only evaluated cells can be copied"
        self.kv[dst].extend(self.kv[src][start:end])  # counted twice here; llama.cpp shares them
        self.copied += end - start

    def new_sampler(self, params: SamplingParams) -> FakeSampler:
        if params.seed == BAD_SEED:
            return FakeSampler(self, fail=True)
        return FakeSampler(self)

    def is_eog(self, token: int) -> bool:
        return token == EOG

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int]) -> bytes:
        return bytes(tokens)

    @staticmethod
    def next_token(context: list[int]) -> int:
        first = context.index(SEP)
        second = context.index(SEP, first + 1)
        reply = context[first + 1 : second]
        produced = len(context) - second - 1
        return reply[produced] if produced < len(reply) else EOG


class FakeSampler:
    def __init__(self, engine: FakeEngine, fail: bool = False) -> None:
        self.engine, self.fail, self.closed = engine, fail, False

    def sample(self, index: int) -> int:
        if self.fail:
            raise RuntimeError("sampler exploded")
        return self.engine.next_token(self.engine.rows[index])

    def close(self) -> None:
        self.closed = True


def prompt(question: bytes, reply: bytes | Sequence[int]) -> tuple[int, ...]:
    return (*question, SEP, *reply, SEP)


def job(
    question: bytes,
    reply: bytes | Sequence[int],
    max_tokens: int = 64,
    stop: tuple[bytes, ...] = (),
    seed: int = 0,
) -> GenerationJob:
    return GenerationJob(prompt(question, reply), max_tokens, stop, SamplingParams(seed=seed))


@pytest.fixture
def gated():
    """A batcher whose engine waits until the test opens the gate (so all jobs are queued first)."""
    gate = threading.Event()
    engine = FakeEngine(gate=gate)
    batcher = ContinuousBatcher(engine, name="fake")
    yield engine, batcher, gate
    gate.set()
    batcher.close(timeout=5)


def results(futures: Sequence[Future[GenerationResult]]) -> list[GenerationResult]:
    return [f.result(timeout=10) for f in futures]


def test_concurrent_jobs_decode_in_one_batch_and_each_gets_its_own_reply(gated) -> None:
    engine, batcher, gate = gated
    futures = [batcher.submit(job(f"q{i}".encode(), f"answer {i}!".encode())) for i in range(4)]
    gate.set()
    out = results(futures)
    assert [r.text for r in out] == [f"answer {i}!".encode() for i in range(4)]
    assert all(r.finish_reason == "stop" for r in out)  # ended by the end-of-generation token
    # the end-of-generation token is not counted
    assert [len(r.completion_tokens) for r in out] == [len(f"answer {i}!") for i in range(4)]
    assert [r.prompt_tokens for r in out] == [
        len(prompt(f"q{i}".encode(), f"answer {i}!".encode())) for i in range(4)
    ]
    assert max(len(b) for b in engine.batches) == 4  # all four sequences shared decode calls
    assert batcher.stats.jobs == 4 and batcher.stats.max_sequences == 4
    # 4 prompts + 9 decode steps, not 4 x (1 + 9) one-at-a-time calls
    assert batcher.stats.steps <= 1 + len("answer 0!")


def test_stop_string_cuts_text_and_counts_the_tokens_generated(gated) -> None:
    _, batcher, gate = gated
    gate.set()
    r = batcher.submit(job(b"q", b"42 STOP and more", stop=(b"STOP", b"more"))).result(timeout=10)
    assert r.text == b"42 " and r.finish_reason == "stop"
    # like llama-cpp-python: the tokens up to the one that completed the stop string
    assert len(r.completion_tokens) == len(b"42 STOP")


def test_max_tokens_ends_with_length(gated) -> None:
    _, batcher, gate = gated
    gate.set()
    r = batcher.submit(job(b"q", b"a long reply", max_tokens=4)).result(timeout=10)
    assert r.text == b"a lo" and r.finish_reason == "length" and len(r.completion_tokens) == 4


def test_budget_is_clipped_to_the_context(gated) -> None:
    engine, batcher, gate = gated
    gate.set()
    reply = bytes(range(65, 91)) * 12  # prompt + reply exceed n_ctx
    p = prompt(b"q", reply)
    r = batcher.submit(GenerationJob(p, 10_000)).result(timeout=10)
    assert r.finish_reason == "length" and len(r.completion_tokens) == engine.n_ctx - len(p)


def test_prompt_longer_than_context_fails_alone(gated) -> None:
    engine, batcher, gate = gated
    too_long = batcher.submit(GenerationJob(tuple([65] * engine.n_ctx), 8))
    fine = batcher.submit(job(b"q", b"ok"))
    gate.set()
    with pytest.raises(ValueError, match="exceed context window"):
        too_long.result(timeout=10)
    assert fine.result(timeout=10).text == b"ok"


def test_incomplete_utf8_defers_the_stop_and_length_checks(gated) -> None:
    _, batcher, gate = gated
    gate.set()
    reply = "abé!".encode()  # é is two tokens; after the first, llama-cpp-python skips both checks once
    stopped = batcher.submit(job(b"q", reply, stop=(b"b\xc3",))).result(timeout=10)
    assert stopped.text == b"a" and stopped.finish_reason == "stop" and len(stopped.completion_tokens) == 4
    cut = batcher.submit(job(b"q", reply, max_tokens=3)).result(timeout=10)
    assert cut.text == "abé".encode() and cut.finish_reason == "length" and len(cut.completion_tokens) == 4


def test_a_failing_request_does_not_lose_the_others(gated) -> None:
    engine, batcher, gate = gated
    good = [batcher.submit(job(f"q{i}".encode(), f"reply {i}".encode())) for i in range(2)]
    poisoned = batcher.submit(GenerationJob((*b"q", POISON, SEP, *b"xx", SEP), 16))
    bad_sampler = batcher.submit(job(b"qs", b"never", seed=BAD_SEED))
    gate.set()
    with pytest.raises(DecodeError, match="poisoned"):
        poisoned.result(timeout=10)
    with pytest.raises(RuntimeError, match="sampler exploded"):
        bad_sampler.result(timeout=10)
    assert [f.result(timeout=10).text for f in good] == [b"reply 0", b"reply 1"]
    assert batcher.stats.failed == 2 and batcher.stats.jobs == 2
    assert any(len(b) == 1 for b in engine.batches)  # the failed batch was retried one sequence at a time
    # the loop keeps serving after failures
    assert batcher.submit(job(b"again", b"fine")).result(timeout=10).text == b"fine"


def test_more_jobs_than_sequences_wait_for_a_free_slot(gated) -> None:
    engine, batcher, gate = gated
    futures = [batcher.submit(job(f"q{i}".encode(), f"r{i}".encode())) for i in range(10)]
    gate.set()
    assert [r.text for r in results(futures)] == [f"r{i}".encode() for i in range(10)]
    assert max(len(b) for b in engine.batches) == engine.n_seq_max


def test_reservations_never_overflow_the_kv_cache() -> None:
    gate = threading.Event()
    engine = FakeEngine(n_seq_max=4, kv_size=120, n_ctx=100, gate=gate)
    batcher = ContinuousBatcher(engine)
    try:
        futures = [
            batcher.submit(job(f"question {i}".encode(), f"reply {i}".encode(), max_tokens=30))
            for i in range(6)
        ]
        gate.set()
        assert [r.text for r in results(futures)] == [f"reply {i}".encode() for i in range(6)]
        assert engine.max_cells <= 120
        # each job reserves prompt + budget (~50 cells): at most two ran at once
        assert max(len(b) for b in engine.batches) <= 2
    finally:
        batcher.close(timeout=5)


def test_a_later_job_reuses_the_kv_prefix_of_an_earlier_one() -> None:
    engine = FakeEngine()
    batcher = ContinuousBatcher(engine)
    try:
        system = b"You are a careful agent. " * 3
        first = batcher.submit(job(system + b"Q1", b"one")).result(timeout=10)
        before = engine.evaluated
        second = batcher.submit(job(system + b"Q2", b"two")).result(timeout=10)
        assert first.reused_prefix == 0
        assert second.reused_prefix == len(system) + 1  # the shared text and the "Q"
        assert second.text == b"two"
        assert engine.evaluated - before == len(prompt(system + b"Q2", b"two")) - second.reused_prefix + 3
    finally:
        batcher.close(timeout=5)


def test_prefix_reuse_can_be_turned_off() -> None:
    engine = FakeEngine()
    batcher = ContinuousBatcher(engine, reuse_prefix=False)
    try:
        batcher.submit(job(b"same prompt", b"a")).result(timeout=10)
        again = batcher.submit(job(b"same prompt", b"a")).result(timeout=10)
        assert again.reused_prefix == 0 and again.text == b"a"
    finally:
        batcher.close(timeout=5)


def test_long_prompts_are_prefilled_in_chunks_next_to_running_decodes() -> None:
    gate = threading.Event()
    engine = FakeEngine(n_batch=16, gate=gate)
    batcher = ContinuousBatcher(engine)
    try:
        short = batcher.submit(job(b"s", b"short reply here"))
        long = batcher.submit(job(b"x" * 60, b"long"))
        gate.set()
        assert short.result(timeout=10).text == b"short reply here"
        assert long.result(timeout=10).text == b"long"
        assert len(engine.batches) > 4  # 64 prompt tokens cannot go in one 16-token batch
    finally:
        batcher.close(timeout=5)


def test_stopping_criteria_sees_the_evaluated_tokens(gated) -> None:
    _, batcher, gate = gated
    gate.set()
    p = prompt(b"q", b"abcdef")
    seen: list[int] = []

    def criteria(tokens: Sequence[int]) -> bool:
        seen.append(len(tokens))
        return tokens[-1] == ord("c")  # stop once "c" has been evaluated

    r = batcher.submit(GenerationJob(p, 32, stopping_criteria=criteria)).result(timeout=10)
    assert r.text == b"abc" and r.finish_reason == "stop" and len(r.completion_tokens) == 3
    assert seen[0] == len(p)


def test_close_fails_queued_jobs_and_refuses_new_ones() -> None:
    gate = threading.Event()
    engine = FakeEngine(n_seq_max=1, gate=gate)
    batcher = ContinuousBatcher(engine)
    futures = [batcher.submit(job(f"q{i}".encode(), b"r")) for i in range(3)]
    closer = threading.Thread(target=batcher.close)
    closer.start()
    gate.set()
    closer.join(5)
    errors = [f.exception(timeout=5) for f in futures]
    assert any(isinstance(e, RuntimeError) for e in errors)
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(job(b"late", b"r"))


def test_kv_size_below_context_is_rejected() -> None:
    with pytest.raises(ValueError, match="kv_size"):
        ContinuousBatcher(FakeEngine(kv_size=100, n_ctx=200))


class StepClock:
    """A clock the test advances by hand (here: one second per decode call)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_queue_wait_and_model_time_are_timed_apart() -> None:
    gate = threading.Event()
    engine = FakeEngine(n_seq_max=1, gate=gate)
    clock = StepClock()
    decode = engine.decode

    def timed_decode(entries: Sequence[BatchEntry]) -> None:
        decode(entries)
        clock.now += 1.0

    engine.decode = timed_decode  # type: ignore[method-assign]
    batcher = ContinuousBatcher(engine, clock=clock)
    try:
        # one sequence slot: the second job waits until the first has finished
        first, second = (batcher.submit(job(f"q{i}".encode(), b"ab")) for i in range(2))
        gate.set()
        a, b = results([first, second])
    finally:
        batcher.close(timeout=5)
    # each job: one prefill decode, then decodes of "a" and "b" (the third sample is end-of-generation)
    assert (a.queue_s, a.run_s) == (0.0, 3.0)
    assert (b.queue_s, b.run_s) == (3.0, 3.0)  # waited for the whole of the first job; ran as long
    assert a.text == b.text == b"ab"


SYSTEM = b"You are one of several careful agents; think, then answer. " * 2  # 118 tokens


@pytest.mark.parametrize("n_batch", [512, 16])  # one prefill chunk, or many
def test_jobs_in_flight_together_evaluate_their_common_prefix_once(n_batch: int) -> None:
    def run(share: bool) -> tuple[list[GenerationResult], FakeEngine, ContinuousBatcher]:
        gate = threading.Event()
        engine = FakeEngine(n_seq_max=4, n_batch=n_batch, gate=gate)
        batcher = ContinuousBatcher(engine, share_prefix=share)
        try:
            jobs = [job(SYSTEM + f"Q{i}".encode(), f"reply {i}".encode()) for i in range(4)]
            futures = [batcher.submit(j) for j in jobs]
            gate.set()
            return results(futures), engine, batcher
        finally:
            batcher.close(timeout=5)

    shared, eng_s, b_s = run(True)
    alone, eng_a, _ = run(False)
    assert [r.text for r in shared] == [r.text for r in alone] == [f"reply {i}".encode() for i in range(4)]
    common = len(SYSTEM) + 1  # the system prompt and the "Q"
    assert eng_a.evaluated - eng_s.evaluated == 3 * common  # three of four sequences copied it
    assert eng_s.copied == 3 * common and b_s.stats.shared_tokens == 3 * common
    assert sorted(r.reused_prefix for r in shared) == [0, common, common, common]
    assert all(r.reused_prefix == 0 for r in alone)
    assert max(len(b) for b in eng_s.batches) == 4  # after the shared prefill all four decode together


def test_a_job_waiting_for_a_shared_prefix_goes_on_when_its_leader_fails() -> None:
    gate = threading.Event()
    engine = FakeEngine(n_seq_max=2, gate=gate)
    batcher = ContinuousBatcher(engine)
    try:
        # the first job (the one that would evaluate the system prompt) fails in its first decode
        leader = batcher.submit(GenerationJob((*SYSTEM, POISON, SEP, ord("x"), SEP), 16))
        follower = batcher.submit(job(SYSTEM + b"B", b"fine"))
        gate.set()
        with pytest.raises(DecodeError):
            leader.result(timeout=10)
        assert follower.result(timeout=10).text == b"fine"
    finally:
        batcher.close(timeout=5)


def test_a_new_job_copies_the_prefix_a_running_job_has_evaluated() -> None:
    gate = threading.Event()
    engine = FakeEngine(n_seq_max=2)
    batcher = ContinuousBatcher(engine)
    try:
        long_reply = b"a long reply that keeps the first sequence busy for a while"
        first = batcher.submit(job(SYSTEM + b"Q1", long_reply))
        while engine.evaluated == 0:  # the first job's prompt is in the cache
            gate.wait(0.001)
        second = batcher.submit(job(SYSTEM + b"Q2", b"short")).result(timeout=10)
        assert first.result(timeout=10).text == long_reply
        assert second.text == b"short" and second.reused_prefix == len(SYSTEM) + 1
    finally:
        batcher.close(timeout=5)


def test_a_short_common_prefix_is_not_worth_waiting_for() -> None:
    gate = threading.Event()
    engine = FakeEngine(n_seq_max=2, gate=gate)
    batcher = ContinuousBatcher(engine, min_share=16)
    try:
        # 13 tokens in common ("Hello, agent "): both prefill in the first decode, neither waits
        futures = [batcher.submit(job(b"Hello, agent " + bytes([65 + i]) * 30, b"ok")) for i in range(2)]
        gate.set()
        assert [r.text for r in results(futures)] == [b"ok", b"ok"]
        assert engine.batches[0] == (0, 1) and engine.copied == 0
    finally:
        batcher.close(timeout=5)
    with pytest.raises(ValueError, match="min_share"):
        ContinuousBatcher(FakeEngine(), min_share=0)


@pytest.mark.parametrize(("kv_size", "most"), [(None, 16), (2 * 4096, 11)])
def test_sixteen_chain_steps_run_at_once_in_the_default_kv_cache(kv_size: int | None, most: int) -> None:
    """16 calls of ~450 prompt tokens and a 256-token budget (a chain's second step) each reserve
    ~710 cells: the engine's default KV size runs all 16 at once; the old 2 * n_ctx ran 11."""
    from puppeteer.backends.llamacpp import default_kv_size

    gate = threading.Event()
    size = default_kv_size(4096, 16) if kv_size is None else kv_size
    engine = FakeEngine(n_seq_max=16, kv_size=size, n_batch=512, n_ctx=4096, gate=gate)
    batcher = ContinuousBatcher(engine)
    try:
        # replies long enough that the first calls still decode while the last ones prefill
        replies = [f"reply {i:02d} ".encode() * 4 for i in range(16)]
        futures = [batcher.submit(job(bytes([65 + i]) * 446, replies[i], max_tokens=256)) for i in range(16)]
        gate.set()
        assert [r.text for r in results(futures)] == replies
        assert max(len(b) for b in engine.batches) == most
    finally:
        batcher.close(timeout=5)


def test_default_kv_size_gives_each_sequence_1024_cells_and_two_contexts_at_least() -> None:
    from puppeteer.backends.llamacpp import default_kv_size

    assert default_kv_size(4096, 16) == 16 * 1024
    assert default_kv_size(4096, 1) == 2 * 4096  # a long call still fits beside another
    assert default_kv_size(32768, 16) == 2 * 32768
