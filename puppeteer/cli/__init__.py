"""The ``puppeteer`` command line: one module per command group, assembled by :mod:`puppeteer.cli.app`.

Each sub-command is a :class:`~puppeteer.cli.command.Command` (a configure and a handler function).
The CLI is the top layer: it may import anything; nothing else in the package imports it.
``puppeteer --version`` answers here, before the command groups (torch, the jobs) are imported.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from puppeteer.cli.version import PROG, asks_version, installed_version

    args = list(sys.argv[1:] if argv is None else argv)
    if asks_version(args):
        sys.stdout.write(f"{PROG} {installed_version()}\n")
        return 0
    from puppeteer.cli.app import main as run

    return run(args)


__all__ = ["main"]
