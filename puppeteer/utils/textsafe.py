"""Make text from outside (actions, user input) safe for every backend, once, at the edge."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """``text`` with every code point UTF-8 can encode: surrogate pairs joined, lone ones -> U+FFFD.

    Python strings may hold unpaired surrogates (``"\\udcff"``, e.g. from ``surrogateescape``
    decoding or a fuzzer); UTF-8 encoders (llama.cpp chat formatting, HTTP clients) reject them.
    """
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
