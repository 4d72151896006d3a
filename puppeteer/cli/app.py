"""The ``puppeteer`` parser and entry point: the command groups' :class:`Command` tuples, in help order."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from rich.markup import escape

from puppeteer.cli import analytics, outcomes, pool, run, serve, suite, train
from puppeteer.cli import eval as eval_cli
from puppeteer.cli.command import Command
from puppeteer.cli.version import installed_version
from puppeteer.errors import UserError
from puppeteer.utils.consoles import output_console

GROUPS = (pool, suite, run, eval_cli, serve, train, outcomes, analytics)  # in the order `--help` lists them


def commands() -> tuple[Command, ...]:
    return tuple(cmd for group in GROUPS for cmd in group.COMMANDS)


def build_parser(cmds: Sequence[Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="puppeteer", description="Learned orchestration of LLM agents.")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for cmd in cmds:
        cmd.configure(sub.add_parser(cmd.name, help=cmd.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    cmds = commands()
    args = build_parser(cmds).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    console = output_console()
    handler = {c.name: c.handler for c in cmds}[args.command]
    try:
        return handler(args, console)
    except (UserError, OSError, KeyError, ValueError, ImportError) as e:  # one line, no traceback
        console.print(f"[red]error:[/red] {escape(str(e))}", soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
