"""``puppeteer outcomes``: build a pool's shipped outcome table (every agent alone on every item), show it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from rich.console import Console

from puppeteer.cli.command import Command, positive_int
from puppeteer.errors import UserError

if TYPE_CHECKING:
    from puppeteer.replay import Outcome


def configure_outcomes(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="outcomes_cmd", required=True)
    build = sub.add_parser(
        "build", help="run every agent alone on every item of some shards; merge into the pool's table"
    )
    build.add_argument("--pool", required=True, help="a pool with a replay: folder (or give --table)")
    build.add_argument("--suite", required=True)
    build.add_argument(
        "--shard", action="append", required=True, help="SPLIT:N, the first N items of a split; repeatable"
    )
    build.add_argument("--agents", default=None, help="comma-separated agents (default: all)")
    build.add_argument("--table", default=None, help="table folder (default: the pool's replay folder)")
    build.add_argument("--work", default="runs/outcomes", help="scratch: the response cache and runs")
    build.add_argument(
        "--concurrency", type=positive_int, default=16, help="items at once (batched decoding)"
    )
    show = sub.add_parser("show", help="the per-agent table of a pool's outcome table, as markdown")
    show.add_argument("--pool", required=True)
    show.add_argument("--split", default="test")
    show.add_argument("--table", default=None, help="table folder (default: the pool's replay folder)")
    show.add_argument(
        "--partial",
        action="store_true",
        help="show a table whose agents cover different items (on the items they all have)",
    )


def _split_size(rows: Sequence[Outcome], split: str) -> str | None:
    """``of N in SUITE/SPLIT``: how many items the suite's split holds (None where it cannot load)."""
    from puppeteer.tasks import load_suite

    suites = {o.suite for o in rows if o.split == split}
    if len(suites) != 1:
        return None
    suite = suites.pop()
    try:
        n = len(load_suite(suite, split))
    except Exception:  # a suite whose data package is missing: the table still shows
        return None
    return f"of {n:,} in {suite}/{split}"


def outcomes_command(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    from puppeteer.pool import load_pool

    pool = load_pool(args.pool)
    table = Path(args.table) if args.table else pool.replay
    if table is None:
        raise UserError(f"pool {pool.name!r} names no replay folder: give --table")
    if args.outcomes_cmd == "show":
        from puppeteer.analytics.outcome_table import check_coverage, coverage, markdown
        from puppeteer.replay import OUTCOMES_FILE, read_outcomes

        path = table / OUTCOMES_FILE
        if not path.is_file():
            raise UserError(f"{path}: no outcome table there; build it with `puppeteer outcomes build`")
        rows = read_outcomes(table)
        ran = {o.agent for o in rows if o.split == args.split}
        agents = [a.name for a in pool.agents if a.name in ran]
        cov = replace(coverage(rows, args.split, agents), of=_split_size(rows, args.split))
        if not args.partial:
            check_coverage(cov, str(path))
        sys.stdout.write(f"Coverage: {cov.line()}\n\n")
        sys.stdout.write(markdown(rows, args.split, agents))
        return 0
    from puppeteer.jobs.outcomes import Shard, build

    shards = [Shard.parse(s) for s in args.shard]
    build(
        args.pool,
        args.suite,
        shards,
        table,
        Path(args.work) / pool.name / args.suite,
        agents=args.agents.split(",") if args.agents else None,
        concurrency=args.concurrency,
        progress=console.is_terminal,
    )
    console.print(f"table: {table}")
    return 0


COMMANDS = (
    Command(
        "outcomes",
        "build a pool's shipped outcome table (replayed with no model)",
        configure_outcomes,
        outcomes_command,
    ),
)
