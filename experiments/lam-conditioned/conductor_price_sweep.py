"""The prompted conductor told several prices of cost (issue 36, section 2): does its cost fall with lambda?

One ``puppeteer eval --policy conductor --price-in-prompt --lam X`` per lambda on the same items and
worker draws (``OUT/lam<X>/``; a finished run is kept, so the script resumes), then a report: per
lambda accuracy (95% Wilson), US cents, calls and reward per item, the share of plans whose first agent
is the table's best value at that price for the item's kind (``card_value``), and the first agents
named; between neighbouring lambdas the paired bootstrap on cents and the exact McNemar test on
accuracy. Writes ``OUT/report.md``, ``OUT/sweep.json``, ``OUT/sweep.png`` and each run's
``items.jsonl`` (no question text: the routing suite holds GPQA items).

    python experiments/lam-conditioned/conductor_price_sweep.py --pool sim-routing --suite \\
        mix-routing --n 48 \\
        --prompt prompt-v2-priced-ordered --lams 0.01 0.1 1 --concurrency 8 \\
        --cache runs/ordered/responses.sqlite --out runs/ordered
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.evaluation.stats import mcnemar_exact, paired_bootstrap, wilson_interval

# experiments/_shared/: the modules that several studies use (not installed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from conductor_items import first_is_best_value, item_records

log = logging.getLogger("conductor_price_sweep")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="sim-routing")
    p.add_argument("--suite", default="mix-routing")
    p.add_argument("--n", type=int, default=48)
    p.add_argument("--policy", default="conductor", help="conductor spec (default: the 1.5B, grammar on)")
    p.add_argument("--prompt", default="prompt-v2-priced-ordered")
    p.add_argument("--lams", type=float, nargs="+", default=[0.01, 0.1, 1.0])
    p.add_argument("--cost-model", default="usd")
    p.add_argument("--max-steps", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=8, help="plans in flight (batched decoding)")
    p.add_argument("--cache", default=None, help="response cache (default: the user's shared cache)")
    p.add_argument(
        "--singles",
        action="store_true",
        help="also each agent alone on the same items, scored with the conductor's reward at each lambda",
    )
    p.add_argument("--out", required=True)
    args = p.parse_args(list(argv))
    if len(args.lams) < 2 or any(x < 0 for x in args.lams):
        p.error("--lams: at least two prices, none negative")
    args.lams = sorted(args.lams)
    return args


def run_dir(out: Path, lam: float) -> Path:
    return out / f"lam{lam:g}"


def summarise(pool: Pool, lam: float, items: Sequence[Mapping[str, Any]], cost_model: str) -> dict[str, Any]:
    n = len(items)
    correct = sum(i["correct"] for i in items)
    lo, hi = wilson_interval(correct, n)
    first = Counter(i["plan"][0] if i["plan"] else "(unparsed)" for i in items)
    return {
        "lam": lam,
        "n": n,
        "accuracy": correct / n,
        "ci": [lo, hi],
        "cents": 100 * sum(i["usd"] for i in items) / n,
        "calls": sum(len(i["plan"] or []) for i in items) / n,
        "reward": sum(i["reward"] for i in items) / n,
        "parsed": sum(i["plan"] is not None for i in items) / n,
        "best_value_first": sum(first_is_best_value(pool, i, lam, cost_model) for i in items) / n,
        "first_agent": dict(first.most_common()),
    }


def compare(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Paired B - A on the items both runs hold: cents (bootstrap) and accuracy (exact McNemar)."""
    by_id = {i["task_id"]: i for i in b}
    pairs = [(i, by_id[i["task_id"]]) for i in a if i["task_id"] in by_id]
    cost = paired_bootstrap([100 * x["usd"] for x, _ in pairs], [100 * y["usd"] for _, y in pairs])
    test = mcnemar_exact([x["correct"] for x, _ in pairs], [y["correct"] for _, y in pairs])
    return {
        "n": len(pairs),
        "cents_diff": cost.diff,
        "cents_ci": [cost.ci_low, cost.ci_high],
        "mcnemar_p": test.p_value,
        "a_only": test.only_a,
        "b_only": test.only_b,
    }


