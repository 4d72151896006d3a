"""llama.cpp under the continuous batcher: an :class:`~puppeteer.backends.llamacpp.continuous.Engine`
and chat calls.

:class:`LlamaCppEngine` is a second llama.cpp context on a loaded ``llama_cpp.Llama``'s model
with ``n_seq_max`` sequences in one unified KV cache of ``kv_size`` cells (or, with
``kv_unified=False``, one stream of ``kv_size / n_seq_max`` cells per sequence; the other context
settings, flash attention included, are the ``Llama``'s); it fills a
``llama_batch`` from :class:`~puppeteer.backends.llamacpp.continuous.BatchEntry` rows and samples with
the sampler chain that ``Llama._init_sampler`` builds (same settings, same seed).

:func:`batched_chat_completion` answers a ``create_chat_completion`` call through the batcher
while running llama-cpp-python's own chat handler: the handler formats the messages with the
model's chat template, tokenizes them and merges the template's stop strings, then calls
``create_completion`` on what it believes is the ``Llama``; that call becomes a
:class:`~puppeteer.backends.llamacpp.continuous.GenerationJob` and waits for its result. So prompts,
stop strings and the response dict are the one-at-a-time path's, byte for byte; the dict also
carries ``"timings": {"queue_s", "run_s"}``, the job's wait for a slot and its time from admission
to finish (the batcher's :class:`~puppeteer.backends.llamacpp.continuous.GenerationResult`).
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from puppeteer.backends.llamacpp.continuous import (
    BatchEntry,
    DecodeError,
    GenerationJob,
    GenerationResult,
    SamplingParams,
)

if TYPE_CHECKING:
    from llama_cpp import Llama

Submit = Callable[[GenerationJob], "Future[GenerationResult]"]

# what ``Llama.create_chat_completion`` forwards to its chat handler (llama-cpp-python 0.3.36)
_HANDLER_ARGS = (
    "messages",
    "functions",
    "function_call",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "logprobs",
    "top_logprobs",
    "stream",
    "stop",
    "seed",
    "response_format",
    "max_tokens",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "tfs_z",
    "mirostat_mode",
    "mirostat_tau",
    "mirostat_eta",
    "model",
    "logits_processor",
    "grammar",
    "logit_bias",
)


class _Sampler:
    def __init__(self, chain: Any, ctx: Any) -> None:
        self._chain = chain
        self._ctx = ctx

    def sample(self, index: int) -> int:
        return int(self._chain.sample(self._ctx, index))

    def close(self) -> None:
        self._chain.close()


class _GreedyGrammarSampler:
    """Greedy decoding under a grammar, checking the grammar on the chosen token first.

    llama.cpp's chain applies a grammar to every token of the vocabulary at every step (151k for
    Qwen). Greedy decoding needs only the best token the grammar allows: take the best token; if the
    grammar accepts it (the common case: the model follows the format), it is that token; otherwise
    apply the grammar to the whole vocabulary and take the best allowed one. The choice equals the
    chain's (grammar, then greedy) by construction; only the work differs.
    """

    def __init__(self, lib: Any, ctx: Any, vocab: Any, n_vocab: int, grammar: str) -> None:
        self._lib, self._ctx, self._n_vocab = lib, ctx, n_vocab
        self._grammar = lib.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
        if not self._grammar:
            raise ValueError("llama.cpp could not parse the grammar")
        self._one = (lib.llama_token_data * 1)()
        self._one_array = lib.llama_token_data_array(self._one, 1, -1, False)
        self._all: Any = None  # the whole vocabulary's candidates, made on the first refusal only
        self.full_checks = 0  # steps whose best token the grammar refused (the whole vocabulary checked)

    def _candidates(self) -> tuple[Any, Any]:
        import numpy as np

        if self._all is None:
            buffer = (self._lib.llama_token_data * self._n_vocab)()
            array = self._lib.llama_token_data_array(buffer, self._n_vocab, -1, False)
            view = np.frombuffer(buffer, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
            self._all = (buffer, array, view, np.arange(self._n_vocab, dtype=np.int32))
        _, array, view, ids = self._all
        view["id"] = ids
        return array, view

    def _logits(self, index: int) -> Any:
        import numpy as np

        pointer = self._lib.llama_get_logits_ith(self._ctx.ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))

    def sample(self, index: int) -> int:
        import ctypes

        import numpy as np

        logits = self._logits(index)
        token = int(np.argmax(logits))
        self._one[0].id, self._one[0].logit, self._one[0].p = token, float(logits[token]), 0.0
        self._one_array.size, self._one_array.selected, self._one_array.sorted = 1, -1, False
        self._lib.llama_sampler_apply(self._grammar, ctypes.byref(self._one_array))
        if not np.isneginf(self._one[0].logit):
            self._lib.llama_sampler_accept(self._grammar, token)
            return token
        self.full_checks += 1
        array, view = self._candidates()
        view["logit"], view["p"] = logits, 0.0
        array.size, array.selected, array.sorted = self._n_vocab, -1, False
        self._lib.llama_sampler_apply(self._grammar, ctypes.byref(array))
        token = int(view["id"][int(np.argmax(view["logit"]))])
        self._lib.llama_sampler_accept(self._grammar, token)
        return token

    def close(self) -> None:
        if self._grammar:
            self._lib.llama_sampler_free(self._grammar)
            self._grammar = None


class LlamaCppEngine:
    """A batched llama.cpp context on ``llama``'s model (the ``Llama``'s own context is left alone)."""

    def __init__(
        self,
        llama: Llama,
        *,
        n_seq_max: int,
        kv_size: int,
        n_ctx: int,
        n_batch: int,
        n_threads: int,
        kv_unified: bool = True,
    ) -> None:
        import llama_cpp
        from llama_cpp import _internals

        self._llama = llama
        self._lib = llama_cpp
        # greedy decoding under a grammar checks the chosen token first (_GreedyGrammarSampler); False:
        # llama.cpp's chain applies the grammar to the whole vocabulary at every step (same tokens)
        self.fast_grammar = True
        self.n_seq_max = n_seq_max
        self.kv_size = kv_size
        # one stream per sequence (kv_unified=False): a sequence holds at most its stream's cells
        self.n_ctx = n_ctx if kv_unified else min(n_ctx, kv_size // n_seq_max)
        self.n_batch = n_batch
        self.kv_unified = kv_unified
        params = llama_cpp.llama_context_params.from_buffer_copy(llama.context_params)
        params.n_ctx = kv_size
        params.n_batch = n_batch
        params.n_ubatch = min(n_batch, params.n_ubatch or n_batch)
        params.n_seq_max = n_seq_max
        params.kv_unified = kv_unified
        params.n_threads = params.n_threads_batch = n_threads
        self._ctx = _internals.LlamaContext(model=llama._model, params=params, verbose=llama.verbose)
        self._memory = llama_cpp.llama_get_memory(self._ctx.ctx)
        self._vocab = llama._model.vocab
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._closed = False

    def decode(self, entries: Sequence[BatchEntry]) -> None:
        batch = self._batch
        n = 0
        for entry in entries:
            last = len(entry.tokens) - 1
            for j, token in enumerate(entry.tokens):
                batch.token[n] = token
                batch.pos[n] = entry.pos0 + j
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = entry.seq
                batch.logits[n] = entry.logits and j == last
                n += 1
        if n > self.n_batch:
            raise ValueError(f"batch of {n} tokens exceeds n_batch={self.n_batch}")
        batch.n_tokens = n
        status = self._lib.llama_decode(self._ctx.ctx, batch)
        if status != 0:
            raise DecodeError(f"llama_decode returned {status} for {len(entries)} sequences, {n} tokens")

    def seq_rm(self, seq: int, start: int) -> None:
        self._lib.llama_memory_seq_rm(self._memory, seq, start, -1)

    def seq_cp(self, src: int, dst: int, start: int, end: int) -> None:
        # unified KV cache: the cells get ``dst`` as a second owner (no copy, no new cells)
        self._lib.llama_memory_seq_cp(self._memory, src, dst, start, end)

    def new_sampler(self, params: SamplingParams) -> _Sampler:
        # the chain of ``Llama._init_sampler``; it reads the seed from the Llama, and only this
        # engine's loop thread builds samplers for this Llama
        self._llama.set_seed(params.seed)
        neutral = (
            params.repeat_penalty == 1.0 and not params.frequency_penalty and not params.presence_penalty
        )
        if params.grammar is not None and params.temperature == 0.0 and neutral and self.fast_grammar:
            return _GreedyGrammarSampler(  # type: ignore[return-value]
                self._lib, self._ctx, self._vocab, self._llama.n_vocab(), params.grammar
            )
        grammar = None
        if params.grammar is not None:
            from llama_cpp import LlamaGrammar

            grammar = LlamaGrammar.from_string(params.grammar, verbose=False)
        chain = self._llama._init_sampler(
            top_k=params.top_k,
            top_p=params.top_p,
            min_p=params.min_p,
            typical_p=params.typical_p,
            temp=params.temperature,
            repeat_penalty=params.repeat_penalty,
            frequency_penalty=params.frequency_penalty,
            presence_penalty=params.presence_penalty,
            grammar=grammar,
        )
        return _Sampler(chain, self._ctx)

    def is_eog(self, token: int) -> bool:
        return bool(self._lib.llama_vocab_is_eog(self._vocab, token))

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int]) -> bytes:
        return self._llama.detokenize(list(tokens), prev_tokens=list(prev_tokens))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._lib.llama_batch_free(self._batch)
            self._ctx.close()


class _CompletionProxy:
    """Stands in for the ``Llama`` inside a chat handler: tokenizes with it, generates through ``submit``."""

    def __init__(self, llama: Llama, submit: Submit) -> None:
        self._llama = llama
        self._submit = submit
        self.verbose = llama.verbose
        self.result: GenerationResult | None = None  # of the last completion

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return self._llama.tokenize(text, add_bos=add_bos, special=special)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llama, name)

    def create_completion(
        self,
        *,
        prompt: list[int] | str,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        top_k: int = 40,
        stop: str | list[str] | None = None,
        seed: int | None = None,
        stream: bool = False,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        stopping_criteria: Any = None,
        logprobs: int | None = None,
        grammar: Any = None,
        logits_processor: Any = None,
        logit_bias: Any = None,
        mirostat_mode: int = 0,
        model: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        unsupported = {
            "stream": stream,
            "logprobs": logprobs is not None,
            "logits_processor": logits_processor is not None,
            "logit_bias": logit_bias is not None,
            "mirostat": mirostat_mode != 0,
            "text prompt": isinstance(prompt, str),
        }
        used = [k for k, v in unsupported.items() if v]
        if used:
            raise NotImplementedError(f"batched decoding does not support {', '.join(used)}")
        if seed is None:
            raise ValueError("batched decoding needs an explicit seed")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        criteria = None
        if stopping_criteria is not None:
            import numpy as np

            empty = np.zeros(0, dtype=np.single)

            def criteria(tokens: Sequence[int]) -> bool:
                return bool(stopping_criteria(np.asarray(tokens, dtype=np.intc), empty))

        job = GenerationJob(
            prompt=tuple(int(t) for t in prompt),
            max_tokens=-1 if max_tokens is None else int(max_tokens),
            stop=tuple(s.encode("utf-8") for s in stops),
            sampling=SamplingParams(
                temperature=temperature,
                seed=seed,
                top_k=top_k,
                top_p=top_p,
                min_p=min_p,
                typical_p=typical_p,
                repeat_penalty=repeat_penalty,
                frequency_penalty=frequency_penalty,
                presence_penalty=presence_penalty,
                grammar=getattr(grammar, "_grammar", grammar),  # LlamaGrammar keeps its GBNF text
            ),
            stopping_criteria=criteria,
        )
        result = self.result = self._submit(job).result()
        n_completion = len(result.completion_tokens)
        return {
            "id": f"cmpl-{uuid.uuid4()}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model if model is not None else self._llama.model_path,
            "choices": [
                {
                    "text": result.text.decode("utf-8", errors="ignore"),
                    "index": 0,
                    "logprobs": None,
                    "finish_reason": result.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": n_completion,
                "total_tokens": result.prompt_tokens + n_completion,
            },
        }


def _chat_defaults() -> dict[str, Any]:
    from llama_cpp import Llama

    sig = inspect.signature(Llama.create_chat_completion)
    return {name: p.default for name, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}


def batched_chat_completion(llama: Llama, submit: Submit, **kwargs: Any) -> dict[str, Any]:
    """``llama.create_chat_completion(**kwargs)``, generated through ``submit`` (blocks until done)."""
    from llama_cpp import llama_chat_format

    handler = (
        llama.chat_handler
        or llama._chat_handlers.get(llama.chat_format)
        or llama_chat_format.get_chat_completion_handler(llama.chat_format)
    )
    args = {**_chat_defaults(), **kwargs}
    proxy = _CompletionProxy(llama, submit)
    response = handler(llama=proxy, **{k: args.get(k) for k in _HANDLER_ARGS})
    if proxy.result is not None:
        response["timings"] = {"queue_s": proxy.result.queue_s, "run_s": proxy.result.run_s}
    return response
