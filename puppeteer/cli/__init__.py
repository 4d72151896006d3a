"""The ``puppeteer`` command line: one module per command group, assembled by :mod:`puppeteer.cli.app`.

Each sub-command is a :class:`~puppeteer.cli.command.Command` (a configure and a handler function).
The CLI is the top layer: it may import anything; nothing else in the package imports it.
"""

from puppeteer.cli.app import main

__all__ = ["main"]
