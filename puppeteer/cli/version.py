"""The installed version, and ``puppeteer --version`` answered before the command line's heavy imports."""

from __future__ import annotations

from collections.abc import Sequence

PROG = "puppeteer"


def installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("puppeteer-orchestra")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def asks_version(argv: Sequence[str]) -> bool:
    """Whether argparse would answer ``--version``: it comes among the options before the command."""
    for arg in argv:
        if arg == "--version":
            return True
        if not arg.startswith("-"):  # the command: what follows is its own
            return False
    return False
