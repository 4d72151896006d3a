"""Batched vs one-at-a-time decoding on a real model (SmolLM2-135M through llama.cpp). All slow."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from puppeteer.backends.cache import CachedBackend, request_key
from puppeteer.backends.models import EMBEDDED_MODELS
from puppeteer.types import Completion, CompletionRequest, Message, ModelSpec

pytestmark = pytest.mark.slow

KEY = "smollm2-135m"
SPEC = ModelSpec(name=KEY, backend="llamacpp", target=KEY, params_b=EMBEDDED_MODELS[KEY].params_b)
PROMPTS = [  # (question, max_tokens, stop): answers that end on their own, cut by the budget, cut by a stop
    ("What is 2+2?", 48, ()),
    ("Say hello in one short sentence.", 48, ()),
    ("Name three colors, one per line.", 48, ("\n",)),
    ("Write a long story about a dragon.", 12, ()),
    ("Count from 1 to 30, separated by commas.", 64, (", 7",)),
    ("Explain what a compiler does.", 24, (".",)),
]


def requests() -> list[CompletionRequest]:
    return [
        CompletionRequest(model=SPEC, messages=(Message("user", q),), max_tokens=m, stop=s)
        for q, m, s in PROMPTS
    ]


def backend(batching: bool, **kw: object):
    pytest.importorskip("llama_cpp")
    from puppeteer.backends.llamacpp import LlamaCppBackend

    kw.setdefault("reuse_prefix", False)
    return LlamaCppBackend(n_ctx=1024, batching=batching, **kw)  # type: ignore[arg-type]


def at_once(b, reqs: list[CompletionRequest]) -> list[Completion]:
    async def run() -> list[Completion]:
        return await asyncio.gather(*(b.acomplete(r) for r in reqs))

    return asyncio.run(run())


@pytest.fixture(scope="module")
def sequential() -> list[Completion]:
    b = backend(False)
    try:
        return [b.complete(r) for r in requests()]
    finally:
        b.close()


def check_consistent(c: Completion, r: CompletionRequest) -> None:
    assert c.truncated == (c.completion_tokens == r.max_tokens)
    assert c.completion_tokens <= r.max_tokens and c.prompt_tokens > 0
    assert not any(s in c.text for s in r.stop)


def test_batched_engine_one_at_a_time_reproduces_the_sequential_path(sequential) -> None:
    b = backend(True)
    try:
        got = [b.complete(r) for r in requests()]  # batches of one: the same kernels as the old path
    finally:
        b.close()
    for s, g, r in zip(sequential, got, requests(), strict=True):
        check_consistent(g, r)
        assert (g.text, g.prompt_tokens, g.completion_tokens, g.truncated) == (
            s.text,
            s.prompt_tokens,
            s.completion_tokens,
            s.truncated,
        )
    # the cases the prompts were chosen for
    assert got[3].truncated and got[3].completion_tokens == 12
    assert any(
        not g.truncated and g.completion_tokens < r.max_tokens for g, r in zip(got, requests(), strict=True)
    )


def test_concurrent_calls_batch_and_agree_with_the_sequential_path(sequential) -> None:
    b = backend(True)
    try:
        got = at_once(b, requests())
        stats = b.batcher(KEY)[1].stats
    finally:
        b.close()
    assert stats.max_sequences == len(PROMPTS)  # every request was in one decode call at some point
    same = 0
    for s, g, r in zip(sequential, got, requests(), strict=True):
        check_consistent(g, r)
        assert g.prompt_tokens == s.prompt_tokens  # same chat template and tokenization
        if g.text == s.text:  # batched kernels round differently; where the text agrees, all must
            same += 1
            assert (g.completion_tokens, g.truncated) == (s.completion_tokens, s.truncated)
    assert same >= len(PROMPTS) // 2


def test_the_response_cache_is_shared_between_batched_and_sequential(tmp_path: Path) -> None:
    db = tmp_path / "cache.sqlite"
    reqs = requests()[:3]
    batched = CachedBackend(backend(True), db)
    try:
        first = at_once(batched, reqs)
    finally:
        batched.inner.close()
        batched.close()
    sequential = CachedBackend(backend(False), db)
    try:
        again = [sequential.complete(r) for r in reqs]
        assert sequential.stats.hits == 3 and sequential.stats.misses == 0
    finally:
        sequential.inner.close()
        sequential.close()
    assert [c.text for c in again] == [c.text for c in first] and all(c.cached for c in again)
    assert len({request_key(r) for r in reqs}) == 3


def test_a_failing_request_does_not_lose_the_others() -> None:
    b = backend(True)
    too_long = CompletionRequest(model=SPEC, messages=(Message("user", "word " * 3000),), max_tokens=8)
    reqs = [*requests()[:2], too_long]

    async def run() -> list[object]:
        return await asyncio.gather(*(b.acomplete(r) for r in reqs), return_exceptions=True)

    try:
        out = asyncio.run(run())
    finally:
        b.close()
    assert isinstance(out[2], ValueError) and "exceed context window" in str(out[2])
    assert all(isinstance(c, Completion) and c.text for c in out[:2])


def test_latency_leaves_out_the_wait_for_a_sequence_slot() -> None:
    b = backend(True, n_parallel=1)  # one sequence slot: concurrent calls queue for it
    try:
        got = at_once(b, requests()[:3])
    finally:
        b.close()
    waited = [c for c in got if c.queue_s > 0.0]
    assert len(waited) >= 2  # only the first admitted call found the slot free
    # a call that waited for the slot waited at least for one whole other generation (its prefill and
    # decoding); its own latency_s does not include that wait
    assert max(c.queue_s for c in got) >= min(c.latency_s - 0.05 for c in got)
    assert all(c.latency_s > 0.0 for c in got)


def test_calls_in_flight_together_share_their_system_prompt_and_agree_without_it() -> None:
    system = "You are a terse assistant. Answer in one short sentence and do not explain. " * 4
    questions = ["What is 2+2?", "Name a color.", "Say hello.", "What is the capital of France?"]
    reqs = [
        CompletionRequest(model=SPEC, messages=(Message("system", system), Message("user", q)), max_tokens=24)
        for q in questions
    ]
    runs = {}
    for share in (True, False):
        b = backend(True, reuse_prefix=True, share_prefix=share)
        try:
            runs[share] = (at_once(b, reqs), b.batcher(KEY)[1].stats)
        finally:
            b.close()
    (shared, s_stats), (alone, a_stats) = runs[True], runs[False]
    # the system prompt (~70 tokens) was evaluated once, not four times
    assert s_stats.shared_tokens >= 3 * 60 and a_stats.shared_tokens == 0
    # evaluated = prompt tokens evaluated + every sampled token but each job's last; the texts (and so
    # the sampled counts) may differ, the prompt tokens evaluated differ by exactly the shared ones
    prompt_evaluated = {k: st.tokens - st.sampled + st.jobs for k, st in ((True, s_stats), (False, a_stats))}
    assert prompt_evaluated[False] - prompt_evaluated[True] == s_stats.shared_tokens
    assert prompt_evaluated[False] == sum(a.prompt_tokens for a in alone)  # nothing was reused there
    same = 0
    for s, a, r in zip(shared, alone, reqs, strict=True):
        check_consistent(s, r)
        assert s.prompt_tokens == a.prompt_tokens
        same += s.text == a.text
    assert same >= len(reqs) // 2  # shared KV cells are the same numbers, up to batched rounding
