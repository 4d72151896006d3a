from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from puppeteer.backends.litellm_backend import LiteLLMBackend, LiteLLMCallError
from puppeteer.types import CompletionRequest, Message, ModelSpec

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-test-SECRET-0123456789abcdef"


@dataclass
class FakeServer:
    """An OpenAI-compatible /v1/chat/completions endpoint on 127.0.0.1 (real HTTP, fixed reply)."""

    fail_first: int = 0
    status_on_fail: int = 500
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    port: int = 0

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def _handler(state: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            state.requests.append({"path": self.path, **body})
            state.headers.append({k.lower(): v for k, v in self.headers.items()})
            if len(state.requests) <= state.fail_first:
                payload = json.dumps({"error": {"message": "temporary failure", "type": "server_error"}})
                self._send(state.status_on_fail, payload.encode())
                return
            if self.path != "/v1/chat/completions":
                self._send(404, b'{"error": {"message": "not found"}}')
                return
            n = len(state.requests)
            reply = {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 1700000000,
                "model": body.get("model", "?"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": f"The answer is 84. (call {n})"},
                    }
                ],
                "usage": {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40},
            }
            self._send(200, json.dumps(reply).encode())

        def _send(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@pytest.fixture
def server() -> Iterator[FakeServer]:
    state = FakeServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def local_spec(**options: Any) -> ModelSpec:
    return ModelSpec(
        name="local",
        backend="litellm",
        target="openai/tiny-local",
        params_b=1.5,
        price_in=1.0,
        price_out=2.0,
        options=options,
    )


def request(spec: ModelSpec, **kw: Any) -> CompletionRequest:
    return CompletionRequest(
        model=spec, messages=(Message("system", "Be brief."), Message("user", "What is 12*7?")), **kw
    )


OFFLINE_PROBE = """
import socket, sys
attempts = []
LOCAL = ("127.0.0.1", "::1", "localhost")
real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo
def connect(self, addr, *a):
    if not (isinstance(addr, tuple) and addr[0] in LOCAL):
        attempts.append(addr)
        raise OSError("network denied by test")
    return real_connect(self, addr, *a)
def getaddrinfo(host, *a, **k):
    if host not in LOCAL:
        attempts.append(host)
        raise socket.gaierror("dns denied by test")
    return real_getaddrinfo(host, *a, **k)
socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo
import puppeteer.backends.litellm_backend as m
from puppeteer.types import CompletionRequest, Message, ModelSpec
backend = m.LiteLLMBackend(api_key="x", num_retries=0)
assert "litellm" not in sys.modules, "litellm imported at package import or construction"
spec = ModelSpec(name="m", backend="litellm", target="gpt-4o-mini", params_b=8.0,
                 options={"mock_response": "offline ok"})
c = backend.complete(CompletionRequest(model=spec, messages=(Message("user", "hi"),)))
assert "litellm" in sys.modules
print(c.text, "|", attempts)
"""


def test_import_is_lazy_and_mock_calls_stay_offline() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITELLM")}
    out = subprocess.run(
        [sys.executable, "-c", OFFLINE_PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "offline ok | []"  # no connection or DNS attempt at all


def test_mock_response_offline() -> None:
    spec = ModelSpec(
        name="mini",
        backend="litellm",
        target="gpt-4o-mini",
        params_b=8.0,
        options={"mock_response": "It is 84."},
    )
    backend = LiteLLMBackend(num_retries=0)
    completion = backend.complete(request(spec, max_tokens=20))
    assert completion.text == "It is 84."
    assert completion.prompt_tokens > 0 and completion.completion_tokens > 0
    assert completion.flops == spec.flops(completion.prompt_tokens, completion.completion_tokens)
    # gpt-4o-mini is in litellm's bundled price map: a positive price although the spec says 0
    assert completion.cost_usd is not None and 0 < completion.cost_usd < 0.01
    assert os.environ["LITELLM_OFFLINE_MODE"] == "true"


def test_mock_response_async() -> None:
    spec = ModelSpec(
        name="mini",
        backend="litellm",
        target="gpt-4o-mini",
        params_b=8.0,
        options={"mock_response": "async 84"},
    )
    completions = asyncio.run(_gather(LiteLLMBackend(num_retries=0), spec, 3))
    assert [c.text for c in completions] == ["async 84"] * 3


async def _gather(backend: LiteLLMBackend, spec: ModelSpec, n: int) -> list[Any]:
    return await asyncio.gather(*(backend.acomplete(request(spec, sample_index=i)) for i in range(n)))


def test_real_http_roundtrip(server: FakeServer) -> None:
    backend = LiteLLMBackend(num_retries=0, timeout=10, api_base=server.api_base, api_key=SECRET)
    spec = local_spec()
    completion = backend.complete(request(spec, max_tokens=33, temperature=0.3, stop=("\n\n", "END")))
    assert completion.text == "The answer is 84. (call 1)"
    assert (completion.prompt_tokens, completion.completion_tokens) == (31, 9)
    assert completion.cost_usd == pytest.approx(spec.usd(31, 9))  # unknown to litellm: the spec's prices
    assert completion.cost_usd == pytest.approx((31 * 1.0 + 9 * 2.0) / 1e6)
    assert completion.latency_s > 0
    (sent,) = server.requests
    assert sent["path"] == "/v1/chat/completions"
    assert sent["model"] == "tiny-local"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 12*7?"},
    ]
    assert sent["max_tokens"] == 33 and sent["temperature"] == 0.3 and sent["stop"] == ["\n\n", "END"]
    assert server.headers[0].get("authorization") == f"Bearer {SECRET}"


def test_real_http_async_and_options_override(server: FakeServer) -> None:
    backend = LiteLLMBackend(num_retries=0, timeout=10, api_base="http://127.0.0.1:9/unused", api_key="wrong")
    spec = local_spec(api_base=server.api_base, api_key=SECRET, seed=100)
    completions = asyncio.run(_gather(backend, spec, 3))
    assert sorted(c.text for c in completions) == [f"The answer is 84. (call {i})" for i in (1, 2, 3)]
    assert sorted(r["seed"] for r in server.requests) == [100, 101, 102]  # seed + sample_index
    assert {h.get("authorization") for h in server.headers} == {f"Bearer {SECRET}"}


def test_api_key_from_env_var(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUPPETEER_TEST_KEY", SECRET)
    backend = LiteLLMBackend(num_retries=0, timeout=10)
    spec = local_spec(api_base=server.api_base, api_key_env="PUPPETEER_TEST_KEY")
    backend.complete(request(spec))
    assert server.headers[0].get("authorization") == f"Bearer {SECRET}"
    assert "api_key_env" not in server.requests[0]
    monkeypatch.delenv("PUPPETEER_TEST_KEY")
    with pytest.raises(LiteLLMCallError, match="PUPPETEER_TEST_KEY"):
        backend.complete(request(spec))


def test_litellm_retries_transient_server_errors(server: FakeServer) -> None:
    server.fail_first = 1
    backend = LiteLLMBackend(num_retries=2, timeout=10, api_base=server.api_base, api_key=SECRET)
    completion = backend.complete(request(local_spec()))
    assert completion.text == "The answer is 84. (call 2)"
    assert len(server.requests) == 2


def test_errors_and_logs_never_show_the_key(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    server.fail_first = 10
    server.status_on_fail = 401
    caplog.set_level(logging.DEBUG)
    backend = LiteLLMBackend(num_retries=0, timeout=10, api_base=server.api_base, api_key=SECRET)
    assert SECRET not in repr(backend)
    with pytest.raises(LiteLLMCallError) as info:
        backend.complete(request(local_spec()))
    assert "tiny-local" in str(info.value)
    assert SECRET not in str(info.value)
    assert SECRET not in caplog.text
    assert "api_key': '***'" in caplog.text  # the debug line was emitted, redacted
