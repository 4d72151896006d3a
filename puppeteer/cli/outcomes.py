"""``puppeteer outcomes``: build a pool's shipped outcome table (every agent alone on every item, and
two-step chains on top), show it; import a table of logged outcomes; run the field's routers and the
learned router on it."""

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
    from puppeteer.backends.replay import Outcome


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
    steps.add_argument(
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
    imp = sub.add_parser(
        "import",
        help="check a table of logged outcomes (CSV, JSONL, Parquet; long or wide) and write a pool and a "
        "suite that replay it (docs/own-outcomes.md)",
    )
    imp.add_argument("files", nargs="+", help="table files of one form, concatenated")
    imp.add_argument("--out", required=True, help="output folder: pool.yaml, suite.yaml, logged.csv.gz")
    imp.add_argument("--name", default=None, help="pool and suite name (default: the folder's name)")
    imp.add_argument("--form", default="auto", choices=("auto", "long", "wide"))
    imp.add_argument("--prices", default=None, help="YAML/JSON {model: {input, output}}, USD per 1M tokens")
    imp.add_argument(
        "--dedupe-splits",
        action="store_true",
        help="drop a prompt whose text is in two splits from every split but --keep-split (default: refuse)",
    )
    imp.add_argument("--keep-split", default="test", help="the split a shared prompt stays in (default test)")
    imp.add_argument(
        "--drop-incomplete", action="store_true", help="drop prompts lacking a score for some model"
    )
    imp.add_argument(
        "--test-fraction", type=float, default=0.2, help="without a split column: share hashed to test"
    )
    imp.add_argument(
        "--validation-fraction",
        type=float,
        default=0.1,
        help="without a validation split: the share of train hashed into one (0: none)",
    )
    imp.add_argument(
        "--live", action="append", default=[], help="MODEL=LITELLM_ID: the live model `serve` calls"
    )
    imp.add_argument("--force", action="store_true", help="replace an existing output folder")
    export = sub.add_parser(
        "export", help="a pool's shipped outcome table in the long form that `outcomes import` reads"
    )
    export.add_argument("--pool", required=True, help="a pool with a replay: folder")
    export.add_argument("--suite", required=True, help="the suite whose questions become the prompts")
    export.add_argument("--split", action="append", default=None, help="splits to export (default: all)")
    export.add_argument("--out", required=True, help="a .csv, .csv.gz, .jsonl or .parquet file")
    routers = sub.add_parser(
        "routers",
        help="the field's routers and the learned router on an imported table: metrics, table, plot",
    )
    routers.add_argument("folder", help="an imported table's folder (from `outcomes import`)")
    routers.add_argument("--out", required=True, help="where results.json, routers.md, routers.png go")
    routers.add_argument("--seeds", default="0,1,2,3,4")
    routers.add_argument("--encoder", default="minilm", help="minilm, or hashing (fast, no model)")
    routers.add_argument("--train-split", default="train")
    routers.add_argument("--test-split", default="test")
    routers.add_argument("--lams", type=int, default=24, help="points of the cost-knob sweep")
    routers.add_argument("--episodes", type=int, default=30000, help="the learned router's training episodes")
    routers.add_argument("--lr", type=float, default=3e-3, help="the learned router's learning rate")
    routers.add_argument(
        "--first-weights",
        default="policy",
        choices=("policy", "uniform"),
        help="the learned router's first-decision loss weights (trainer.first_weights)",
    )
    routers.add_argument("--no-learned", action="store_true", help="only the field's routers")
    fit = sub.add_parser(
        "fit-sim",
        help="fit a simulated pool to a pool's shipped outcome table (accuracy, tokens, error correlation, "
        "verifier rates) and write its pool file",
    )
    fit.add_argument("--pool", required=True, help="a pool with a shipped table (replay: folder)")
    fit.add_argument(
        "--suite", required=True, help="the table's suite (its questions give visible difficulty)"
    )
    fit.add_argument("--name", default="sim-local", help="the simulated pool's name")
    fit.add_argument("--out", required=True, help="the pool file to write (e.g. agents/sim-local.yaml)")
    fit.add_argument("--no-group", action="store_true", help="no per-model correlation (group_corr 0)")
    fit.add_argument(
        "--verifier",
        action="append",
        default=[],
        help="fit only this verifier's chains; repeatable (default: all)",
    )
    fit.add_argument(
        "--chains",
        action="append",
        default=[],
        help="SPLIT:N, read only the chains on the first N items of a split; repeatable (default: all)",
    )


def _import(args: argparse.Namespace, console: Console) -> int:
    from types import MappingProxyType

    from puppeteer.outcomes.importer import import_table
    from puppeteer.outcomes.table import ReadOptions, read_prices

    live = {}
    for item in args.live:
        model, sep, target = item.partition("=")
        if not sep or not model or not target:
            raise UserError(f"--live {item!r}: give MODEL=LITELLM_ID")
        live[model] = target
    options = ReadOptions(
        form=args.form,
        prices=MappingProxyType(read_prices(args.prices) if args.prices else {}),
        dedupe_splits=args.dedupe_splits,
        keep_split=args.keep_split,
        drop_incomplete=args.drop_incomplete,
        test_fraction=args.test_fraction,
        validation_fraction=args.validation_fraction,
    )
    done = import_table(args.files, args.out, name=args.name, options=options, live=live, force=args.force)
    t = done.table
    sizes = ", ".join(f"{s} {t.splits.count(s)}" for s in t.split_names)
    console.print(f"imported {len(t)} prompts x {len(t.models)} models ({sizes}) into {done.folder}")
    console.print(f"pool: {done.pool}\nsuite: {done.suite}")
    return 0


def _export(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    from puppeteer.agents.pool import load_pool
    from puppeteer.backends.replay import read_outcomes
    from puppeteer.outcomes.export import long_from_outcomes
    from puppeteer.tasks.suites import load_suite

    pool = load_pool(args.pool)
    if pool.replay is None:
        raise UserError(f"pool {pool.name!r} names no replay folder")
    rows = read_outcomes(pool.replay)
    splits = args.split or sorted({o.split for o in rows if o.suite == args.suite})
    questions = {t.id: t.question for split in splits for t in load_suite(args.suite, split)}
    frame = long_from_outcomes(
        [o for o in rows if o.suite == args.suite and o.split in splits], questions, pool
    )
    if frame.empty:
        raise UserError(f"pool {pool.name!r}'s table has no outcomes on suite {args.suite!r} splits {splits}")
    out = Path(args.out)
    name = out.name.lower().removesuffix(".gz")
    if name.endswith(".parquet"):
        frame.to_parquet(out, index=False)
    elif name.endswith(".jsonl"):
        frame.to_json(out, orient="records", lines=True, force_ascii=False)
    elif name.endswith(".csv"):
        frame.to_csv(out, index=False)
    else:
        raise UserError(f"--out {out}: give a .csv, .csv.gz, .jsonl or .parquet file")
    console.print(f"{out}: {frame['prompt_id'].nunique()} prompts x {frame['model'].nunique()} agents")
    return 0


def _routers(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    from puppeteer.jobs.bench_routers import BenchConfig, LearnedConfig, run_bench

    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        raise UserError(f"--seeds {args.seeds!r}: give comma-separated integers") from None
    cfg = BenchConfig(
        folder=Path(args.folder),
        out=Path(args.out),
        train_split=args.train_split,
        test_split=args.test_split,
        seeds=seeds,
        encoder=args.encoder,
        n_lams=args.lams,
        learned=None
        if args.no_learned
        else LearnedConfig(episodes=args.episodes, lr=args.lr, first_weights=args.first_weights),
    )
    run_bench(cfg)
    console.print(f"table: {cfg.out / 'routers.md'}\nplot: {cfg.out / 'routers.png'}")
    return 0


def _fit_sim(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    from puppeteer.jobs.outcomes import Shard
    from puppeteer.jobs.sim_fit import FitSimConfig, fit_sim

    config = FitSimConfig(
        args.pool,
        args.suite,
        args.name,
        Path(args.out),
        fit_group=not args.no_group,
        verifiers=tuple(args.verifier),
        chains=tuple(Shard.parse(c) for c in args.chains),
    )
    fit, _ = fit_sim(config)
    lat = fit.latent
    console.print(
        f"wrote {args.out}: {len(fit.agents)} agents, {len(fit.verifiers)} verifier(s); group_corr "
        f"{lat.group_corr}, rho {dict(lat.rho)}, visible {dict(lat.visible)}"
    )
    return 0


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

    from puppeteer.agents.pool import load_pool

    if args.outcomes_cmd == "import":
        return _import(args, console)
    if args.outcomes_cmd == "routers":
        return _routers(args, console)
    if args.outcomes_cmd == "export":
        return _export(args, console)
    if args.outcomes_cmd == "fit-sim":
        return _fit_sim(args, console)

    pool = load_pool(args.pool)
    table = Path(args.table) if args.table else pool.replay
    if table is None:
        raise UserError(f"pool {pool.name!r} names no replay folder: give --table")
    if args.outcomes_cmd == "show":
        from puppeteer.analytics.outcome_table import check_coverage, coverage, markdown
        from puppeteer.backends.replay import OUTCOMES_FILE, read_outcomes

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

    from puppeteer.backends.replay import read_outcomes
    from puppeteer.jobs.outcomes import Shard
    from puppeteer.jobs.second_steps import build_steps, first_agents, parse_firsts

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
