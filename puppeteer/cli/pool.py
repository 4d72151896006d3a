"""``puppeteer pool``: list the shipped pools, show one pool's agents."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from puppeteer.cli.command import Command


def configure_pool(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="pool_cmd", required=True)
    show = sub.add_parser("show", help="a table of the pool's agents")
    show.add_argument("name", help="pool name (agents/<name>.yaml) or a YAML path")
    sub.add_parser("list", help="the shipped pools")


def pool_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.pool import load_pool
    from puppeteer.resources import data_dir

    if args.pool_cmd == "list":
        for path in sorted(data_dir("agents").glob("*.yaml")):
            pool = load_pool(path)
            console.print(f"[bold]{pool.name}[/bold] ({len(pool)} agents): {pool.description}")
        return 0
    pool = load_pool(args.name)
    table = Table(title=f"pool {pool.name}: {pool.description}")
    for col in ("id", "name", "model", "backend", "pattern", "tools", "$/1M in", "$/1M out", "params (B)"):
        table.add_column(col)
    for i, a in enumerate(pool.agents):
        table.add_row(
            str(i),
            a.name,
            a.model.target,
            a.model.backend,
            a.pattern,
            ",".join(a.tools) or "-",
            f"{a.model.price_in:g}",
            f"{a.model.price_out:g}",
            f"{a.model.params_b:g}",
        )
    table.add_row(str(pool.terminator_id), "terminator", "-", "-", "ends the episode", "-", "0", "0", "0")
    console.print(table)
    return 0


COMMANDS = (Command("pool", "inspect agent pools", configure_pool, pool_command),)
