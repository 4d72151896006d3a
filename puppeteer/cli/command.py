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
