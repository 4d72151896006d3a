"""A sub-command of the ``puppeteer`` command line: its name, help line, argument set-up and handler."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console

Handler = Callable[[argparse.Namespace, Console], int]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    handler: Handler


def positive_int(text: str) -> int:
    """An ``argparse`` type: a whole number >= 1 (``--concurrency 0`` or ``-5`` is refused at parsing)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value
