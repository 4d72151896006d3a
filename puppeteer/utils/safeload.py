"""Durable, code-free persistence of torch state: atomic fsynced saves, ``weights_only`` loads.

``torch.load(weights_only=False)`` unpickles arbitrary objects, so a checkpoint written by
someone else could run their code. Everything the project saves is tensors and plain data
(dicts, lists, numbers, strings), which ``weights_only=True`` loads; anything else is refused.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

# what torch's weights-only unpickler says about a class or function it refused to load
_FOREIGN = re.compile(r"GLOBAL|Unsupported class|global", re.IGNORECASE)


class CheckpointError(ValueError):
    """A checkpoint or policy file that cannot be (safely) loaded or saved."""


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """Write ``obj`` to ``path`` so that a crash or kill -9 leaves either the old file or the new one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:  # torch's zip writer reports a full disk as RuntimeError
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise CheckpointError(f"could not write {path}: {_why(exc)}; the previous file is intact") from None
    with contextlib.suppress(OSError):  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _why(exc: BaseException) -> str:
    """One line about a failed write (torch's messages run over many lines with a C++ trace)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip()
    if "file write failed" in text or "inline_container" in text:
        return "the file could not be written (disk full or a file size limit)"
    return text.splitlines()[0] if text else type(exc).__name__


def safe_torch_load(path: str | Path) -> Any:
    """``torch.load`` of tensors and plain data only; a clear :class:`CheckpointError` otherwise."""
    path = Path(path)
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        if not _FOREIGN.search(str(exc)):
            raise _corrupt(path, exc) from exc
        raise CheckpointError(
            f"{path} holds objects other than tensors and plain data; refusing to unpickle it "
            "(it could run code). Move it away unless you know who wrote it"
        ) from exc
    except FileNotFoundError:
        raise
    except Exception as exc:  # the restricted unpickler on arbitrary bytes raises anything
        # (IndexError, struct.error, UnicodeDecodeError...); it never runs code, so all mean "corrupt"
        raise _corrupt(path, exc) from exc


def _corrupt(path: Path, exc: BaseException) -> CheckpointError:
    return CheckpointError(
        f"{path} is corrupt or truncated ({type(exc).__name__}); it was left as is: "
        "restore it, or move it away to start over"
    )
