"""``puppeteer serve``: argument parsing for :mod:`puppeteer.serving.serve` (FastAPI is imported only
when run)."""

from __future__ import annotations

import argparse
import importlib.util
from typing import TYPE_CHECKING

from puppeteer.cli.command import Command
from puppeteer.errors import UserError

if TYPE_CHECKING:
    from rich.console import Console


def configure_serve(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", required=True, help="policy spec (see `puppeteer eval --help`)")
    p.add_argument("--pool", required=True, help="pool name (agents/<name>.yaml) or a YAML path")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    p.add_argument("--max-steps", type=int, default=5)
    p.add_argument(
        "--lam",
        type=float,
        default=0.1,
        help="price of cost; a policy trained with lam_range routes at it unless a request sets its own "
        "(body field `lam`), clamped into the trained range",
    )
    p.add_argument(
        "--grader",
        default="exact",
        help="default answer format for questions (numeric, math, letter, exact); "
        "a request may set its own with the extra field `grader`",
    )
    p.add_argument(
        "--suite",
        default=None,
        help="questions found verbatim in this suite run as its items (graded; sim knows them)",
    )
    p.add_argument("--split", default="test")
    p.add_argument("--cache", default=None, help="SQLite response cache for model-calling backends")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--max-concurrency", type=int, default=8, help="requests routed at once (others wait)")
    p.add_argument(
        "--live",
        action="store_true",
        help="answer with each agent's live: model (a pool imported from logs: the router was trained on "
        "the logged outcomes, the live models answer)",
    )


def serve_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.agents.pool import load_pool
    from puppeteer.backends.cache import resolve_cache
    from puppeteer.serving.orchestrator import Orchestrator

    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"`puppeteer serve` needs {', '.join(missing)}: pip install 'puppeteer-orchestra[serve]'"
        )
    from puppeteer.serving.serve import known_graders, serve

    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port}: a TCP port is 1..65535")
    if not args.lam >= 0:
        raise UserError(f"--lam {args.lam}: a price of cost is >= 0")
    if args.max_concurrency < 1:
        raise UserError(
            f"--max-concurrency {args.max_concurrency}: at least 1 request must be routed at once"
        )
    if args.grader is not None and args.grader not in known_graders():
        raise UserError(f"--grader {args.grader!r}: unknown; known: {', '.join(sorted(known_graders()))}")
    pool = load_pool(args.pool)
    if args.live:
        pool = pool.live_pool()
    cache = resolve_cache(pool, args.cache, args.no_cache)
    orch = Orchestrator.load(
        args.policy,
        pool,
        max_steps=args.max_steps,
        lam=args.lam,
        grader=args.grader,
        suite=args.suite,
        split=args.split,
        cache=cache,
    )
    console.print(
        f"serving policy [bold]{orch.spec}[/bold] on pool [bold]{pool.name}[/bold] at "
        f"http://{args.host}:{args.port}/v1 (POST /v1/chat/completions)"
    )
    try:
        serve(orch, host=args.host, port=args.port, max_concurrency=args.max_concurrency)
    finally:
        orch.close()
    return 0


COMMANDS = (
    Command("serve", "serve a policy as an OpenAI-compatible endpoint", configure_serve, serve_command),
)
