"""Small real-model probes for the local-v2 pool: accuracy, tokens, truncation, tool-call and copy rates.

Runs each ``--specs`` entry (``AGENT`` for one call, ``A>B`` for a chain where B sees A's work) on
the first ``--n`` items of a suite through the response cache, one item at a time, and appends one
JSON line per episode to ``--out`` (a stopped run resumes: finished episodes are skipped, and finished
model calls replay from the cache). ``--pool`` picks the pool whose agents and context layout are used.

    python experiments/local-pool-v2/pool_v2_probe.py --pool local-v2 --suite gsm8k --n 20 --specs \
        qwen0.5b-pot
    python experiments/local-pool-v2/pool_v2_probe.py --pool local --suite gsm8k --n 10 --specs \
        'qwen0.5b-cot>qwen0.5b-cot'
    python experiments/local-pool-v2/pool_v2_probe.py --summary runs/pool_v2/probe.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import load_pool
from puppeteer.agents.reasoning import ANSWER_FORMATS, DEFAULT_FORMAT
from puppeteer.backends import make_router
from puppeteer.backends.cache import default_response_cache
from puppeteer.envs.executor import EpisodeContext, Executor
from puppeteer.tasks import load_suite
from puppeteer.tasks.graders import default_graders
from puppeteer.tools import default_tools
from puppeteer.types import Step, Workflow

logger = logging.getLogger("pool_v2_probe")


def episode(executor: Executor, task: Any, grader: Any, ids: list[int]) -> tuple[Step, ...]:
    ctx = EpisodeContext(
        question=task.question,
        item_key=task.id,
        extract=lambda text, truncated: grader.extract(text, task, truncated=truncated),
        answer_format=ANSWER_FORMATS.get(task.grader, DEFAULT_FORMAT),
    )
    workflow = Workflow(
        model_id=tuple(ids),
        subtasks=tuple("" for _ in ids),
        access_list=tuple(tuple(range(i)) for i in range(len(ids))),
    )
    return executor.run_workflow(ctx, workflow)


def run(args: argparse.Namespace) -> None:
    pool = load_pool(args.pool)
    if args.layout:
        pool = replace(pool, context_layout=args.layout)
    tasks = load_suite(args.suite, "test", n=args.n, seed=0)
    graders = default_graders()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["pool"], r["layout"], r["spec"], r["item"]))
    router = make_router(
        {k: dict(v) for k, v in pool.backend_options.items()}, cache=args.cache or default_response_cache()
    )
    executor = Executor(backend=router, pool=pool, tools=default_tools())
    for spec in args.specs:
        ids = [pool.index(name) for name in spec.split(">")]
        for task in tasks:
            if (pool.name, pool.context_layout, spec, task.id) in done:
                continue
            grader = graders[task.grader]
            steps = episode(executor, task, grader, ids)
            last = steps[-1]
            record = {
                "pool": pool.name,
                "layout": pool.context_layout,
                "spec": spec,
                "suite": args.suite,
                "item": task.id,
                "correct": grader.grade(last.answer, task),
                "answer": last.answer,
                "steps": [
                    {
                        "agent": s.agent_name,
                        "answer": s.answer,
                        "tokens": s.completion.completion_tokens,
                        "prompt_tokens": s.completion.prompt_tokens,
                        "truncated": s.completion.truncated,
                        "tool_calls": s.tool_calls,
                        "model_s": round(s.completion.latency_s, 2),
                        "cached": s.completion.cached,
                        "text": s.completion.text,
                    }
                    for s in steps
                ],
            }
            if len(steps) > 1:
                prev, cur = steps[-2].completion.text.strip(), last.completion.text.strip()
                record["verbatim_copy"] = bool(prev) and (cur == prev or cur.startswith(prev[:200]))
                record["kept_answer"] = last.answer is not None and last.answer == steps[-2].answer
            with out.open("a") as f:
                f.write(json.dumps(record) + "\n")
            logger.info("%s %s %s correct=%s", pool.name, spec, task.id, record["correct"])
    router.close()


def summary(path: Path) -> str:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        r = json.loads(line)
        groups[(r["pool"] + " / " + r["layout"], r["suite"], r["spec"])].append(r)
    rows = [
        "| pool / layout | suite | spec | n | accuracy | last-step tokens (mean) | truncated | "
        "tool-call rate | model s/item | verbatim copies | kept previous answer |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (pool, suite, spec), rs in groups.items():
        n = len(rs)
        last = [r["steps"][-1] for r in rs]
        acc = sum(r["correct"] for r in rs) / n
        toks = sum(s["tokens"] for s in last) / n
        trunc = sum(s["truncated"] for s in last)
        tools = sum(s["tool_calls"] > 0 for s in last)
        secs = sum(sum(s["model_s"] for s in r["steps"]) for r in rs) / n
        copies = sum(r.get("verbatim_copy", False) for r in rs) if len(rs[0]["steps"]) > 1 else "-"
        kept = sum(r.get("kept_answer", False) for r in rs) if len(rs[0]["steps"]) > 1 else "-"
        rows.append(
            f"| {pool} | {suite} | `{spec}` | {n} | {acc:.2f} | {toks:.0f} | {trunc}/{n} | "
            f"{tools}/{n} | {secs:.1f} | {copies} | {kept} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="local-v2")
    p.add_argument("--suite", default="gsm8k")
    p.add_argument("--n", type=int, default=20)
    p.add_argument("--specs", nargs="+", default=[])
    p.add_argument("--layout", default=None, help="override the pool's context_layout (turns | inline)")
    p.add_argument("--cache", default=None)
    p.add_argument("--out", default="runs/pool_v2/probe.jsonl")
    p.add_argument("--summary", default=None, help="print the table of a probe file and exit")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.summary:
        sys.stdout.write(summary(Path(args.summary)) + "\n")
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
