"""What each conductor model learned for its CPU time: the 0.5B of models.sh against the 135M seeds.

For each conductor: the fine-tune's CPU seconds (trl's ``train_runtime``, one thread), the examples it saw,
its last logged loss; then, on the held-out items the 0.5B planned (a subset of world.sh's A/B items, same
draws), the share of parsed plans, the share that are the kept plan of the question's kind, accuracy and
return (accuracy - lambda x model minutes at the pool's declared speeds)::

    python experiments/conductor-warm/models.py \\
        runs/conductor-warm/sim-local-cascade-qwen2.5-coder-0.5b/s641 \\
        runs/conductor-warm/sim-local-cascade/s621 runs/conductor-warm/sim-local-cascade/s622 \\
        runs/conductor-warm/sim-local-cascade/s623 --ab runs/conductor-warm/sim-local-cascade/ab \\
        --out experiments/conductor-warm/results/sim-local-cascade-qwen2.5-coder-0.5b
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import report  # the sibling module (this folder is on sys.path when the script runs)

from puppeteer.agents.pool import load_pool
from puppeteer.envs.workflow import parse_workflow
from puppeteer.train.grpo.warm_start import read_plans


def kept_by_kind(plans_file: Path, n_agents: int) -> dict[str, str]:
    """Each kind's kept plan, written as report.read_arm writes a trajectory's plan."""
    out = {}
    for k in read_plans(plans_file):
        w = parse_workflow(k.text, n_agents, final=True, cascade=True)
        out[k.kind] = f"{list(w.model_id)} final={w.final or 'last'}"
    return out


def held_out(run: Path, ab: Path | None) -> Path:
    """Where a run's held-out plans are: its own eval (models.sh), else its arm in world.sh's A/B."""
    if (run / "eval" / "trajectories.jsonl").is_file():
        return run / "eval"
    if ab is None:
        raise SystemExit(f"{run} has no eval/: give --ab, the A/B its conductor ran in")
    arms = [d for d in ab.iterdir() if d.name.endswith(f"_{run.name}_warm_start")]
    if len(arms) != 1:
        raise SystemExit(f"{ab} holds {len(arms)} arms of {run.name}")
    return arms[0]


Rows = Mapping[str, Mapping[str, Any]]  # task id -> report.read_arm's row


def row(run: Path, rows: Rows, items: Sequence[str], kept: Mapping[str, str], lam: float) -> dict[str, Any]:
    config = json.loads((run / "config.json").read_text())
    log = json.loads((run / "warm_start" / "sft_log.json").read_text())
    steps = [e for e in log if "loss" in e]
    final = next(e for e in reversed(log) if "train_runtime" in e)
    chosen = [rows[i] for i in items]
    return {
        "run": str(run),
        "model": (config.get("model") or {}).get("id"),
        "sft_cpu_s": final["train_runtime"],
        "examples": round(final["epoch"] * 200),
        "last_loss": steps[-1]["loss"],
        "parse_rate": sum(r["parsed"] for r in chosen) / len(chosen),
        "kept_plan_rate": sum(r["plan"] == kept.get(r["domain"]) for r in chosen) / len(chosen),
        **report.summary(chosen, lam, "minutes"),
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="conductor runs; the first sets the items")
    ap.add_argument("--ab", type=Path, default=None, help="world.sh's A/B (the 135M seeds' held-out plans)")
    ap.add_argument("--plans", type=Path, default=Path("runs/conductor-warm/sim-local-cascade/plans.jsonl"))
    ap.add_argument("--pool", default="sim-local")
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    pool = load_pool(args.pool)
    kept = kept_by_kind(args.plans, len(pool))
    arms = {run: report.read_arm(held_out(run, args.ab), pool) for run in args.runs}
    items = sorted(set.intersection(*(set(a) for a in arms.values())))
    table = [row(run, arms[run], items, kept, args.lam) for run in args.runs]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "models.json").write_text(json.dumps({"items": len(items), "rows": table}, indent=2))
    lines = [
        f"Backend: sim (`{args.pool}`); the conductors on transformers on the CPU, one thread; {len(items)} "
        f"held-out items, the same draws; return = accuracy - {args.lam} x model minutes per item.",
        "",
        "| conductor | fine-tune CPU s | examples seen | last loss | parsed | kind's kept plan | accuracy "
        "[95% Wilson] | return |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in table:
        lines.append(
            f"| {r['model']} (`{Path(r['run']).name}`) | {r['sft_cpu_s']:.0f} | {r['examples']} | "
            f"{r['last_loss']:.3f} | {r['parse_rate']:.2f} | {r['kept_plan_rate']:.2f} | "
            f"{r['accuracy']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {r['return']:.3f} |"
        )
    report.write_markdown(args.out / "models.md", lines)


if __name__ == "__main__":
    main()
