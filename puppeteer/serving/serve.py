"""An OpenAI-compatible chat endpoint in front of an :class:`~puppeteer.serving.orchestrator.Orchestrator`.

``puppeteer serve --policy SPEC --pool NAME --port N`` serves ``POST /v1/chat/completions``
(FastAPI + uvicorn, the ``serve`` extra). An application points its OpenAI client at it::

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
    reply = client.chat.completions.create(model="puppeteer", messages=[{"role": "user", "content": q}])
    reply.choices[0].message.content, reply.usage.cost_usd

The last user message is the question; the policy routes it through the pool's agents and the
final (aggregated) answer is the reply. ``usage`` carries the summed tokens of every call plus
``cost_usd``, ``calls`` and ``flops``; ``puppeteer`` holds the steps taken. With
``stream=True`` the final answer arrives as OpenAI-style SSE chunks once routing has finished
(with ``stream_options={"include_usage": true}``, a last chunk carries the usage). Extra
request fields: ``grader`` (answer format: ``numeric``, ``math``, ``letter``, ``exact``) and, for a
policy trained over a range of lambdas (``lam_range``), ``lam``: this request's price of cost
(``extra_body={"lam": 0.2}`` from the openai client), clamped into the trained range; ``usage.lam``
is the lambda the request was routed at. A policy trained at one lambda refuses ``lam`` (400).

Every answer (streamed or not) carries its price in USD in the ``x-litellm-response-cost`` header,
which litellm reads into its spend tracking: ``litellm.completion(model="openai/puppeteer",
api_base=...)`` returns it as ``response._hidden_params["response_cost"]`` and hands it to success
callbacks as ``kwargs["response_cost"]``. ``usage.cost`` repeats ``cost_usd`` under the name that
OpenAI-compatible providers (OpenRouter) report their charge in, which ``litellm.completion_cost(reply)``
returns as it is: a router's price depends on the agents it called, so no entry of litellm's per-token
price map (``litellm.register_model``) could give it.

Errors use OpenAI's error body: 400 for a malformed request, 502 when a backend fails,
503 when the server is saturated; the server stays up either way. At most
``max_concurrency`` requests are routed at once; others wait up to ``queue_timeout_s``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from puppeteer.serving.orchestrator import Orchestrator, OrchestratorResult
from puppeteer.utils.textsafe import encodable

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")
COST_HEADER = "x-litellm-response-cost"  # litellm reads it into response._hidden_params["response_cost"]
HTTP_KINDS = {404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error"}


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "\n".join(p.text or "" for p in self.content if p.type == "text")
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # temperature, max_tokens ... are accepted and ignored
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    grader: str | None = None
    # price of cost (conditioned): a JSON number, finite and >= 0 (strict: true or "0.3" are refused)
    lam: float | None = Field(default=None, ge=0.0, allow_inf_nan=False, strict=True)

    def question(self) -> str:
        for message in reversed(self.messages):
            if message.role == "user" and message.text().strip():
                return message.text()
        raise ValueError("the request has no user message with text")


class ServeError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def _usage(result: OrchestratorResult) -> dict[str, Any]:
    usage = {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
        "cost_usd": result.cost_usd,
        "calls": result.calls,
        "flops": result.flops,
    }
    if result.cost_usd is not None:  # the charge in OpenRouter's field, which litellm.completion_cost reads
        usage["cost"] = float(result.cost_usd)
    if result.lam is not None:  # a lambda-conditioned router: the price it routed this request at
        usage["lam"] = result.lam
    return usage


def _details(result: OrchestratorResult) -> dict[str, Any]:
    return {
        "policy": result.policy,
        "pool": result.pool,
        "task_id": result.task_id,
        "final_answer": result.final_answer,
        "correct": result.correct,
        "parse_error": result.parse_error,
        "steps": [
            {
                "agent": s.agent_name,
                "agent_id": s.agent_id,
                "answer": s.answer,
                "text": s.completion.text,
                "prompt_tokens": s.completion.prompt_tokens,
                "completion_tokens": s.completion.completion_tokens,
                "cost_usd": s.completion.cost_usd,
            }
            for s in result.steps
        ],
    }


def completion_body(result: OrchestratorResult, model: str, request_id: str, created: int) -> dict[str, Any]:
    """A ``chat.completion`` object for one answered question."""
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.text},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage(result),
        "puppeteer": _details(result),
    }


def _pieces(text: str, size: int = 16) -> Iterator[str]:
    for i in range(0, len(text), size):
        yield text[i : i + size]


def stream_chunks(
    result: OrchestratorResult, model: str, request_id: str, created: int, include_usage: bool
) -> Iterator[str]:
    """``chat.completion.chunk`` SSE events for the final answer, then ``[DONE]``."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        body = {
            "id": request_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(result.text):
        yield chunk({"content": piece})
    yield chunk({}, "stop")
    if include_usage:
        body = {
            "id": request_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": _usage(result),
            "puppeteer": _details(result),
        }
        yield f"data: {json.dumps(body, ensure_ascii=False)}\n\n"
    yield "data: [DONE]\n\n"


