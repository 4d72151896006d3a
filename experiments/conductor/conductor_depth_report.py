"""What a second planning round does: per-depth tables of conductor evaluations (issue 31, section 4).

Reads finished ``puppeteer eval --policy conductor... --max-depth D`` runs and writes, for each, the
accuracy, worker calls and cost had every episode stopped after round d (the evaluation's
``per_depth``), what each review round did (kept the answer with empty lists or planned again; of the
new plans, wrong -> right and right -> wrong), accuracy per depth and domain, and a compact per-item
file (agents and grade per round, no question or plan text: sim suites include GPQA).

    python experiments/conductor/conductor_depth_report.py runs/depth/sim-routing-d1 \
        runs/depth/sim-routing-always \
        --out experiments/conductor/results/depth

Where the pool declares model speeds (local pools), cost is also given in single-stream model seconds,
the conductor's own calls included (priced as the pool's model that serves ``--conductor-model``).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from puppeteer.agents.pool import Pool, load_pool


def _model_s(pool: Pool, line: dict[str, Any], depth: int, conductor: str | None) -> float | None:
    """Single-stream model seconds of the workers' and the conductor's calls up to round ``depth``."""
    idx = {i for r in line["rounds"][: depth + 1] for i in r["steps"]}
    total = 0.0
    for s in line["steps"]:
        if s["index"] in idx:
            c = s["completion"]
            secs = pool.agent(s["agent_id"]).model.model_seconds(c["prompt_tokens"], c["completion_tokens"])
            if secs is None:
                return None
            total += secs
    if conductor is not None:
        spec = next(m for m in (a.model for a in pool.agents) if m.target == conductor)
        for c in line["conductor"][: depth + 1]:
            total += spec.model_seconds(c["prompt_tokens"], c["completion_tokens"]) or 0.0
    return total


def run_report(run: Path, conductor: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = json.loads((run / "results.json").read_text())
    lines = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    pool = load_pool(result["pool"])
    max_depth = int(result.get("max_depth", 0))
    items, moves = [], Counter()
    by_domain: dict[str, list[list[bool]]] = defaultdict(list)
    model_s: list[list[float | None]] = []
    for line in lines:
        rounds = line.get("rounds") or []
        graded = [bool(r.get("correct")) for r in rounds]
        # each episode as if it had stopped after round d (an episode that ended earlier keeps its end)
        upto = [graded[min(d, len(graded) - 1)] if graded else False for d in range(max_depth + 1)]
        by_domain[line.get("domain") or "?"].append(upto)
        model_s.append([_model_s(pool, line, d, conductor) for d in range(max_depth + 1)])
        for prev, cur, r in zip(graded, graded[1:], rounds[1:], strict=False):
            if r.get("parse_error"):
                moves["review did not parse"] += 1
            elif not r["steps"]:
                moves["kept the answer (empty lists)"] += 1
            else:
                moves[f"planned again: {'right' if prev else 'wrong'} -> {'right' if cur else 'wrong'}"] += 1
        named = {s["index"]: s["agent_name"] for s in line["steps"]}
        items.append(
            {
                "task_id": line["task_id"],
                "domain": line.get("domain"),
                "correct": line["correct"],
                "rounds": [
                    {
                        "agents": [named[i] for i in r["steps"]],
                        "recurse": r.get("recurse", False),
                        "parse_error": bool(r.get("parse_error")),
                        "correct": bool(r.get("correct")),
                    }
                    for r in rounds
                ],
            }
        )
    secs = [
        float(np.mean([m[d] for m in model_s])) if all(m[d] is not None for m in model_s) else None
        for d in range(max_depth + 1)
    ]
    summary = {
        "run": str(run),
        "pool": result["pool"],
        "suite": result["suite"],
        "n": result["n"],
        "max_depth": max_depth,
        "recursion": result.get("recursion", "offer"),
        "accuracy": result["accuracy"],
        "parse_errors": result["n_parse_errors"],
        "per_depth": [{**d, "model_s_incl_conductor": secs[d["depth"]]} for d in result["per_depth"]],
        "reviews": dict(moves),
        "by_domain": {
            dom: [float(np.mean([u[d] for u in rows])) for d in range(max_depth + 1)]
            for dom, rows in sorted(by_domain.items())
        },
        "domain_n": {dom: len(rows) for dom, rows in sorted(by_domain.items())},
        "wall_s": result.get("wall_s"),
    }
    return summary, items


def markdown(s: dict[str, Any]) -> str:
    depths = range(s["max_depth"] + 1)
    out = [
        f"## `{s['pool']}` / `{s['suite']}`: max_depth {s['max_depth']}, recursion `{s['recursion']}`, "
        f"n = {s['n']}",
        "",
        "| stopped after round | reached | accuracy | worker calls | conductor calls | USD incl. conductor | "
        "model s incl. conductor |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d in s["per_depth"]:
        secs = "-" if d["model_s_incl_conductor"] is None else f"{d['model_s_incl_conductor']:.1f}"
        out.append(
            f"| {d['depth']} | {d['reached']} | {d['accuracy']:.3f} | {d['mean_worker_calls']:.2f} | "
            f"{d['mean_conductor_calls']:.2f} | {d['mean_usd_incl_conductor']:.5f} | {secs} |"
        )
    out += ["", "What the review rounds did:", ""]
    out += [f"- {k}: {v}" for k, v in sorted(s["reviews"].items())] or ["- no review round was reached"]
    out += [
        "",
        "| domain | n | " + " | ".join(f"accuracy after round {d}" for d in depths) + " |",
        "|---|---:|" + "---:|" * len(depths),
    ]
    for dom, accs in s["by_domain"].items():
        out.append(f"| {dom} | {s['domain_n'][dom]} | " + " | ".join(f"{a:.3f}" for a in accs) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--conductor-model", default="qwen2.5-coder-1.5b", help="target of the conductor's model")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    parts = []
    for run in args.runs:
        pool = load_pool(json.loads((run / "results.json").read_text())["pool"])
        served = any(a.model.target == args.conductor_model for a in pool.agents)
        summary, items = run_report(run, args.conductor_model if served else None)
        (args.out / f"{run.name}.json").write_text(json.dumps(summary, indent=1))
        with (args.out / f"{run.name}.items.jsonl").open("w") as f:
            f.writelines(json.dumps(x) + "\n" for x in items)
        parts.append(markdown(summary))
    (args.out / "report.md").write_text("# Planning rounds, depth by depth\n\n" + "\n".join(parts))


if __name__ == "__main__":
    main()