def single_returns(pool: Pool, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each agent alone on the same items (``OUT/singles/<agent>``): accuracy and US cents per item, and at
    each lambda the conductor's reward for a one-step plan by it (0.5 + 0.5 x right - lambda x cents)."""
    out: dict[str, dict[str, Any]] = {}
    for agent in pool.agents:
        result = evaluate_policy(
            f"single:{agent.name}",
            pool,
            args.suite,
            n=args.n,
            max_steps=1,
            out_dir=Path(args.out) / "singles" / agent.name,
            cache=args.cache,
            overwrite=True,
            progress=False,
        )
        cents = 100 * result.mean_usd
        out[agent.name] = {
            "accuracy": result.accuracy,
            "cents": cents,
            "reward": {f"{lam:g}": 0.5 + 0.5 * result.accuracy - lam * cents for lam in args.lams},
        }
    return out


def report(
    rows: Sequence[Mapping[str, Any]],
    steps: Sequence[Mapping[str, Any]],
    singles: Mapping[str, Mapping[str, Any]],
    args: argparse.Namespace,
) -> str:
    lines = [
        f"# The prompted conductor at {len(rows)} prices of cost",
        "",
        f"Pool `{args.pool}`, suite `{args.suite}`, the first {args.n} held-out items, the same items "
        f"and worker draws at every price. Conductor `{args.policy}` with prompt `{args.prompt}`, price "
        f"stated in the prompt (lambda per unit of the `{args.cost_model}` cost model), at most "
        f"{args.max_steps} steps. Backends: see each run's results.json (`backends`).",
        "",
        "```",
        "python experiments/lam-conditioned/conductor_price_sweep.py " + shlex.join(sys.argv[1:]),
        "```",
        "",
        "| lambda | accuracy [95% Wilson] | US cents / item | calls / item | reward / item "
        "| first agent = best value | first agents |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        firsts = ", ".join(f"`{a}` {c}" for a, c in r["first_agent"].items())
        lines.append(
            f"| {r['lam']:g} | {r['accuracy']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {r['cents']:.4f} | "
            f"{r['calls']:.2f} | {r['reward']:.3f} | {r['best_value_first']:.0%} | {firsts} |"
        )
    lines += [
        "",
        "| from -> to | paired items | cents, to - from [95% CI] | McNemar p (only from / only to) |",
        "|---|---:|---|---|",
    ]
    for s in steps:
        lines.append(
            f"| {s['from']:g} -> {s['to']:g} | {s['n']} | {s['cents_diff']:+.4f} [{s['cents_ci'][0]:+.4f}, "
            f"{s['cents_ci'][1]:+.4f}] | {s['mcnemar_p']:.3g} ({s['a_only']} / {s['b_only']}) |"
        )
    if singles:
        lines += [
            "",
            "Each agent alone on the same items, scored with the conductor's reward at each price "
            "(0.5 + 0.5 x right - lambda x cents):",
            "",
            "| agent | accuracy | US cents / item | "
            + " | ".join(f"reward at {r['lam']:g}" for r in rows)
            + " |",
            "|---|---:|---:|" + "---:|" * len(rows),
        ]
        keys = [format(r["lam"], "g") for r in rows]
        for name, s in singles.items():
            cells = " | ".join(f"{s['reward'][k]:.3f}" for k in keys)
            lines.append(f"| `{name}` | {s['accuracy']:.3f} | {s['cents']:.4f} | {cells} |")
        best = " | ".join(f"{max(s['reward'][k] for s in singles.values()):.3f}" for k in keys)
        mine = " | ".join(f"{r['reward']:.3f}" for r in rows)
        lines += [f"| **best agent alone** | | | {best} |", f"| **the conductor** | | | {mine} |"]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lams = [r["lam"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot(lams, [r["cents"] for r in rows], "o-", color="tab:red", label="US cents / item")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("lambda stated in the prompt (points per US cent)")
    ax.set_ylabel("US cents per item", color="tab:red")
    twin = ax.twinx()
    twin.errorbar(
        lams,
        [r["accuracy"] for r in rows],
        yerr=[[r["accuracy"] - r["ci"][0] for r in rows], [r["ci"][1] - r["accuracy"] for r in rows]],
        fmt="s--",
        color="tab:blue",
        capsize=3,
    )
    twin.set_ylabel("accuracy (95% Wilson)", color="tab:blue")
    twin.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out)
    pool = load_pool(args.pool)
    agents = [a.name for a in pool.agents]
    runs: dict[float, list[dict[str, Any]]] = {}
    for lam in args.lams:
        run = run_dir(out, lam)
        done = run / "results.json"
        if not (done.is_file() and json.loads(done.read_text()).get("completed")):
            log.info("lambda %g: evaluating %s on %d items", lam, args.policy, args.n)
            evaluate_policy(
                args.policy,
                pool,
                args.suite,
                n=args.n,
                lam=lam,
                max_steps=args.max_steps,
                out_dir=run,
                cache=args.cache,
                overwrite=True,
                price_in_prompt=True,
                prompt=args.prompt,
                cost_model=args.cost_model,
                concurrency=args.concurrency,
            )
        runs[lam] = item_records(run, agents)
        (run / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in runs[lam]))
    rows = [summarise(pool, lam, runs[lam], args.cost_model) for lam in args.lams]
    steps = [
        {"from": a, "to": b, **compare(runs[a], runs[b])}
        for a, b in zip(args.lams, args.lams[1:], strict=False)
    ]
    singles = single_returns(pool, args) if args.singles else {}
    summary = {"rows": rows, "steps": steps, "singles": singles}
    (out / "sweep.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "report.md").write_text(report(rows, steps, singles, args))
    backends = json.loads((run_dir(out, args.lams[0]) / "results.json").read_text()).get("backends", [])
    title = f"conductor, prompt {args.prompt}: {args.pool} / {args.suite}, n = {args.n}"
    plot(rows, out / "sweep.png", f"{title}\nbackends: {', '.join(backends)}")
    log.info("wrote %s", out / "report.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
