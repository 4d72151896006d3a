"""The served router: Orchestrator, `puppeteer run --policy`, and the OpenAI-compatible endpoint."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from puppeteer.backends.sim import SimBackend
from puppeteer.cli import main
from puppeteer.serving.orchestrator import Orchestrator, UnknownToSimulator
from puppeteer.tasks import load_suite

pytestmark = pytest.mark.integration

ITEMS = load_suite("arith", "test", n=8)


def test_orchestrator_answers_a_suite_item_like_the_evaluation() -> None:
    from puppeteer.evaluation.evaluate import evaluate_policy

    with Orchestrator.load("vote:3", "sim-paper", suite="arith") as orch:
        results = [orch.answer(t.question) for t in ITEMS]
    ev = evaluate_policy("vote:3", "sim-paper", "arith", n=8, progress=False)
    assert [r.task_id for r in results] == [t.id for t in ITEMS]
    assert sum(bool(r.correct) for r in results) == ev.correct
    assert all(r.calls == 3 and len(r.steps) == 3 for r in results)
    mean_usd = sum(r.cost_usd for r in results) / len(results)
    assert mean_usd == pytest.approx(ev.mean_usd) and mean_usd > 0
    assert all(r.prompt_tokens > 0 and r.completion_tokens > 0 for r in results)


def test_orchestrator_runs_step_policies_and_free_questions() -> None:
    with Orchestrator.load("random-step", "sim-paper", max_steps=3, suite="arith") as orch:
        result = orch.answer(load_suite("arith", "test")[0].question)
        assert 1 <= result.calls <= 3 and result.text and result.correct is not None
        # issue 33: a simulated pool knows only its suite's answers; it used to answer "unknown" and
        # charge every call for any other question
        with pytest.raises(UnknownToSimulator, match="simulated"):
            orch.answer("What is the capital of France?")
    free = Orchestrator.load("random-step", "sim-paper", max_steps=3, backend=SimBackend())
    result = free.answer("What is the capital of France?")  # a backend given by the caller decides
    assert result.correct is None and result.task_id.startswith("free/") and result.calls >= 1
    with pytest.raises(ValueError, match="empty"):
        Orchestrator.load("single:0", "sim-paper").answer("   ")


def test_orchestrator_applies_a_trained_puppeteer(tmp_path) -> None:
    from puppeteer.agents.pool import load_pool
    from puppeteer.policies.puppeteer import PuppeteerPolicy
    from puppeteer.policies.puppeteer_config import PolicyConfig

    pool = load_pool("sim-paper")
    PuppeteerPolicy(pool, PolicyConfig(encoder="hashing", hidden=16, max_steps=3)).save(tmp_path / "p")
    with Orchestrator.load(f"puppeteer:{tmp_path / 'p'}", pool, max_steps=3, suite="arith") as orch:
        result = orch.answer(ITEMS[0].question)
    assert result.policy == f"puppeteer:{tmp_path / 'p'}" and result.correct is not None


def test_cli_run_with_a_policy_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--policy", "vote:3", "--pool", "sim-paper", "--suite", "arith", "--index", "2"]) == 0
    out = capsys.readouterr().out
    assert "final answer" in out and "policy: vote:3" in out and "calls=3" in out


# --------------------------------------------------------------------------- the endpoint


class _FailsOnKeyword:
    """A backend that fails for questions containing FAIL (a provider outage), else delegates."""

    name = "sim"

    def __init__(self, inner) -> None:
        self.inner = inner

    def _check(self, request) -> None:
        if any("FAIL" in m.content for m in request.messages):
            raise ConnectionError("provider unreachable")

    def complete(self, request):
        self._check(request)
        return self.inner.complete(request)

    async def acomplete(self, request):
        self._check(request)
        return await self.inner.acomplete(request)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    pytest.importorskip("fastapi")
    uvicorn = pytest.importorskip("uvicorn")
    from puppeteer.serving.serve import create_app

    base = Orchestrator.load("vote:3", "sim-paper", suite="arith")
    orch = Orchestrator.load("vote:3", "sim-paper", suite="arith", backend=_FailsOnKeyword(base.backend()))
    app = create_app(orch, max_concurrency=4)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(200):  # bounded wait for start-up
        if srv.started:
            break
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1"
    srv.should_exit = True
    thread.join(timeout=10)
    base.close()


@pytest.fixture()
def openai():
    return pytest.importorskip("openai")


@pytest.fixture()
def client(server: str, openai):
    return openai.OpenAI(base_url=server, api_key="unused", max_retries=0, timeout=60)


def test_chat_completion_answers_with_usage_and_cost(client) -> None:
    task = ITEMS[0]
    messages = [{"role": "user", "content": task.question}]
    reply = client.chat.completions.create(model="puppeteer", messages=messages)
    assert reply.object == "chat.completion" and reply.model == "puppeteer"
    assert reply.choices[0].message.role == "assistant" and reply.choices[0].finish_reason == "stop"
    details = reply.model_extra["puppeteer"]
    assert reply.choices[0].message.content == details["final_answer"]
    assert len(details["steps"]) == 3 and details["correct"] in (True, False)
    usage = reply.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0
    assert usage.model_extra["cost_usd"] > 0 and usage.model_extra["calls"] == 3
    assert usage.model_extra["cost_usd"] == pytest.approx(sum(s["cost_usd"] for s in details["steps"]))


def test_streaming_delivers_the_final_answer_in_chunks(client) -> None:
    task = ITEMS[1]
    plain = client.chat.completions.create(
        model="puppeteer", messages=[{"role": "user", "content": task.question}]
    )
    stream = client.chat.completions.create(
        model="puppeteer",
        messages=[{"role": "user", "content": task.question}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == plain.usage.total_tokens


def test_concurrent_requests_each_get_their_own_answer(client) -> None:
    def ask(task):
        messages = [{"role": "user", "content": task.question}]
        reply = client.chat.completions.create(model="puppeteer", messages=messages)
        return reply.model_extra["puppeteer"]["task_id"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(ask, ITEMS))
    assert ids == [t.id for t in ITEMS]


@pytest.mark.parametrize(
    "body",
    [
        {"model": "puppeteer", "messages": []},
        {"model": "puppeteer"},
        {"model": "puppeteer", "messages": [{"role": "wizard", "content": "hi"}]},
        {"model": "puppeteer", "messages": [{"role": "system", "content": "only a system prompt"}]},
        {"model": "puppeteer", "messages": [{"role": "user", "content": "2+2?"}], "grader": "astrology"},
    ],
)
def test_a_malformed_request_is_a_clear_400_and_the_server_stays_up(client, openai, body) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.post("/chat/completions", body=body, cast_to=object)
    assert err.value.status_code == 400
    assert err.value.body["type"] == "invalid_request_error" and err.value.body["message"]
    ok = client.chat.completions.create(
        model="puppeteer", messages=[{"role": "user", "content": ITEMS[2].question}]
    )
    assert ok.choices[0].message.content


def test_a_backend_failure_is_a_clear_502_and_the_server_stays_up(client, openai) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(
            model="puppeteer", messages=[{"role": "user", "content": "FAIL please"}]
        )
    assert err.value.status_code == 502
    assert "provider unreachable" in err.value.body["message"] and err.value.body["type"] == "backend_error"
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(
            model="puppeteer", messages=[{"role": "user", "content": "FAIL"}], stream=True
        )
    ok = client.chat.completions.create(
        model="puppeteer", messages=[{"role": "user", "content": ITEMS[3].question}]
    )
    assert ok.choices[0].message.content


def test_models_and_health(client, server) -> None:
    assert [m.id for m in client.models.list()] == ["puppeteer"]
    import httpx

    assert httpx.get(server.removesuffix("/v1") + "/health").json()["policy"] == "vote:3"


class _Slow(_FailsOnKeyword):
    """Takes its time, like a busy provider."""

    def complete(self, request):
        time.sleep(0.3)
        return super().complete(request)

    async def acomplete(self, request):
        import asyncio

        await asyncio.sleep(0.3)
        return await super().acomplete(request)


def test_a_saturated_server_answers_503_and_recovers() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from puppeteer.serving.serve import create_app

    base = Orchestrator.load("single:0", "sim-paper", suite="arith")
    orch = Orchestrator.load("single:0", "sim-paper", suite="arith", backend=_Slow(base.backend()))
    app = create_app(orch, max_concurrency=1, queue_timeout_s=0.05)
    body = {"model": "puppeteer", "messages": [{"role": "user", "content": ITEMS[0].question}]}
    with TestClient(app) as http, ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(http.post, "/v1/chat/completions", json=body) for _ in range(2)]
        codes = sorted(f.result().status_code for f in futures)
        assert codes == [200, 503]
        assert http.post("/v1/chat/completions", json=body).status_code == 200


def test_lone_surrogates_and_unknown_models_get_openai_shaped_answers(server) -> None:
    """Issue 33: a lone surrogate in the question gave a 502, one in the model name a plain-text 500;
    an unknown model was served anyway."""
    import httpx

    url = server + "/chat/completions"

    def post(model: str, content: str) -> httpx.Response:
        body = f'{{"model": "{model}", "messages": [{{"role": "user", "content": "{content}"}}]}}'
        return httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=60)

    ok = post("puppeteer", "What is 2+2? \\udcff")  # a JSON escape of a lone surrogate
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"]
    for model in ("gpt-4o", "bad \\ud800 name"):
        missing = post(model, "What is 2+2?")
        assert missing.status_code == 404
        err = missing.json()["error"]
        assert err["type"] == "model_not_found" and "puppeteer" in err["message"]


def test_litellm_spend_tracking_sees_the_routers_cost(server: str) -> None:
    """A litellm user calling the served router gets its price in litellm's own spend tracking: the
    response's ``response_cost`` and the success callbacks' ``kwargs["response_cost"]``."""
    litellm = pytest.importorskip("litellm")
    seen: list[float] = []

    def record(kwargs, response, start, end) -> None:  # litellm's success-callback signature
        seen.append(kwargs.get("response_cost"))

    messages = [{"role": "user", "content": ITEMS[1].question}]
    saved = litellm.success_callback
    litellm.success_callback = [record]
    try:
        reply = litellm.completion(
            model="openai/puppeteer", api_base=server, api_key="unused", messages=messages
        )
        cost = reply.usage.cost_usd  # the router's own usage field, passed through by litellm
        assert cost > 0
        assert reply._hidden_params["response_cost"] == pytest.approx(cost)
        assert litellm.completion_cost(reply) == pytest.approx(cost)  # usage.cost: the router's charge
        for _ in range(100):  # litellm runs its callbacks in a thread of its own
            if seen:
                break
            time.sleep(0.05)
        assert seen and seen[0] == pytest.approx(cost)
    finally:
        litellm.success_callback = saved


def test_litellm_completion_cost_prices_a_served_reply() -> None:
    """litellm's ``completion_cost`` raised ModelNotMappedError on a served reply (its price map has no
    router); the reply's ``usage.cost`` (OpenRouter's field) is the router's charge, which it returns."""
    pytest.importorskip("fastapi")
    litellm = pytest.importorskip("litellm")
    from fastapi.testclient import TestClient

    from puppeteer.serving.serve import create_app

    orch = Orchestrator.load("vote:3", "sim-paper", suite="arith")
    body = {"model": "puppeteer", "messages": [{"role": "user", "content": ITEMS[2].question}]}
    with TestClient(create_app(orch)) as http:
        reply = http.post("/v1/chat/completions", json=body).json()
    usage = reply["usage"]
    assert usage["calls"] == 3 and usage["cost"] == usage["cost_usd"] > 0
    assert litellm.completion_cost(completion_response=litellm.ModelResponse(**reply)) == pytest.approx(
        usage["cost_usd"]
    )
