"""The rich console that commands and jobs write to: wide and unwrapped when output is not a terminal.

rich wraps at 80 columns when stdout is a file or a pipe, so tables were cut and printed paths broke
across lines in logs. :func:`output_console` keeps a terminal's own width; elsewhere (a file, a pipe,
CI) it draws at :data:`FILE_WIDTH` columns (tables still take only the width their cells need) and
never wraps long lines, unless ``COLUMNS`` names a width.
"""

from __future__ import annotations

import os
from typing import IO

from rich.console import Console

FILE_WIDTH = 200  # columns a table may take in a file: every shipped table fits


def output_console(file: IO[str] | None = None) -> Console:
    """A console on ``file`` (stdout by default): the terminal's width there, else wide and unwrapped."""
    console = Console(file=file)
    if console.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():
        return console
    return Console(file=file, width=FILE_WIDTH, soft_wrap=True)