def create_app(
    orchestrator: Orchestrator,
    model_name: str = "puppeteer",
    max_concurrency: int = 8,
    queue_timeout_s: float = 600.0,
) -> FastAPI:
    """The FastAPI application (run it with uvicorn, or see :func:`serve`)."""
    from fastapi import FastAPI, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    app = FastAPI(
        title="puppeteer router",
        description=f"policy {orchestrator.spec} on pool {orchestrator.pool.name}, OpenAI-compatible",
    )
    slots = asyncio.Semaphore(max_concurrency)

    def error(status: int, kind: str, message: str) -> JSONResponse:
        body = {"error": {"message": encodable(message), "type": kind, "param": None, "code": None}}
        return JSONResponse(status_code=status, content=body)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()]
        return error(400, "invalid_request_error", "malformed request: " + "; ".join(parts))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals (a body that is not UTF-8, a wrong method...) in OpenAI's error shape
        kind = HTTP_KINDS.get(exc.status_code, "invalid_request_error")
        return error(exc.status_code, kind, str(exc.detail))

    @app.exception_handler(ServeError)
    async def _serve_error(request: Request, exc: ServeError) -> JSONResponse:
        return error(exc.status, exc.kind, exc.message)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        status: dict[str, Any] = {"status": "ok", "policy": orchestrator.spec, "pool": orchestrator.pool.name}
        if orchestrator.lam_range is not None:  # the lambdas a request may ask for
            status["lam_range"] = list(orchestrator.lam_range.bounds)
            status["lam"] = orchestrator.lam
        return status

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "puppeteer"}],
        }

    async def route(body: ChatRequest) -> OrchestratorResult:
        if body.model != model_name:
            raise ServeError(
                404,
                "model_not_found",
                f"the model {encodable(body.model)!r} does not exist here; this server routes as "
                f"{model_name!r} (GET /v1/models)",
            )
        try:
            question = body.question()
        except ValueError as e:
            raise ServeError(400, "invalid_request_error", str(e)) from None
        if body.grader is not None and body.grader not in known_graders():
            raise ServeError(
                400,
                "invalid_request_error",
                f"unknown grader {body.grader!r}; known: {', '.join(sorted(known_graders()))}",
            )
        refusal = orchestrator.refusal(question)
        if refusal is not None:
            raise ServeError(400, "invalid_request_error", refusal)
        if body.lam is not None and orchestrator.lam_range is None:
            raise ServeError(
                400,
                "invalid_request_error",
                f"this router ({orchestrator.spec}) was trained at one price of cost and takes no `lam`; "
                "serve a policy trained with lam_range=[low,high] to set it per request",
            )
        try:
            await asyncio.wait_for(slots.acquire(), timeout=queue_timeout_s)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            raise ServeError(503, "server_busy", "too many requests in flight; retry later") from None
        try:
            return await run_in_threadpool(orchestrator.answer, question, grader=body.grader, lam=body.lam)
        except Exception as e:
            log.exception("routing failed")
            raise ServeError(
                502, "backend_error", f"the agents' backend failed: {type(e).__name__}: {e}"
            ) from None
        finally:
            slots.release()

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest):  # a JSONResponse or a StreamingResponse
        result = await route(body)
        request_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if body.stream:
            include = bool(body.stream_options and body.stream_options.include_usage)

            async def events() -> AsyncIterator[str]:
                for event in stream_chunks(result, body.model, request_id, created, include):
                    yield event

            return StreamingResponse(events(), media_type="text/event-stream", headers=cost_header(result))
        return JSONResponse(
            completion_body(result, body.model, request_id, created), headers=cost_header(result)
        )

    return app


def cost_header(result: OrchestratorResult) -> dict[str, str]:
    """The request's price in USD as the header litellm reads into its spend tracking
    (``response._hidden_params["response_cost"]``, the ``response_cost`` of its callbacks)."""
    return {COST_HEADER: f"{float(result.cost_usd or 0.0):.10g}"}


def known_graders() -> set[str]:
    from puppeteer.tasks import default_graders

    return set(default_graders())


def serve(
    orchestrator: Orchestrator,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_concurrency: int = 8,
    log_level: str = "info",
) -> None:
    """Run the app with uvicorn until interrupted."""
    import uvicorn

    if host not in LOOPBACK:
        log.warning("serving on %s: the endpoint has no authentication; put it behind your own gateway", host)
    uvicorn.run(
        create_app(orchestrator, max_concurrency=max_concurrency), host=host, port=port, log_level=log_level
    )


__all__ = ["ChatRequest", "completion_body", "create_app", "serve", "stream_chunks"]
