"""``puppeteer pool``: list the shipped pools, show one pool's agents, measure the embedded models'
single-stream speeds that a pool declares (``calibrate``)."""

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
    from puppeteer.jobs.calibrate import DEFAULT_MODELS

    cal = sub.add_parser(
        "calibrate",
        help="single-stream prefill and decode speed of embedded models (a pool's prefill_tps, decode_tps)",
        description="Measure each embedded llama.cpp model alone, one request at a time, greedy: the "
        "prefill_tps and decode_tps that a pool declares (agents/<pool>.yaml) to price every call as the "
        "seconds it takes alone on this machine. Run it on an idle machine.",
    )
    cal.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated embedded model keys")
    cal.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: every CPU)")
    cal.add_argument("--reps", type=int, default=3, help="rounds per model; the medians are reported")
    cal.add_argument("--tokens", type=int, default=64, help="completion tokens of the decode request")
    cal.add_argument("--repeat", type=int, default=6, help="filler repeats in the prompt (~6: ~300 tokens)")
    cal.add_argument("--out", "--json", dest="out", default=None, help="also write the results as JSON")


def pool_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.pool import load_pool
    from puppeteer.resources import data_dir

    if args.pool_cmd == "calibrate":
        return _calibrate(args, console)
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


def _calibrate(args: argparse.Namespace, console: Console) -> int:
    import json

    from puppeteer.jobs.calibrate import calibrate

    def show(key: str, speeds: dict[str, float]) -> None:
        console.print(f"{key}: {json.dumps(speeds)}", markup=False, highlight=False, soft_wrap=True)

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    calibrate(models, args.threads, args.reps, args.tokens, args.repeat, out=args.out, on_model=show)
    if args.out:
        console.print(f"written: {args.out}", markup=False, highlight=False)
    return 0


COMMANDS = (Command("pool", "inspect agent pools", configure_pool, pool_command),)
