"""The warm-started conductor against the best rule, the best single agent and the step-wise routers.

Reads the arms of one ``puppeteer ab`` run (every arm on the same held-out items and draws), prices each
item at ``--lam`` per US cent (or, with ``--pool P --cost minutes``, per minute of the pool's declared
single-stream model time), and writes, for every conductor arm and pooled over the conductor seeds:
accuracy, cents per item, return (accuracy - lambda x cents), the delta against ``best-rule`` and
``best-single`` in points with the exact McNemar test on correctness, and the plans it wrote (how many
distinct plans, how many on at least 10% of the items, the commonest per kind)::

    python experiments/conductor-warm/report.py runs/conductor-warm/ab --lam 0.1 \\
        --out experiments/conductor-warm/results
    python experiments/conductor-warm/report.py runs/conductor-warm/sim-local/ab --lam 1 \
        --pool sim-local --cost minutes --out experiments/conductor-warm/results/sim-local
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.envs.trajectories import trajectory_from_dict
from puppeteer.evaluation.stats import mcnemar_exact, wilson_interval

UNITS = {"cents": "US cents", "minutes": "model minutes"}


def item_cost(row: Mapping[str, Any], pool: Pool | None) -> float:
    """The item's cost: US cents of its calls, or (with a pool) model minutes at its declared speeds."""
    if pool is None:
        return 100.0 * float(row.get("cost_usd") or 0.0)
    return (pool.model_seconds(trajectory_from_dict(dict(row)).steps) or 0.0) / 60.0


def read_arm(path: Path, pool: Pool | None = None) -> dict[str, dict[str, Any]]:
    """Per task id: correct, cost (``cents``: US cents, or model minutes with a pool) and the plan (the
    workflow's agents and final choice, for conductors)."""
    out = {}
    for line in (path / "trajectories.jsonl").read_text().splitlines():
        row = json.loads(line)
        workflow = row.get("workflow") or {}
        plan = None
        if workflow:
            plan = f"{workflow.get('model_id')} final={workflow.get('final') or 'last'}"
        out[row["task_id"]] = {
            "correct": bool(row["correct"]),
            "cost": item_cost(row, pool),
            "domain": row.get("domain") or row["task_id"].split("/")[0],
            "plan": plan,
            "parsed": row.get("parse_error") is None,
        }
    return out


def summary(rows: Sequence[Mapping[str, Any]], lam: float, unit: str = "cents") -> dict[str, Any]:
    """Accuracy with its Wilson interval, the mean cost per item (keyed by its unit) and the return."""
    n = len(rows)
    acc = sum(r["correct"] for r in rows) / n
    cost = sum(r["cost"] for r in rows) / n
    low, high = wilson_interval(sum(r["correct"] for r in rows), n)
    return {"n": n, "accuracy": acc, "ci": [low, high], unit: cost, "return": acc - lam * cost}


def compare(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], lam: float) -> dict[str, Any]:
    """``a`` against the reference ``b`` on the same items, in points of return, with McNemar."""
    test = mcnemar_exact([r["correct"] for r in a], [r["correct"] for r in b])
    delta = 100 * (summary(a, lam)["return"] - summary(b, lam)["return"])
    return {"delta_points": delta, "p": test.p_value, "only_arm": test.only_a, "only_ref": test.only_b}


