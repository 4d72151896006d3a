"""A Gymnasium text space for real text: any unicode string up to a length."""

from __future__ import annotations

import string
from typing import Any

from gymnasium import spaces

# Characters used when *sampling*; any str of the right length is *contained*.
SAMPLE_CHARSET = string.printable + "äöüßéèàçñøåæœ€£¥°±×÷≤≥≠∞√∑∫πσμλ—–…“”‘’«»中文日本語한국어"


class UnicodeText(spaces.Text):
    """``spaces.Text`` whose ``contains`` accepts every unicode string within the length bounds."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | None = None) -> None:
        super().__init__(max_length=max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    __hash__ = None  # type: ignore[assignment]
