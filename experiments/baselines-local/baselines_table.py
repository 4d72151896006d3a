"""Run a list of baselines on a pool and suites, write a markdown table (``runs/baselines/<pool>/table.md``).

Default: the local pool, gsm8k and mmlu test splits, n=50, every baseline of
``puppeteer.policies.baselines.default_baseline_specs`` (each single agent, random, chain,
vote:3, moa, reflect), through one set of loaded models and the shared response cache so that
calls common to several baselines (every solver's first call) run once. Runs (baseline x suite)
go one after another, or ``--jobs K`` at a time through the same backend (for providers' APIs; on
llama.cpp it was measured no faster, docs/benchmarks.md). The table is rewritten after each run
finishes, so a run that is stopped keeps what it finished (re-running replays finished calls from
the cache).
Trajectories and results.json of each run go to ``runs/baselines/<pool>/<suite>/<spec>/``.

    python experiments/baselines-local/baselines_table.py                     # real models: slow
    python experiments/baselines-local/baselines_table.py --pool sim-paper --suites arith mix-math-mmlu \
        --n 100
    python experiments/baselines-local/baselines_table.py --pool sim-paper --specs vote:3 oracle \
        single:gpt5-cot
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from overlap import Outcomes, compare, coverage, read_outcomes, read_revisions

from puppeteer.agents.pool import load_pool
from puppeteer.analytics.plots import CostPoint, accuracy_vs_cost
from puppeteer.analytics.tables import markdown_table
from puppeteer.backends import make_router
from puppeteer.backends.cache import resolve_cache
from puppeteer.backends.llamacpp import available_cpus
from puppeteer.evaluation.evaluate import slug
from puppeteer.evaluation.many import EvalRun, evaluate_many
from puppeteer.evaluation.results import EvalResult
from puppeteer.evaluation.settings import EvalSettings
from puppeteer.policies.baselines import default_baseline_specs
from puppeteer.policies.protocol import EpisodeSettings
from puppeteer.utils.redaction import redact

SCRIPT = "experiments/baselines-local/baselines_table.py"  # the command each table records
# text below this line in an existing table file (findings written by hand) survives a rewrite
NOTES_MARKER = "<!-- generated table ends here; notes below are kept when the table is rewritten -->"
# baselines whose every step sees the step before: does the last step change that step's answer?
SEQUENTIAL = ("chain", "reflect", "random")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="local")
    p.add_argument("--suites", nargs="+", default=["gsm8k", "mmlu"])
    p.add_argument("--split", default="test")
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=5)
    p.add_argument(
        "--specs", nargs="+", default=None, help="policy specs (default: all baselines for the pool)"
    )
    p.add_argument("--cache", default=None, help="response cache (default: the user's shared cache)")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--runs-dir", default="runs/baselines")
    p.add_argument(
        "--n-threads",
        type=int,
        default=None,
        help="llama.cpp threads (default: every available CPU; calls run one at a time)",
    )
    p.add_argument(
        "--no-batching",
        dest="batching",
        action="store_false",
        help="llama.cpp decodes one call at a time (the path before batched decoding; for benchmarks)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs (baseline x suite) evaluated at once through the shared backend (default 1: one after "
        "another, each with its own progress bar; more pays for API backends, not for llama.cpp on 2 cores)",
    )
    p.add_argument("--out", default=None, help="markdown file (default: <runs-dir>/<pool>/table.md)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--no-plot",
        action="store_true",
        help="no accuracy-vs-cost figure (default: <out dir>/img/baselines-<pool>.png)",
    )
    return p.parse_args(argv)


def overlap_lines(results: list[EvalResult]) -> list[str]:
    """Item by item: what single agents cover together, and what each other run gains and loses
    against the best single agent (read from the runs' trajectories)."""
    dirs = {
        r.policy: Path(r.out_dir)
        for r in results
        if r.out_dir and r.completed and (Path(r.out_dir) / "trajectories.jsonl").is_file()
    }
    outcomes: dict[str, Outcomes] = {p: read_outcomes(d) for p, d in dirs.items()}
    singles = {p: o for p, o in outcomes.items() if p.startswith("single:")}
    if not singles:
        return []
    cov = coverage(singles)
    lines = [
        f"Item by item: at least one of the {len(singles)} single agents solves "
        f"**{cov.any} of {cov.n}** items (the most a router picking one of them per item could "
        f"solve); the best alone, `{cov.best}`, solves {cov.best_solved}."
    ]
    others = {p: o for p, o in outcomes.items() if p not in singles}
    if others:
        best = f"`{cov.best}`"
        lines += [
            "",
            f"| policy | correct | gained vs {best} | lost vs {best} | last step kept the previous "
            "step's answer (verbatim copies) |",
            "|---|---:|---:|---:|---|",
        ]
        for p, o in others.items():
            c = compare(o, singles[cov.best])
            kept = "-"
            if p.startswith(SEQUENTIAL):
                rev = read_revisions(dirs[p])
                kept = f"{rev.same_answer} of {rev.episodes} ({rev.verbatim})" if rev.episodes else "-"
            name = p.replace("|", "\\|")
            lines.append(f"| `{name}` | {len(o.solved)} | +{c.gained} | -{c.lost} | {kept} |")
    return ["", *lines]


def plot(results: list[EvalResult], path: Path, machine: str) -> Path:
    """Accuracy against model seconds per item, one panel per suite: single-stream seconds at the
    pool's declared speeds where it declares them (batch- and load-independent), else as recorded."""
    single = all(r.mean_model_s is not None for r in results)
    panels = {
        suite: [
            CostPoint(
                r.policy,
                r.mean_model_s if single and r.mean_model_s is not None else r.mean_latency_s,
                r.accuracy,
                r.ci_low,
                r.ci_high,
            )
            for r in results
            if r.suite == suite and r.completed
        ]
        for suite in dict.fromkeys(r.suite for r in results)
    }
    first = results[0]
    title = (
        f"Baselines on pool {first.pool}, split {first.split}, n={first.n} per suite "
        f"(backend {'+'.join(first.backends)}; {machine})"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    label = (
        "single-stream model seconds per item (declared speeds)"
        if single
        else "model seconds per item (as recorded per call)"
    )
    return accuracy_vs_cost(panels, path, title, cost_label=label)


def kept_notes(path: Path) -> str:
    """The marker line and the hand-written notes after it in an existing table file (or just the marker)."""
    old = path.read_text() if path.is_file() else ""
    _, found, notes = old.partition(NOTES_MARKER)
    return "\n" + NOTES_MARKER + (notes if found else "\n")


def render(
    results: list[EvalResult],
    command: str,
    cache: Path | None,
    machine: str,
    pending: list[str],
    figure: str | None = None,
) -> str:
    first = results[0]
    lines = [
        f"# Baselines on the `{first.pool}` pool",
        "",
        f"Made {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by:",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Split `{first.split}`, first n={first.n} items per suite (seed {first.seed}), each item run "
        "once; accuracy with its 95% Wilson interval (errors count as wrong); calls, tokens "
        "(prompt+completion), USD and model s (seconds of model time, as measured when each call was "
        "made; with batched decoding a call's time includes the calls it shared a batch with) are means "
        "per item; single-stream s is each call priced at the pool's declared single-stream speeds "
        "(`prefill_tps`, `decode_tps`: the time it takes alone on the reference machine, independent of "
        "batching and load; `-` where the pool declares none); truncated and tool calls are the shares of "
        "all calls cut at their `max_tokens` and that ran at least one tool call (program of thought: the "
        "program ran); wall s is this run's wall time (calls "
        "served by the response cache are nearly free, so it can be far below the model time).",
        f"Response cache: `{cache}`." if cache else "No response cache.",
        f"Machine: {machine}.",
        "",
    ]
    if pending:
        lines += [
            f"**Partial**: written after {len(results)} runs; not run yet: {', '.join(pending)}. "
            "Re-running the command replays finished calls from the cache and completes it.",
            "",
        ]
    if figure:
        lines += [f"![accuracy against model time]({figure})", ""]
    for suite in dict.fromkeys(r.suite for r in results):
        suite_results = [r for r in results if r.suite == suite]
        lines += [f"## {suite}", "", markdown_table(suite_results), *overlap_lines(suite_results), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None, root: Path | None = None) -> int:
    """The table's command line; ``argv`` defaults to ``sys.argv[1:]``; without ``--out`` the table
    goes to ``<runs-dir>/<pool>/table.md`` under ``root`` (the current directory unless given)."""
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    pool = load_pool(args.pool)
    specs = args.specs or list(default_baseline_specs(pool))
    cache = resolve_cache(pool, args.cache, args.no_cache)
    options = {k: dict(v) for k, v in pool.backend_options.items()}
    options.setdefault("llamacpp", {})["n_threads"] = args.n_threads or available_cpus()
    options["llamacpp"]["batching"] = args.batching
    # one set of loaded models for every run, unless the backend is tied to one run's answer key
    backend = None if pool.needs_answer_key else make_router(options, cache=cache)
    command = redact(shlex.join(["python", SCRIPT, *argv]))  # no key in the docs
    md_path = Path(args.out) if args.out else (root or Path.cwd()) / args.runs_dir / pool.name / "table.md"
    md_path.parent.mkdir(parents=True, exist_ok=True)
    machine = f"{available_cpus()} CPUs"
    if "llamacpp" in pool.backends():
        machine += f", llama.cpp with {options['llamacpp']['n_threads']} threads"
    runs = [(spec, suite) for spec in specs for suite in args.suites]
    if args.jobs < 1:
        raise SystemExit(f"--jobs must be at least 1, got {args.jobs}")
    finished: dict[int, EvalResult] = {}

    def write_table(i: int, result: EvalResult) -> None:
        finished[i] = result
        results = [finished[j] for j in sorted(finished)]
        pending = [f"`{sp}` on {su}" for j, (sp, su) in enumerate(runs) if j not in finished]
        figure = None
        if not args.no_plot:
            png = plot(results, md_path.parent / "img" / f"baselines-{pool.name}.png", machine)
            figure = png.relative_to(md_path.parent).as_posix()
        md_path.write_text(render(results, command, cache, machine, pending, figure) + kept_notes(md_path))

    evaluate_many(
        [
            EvalRun(
                spec,
                EvalSettings(
                    pool=pool,
                    suite=suite,
                    split=args.split,
                    n=args.n,
                    seed=args.seed,
                    out_dir=Path(args.runs_dir) / pool.name / suite / slug(spec),
                    episode=EpisodeSettings(max_steps=args.max_steps),
                    backend=backend,
                    progress=not args.quiet,
                    overwrite=True,  # regenerates its runs
                ),
            )
            for spec, suite in runs
        ],
        args.jobs,
        on_done=write_table,
        label=f"baselines on {pool.name} ({args.jobs} at a time)",
        progress=not args.quiet,
    )
    sys.stdout.write(f"wrote {md_path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(root=Path(__file__).resolve().parents[2]))  # runs/ under the repository root
