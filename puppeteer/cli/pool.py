"""``puppeteer pool``: list the shipped pools, show one pool's agents, measure the embedded models'
single-stream speeds that a pool declares (``calibrate``), measure the agents' cards (``cards``)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from puppeteer.cli.command import Command
from puppeteer.errors import UserError


def configure_pool(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="pool_cmd", required=True)
    show = sub.add_parser("show", help="a table of the pool's agents")
    show.add_argument("name", nargs="?", help="pool name (agents/<name>.yaml) or a YAML path")
    show.add_argument("--pool", dest="pool_name", default=None, help="the same, as an option")
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
    cards = sub.add_parser(
        "cards",
        help="measure each agent's card (price, speed, accuracy per domain) and store it beside the pool",
        description="Call every agent of the pool once on the first N items per domain of a calibration "
        "split of the suite (never its test split), through the env, and write the cards "
        "(<pool>.cards.json beside the pool's YAML, where the pool loader finds them; policy.cards=true "
        "reads them). Every call is a real call on a pool of real models.",
    )
    cards.add_argument("--pool", required=True, help="pool name (agents/<name>.yaml) or a YAML path")
    cards.add_argument("--suite", required=True, help="the suite whose domains the cards measure")
    cards.add_argument("--split", default="train", help="calibration split (train | validation)")
    cards.add_argument("--per-domain", type=int, default=20, help="calibration items per domain")
    cards.add_argument("--seed", type=int, default=0, help="item i is reset with seed + i")
    cards.add_argument(
        "--n",
        type=int,
        default=None,
        help="take the calibration items among the split's first N (as runs on N items take them; "
        "e.g. the items a shipped outcome table holds)",
    )
    cards.add_argument("--out", default=None, help="write here instead of beside the pool")


def pool_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.agents.pool import load_pool
    from puppeteer.utils.resources import data_dir

    if args.pool_cmd == "calibrate":
        return _calibrate(args, console)
    if args.pool_cmd == "cards":
        return _cards(args, console)
    if args.pool_cmd == "list":
        for path in sorted(data_dir("agents").glob("*.yaml")):
            pool = load_pool(path)
            console.print(f"[bold]{pool.name}[/bold] ({len(pool)} agents): {pool.description}")
        return 0
    from rich.markup import escape

    if (args.name is None) == (args.pool_name is None):
        raise UserError("pool show takes one pool: a name (pool show local) or --pool NAME")
    pool = load_pool(args.name or args.pool_name)
    console.print(f"[bold]pool {escape(pool.name)}[/bold]: {escape(pool.description)}")
    table = Table()
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


def _cards(args: argparse.Namespace, console: Console) -> int:
    import json

    from puppeteer.agents.cards import AgentCard, cards_path
    from puppeteer.agents.pool import load_pool
    from puppeteer.jobs.cards import measure_cards
    from puppeteer.utils.resources import find_yaml

    pool = load_pool(args.pool)
    out = args.out or cards_path(find_yaml("agents", args.pool))

    def show(card: AgentCard) -> None:
        console.print(json.dumps(card.to_dict()), markup=False, highlight=False, soft_wrap=True)

    cards = measure_cards(
        pool,
        args.suite,
        split=args.split,
        per_domain=args.per_domain,
        seed=args.seed,
        n=args.n,
        on_agent=show,
    )
    cards.save(out)
    console.print(f"written: {out}", markup=False, highlight=False)
    return 0


COMMANDS = (Command("pool", "inspect agent pools", configure_pool, pool_command),)
