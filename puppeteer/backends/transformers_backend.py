"""Backend ``transformers``: any causal LM that ``transformers`` loads, on CPU by default.

``request.model.target`` is an HF model id, a local directory (a fine-tuned or GRPO-trained
checkpoint) or ``DIR#FILE.gguf`` for a GGUF file inside ``DIR`` (``gguf_file=``, needs the
``gguf`` package; the weights are dequantised). ``embedded:KEY`` names an embedded GGUF model of
:mod:`puppeteer.backends.models`, loaded through :mod:`puppeteer.backends.hf_models` (converted
once and cached whole, shared with the GRPO conductor loader). Models load lazily, once per
target; calls on one model are serialised. The chat template of the tokenizer formats the messages.

For a ``DIR#FILE.gguf`` target the tokenizer is converted on first load (about a minute): it is
saved to ``$PUPPETEER_CACHE/hf-tokenizers/<name>`` and reused from there.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from puppeteer.backends.base import SyncBackend, refuse_grammar
from puppeteer.types import Completion, CompletionRequest

log = logging.getLogger(__name__)


@dataclass
class _Loaded:
    model: Any
    tokenizer: Any
    lock: threading.Lock = field(default_factory=threading.Lock)


def resolve_target(target: str, cache_dir: Path | None = None) -> tuple[str, str | None]:
    """``(path_or_id, gguf_file)`` for a target (see the module notes)."""
    if target.startswith("embedded:"):
        from puppeteer.backends.models import model_path

        path = model_path(target.removeprefix("embedded:"), cache_dir)
        return str(path.parent), path.name
    base, sep, gguf = target.partition("#")
    return base, (gguf if sep else None)


class TransformersBackend(SyncBackend):
    name = "transformers"

    def __init__(
        self,
        device: str = "cpu",
        dtype: str = "float32",
        seed: int = 0,
        cache_dir: Path | str | None = None,
        n_threads: int | None = None,
    ) -> None:
        self.device = device
        self.dtype = dtype
        self.seed = seed
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.n_threads = n_threads
        self._loaded: dict[str, _Loaded] = {}
        self._lock = threading.Lock()

    def _tokenizer(self, path: str, gguf: str | None) -> Any:
        from transformers import AutoTokenizer

        if gguf is None:
            return AutoTokenizer.from_pretrained(path)
        from puppeteer.backends.models import default_cache_dir

        digest = hashlib.sha256(f"{Path(path).resolve()}#{gguf}".encode()).hexdigest()[:12]
        root = (self.cache_dir or default_cache_dir()).parent
        saved = root / "hf-tokenizers" / f"{Path(gguf).stem}-{digest}"
        if (saved / "tokenizer_config.json").is_file():
            return AutoTokenizer.from_pretrained(saved)
        tokenizer = AutoTokenizer.from_pretrained(path, gguf_file=gguf)
        tokenizer.save_pretrained(saved)
        return tokenizer

    def load(self, target: str) -> _Loaded:
        with self._lock:
            if target in self._loaded:
                return self._loaded[target]
            import torch
            from transformers import AutoModelForCausalLM

            if self.n_threads:
                torch.set_num_threads(self.n_threads)
            start = time.perf_counter()
            if target.startswith("embedded:"):  # one loader and cache with the GRPO conductor
                from puppeteer.backends.hf_models import load_embedded_hf

                key = target.removeprefix("embedded:")
                model, tokenizer = load_embedded_hf(key, getattr(torch, self.dtype))
                model = model.to(self.device).eval()
            else:
                path, gguf = resolve_target(target, self.cache_dir)
                kwargs: dict[str, Any] = {"dtype": getattr(torch, self.dtype)}
                if gguf is not None:
                    kwargs["gguf_file"] = gguf
                model = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(self.device).eval()
                tokenizer = self._tokenizer(path, gguf)
            loaded = self._loaded[target] = _Loaded(model, tokenizer)
            log.info("transformers: loaded %s in %.1fs", target, time.perf_counter() - start)
            return loaded

    def complete(self, request: CompletionRequest) -> Completion:
        refuse_grammar(request, "transformers")
        import torch

        loaded = self.load(request.model.target)
        tok = loaded.tokenizer
        messages = [m.as_dict() for m in request.messages]
        with loaded.lock:
            inputs = tok.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            ).to(self.device)
            n_prompt = int(inputs["input_ids"].shape[1])
            sample = request.temperature > 0
            gen_kwargs: dict[str, Any] = {
                "max_new_tokens": request.max_tokens,
                "do_sample": sample,
                "pad_token_id": tok.pad_token_id or tok.eos_token_id,
            }
            if sample:
                gen_kwargs["temperature"] = request.temperature
                torch.manual_seed(self.seed + request.sample_index)
            else:
                gen_kwargs.update(temperature=None, top_p=None, top_k=None)
            start = time.perf_counter()
            with torch.no_grad():
                out = loaded.model.generate(**inputs, **gen_kwargs)
            latency = time.perf_counter() - start
        new = out[0, n_prompt:]
        text = tok.decode(new, skip_special_tokens=True)
        for stop in request.stop:
            if stop and stop in text:
                text = text[: text.index(stop)]
        n_new = int(new.shape[0])
        ended = n_new > 0 and int(new[-1]) == tok.eos_token_id
        return Completion(
            text=text,
            prompt_tokens=n_prompt,
            completion_tokens=n_new,
            cost_usd=request.model.usd(n_prompt, n_new),
            flops=request.model.flops(n_prompt, n_new),
            latency_s=latency,
            model=request.model.target,
            truncated=n_new >= request.max_tokens and not ended,
        )
