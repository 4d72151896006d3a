"""``puppeteer eval``: its arguments, the response cache it picks, and the summary it prints.

The evaluation itself is :func:`puppeteer.evaluation.evaluate.evaluate_policy`; the tables come from
:mod:`puppeteer.analytics.tables`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.agents.pool import load_pool
from puppeteer.backends.cache import RESPONSE_CACHE_ENV, resolve_cache
from puppeteer.cli.command import Command, positive_int
from puppeteer.envs.aggregate import FINAL_CHOICES
from puppeteer.errors import UserError
from puppeteer.evaluation.evaluate import evaluate_policy, slug

if TYPE_CHECKING:
    from rich.console import Console


def add_replay_flag(p: argparse.ArgumentParser) -> None:
    """``--replay on|strict|off``: how a pool's shipped outcome table is used (``PUPPETEER_REPLAY``)."""
    from puppeteer.backends import REPLAY_ENV, REPLAY_MODES

    p.add_argument(
        "--replay",
        choices=REPLAY_MODES,
        default=os.environ.get(REPLAY_ENV, "on"),
        help="serve the calls that the pool's shipped outcome table holds from it (on, the default), "
        "refuse any other call (strict: nothing loads a model), or call the models again (off)",
    )


def apply_replay_flag(args: argparse.Namespace) -> None:
    from puppeteer.backends import REPLAY_ENV

    os.environ[REPLAY_ENV] = args.replay  # this process and the workers it starts


def configure_eval(p: argparse.ArgumentParser) -> None:
    from puppeteer.policies.registry import REGISTRY

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "policy specs:\n  " + "\n  ".join(REGISTRY.spec_forms())
    p.add_argument("--pool", required=True, help="pool name (agents/<name>.yaml) or a YAML path")
    p.add_argument("--suite", required=True, help="suite name (envs/<name>.yaml)")
    p.add_argument("--policy", required=True, help="policy spec, see below")
    p.add_argument(
        "--n",
        type=int,
        default=None,
        help="the first N items of the split in --seed's order (default: all); the quickstart and "
        "`puppeteer train` take their N items in seed 0's order, whatever their own seed",
    )
    p.add_argument("--split", default="test")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="orders the split's items (which N --n takes) and seeds each item's episode",
    )
    p.add_argument("--max-steps", type=int, default=5)
    p.add_argument(
        "--lam",
        type=float,
        default=0.1,
        help="cost weight in the reward; a policy trained with lam_range routes at it (clamped into its "
        "trained range, with a warning)",
    )
    p.add_argument(
        "--cache",
        default=None,
        help=f"SQLite response cache for model-calling backends (default: ${RESPONSE_CACHE_ENV} "
        "or ~/.cache/puppeteer/responses.sqlite)",
    )
    p.add_argument("--no-cache", action="store_true", help="call the models every time")
    add_replay_flag(p)
    p.add_argument(
        "--out",
        default=None,
        help="output directory for results.json and trajectories.jsonl "
        "(default: runs/eval/<pool>_<suite>_<split>_<policy>)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--json", action="store_true", help="print the summary as one JSON object (no table, no progress bar)"
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="spread the items over Ray workers: a local instance (no ADDRESS), 'auto' or "
        "ray://HEAD:10001 (needs the ray extra; same results as without)",
    )
    p.add_argument("--ray-workers", type=int, default=None, help="shards for --ray (default: cluster CPUs)")
    p.add_argument("--overwrite", action="store_true", help="replace a finished result in --out")
    p.add_argument(
        "--agents",
        default=None,
        help="comma-separated agents: the pool of these agents only, in this order (as `quickstart "
        "--agents`; a policy trained on a subset of a pool is evaluated on the same subset)",
    )
    p.add_argument(
        "--available",
        default=None,
        help="comma-separated agent names: evaluate on this fixed subset of the pool",
    )
    p.add_argument(
        "--k-available",
        type=int,
        default=None,
        help="a random k-of-n subset of the agents per item (seeded per item)",
    )
    p.add_argument(
        "--max-depth",
        type=int,
        default=0,
        help="conductor policies: how often the conductor may call itself (recursion)",
    )
    p.add_argument(
        "--recursion",
        choices=("offer", "always"),
        default="offer",
        help="conductor policies with --max-depth: offer the conductor as a worker it may name as the "
        "last step (offer), or follow every round with a review round (always: test-time scaling)",
    )
    p.add_argument(
        "--price-in-prompt",
        action="store_true",
        help="conductor policies: the prompt states the price of cost (--lam per unit of the cost "
        "model); a conductor trained over a lambda range always sees it",
    )
    p.add_argument(
        "--prompt",
        default=None,
        help="conductor policies: the prompt config (configs/conductor/NAME.yaml, e.g. prompt-v2-cards: "
        "the agents table with each agent's measured card)",
    )
    p.add_argument(
        "--cost-model",
        default=None,
        help="conductor policies: what --lam prices (tokens, usd, calls, minutes, flops); default tokens",
    )
    p.add_argument(
        "--final-answer",
        choices=FINAL_CHOICES,
        default=None,
        help="how the final answer is chosen, in place of each policy's own: last (the last step's), "
        "vote (majority over the steps' answers), plan (workflow policies: the plan's own final line) or "
        "cascade (plan, and the line may make the plan a cascade: final = 'cascade:TRIGGER')",
    )
    p.add_argument(
        "--concurrency",
        type=positive_int,
        default=None,
        help="items in flight at once (default: 16 for pools that call models, 1 for sim)",
    )


