"""Run directories kept as a database keeps its files: one writer at a time, owners respected.

:func:`claim` takes an exclusive lock on ``DIR/.lock`` (``fcntl.flock``) for as long as the run holds
it. A second process that asks for the same directory is refused at once with one line; a process
that dies (even by kill -9) loses its lock with its file descriptors, so the same command resumes.
The lock file itself stays (an empty file naming the last holder's process id) and is never data.

:func:`check_owner` refuses a directory whose result files another command wrote: a training run
never replaces the ``results.json`` or ``trajectories.jsonl`` of an evaluation, and vice versa.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from puppeteer.errors import UserError

LOCK_FILE = ".lock"

try:  # POSIX; elsewhere runs go unlocked (one writer is then the user's care)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class RunDirBusy(UserError):
    """Another process is writing to the run directory."""


class RunDirForeign(UserError):
    """The run directory holds the results of another command."""


def _check_is_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"run directory {out} is a file, not a directory")


@contextlib.contextmanager
def claim(out: str | Path) -> Iterator[Path]:
    """Hold ``out`` (created if missing) for one writer for the duration of the ``with`` block."""
    out = Path(out)
    _check_is_dir(out)
    made = _missing_dirs(out)  # removed again if the run fails before writing anything
    try:
        out.mkdir(parents=True, exist_ok=True)
        handle: IO[str] = (out / LOCK_FILE).open("a+", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot use run directory {out}: {exc.strerror or exc}") from None
    try:
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.seek(0)
                holder = handle.read().strip() or "?"
                raise RunDirBusy(
                    f"{out} is in use by another run (process {holder}); wait for it to finish "
                    "or choose another output directory"
                ) from None
        with contextlib.suppress(OSError):  # who holds it, for the message of the next one
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
        yield out
    except BaseException:
        if made and [p.name for p in out.iterdir()] == [LOCK_FILE]:  # a refused run leaves no trace
            with contextlib.suppress(OSError):
                (out / LOCK_FILE).unlink()
                for d in made:
                    d.rmdir()
        raise
    finally:
        handle.close()  # releases the lock


def _missing_dirs(out: Path) -> list[Path]:
    """``out`` and those of its parents that do not exist yet, deepest first."""
    missing: list[Path] = []
    p = out
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    return missing


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_training_dir(out: Path) -> bool:
    """``out`` was written by the REINFORCE training job (its config or its checkpoint)."""
    config = _read_json(out / "config.json")
    return (isinstance(config, dict) and "trainer" in config) or (out / "checkpoint.pt").exists()


def check_owner(out: str | Path, command: str) -> None:
    """Refuse ``out`` if it holds results that a command other than ``command`` wrote.

    ``command`` is ``"train"`` or ``"eval"``. An empty or missing directory, or one that holds only
    files no run writes (Hydra's ``.hydra``, logs), belongs to anybody.
    """
    out = Path(out)
    _check_is_dir(out)
    if not out.is_dir():
        return
    trained = is_training_dir(out)
    results = out / "results.json"
    written = [n for n in ("results.json", "trajectories.jsonl", "metrics.jsonl") if (out / n).exists()]
    if command == "train" and written and not trained:
        raise RunDirForeign(
            f"{out} holds {written[0]} of another command (not a training run); choose another "
            "output directory"
        )
    if command == "eval" and trained:
        what = "checkpoint.pt" if (out / "checkpoint.pt").exists() else "config.json"
        raise RunDirForeign(
            f"{out} is a training run directory ({what}); choose another --out for the evaluation"
        )
    if command == "train" and results.exists():
        data = _read_json(results)
        if not isinstance(data, dict) or "heldout" not in data:
            raise RunDirForeign(f"{results} is not a training result; choose another output directory")
