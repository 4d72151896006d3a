"""``puppeteer train`` (Hydra: the step-wise puppeteer, or the conductor with ``track=conductor``) and
``puppeteer quickstart`` (train and evaluate on real local models)."""

from __future__ import annotations

import argparse

from rich.console import Console

from puppeteer.cli.command import Command, positive_int
from puppeteer.cli.eval import add_replay_flag, apply_replay_flag


def configure_train(p: argparse.ArgumentParser) -> None:
    # everything after ``train`` goes to Hydra untouched: overrides and its own flags
    # (-m/--multirun for sweeps like lam=0,0.1,0.2, --cfg job, --info, --help) and ``+key=value``
    # additions: no character that starts an override or a Hydra flag marks an option here
    p.prefix_chars = "\x00"
    p.add_argument(
        "overrides", nargs=argparse.REMAINDER, help="Hydra overrides, e.g. pool=sim-paper suite=gsm8k lam=0.2"
    )
    p.set_defaults(multirun=False)


def train_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.jobs.conductor_entry import conductor_main, is_conductor_track
    from puppeteer.jobs.hydra_entry import hydra_main

    if is_conductor_track(args.overrides):  # GRPO on the conductor: configs/conductor.yaml
        conductor_main([*(["-m"] if args.multirun else []), *args.overrides])
        return 0
    hydra_main([*(["-m"] if args.multirun else []), *args.overrides])
    return 0


def _names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names (agents, policy specs), blanks dropped."""
    return tuple(a.strip() for a in text.split(",") if a.strip())


def _task_dims(text: str) -> int | None:
    """``--task-dims``: a whole number of directions, at least 1, or ``all`` (the whole embedding)."""
    return None if text.strip().lower() == "all" else positive_int(text)


def configure_quickstart(p: argparse.ArgumentParser) -> None:
    from puppeteer.jobs.quickstart import QuickstartConfig

    d = QuickstartConfig()
    p.add_argument("--out", default="runs/quickstart", help="run directory (report.md, results.json, plots)")
    p.add_argument(
        "--cache", default=None, help="SQLite response cache (default ~/.cache/puppeteer/responses.sqlite)"
    )
    p.add_argument(
        "--pool",
        default=d.pool,
        help="pool name or YAML path with the job's eight agents (default local-mix, replayed; sim-local: "
        "the same agents on the simulator calibrated on its table)",
    )
    p.add_argument(
        "--agents",
        type=_names,
        default=d.agents,
        help="comma-separated agents of the pool the job routes between (default: local-mix's eight "
        "solvers; e.g. add qwen0.5b-verify on local-mix-steps, whose table holds its second steps)",
    )
    p.add_argument(
        "--baselines",
        type=_names,
        default=d.baselines,
        help=f"comma-separated baseline policies beside the fitted rules (default {','.join(d.baselines)})",
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
    p.add_argument(
        "--after-call-episodes",
        type=int,
        default=d.after_call_episodes,
        help="episodes for the decision after the one-call router's call (0: the router alone; "
        "experiments/local-mix/README.md section 7)",
    )
    p.add_argument(
        "--first-again-episodes",
        type=int,
        default=d.first_again_episodes,
        help="backward induction (0: off): the decision after every first call is learned, then the "
        "first call again with that decision fixed, in this many episodes (experiments/steps-learner)",
    )
    p.add_argument("--encoder", default=d.encoder)
    p.add_argument(
        "--task-dims",
        type=_task_dims,
        default=d.task_dims,
        help=f"the question read on its K principal directions among the training items (default "
        f"{d.task_dims}; fewer: routes closer to one per kind; 'all': the whole embedding)",
    )
    p.add_argument(
        "--by-kind",
        action="store_true",
        help="read the question only as its kind (a classifier fitted on the training items' named "
        "kinds: the input a per-kind rule reads; replaces --task-dims)",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--seeds",
        type=int,
        default=d.seeds,
        help="routers to train (seeds SEED, SEED+1, ...): the headline gives their mean and worst seed "
        "against the best rule and the best single agent (about 6 min a seed on the replayed table)",
    )
    p.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: every CPU)")
    p.add_argument(
        "--no-batching",
        dest="batching",
        action="store_false",
        help="decode one model call at a time (the path before batched decoding; for benchmarks)",
    )
    p.add_argument(
        "--trajectories",
        action="store_true",
        help="also keep every training episode (train*/trajectories.jsonl; hundreds of MB at the defaults)",
    )
    add_replay_flag(p)


def quickstart_command(args: argparse.Namespace, console: Console) -> int:
    from puppeteer.jobs.quickstart import QuickstartConfig, run_quickstart

    apply_replay_flag(args)
    cfg = QuickstartConfig(
        pool=args.pool,
        agents=args.agents,
        baselines=args.baselines,
        n_train=args.n_train,
        n_eval=args.n_eval,
        episodes=args.episodes,
        lam=args.lam,
        max_steps=args.max_steps,
        after_call_episodes=args.after_call_episodes,
        first_again_episodes=args.first_again_episodes,
        encoder=args.encoder,
        task_dims=None if args.by_kind else args.task_dims,
        by_kind=args.by_kind,
        seed=args.seed,
        seeds=args.seeds,
        n_threads=args.threads,
        batching=args.batching,
        trajectories=args.trajectories,
    )
    run_quickstart(cfg, args.out, cache=args.cache, console=console)
    return 0


COMMANDS = (
    Command(
        "train",
        "train the step-wise puppeteer, or the conductor with track=conductor (Hydra overrides)",
        configure_train,
        train_command,
    ),
    Command(
        "quickstart",
        "train and evaluate on real local models, write a report",
        configure_quickstart,
        quickstart_command,
    ),
)