def eval_command(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from puppeteer.analytics.tables import summary_rows

    if args.json:
        # stdout carries the one JSON object only: what a library prints while the evaluation runs
        # (transformers prints a line on import when WANDB_MODE=offline) goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            result = _evaluate(args)
        sys.stdout.write(json.dumps(result.to_dict(), default=str) + "\n")
        return 0 if not _all_failed(result) else 1
    result = _evaluate(args)
    table = Table(title="evaluation", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    for label, value in summary_rows(result):
        table.add_row(label, value)
    console.print(table)
    out = Path(result.out_dir)
    console.print(f"results: {out / 'results.json'}\ntrajectories: {out / 'trajectories.jsonl'}")
    if _all_failed(result):  # not a result: say so and exit non-zero (the run is on disk to inspect)
        console.print(
            f"error: every one of the {result.n} items failed on a call (the warnings above name the "
            "first; trajectories.jsonl has each); check the pool's backend",
            markup=False,
            soft_wrap=True,
        )
        return 1
    return 0


def _evaluate(args: argparse.Namespace) -> Any:
    """The evaluation ``puppeteer eval`` asks for: its flags checked, its pool and cache, the result."""
    apply_replay_flag(args)
    conductor = args.policy.strip().lower().startswith("conductor")
    prompt_flags = {
        "--prompt": args.prompt,
        "--cost-model": args.cost_model,
        "--price-in-prompt": args.price_in_prompt,
    }
    given = [flag for flag, value in prompt_flags.items() if value]
    if given and not conductor:
        raise UserError(
            f"{', '.join(given)}: for conductor policies only (the conductor's prompt); got {args.policy!r}"
        )
    pool = load_pool(args.pool)
    if args.agents:
        pool = pool.subset([a.strip() for a in args.agents.split(",") if a.strip()])
    cache = resolve_cache(pool, args.cache, args.no_cache, model_policy=conductor)
    out = (
        Path(args.out)
        if args.out
        else Path("runs") / "eval" / slug(f"{pool.name}_{args.suite}_{args.split}_{args.policy}")
    )
    available = [a.strip() for a in args.available.split(",") if a.strip()] if args.available else None
    common: dict[str, Any] = dict(  # the same items and settings on either path
        split=args.split,
        n=args.n,
        seed=args.seed,
        out_dir=out,
        cache=cache,
        max_steps=args.max_steps,
        lam=args.lam,
        overwrite=args.overwrite,
        final_answer=args.final_answer,
    )
    ray = None
    if getattr(args, "ray", None) is not None:  # an executor choice: the same evaluation on Ray workers
        from puppeteer.evaluation.settings import RayExecutor

        ray = RayExecutor(address=args.ray, workers=args.ray_workers)
    return evaluate_policy(
        args.policy,
        pool,
        args.suite,
        **common,
        progress=not (args.quiet or args.json) and ray is None,
        available=available,
        k_available=args.k_available,
        price_in_prompt=args.price_in_prompt,
        prompt=args.prompt,
        cost_model=args.cost_model,
        max_depth=args.max_depth,
        recursion=args.recursion,
        concurrency=args.concurrency,
        ray=ray,
    )


def _all_failed(result: Any) -> bool:
    return bool(result.n) and result.n_errors == result.n


COMMANDS = (
    Command(
        "eval",
        "evaluate a policy (baseline spec or trained puppeteer) on a suite",
        configure_eval,
        eval_command,
    ),
)
