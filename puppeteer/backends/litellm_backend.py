"""litellm backend: any provider litellm speaks to, including OpenAI-compatible local servers.

``request.model.target`` is a litellm model string (``gpt-4o-mini``,
``openai/my-model`` with an ``api_base`` ...). litellm itself is imported on first
use, never at package import time, and ``LITELLM_OFFLINE_MODE=true`` (plus
``LITELLM_LOCAL_MODEL_COST_MAP=True``) is set beforehand unless the user chose
otherwise, so importing it does not fetch the price map from the internet.

``ModelSpec.options`` is forwarded to ``litellm.completion`` and overrides the
backend's defaults. Keys with a meaning here:

- ``api_base``, ``api_key``: endpoint and key (``api_key_env`` names an environment
  variable to read the key from, so keys need not sit in pool files);
- ``num_retries``, ``timeout``: litellm's own retries and the per-call timeout;
- ``seed``: a base seed, offset by ``request.sample_index``;
- ``mock_response``: litellm's offline mock; the call returns this text without any
  network (used by tests and dry runs);
- anything else (``top_p``, ``extra_headers`` ...) goes to litellm unchanged.

API keys never reach the logs: log lines show ``api_key=***`` and error messages
that quote a key are redacted.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from puppeteer.backends.base import refuse_grammar
from puppeteer.errors import UserError
from puppeteer.types import Completion, CompletionRequest

log = logging.getLogger(__name__)

OFFLINE_ENV = {"LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
_OWN_OPTIONS = frozenset({"api_key_env", "seed"})
REDACTED = "***"


class LiteLLMCallError(UserError, RuntimeError):
    """A litellm call failed (after litellm's own retries); the message is redacted.

    A :class:`~puppeteer.errors.UserError`: a refused connection or a bad key is the user's to fix,
    so the CLI prints it as one line (an episode that meets it in training or evaluation is still
    recorded as failed, graded wrong)."""


def redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def import_litellm() -> ModuleType:
    """Import litellm with the offline defaults in place (idempotent)."""
    for var, value in OFFLINE_ENV.items():
        os.environ.setdefault(var, value)
    return importlib.import_module("litellm")


class LiteLLMBackend:
    """Backend ``litellm``: sync calls go to ``litellm.completion``, async to ``litellm.acompletion``."""

    name = "litellm"

    def __init__(
        self,
        num_retries: int = 2,
        timeout: float = 120.0,
        api_base: str | None = None,
        api_key: str | None = None,
        drop_params: bool = True,
        extra: Mapping[str, Any] | None = None,
        quiet: bool = True,
    ) -> None:
        self.num_retries = num_retries
        self.timeout = timeout
        self.api_base = api_base
        self._api_key = api_key
        self.drop_params = drop_params
        self.extra = dict(extra or {})
        self.quiet = quiet
        self._lib: ModuleType | None = None
        self._lib_lock = threading.Lock()

    def __repr__(self) -> str:
        key = REDACTED if self._api_key else None
        return f"LiteLLMBackend(api_base={self.api_base!r}, api_key={key!r}, num_retries={self.num_retries})"

    @property
    def litellm(self) -> ModuleType:
        with self._lib_lock:
            if self._lib is None:
                lib = import_litellm()
                if self.quiet:  # litellm print()s provider hints to stdout on some errors
                    lib.suppress_debug_info = True
                self._lib = lib
            return self._lib

    # ------------------------------------------------------------------ request building

    def _kwargs(self, request: CompletionRequest) -> dict[str, Any]:
        options = dict(request.model.options)
        kwargs: dict[str, Any] = {
            "model": request.model.target,
            "messages": [m.as_dict() for m in request.messages],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "num_retries": self.num_retries,
            "timeout": self.timeout,
            "drop_params": self.drop_params,
            **self.extra,
        }
        if request.stop:
            kwargs["stop"] = list(request.stop)
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        env_var = options.get("api_key_env")
        if env_var:
            value = os.environ.get(str(env_var))
            if not value:
                raise LiteLLMCallError(
                    f"model {request.model.name!r}: environment variable {env_var} is not set"
                )
            kwargs["api_key"] = value
        if "seed" in options:
            kwargs["seed"] = int(options["seed"]) + request.sample_index
        kwargs.update({k: v for k, v in options.items() if k not in _OWN_OPTIONS})
        return kwargs

    @staticmethod
    def _secrets(kwargs: Mapping[str, Any]) -> tuple[str, ...]:
        key = kwargs.get("api_key")
        return (str(key),) if key else ()

    @staticmethod
    def _loggable(kwargs: Mapping[str, Any]) -> dict[str, Any]:
        shown = {k: v for k, v in kwargs.items() if k != "messages"}
        if "api_key" in shown:
            shown["api_key"] = REDACTED
        return shown

    # ------------------------------------------------------------------ response parsing

    def _completion(self, request: CompletionRequest, response: Any, latency: float) -> Completion:
        choice = response.choices[0]
        text = getattr(choice.message, "content", None) or ""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        return Completion(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=self._cost(request, response, prompt_tokens, completion_tokens),
            flops=request.model.flops(prompt_tokens, completion_tokens),
            latency_s=latency,
            model=request.model.target,
            truncated=getattr(choice, "finish_reason", None) == "length",
        )

    def _cost(
        self, request: CompletionRequest, response: Any, prompt_tokens: int, completion_tokens: int
    ) -> float:
        """litellm's price for the response when it knows the model, else the spec's prices."""
        try:
            cost = self.litellm.completion_cost(completion_response=response)
        except Exception as exc:  # unknown model / no price: litellm raises various errors
            log.debug(
                "litellm has no price for %s (%s); using the spec's prices",
                request.model.target,
                type(exc).__name__,
            )
            cost = None
        if cost is None or (cost == 0 and (request.model.price_in or request.model.price_out)):
            return request.model.usd(prompt_tokens, completion_tokens)
        return float(cost)

    def _error(
        self, request: CompletionRequest, kwargs: Mapping[str, Any], exc: Exception
    ) -> LiteLLMCallError:
        secrets = self._secrets(kwargs)
        message = redact(f"{type(exc).__name__}: {exc}", secrets)
        return LiteLLMCallError(
            f"litellm call for model {request.model.name!r} ({request.model.target}) failed: {message}"
        )

    # ------------------------------------------------------------------ calls

    def complete(self, request: CompletionRequest) -> Completion:
        refuse_grammar(request, "litellm")
        kwargs = self._kwargs(request)
        lib = self.litellm
        log.debug("litellm.completion %s", self._loggable(kwargs))
        start = time.perf_counter()
        try:
            response = lib.completion(**kwargs)
        except Exception as exc:
            error = self._error(request, kwargs, exc)
            if any(s in str(exc) for s in self._secrets(kwargs)):
                raise error from None  # the original message quotes the key: do not chain it
            raise error from exc
        return self._completion(request, response, time.perf_counter() - start)

    async def acomplete(self, request: CompletionRequest) -> Completion:
        kwargs = self._kwargs(request)
        lib = self._lib or await asyncio.to_thread(lambda: self.litellm)  # first import is slow
        log.debug("litellm.acompletion %s", self._loggable(kwargs))
        start = time.perf_counter()
        try:
            response = await lib.acompletion(**kwargs)
        except Exception as exc:
            error = self._error(request, kwargs, exc)
            if any(s in str(exc) for s in self._secrets(kwargs)):
                raise error from None
            raise error from exc
        return self._completion(request, response, time.perf_counter() - start)
