"""A Gymnasium text space for real text: any unicode string up to a length."""

from __future__ import annotations

import string
from collections.abc import Sequence
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


# --------------------------------------------------------------------------- vector envs
# ``AsyncVectorEnv`` passes observations through shared memory by default and reads them once,
# expecting live views (as numpy arrays over the buffer are). gymnasium's ``Text`` reader
# returns a fixed tuple instead (later steps would show the first observation) and stores
# characters as indices into the sampling charset (any other character fails). ``UnicodeText``
# stores unicode code points (-1 pads the unused tail) and reads as :class:`SharedTexts`, a
# live view whose copies (the vector env deep-copies by default) are plain tuples of str.


class SharedTexts(Sequence[str]):
    """Live read-only view of ``n`` texts in a shared code-point buffer."""

    def __init__(self, shared_memory: Any, n: int, max_length: int) -> None:
        self._memory, self._n, self._max = shared_memory, n, max_length

    def _row(self, i: int) -> str:
        import numpy as np

        data = np.frombuffer(self._memory.get_obj(), dtype=np.int32)[i * self._max : (i + 1) * self._max]
        end = np.flatnonzero(data < 0)
        codes = data[: end[0] if end.size else self._max]
        return codes.astype("<u4").tobytes().decode("utf-32-le", errors="surrogatepass")

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self._row(i) for i in range(self._n)[index])
        i = range(self._n)[index]  # negative indices and bounds like a tuple
        return self._row(i)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"

    def __copy__(self) -> tuple[str, ...]:
        return tuple(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))


def _register_shared_memory() -> None:
    import multiprocessing as mp

    import numpy as np
    from gymnasium.vector.utils import shared_memory as shm

    @shm.create_shared_memory.register(UnicodeText)
    def _create(space: UnicodeText, n: int = 1, ctx: Any = mp) -> Any:
        return ctx.Array(np.dtype(np.int32).char, n * space.max_length)

    @shm.read_from_shared_memory.register(UnicodeText)
    def _read(space: UnicodeText, shared_memory: Any, n: int = 1) -> SharedTexts:
        return SharedTexts(shared_memory, n, space.max_length)

    @shm.write_to_shared_memory.register(UnicodeText)
    def _write(space: UnicodeText, index: int, value: str, shared_memory: Any) -> None:
        size = space.max_length
        codes = np.frombuffer(value.encode("utf-32-le", errors="surrogatepass"), dtype="<u4").astype(np.int32)
        destination = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
        row = destination[index * size : (index + 1) * size]
        row[: len(codes)] = codes
        row[len(codes) :] = -1


_register_shared_memory()
