"""``puppeteer run``: one question through a workflow, a chain of agents or any policy, step by step."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console

from puppeteer.cli.command import Command
from puppeteer.errors import UserError

if TYPE_CHECKING:
    from puppeteer.types import Task, Trajectory


def configure_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("question", nargs="?", help="the question (or use --suite/--index)")
    p.add_argument("--pool", default="local")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--workflow", help="a conductor completion with model_id / subtasks / access_list")
    how.add_argument("--chain", help="comma-separated agent names or ids, run in order (step mode)")
    how.add_argument("--policy", help="any policy spec (see `puppeteer eval --help`), trained ones included")
    p.add_argument("--max-steps", type=int, default=5, help="with --policy: the step limit")
    p.add_argument(
        "--lam",
        type=float,
        default=0.1,
        help="with --policy: the price of cost; a policy trained with lam_range routes at it (clamped "
        "into its trained range, with a warning)",
    )
    p.add_argument("--suite", help="take the question (and its gold answer) from this suite")
    p.add_argument("--split", default="test")
    p.add_argument("--index", type=int, default=0, help="item index within the suite split")
    p.add_argument("--grader", default="exact", help="grader for a free question (numeric, letter, ...)")
    p.add_argument("--answer", default="", help="gold answer for a free question, if known")
    p.add_argument("--cache", default=None, help="SQLite response cache path")


def run_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.agents.pool import load_pool
    from puppeteer.envs.env import ConductorEnv
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
        raise UserError("give a question (the first argument) or --suite SUITE to take one from")
    pool = load_pool(args.pool)
    if args.policy:
        from puppeteer.serving.orchestrator import Orchestrator

        if not args.lam >= 0:
            raise UserError(f"--lam {args.lam}: a price of cost is >= 0")
        with Orchestrator.load(
            args.policy,
            pool,
            max_steps=args.max_steps,
            lam=args.lam,
            cache=args.cache,
            suite=args.suite,
            split=args.split,
        ) as orch:
            refusal = None if args.suite else orch.refusal(task.question)
            if refusal is not None:  # a simulated pool would answer "unknown" and charge every call
                raise UserError(refusal)
            result = orch.run_task(task)
        _print_trajectory(console, task, result.trajectory)
        at = f"  lambda={result.lam:g}" if result.lam is not None else ""
        console.print(f"policy: {result.policy}  calls={result.calls}{at}")
        return 0
    mode = "workflow" if args.workflow is not None else "step"
    chain = (
        []
        if args.workflow is not None
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
    from puppeteer.envs.rollout import run_actions, run_workflow_episode

    if mode == "workflow":
        traj = run_workflow_episode(env, args.workflow, seed=0, options={"task": task})
    else:
        traj = run_actions(env, [*chain, pool.terminator_id], seed=0, options={"task": task}).trajectory
    if traj.parse_error:  # a rejected workflow ran nothing: not a success, and no answer to show
        raise UserError(f"--workflow rejected: {traj.parse_error}")
    _print_trajectory(console, task, traj)
    return 0


def _print_trajectory(console: Console, task: Task, traj: Trajectory) -> None:
    console.rule(f"[bold]{task.id}[/bold]")
    console.print(task.question)
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


COMMANDS = (
    Command("run", "run one question through a workflow or a chain of agents", configure_run, run_command),
)
