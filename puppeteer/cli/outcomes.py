"""``puppeteer outcomes``: build a pool's shipped outcome table (every agent alone on every item, and
two-step chains on top), show it."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from puppeteer.cli.command import Command
from puppeteer.errors import UserError


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
    build.add_argument("--concurrency", type=int, default=16, help="items at once (batched decoding)")
    steps = sub.add_parser(
        "steps",
        help="record two-step chains (a first answer from the table, then a verifier or reviser, called "
        "for real) on some shards; merge into the pool's table",
    )
    steps.add_argument("--pool", required=True, help="a pool with a replay: folder (or give --table)")
    steps.add_argument("--suite", required=True)
    steps.add_argument(
        "--shard", action="append", required=True, help="SPLIT:N, the first N items of a split; repeatable"
    )
    steps.add_argument("--second", required=True, help="comma-separated second agents (verifiers, revisers)")
    steps.add_argument(
        "--first",
        default=None,
        help="KIND=A[+B],... the first agents per kind (default: each kind's best on the train items at "
        "each --lam)",
    )
    steps.add_argument(
        "--lam",
        default="0",
        help="comma-separated prices per model minute at which each kind's best first agent is chosen",
    )
    steps.add_argument("--table", default=None, help="table folder (default: the pool's replay folder)")
    steps.add_argument("--work", default="runs/outcomes", help="scratch: the response cache and runs")
    steps.add_argument("--concurrency", type=int, default=16, help="items at once (batched decoding)")
    show = sub.add_parser("show", help="the per-agent table of a pool's outcome table, as markdown")
    show.add_argument("--pool", required=True)
    show.add_argument("--split", default="test")
    show.add_argument("--table", default=None, help="table folder (default: the pool's replay folder)")


def outcomes_command(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    from puppeteer.pool import load_pool

    pool = load_pool(args.pool)
    table = Path(args.table) if args.table else pool.replay
    if table is None:
        raise UserError(f"pool {pool.name!r} names no replay folder: give --table")
    if args.outcomes_cmd == "show":
        from puppeteer.analytics.outcome_table import markdown
        from puppeteer.replay import read_outcomes

        rows = read_outcomes(table)
        ran = {o.agent for o in rows if o.split == args.split}
        sys.stdout.write(markdown(rows, args.split, [a.name for a in pool.agents if a.name in ran]))
        return 0
    from puppeteer.jobs.outcomes import Shard, build

    if args.outcomes_cmd == "steps":
        return _steps(args, pool.name, table, console)
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


def _steps(args: argparse.Namespace, pool_name: str, table: object, console: Console) -> int:
    from pathlib import Path

    from puppeteer.jobs.outcomes import Shard
    from puppeteer.jobs.second_steps import build_steps, first_agents, parse_firsts
    from puppeteer.replay import read_outcomes

    try:
        shards = [Shard.parse(s) for s in args.shard]
        lams = [float(x) for x in args.lam.split(",") if x.strip()]
        firsts = (
            parse_firsts(args.first)
            if args.first
            else first_agents(read_outcomes(Path(str(table))), args.suite, lams)
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    console.print("first agents: " + ", ".join(f"{k}={'+'.join(a)}" for k, a in firsts.items()))
    build_steps(
        args.pool,
        args.suite,
        shards,
        Path(str(table)),
        Path(args.work) / pool_name / args.suite,
        seconds=[s.strip() for s in args.second.split(",") if s.strip()],
        firsts=firsts,
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
