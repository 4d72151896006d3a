"""The conductor's prompt ablation (issue 31, section 2): reasoning first or not, agent cards or not.

Evaluates one conductor (default: the prompted Qwen2.5-Coder-1.5B under its grammar) with each prompt
config on the same items, item seeds and worker subsets (``puppeteer eval --prompt P``), one run per
prompt in ``OUT/<prompt>/``, and writes ``OUT/report.md`` and ``OUT/ablation.json``: per prompt the
parse rate, accuracy (Wilson), steps and US cents per item, how often the conductor wrote reasoning
lines, how many distinct plans it wrote and the most common plan per domain. Each run's per-item
records go to ``OUT/<prompt>/items.jsonl`` (item id, domain, plan as agent names, grade, reward,
cost, tokens; no question or answer text: the routing suite holds GPQA items, whose authors ask that
they not be republished). A finished run is not run again; the report is rewritten after each run.

    python experiments/conductor/conductor_prompt_ablation.py --pool sim-routing --suite mix-routing --n 60 \
        --out experiments/conductor/results/prompt-ablation-sim-routing
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import load_pool
from puppeteer.envs.conductor_prompt import load_prompt_config
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.evaluation.stats import wilson_interval

# experiments/_shared/: the modules that several studies use (not installed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from conductor_items import item_records

# the rows: prompt config -> what it asks (reasoning first?), its few-shot plans, whether the table has cards
PROMPTS = {
    "prompt-v1": ("one '#' line, as its examples", "two of two steps"),
    "prompt-v2-noreason": ("no", "1, 2 and 3 steps"),
    "prompt-v2": ("yes", "1, 2 and 3 steps"),
    "prompt-v2-noreason-cards": ("no", "1, 2 and 3 steps"),
    "prompt-v2-cards": ("yes", "1, 2 and 3 steps"),
}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="sim-routing")
    p.add_argument("--suite", default="mix-routing")
    p.add_argument("--n", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy", default="conductor", help="conductor spec (default: the 1.5B, grammar on)")
    p.add_argument("--prompts", nargs="+", default=list(PROMPTS))
    p.add_argument("--max-steps", type=int, default=3)
    p.add_argument("--lam", type=float, default=0.1)
    p.add_argument("--cache", default=None, help="response cache (default: the user's shared cache)")
    p.add_argument("--out", required=True)
    return p.parse_args(list(argv))


def summarise(name: str, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    n = len(items)
    correct = sum(i["correct"] for i in items)
    lo, hi = wilson_interval(correct, n)
    plans = Counter(" > ".join(i["plan"]) for i in items if i["plan"] is not None)
    by_domain: dict[str, Counter[str]] = defaultdict(Counter)
    for i in items:
        by_domain[i["domain"]][" > ".join(i["plan"]) if i["plan"] else "(unparsed)"] += 1
    reasoning, shots = PROMPTS.get(name, ("?", "?"))
    return {
        "prompt": name,
        "asks_reasoning": reasoning,
        "examples": shots,
        "cards": load_prompt_config(name).cards,
        "n": n,
        "parsed": sum(i["plan"] is not None for i in items) / n,
        "accuracy": correct / n,
        "ci": [lo, hi],
        "steps": sum(len(i["plan"] or []) for i in items) / n,
        "cents": 100 * sum(i["usd"] for i in items) / n,
        "reward": sum(i["reward"] for i in items) / n,
        "reasoned": sum(i["reasoned"] for i in items) / n,
        "conductor_tokens": sum(i["conductor_completion_tokens"] for i in items) / n,
        "distinct_plans": len(plans),
        "top_plan_share": plans.most_common(1)[0][1] / n if plans else 0.0,
        "by_domain": {d: dict(c.most_common()) for d, c in sorted(by_domain.items())},
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def report(rows: Sequence[Mapping[str, Any]], command: str, pool: str, suite: str, policy: str) -> str:
    lines = [
        f"# Conductor prompt ablation: `{policy}` on pool `{pool}`, suite `{suite}`",
        "",
        "Made by:",
        "",
        "```bash",
        command,
        "```",
        "",
        "Same items, item seeds and worker calls per prompt; backend of the workers and the conductor as the "
        "pool and policy say (see each run's results.json). Accuracy with its 95% Wilson interval; steps, US "
        "cents and model seconds (workers; single-stream, on pools that declare speeds) and reward are "
        "means per item; reasoned: share of plans with a '#' line before the lists; top plan: the share of "
        "items given the most common plan.",
        "",
        "| prompt | asks reasoning first | few-shot plans | cards | n | parsed | accuracy [95% CI] | steps | "
        "cents / item | model s / item | reward | reasoned | conductor tokens | distinct plans | top plan |",
        "|---|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['prompt']}` | {r['asks_reasoning']} | {r['examples']} | {'yes' if r['cards'] else 'no'} "
            "| "
            f"{r['n']} | {r['parsed']:.2f} | {r['accuracy']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | "
            f"{r['steps']:.2f} | {r['cents']:.3f} | {_seconds(r.get('model_s'))} | {r['reward']:.3f} | "
            f"{r['reasoned']:.2f} | "
            f"{r['conductor_tokens']:.0f} | {r['distinct_plans']} | {r['top_plan_share']:.2f} |"
        )
    lines += ["", "## Most common plans per domain", ""]
    for r in rows:
        lines += [f"`{r['prompt']}`:", ""]
        for domain, plans in r["by_domain"].items():
            top = ", ".join(f"{p} ({k})" for p, k in list(plans.items())[:3])
            lines.append(f"- {domain} ({sum(plans.values())}): {top}")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pool = load_pool(args.pool)
    agents = [a.name for a in pool.agents]
    given = sys.argv[1:] if argv is None else list(argv)
    command = shlex.join(["python", "experiments/conductor/conductor_prompt_ablation.py", *given])
    rows = []
    for name in args.prompts:
        run = out / name
        done = run / "results.json"
        if not (done.is_file() and json.loads(done.read_text()).get("completed")):
            evaluate_policy(
                args.policy,
                pool,
                args.suite,
                n=args.n,
                seed=args.seed,
                out_dir=run,
                cache=args.cache,
                max_steps=args.max_steps,
                lam=args.lam,
                prompt=name,
                overwrite=True,
            )
        items = item_records(run, agents)
        (run / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
        row = summarise(name, items)
        # single-stream model seconds of the workers, on pools that declare speeds (local models)
        row["model_s"] = json.loads(done.read_text()).get("mean_model_s")
        rows.append(row)
        (out / "ablation.json").write_text(json.dumps(rows, indent=2) + "\n")
        (out / "report.md").write_text(report(rows, command, args.pool, args.suite, args.policy) + "\n")
    sys.stdout.write(f"wrote {out / 'report.md'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
