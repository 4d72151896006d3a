"""``puppeteer suite``: the shipped task suites."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from puppeteer.cli.command import Command


def configure_suite(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="suite_cmd", required=True)
    sub.add_parser("list", help="the shipped suites with their items per split")


def suite_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.tasks.packages import MissingDataPackage
    from puppeteer.tasks.spec import suite_names
    from puppeteer.tasks.suites import split_sizes, suite_spec

    table = Table(title="suites (envs/*.yaml)")
    for col in ("name", "items per split", "description"):
        table.add_column(col)
    for name in suite_names():
        spec = suite_spec(name)
        try:
            sizes = ", ".join(f"{k} {v}" for k, v in split_sizes(name).items())
        except MissingDataPackage as e:
            sizes = f"[dim]needs {escape(str(e).split(';')[0])}[/dim]"
        table.add_row(name, sizes, escape(" ".join(spec.description.split())))
    console.print(table)
    return 0


COMMANDS = (Command("suite", "list the task suites", configure_suite, suite_command),)
