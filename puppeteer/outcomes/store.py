"""The stored form of an imported table: ``logged.csv.gz`` in the folder a pool's ``replay:`` names.

One row per prompt and model (the long form of :mod:`puppeteer.outcomes.table`, already checked),
sorted by prompt id then model and gzipped with a fixed mtime, so the same table gives the same bytes.
The suite loader (``loader: logged``), the ``logged`` backend and the router benchmark all read it
through :func:`load_logged`, which reads a file once per process.
"""

from __future__ import annotations

import functools
import gzip
import io
from pathlib import Path

import pandas as pd

from puppeteer.errors import UserError
from puppeteer.outcomes.table import LoggedTable, table_from_long

TABLE_FILE = "logged.csv.gz"


def table_file(folder: str | Path) -> Path:
    """The table file of a folder, or the path itself when it names a file."""
    p = Path(folder)
    return p if p.suffix == ".gz" or p.is_file() else p / TABLE_FILE


def write_logged(table: LoggedTable, folder: str | Path) -> Path:
    """Write ``table`` into ``folder`` (created); returns the file."""
    path = table_file(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = table.long_frame().to_csv(index=False, lineterminator="\n", float_format="%.10g")
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(text.encode("utf-8"))
    return path


@functools.lru_cache(maxsize=8)
def _load(path: Path, mtime_ns: int) -> LoggedTable:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        frame = pd.read_csv(
            io.StringIO(fh.read()),
            dtype={"prompt_id": str, "prompt": str, "task": str, "split": str, "model": str},
            keep_default_na=False,
        )
    return table_from_long(frame)


def load_logged(folder: str | Path) -> LoggedTable:
    """The imported table stored at ``folder`` (read once per process while the file is unchanged)."""
    path = table_file(folder).resolve()
    if not path.is_file():
        raise UserError(f"no imported outcome table at {path} (run `puppeteer outcomes import`)")
    return _load(path, path.stat().st_mtime_ns)
