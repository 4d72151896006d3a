"""The ``puppeteer`` command line. Each sub-command is a (configure, handler) pair in a registry."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from puppeteer.errors import UserError
from puppeteer.eval_cli import add_replay_flag, apply_replay_flag, configure_eval, eval_command
from puppeteer.serve_cli import configure_serve, serve_command

if TYPE_CHECKING:
    from puppeteer.types import Task, Trajectory

Handler = Callable[[argparse.Namespace, Console], int]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    handler: Handler


# ----------------------------------------------------------------------------- pool
def _configure_pool(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="pool_cmd", required=True)
    show = sub.add_parser("show", help="a table of the pool's agents")
    show.add_argument("name", help="pool name (agents/<name>.yaml) or a YAML path")
    sub.add_parser("list", help="the shipped pools")


def _pool(args: argparse.Namespace, console: Console) -> int:
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


# ----------------------------------------------------------------------------- run
def _configure_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("question", nargs="?", help="the question (or use --suite/--index)")
    p.add_argument("--pool", default="local")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--workflow", help="a conductor completion with model_id / subtasks / access_list")
    how.add_argument("--chain", help="comma-separated agent names or ids, run in order (step mode)")
    how.add_argument("--policy", help="any policy spec (see `puppeteer eval --help`), trained ones included")
    p.add_argument("--max-steps", type=int, default=5, help="with --policy: the step limit")
    p.add_argument("--suite", help="take the question (and its gold answer) from this suite")
    p.add_argument("--split", default="test")
    p.add_argument("--index", type=int, default=0, help="item index within the suite split")
    p.add_argument("--grader", default="exact", help="grader for a free question (numeric, letter, ...)")
    p.add_argument("--answer", default="", help="gold answer for a free question, if known")
    p.add_argument("--cache", default=None, help="SQLite response cache path")


def _run(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.env import ConductorEnv
    from puppeteer.pool import load_pool
    from puppeteer.tasks import load_suite
    from puppeteer.types import Task

    if args.suite:
        tasks = load_suite(args.suite, args.split)
        if not 0 <= args.index < len(tasks):
            raise UserError(f"--index {args.index}: {args.suite}/{args.split} has items 0..{len(tasks) - 1}")
        task = tasks[args.index]
    elif args.question:
        task = Task(
            id="cli/0",
            question=args.question,
            answer=args.answer,
            suite="cli",
            domain="cli",
            grader=args.grader,
        )
    else:
        console.print("[red]give a question or --suite[/red]")
        return 2
    pool = load_pool(args.pool)
    if args.policy:
        from puppeteer.orchestrator import Orchestrator

        with Orchestrator.load(
            args.policy, pool, max_steps=args.max_steps, cache=args.cache, suite=args.suite, split=args.split
        ) as orch:
            result = orch.run_task(task)
        _print_trajectory(console, task, result.trajectory)
        console.print(f"policy: {result.policy}  calls={result.calls}")
        return 0
    mode = "workflow" if args.workflow else "step"
    chain = (
        []
        if args.workflow
        else [
            int(x) if x.strip().isdigit() else pool.index(x.strip())
            for x in args.chain.split(",")
            if x.strip()
        ]
    )
    bad = [a for a in chain if not 0 <= a <= pool.terminator_id]
    if bad:
        raise UserError(
            f"--chain names agent id {bad[0]}, but pool {pool.name!r} has agents "
            f"0..{len(pool) - 1} "
            f"(and the Terminator, {pool.terminator_id})"
        )
    env = ConductorEnv(mode=mode, pool=pool, tasks=[task], max_steps=max(len(chain) + 1, 5), cache=args.cache)
    from puppeteer.rollout import run_actions, run_workflow_episode

    if mode == "workflow":
        traj = run_workflow_episode(env, args.workflow, seed=0, options={"task": task})
    else:
        traj = run_actions(env, [*chain, pool.terminator_id], seed=0, options={"task": task}).trajectory
    _print_trajectory(console, task, traj)
    return 2 if traj.parse_error else 0  # a rejected workflow ran nothing: not a success


def _print_trajectory(console: Console, task: Task, traj: Trajectory) -> None:
    console.rule(f"[bold]{task.id}[/bold]")
    console.print(task.question)
    if traj.parse_error:
        console.print(f"[red]workflow rejected:[/red] {traj.parse_error}")
    for s in traj.steps:
        c = s.completion
        cost = f"${c.cost_usd:.5f}" if c.cost_usd is not None else "n/a"
        console.rule(f"step {s.index + 1}: {s.agent_name} (sees {list(s.visible)})")
        console.print(f"[dim]{s.subtask}[/dim]")
        console.print(c.text, markup=False)
        console.print(
            f"[cyan]answer={s.answer!r} prompt={c.prompt_tokens} completion={c.completion_tokens} "
            f"cost={cost} latency={c.latency_s:.2f}s cached={c.cached}[/cyan]"
        )
    console.rule("result")
    verdict = "" if not task.answer else (" [green]correct[/green]" if traj.correct else " [red]wrong[/red]")
    console.print(
        f"final answer: {traj.final_answer!r}{verdict}  tokens={traj.prompt_tokens}+"
        f"{traj.completion_tokens} cost=${traj.cost_usd:.5f}"
    )


# ----------------------------------------------------------------------------- train / quickstart
def _configure_train(p: argparse.ArgumentParser) -> None:
    # everything after ``train`` goes to Hydra untouched: overrides and its own flags
    # (-m/--multirun for sweeps like lam=0,0.1,0.2, --cfg job, --info, --help) and ``+key=value``
    # additions: no character that starts an override or a Hydra flag marks an option here
    p.prefix_chars = "\x00"
    p.add_argument(
        "overrides", nargs=argparse.REMAINDER, help="Hydra overrides, e.g. pool=sim-paper suite=gsm8k lam=0.2"
    )
    p.set_defaults(multirun=False)


def _train(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.jobs.hydra_entry import hydra_main
    from puppeteer.train.conductor_entry import conductor_main, is_conductor_track

    if is_conductor_track(args.overrides):  # GRPO on the conductor: configs/conductor.yaml
        conductor_main([*(["-m"] if args.multirun else []), *args.overrides])
        return 0
    hydra_main([*(["-m"] if args.multirun else []), *args.overrides])
    return 0


def _configure_quickstart(p: argparse.ArgumentParser) -> None:
    from puppeteer.jobs.quickstart import QuickstartConfig

    d = QuickstartConfig()
    p.add_argument("--out", default="runs/quickstart", help="run directory (report.md, results.json, plots)")
    p.add_argument(
        "--cache", default=None, help="SQLite response cache (default ~/.cache/puppeteer/responses.sqlite)"
    )
    p.add_argument("--n-train", type=int, default=d.n_train)
    p.add_argument("--n-eval", type=int, default=d.n_eval)
    p.add_argument("--episodes", type=int, default=d.episodes)
    p.add_argument("--lam", type=float, default=d.lam)
    p.add_argument(
        "--max-steps",
        type=int,
        default=d.max_steps,
        help="agents per item (1: learned routing, bounded cost; 2+: chains, many more calls)",
    )
    p.add_argument("--encoder", default=d.encoder)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: every CPU)")
    p.add_argument(
        "--no-batching",
        dest="batching",
        action="store_false",
        help="decode one model call at a time (the path before batched decoding; for benchmarks)",
    )
    add_replay_flag(p)


def _quickstart(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.jobs.quickstart import QuickstartConfig, run_quickstart

    apply_replay_flag(args)
    cfg = QuickstartConfig(
        n_train=args.n_train,
        n_eval=args.n_eval,
        episodes=args.episodes,
        lam=args.lam,
        max_steps=args.max_steps,
        encoder=args.encoder,
        seed=args.seed,
        n_threads=args.threads,
        batching=args.batching,
    )
    run_quickstart(cfg, args.out, cache=args.cache, console=console)
    return 0


# ----------------------------------------------------------------------------- suite
def _configure_suite(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="suite_cmd", required=True)
    sub.add_parser("list", help="the shipped suites with their items per split")


def _suite(args: argparse.Namespace, console: Console) -> int:
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


# ----------------------------------------------------------------------------- outcomes
def _configure_outcomes(p: argparse.ArgumentParser) -> None:
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
    show = sub.add_parser("show", help="the per-agent table of a pool's outcome table, as markdown")
    show.add_argument("--pool", required=True)
    show.add_argument("--split", default="test")
    show.add_argument("--table", default=None, help="table folder (default: the pool's replay folder)")


def _outcomes(args: argparse.Namespace, console: Console) -> int:
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


def commands() -> tuple[Command, ...]:
    return (
        Command("pool", "inspect agent pools", _configure_pool, _pool),
        Command("suite", "list the task suites", _configure_suite, _suite),
        Command("run", "run one question through a workflow or a chain of agents", _configure_run, _run),
        Command(
            "eval",
            "evaluate a policy (baseline spec or trained puppeteer) on a suite",
            configure_eval,
            eval_command,
        ),
        Command("serve", "serve a policy as an OpenAI-compatible endpoint", configure_serve, serve_command),
        Command(
            "train",
            "train the step-wise puppeteer, or the conductor with track=conductor (Hydra overrides)",
            _configure_train,
            _train,
        ),
        Command(
            "quickstart",
            "train and evaluate on real local models, write a report",
            _configure_quickstart,
            _quickstart,
        ),
        Command(
            "outcomes",
            "build a pool's shipped outcome table (replayed with no model)",
            _configure_outcomes,
            _outcomes,
        ),
        *analytics_commands(),
    )


def analytics_commands() -> tuple[Command, ...]:
    from puppeteer.analytics import commands as ac

    return (
        Command(
            "ab",
            "paired A/B test of two policies (specs or run dirs) on the same items",
            ac.configure_ab,
            ac.ab_command,
        ),
        Command(
            "sweep",
            "train and evaluate one policy per (lambda, seed); cost-accuracy plot",
            ac.configure_sweep,
            ac.sweep_command,
        ),
        Command(
            "graph",
            "emergent collaboration graphs of runs: PNGs and an HTML report",
            ac.configure_graph,
            ac.graph_command,
        ),
        Command(
            "query",
            "index runs into the SQLite trajectory store and run SQL",
            ac.configure_query,
            ac.query_command,
        ),
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("puppeteer-orchestra")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser(cmds: Sequence[Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="puppeteer", description="Learned orchestration of LLM agents.")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
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
    console = Console()
    handler = {c.name: c.handler for c in cmds}[args.command]
    try:
        return handler(args, console)
    except (UserError, OSError, KeyError, ValueError, ImportError) as e:  # one line, no traceback
        console.print(f"[red]error:[/red] {escape(str(e))}", soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