def plans_used(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    counts = Counter(r["plan"] for r in rows if r["plan"])
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        by_kind[r["domain"]][r["plan"] or "unparsed"] += 1
    n = len(rows)
    return {
        "distinct": len(counts),
        "at_least_10pct": sum(c >= 0.1 * n for c in counts.values()),
        "parse_rate": sum(r["parsed"] for r in rows) / n,
        "by_kind": {k: c.most_common(3) for k, c in sorted(by_kind.items())},
    }


def _vs(c: Mapping[str, Any], counts: bool = True) -> str:
    pair = f", {c['only_arm']} / {c['only_ref']}" if counts else ""
    return f"{c['delta_points']:+.1f} (p = {c['p']:.2g}{pair})"


def write_markdown(path: Path, lines: Sequence[str]) -> None:
    """Write a report's lines to ``path`` and print them."""
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def arm_dirs(ab: Path) -> list[Path]:
    """The arm folders of an A/B: those its ``arms.json`` lists where it has one (a folder an A/B made
    before ``ab --overwrite`` cleared earlier runs' arms may hold them), else every folder with
    trajectories."""
    listed = ab / "arms.json"
    if listed.is_file():
        return [_run_dir(ab, arm["run_dir"]) for arm in json.loads(listed.read_text())["arms"]]
    return [d for d in sorted(ab.iterdir()) if (d / "trajectories.jsonl").is_file()]


def _run_dir(ab: Path, listed: str) -> Path:
    """An arm's folder: in the A/B's folder where the A/B ran it, else the finished run it was given."""
    inside = ab / Path(listed).name
    return inside if (inside / "trajectories.jsonl").is_file() else Path(listed)


# pooled groups: (label, whether an arm's folder name belongs to it)
GROUPS = (
    ("warm-started (before GRPO)", lambda k: "conductor_grpo" in k and k.endswith("warm_start")),
    ("after GRPO", lambda k: "conductor_grpo" in k and not k.endswith("warm_start")),
    ("step-wise router", lambda k: k.startswith("puppeteer-seed")),  # a quickstart's routers, one a seed
)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ab", type=Path)
    ap.add_argument("--lam", type=float, default=0.1)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cost", choices=sorted(UNITS), default="cents")
    ap.add_argument("--pool", default=None, help="with --cost minutes: the pool whose speeds price a call")
    ap.add_argument("--backend", default="sim (`sim-routing`, suite `mix-routing`)", help="for the header")
    args = ap.parse_args(argv)
    if (args.cost == "minutes") != (args.pool is not None):
        raise SystemExit("--cost minutes needs --pool (and --pool needs --cost minutes)")
    pool = load_pool(args.pool) if args.pool else None
    if pool is not None and not pool.has_speeds:
        raise SystemExit(f"pool {pool.name!r} declares no speeds for every model: no model minutes")
    arms = {d.name: read_arm(d, pool) for d in arm_dirs(args.ab)}
    rule = next(k for k in arms if "best-rule" in k)
    single = next(k for k in arms if "best-single" in k)
    items = sorted(set.intersection(*(set(a) for a in arms.values())))
    unit = args.cost
    table: dict[str, Any] = {f"lam_per_{unit.rstrip('s')}": args.lam, "items": len(items), "arms": {}}
    for name, arm in arms.items():
        rows = [arm[i] for i in items]
        entry: dict[str, Any] = summary(rows, args.lam, unit)
        for ref_name, ref in (("best_rule", rule), ("best_single", single)):
            entry[f"vs_{ref_name}"] = compare(rows, [arms[ref][i] for i in items], args.lam)
        if any(r["plan"] for r in rows):
            entry["plans"] = plans_used(rows)
        table["arms"][name] = entry
    for group, member in GROUPS:
        members = [k for k in arms if member(k)]
        if not members:
            continue
        pooled = [arms[k][i] for k in members for i in items]
        refs = {r: [arms[r][i] for _ in members for i in items] for r in (rule, single)}
        deltas = [table["arms"][k]["vs_best_rule"]["delta_points"] for k in members]
        table.setdefault("pooled", {})[group] = {
            "seeds": len(members),
            **summary(pooled, args.lam, unit),
            "vs_best_rule": compare(pooled, refs[rule], args.lam),
            "vs_best_single": compare(pooled, refs[single], args.lam),
            "worst_seed_vs_best_rule": min(deltas),
        }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(table, indent=2))
    lines = [
        f"Backend: {args.backend}; {len(items)} held-out items, every arm on the same draws; "
        f"return = accuracy - {args.lam} x {UNITS[args.cost]} per item; delta in points of return.",
        "",
        f"| arm | accuracy [95% Wilson] | {args.cost} / item | return | vs best-rule (McNemar p, "
        "arm only / rule only) | vs best-single | plans (distinct, >= 10%) |",
        "|---|---|---:|---:|---|---|---|",
    ]
    for name, e in table["arms"].items():
        plans = f"{e['plans']['distinct']}, {e['plans']['at_least_10pct']}" if "plans" in e else "-"
        ci = f"[{e['ci'][0]:.3f}, {e['ci'][1]:.3f}]"
        lines.append(
            f"| `{name}` | {e['accuracy']:.3f} {ci} | {e[unit]:.3f} | {e['return']:.3f} | "
            f"{_vs(e['vs_best_rule'])} | {_vs(e['vs_best_single'], counts=False)} | {plans} |"
        )
    for group, e in table.get("pooled", {}).items():
        worst = f"worst seed {e['worst_seed_vs_best_rule']:+.1f}"
        who = group if group.startswith("step") else f"conductor {group}"
        lines.append(
            f"| **{who}, {e['seeds']} seeds pooled** | {e['accuracy']:.3f} | {e[unit]:.3f} | "
            f"{e['return']:.3f} | {_vs(e['vs_best_rule'])}; {worst} | "
            f"{_vs(e['vs_best_single'], counts=False)} | |"
        )
    write_markdown(args.out / "report.md", lines)


if __name__ == "__main__":
    main()
