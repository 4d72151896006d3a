"""What a GRPO conductor run planned on its held-out items, before and after training.

Reads RUN/config.json and RUN/heldout_{before,after}.jsonl (a ``puppeteer train track=conductor`` run)
and writes to OUT:

* ``plans.jsonl``: per item and arm, the plan as agent names, the agents offered, the row's lambda and
  the outcome (no subtasks, answers or question text: the held-out split may hold GPQA items);
* ``report.md``: reward, accuracy and cost before and after (paired), the plans by domain, how many
  distinct plans each arm wrote and how often, mean cost below and above the median lambda (with
  ``workflow_lam_range``), and fixed one-call references scored in the same reward env on the same
  rows: each single agent where offered, the "best offered agent" rule (the offered agent with the best
  mean reward over the rows that offer it) and the per-row best one-call plan (an oracle).

    python experiments/conductor-grpo/conductor_plan_report.py runs/conductor/routing-k4-lam \
        experiments/conductor/results/routing-k4-lam
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from puppeteer.envs.workflow import extract_lists
from puppeteer.evaluation.stats import mcnemar_exact
from puppeteer.integrations.trl import WorkflowScorer
from puppeteer.train.grpo import GRPOJob

ARMS = ("before", "after")
SUBTASK = "Solve the problem and state the final answer."


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _plan(completion: str, names: Sequence[str]) -> tuple[str, ...] | None:
    ids, _, _ = extract_lists(completion)
    if not isinstance(ids, list) or not all(isinstance(i, int) and 0 <= i < len(names) for i in ids):
        return None
    return tuple(names[i] for i in ids)


def _mean(xs: Sequence[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    return {k: _mean([float(r[k]) for r in rows]) for k in ("parsed", "correct", "reward", "cost", "calls")}


def _references(run_cfg: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One-call plans of every offered agent on every row, scored in the run's held-out reward env."""
    job = GRPOJob.from_mapping(dict(run_cfg))
    env = job.env(job.eval_split, job.n_eval, training=False)
    names = [a.name for a in env.pool.agents]
    scorer = WorkflowScorer(env, max_workers=8, seed=job.seed)
    calls = [(r, a) for r in rows for a in r["available"]]
    texts = [f"model_id = [{a}]\nsubtasks = [{SUBTASK!r}]\naccess_list = [[]]" for _, a in calls]
    outcomes = scorer.score(
        [r["task_id"] for r, _ in calls],
        texts,
        [r["available"] for r, _ in calls],
        [r["lam"] for r, _ in calls],
    )
    by_row: dict[str, dict[str, Any]] = defaultdict(dict)
    for (r, a), o in zip(calls, outcomes, strict=True):
        by_row[r["task_id"]][names[a]] = o
    per_agent = {n: [row[n].reward for row in by_row.values() if n in row] for n in names}
    rank = sorted((n for n in names if per_agent[n]), key=lambda n: -_mean(per_agent[n]))
    rule = [next(row[n] for n in rank if n in row) for row in by_row.values()]
    oracle = [max(row.values(), key=lambda o: o.reward) for row in by_row.values()]
    return {
        "names": names,
        "single": {
            n: {
                "n": len(v),
                "reward": _mean(v),
                "accuracy": _mean([row[n].correct for row in by_row.values() if n in row]),
            }
            for n, v in per_agent.items()
            if v
        },
        "rule_order": rank,
        "rule": {
            "reward": _mean([o.reward for o in rule]),
            "accuracy": _mean([o.correct for o in rule]),
            "cost": _mean([o.cost for o in rule]),
        },
        "oracle": {
            "reward": _mean([o.reward for o in oracle]),
            "accuracy": _mean([o.correct for o in oracle]),
            "cost": _mean([o.cost for o in oracle]),
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path)
    p.add_argument("out", type=Path)
    args = p.parse_args()
    cfg = json.loads((args.run / "config.json").read_text())
    arms = {
        arm: _rows(args.run / f"heldout_{arm}.jsonl")
        for arm in ARMS
        if (args.run / f"heldout_{arm}.jsonl").exists()
    }
    if not arms:
        raise SystemExit(f"{args.run} has no heldout_before.jsonl or heldout_after.jsonl")
    first = next(iter(arms.values()))
    refs = _references(cfg, first)
    names = refs["names"]
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "plans.jsonl").open("w") as f:
        for arm, rows in arms.items():
            for r in rows:
                plan = _plan(r["completion"], names)
                line = {
                    "arm": arm,
                    "task_id": r["task_id"],
                    "domain": r["task_id"].split("/")[0],
                    "offered": [names[i] for i in r["available"]],
                    "lam": r["lam"],
                    "plan": list(plan) if plan else None,
                    **{k: r[k] for k in ("parsed", "correct", "reward", "cost", "calls")},
                }
                f.write(json.dumps(line) + "\n")
    lines = [
        f"# Conductor plans: `{args.run}`",
        "",
        f"Pool `{cfg['pool']['name']}`, suite `{cfg['suite']['name']}` ({len(first)} held-out items), "
        f"conductor `{cfg['model']['id']}`, k_available={cfg.get('k_available')}, "
        f"constrained={cfg.get('constrained')}, workflow_lam_range={cfg.get('workflow_lam_range')}, "
        f"cost model `{cfg.get('cost_model')}`. Reward = 0.5 (parsed) + 0.5 (correct) - lambda x cost, "
        "each row at its own lambda.",
        "",
        "| arm | parse rate | accuracy | reward | cost per item | calls per item | distinct plans |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    plans: dict[str, Counter[tuple[str, ...] | None]] = {}
    for arm, rows in arms.items():
        plans[arm] = Counter(_plan(r["completion"], names) for r in rows)
        m = _summary(rows)
        lines.append(
            f"| {arm} | {m['parsed']:.2f} | {m['correct']:.3f} | {m['reward']:.3f} | {m['cost']:.3f} | "
            f"{m['calls']:.2f} | {len(plans[arm])} |"
        )
    rule, oracle = refs["rule"], refs["oracle"]
    lines += [
        f"| one call, best offered agent (order {', '.join(refs['rule_order'])}) | 1.00 | "
        f"{rule['accuracy']:.3f} | {rule['reward']:.3f} | {rule['cost']:.3f} | 1.00 | |",
        f"| one call, the per-row best offered agent (oracle) | 1.00 | {oracle['accuracy']:.3f} | "
        f"{oracle['reward']:.3f} | {oracle['cost']:.3f} | 1.00 | |",
        "",
    ]
    if "before" in arms and "after" in arms:
        b = {r["task_id"]: r for r in arms["before"]}
        a = {r["task_id"]: r for r in arms["after"]}
        ids = sorted(set(a) & set(b))
        mc = mcnemar_exact([bool(b[i]["correct"]) for i in ids], [bool(a[i]["correct"]) for i in ids])
        lines += [
            f"After against before, paired on {len(ids)} items: accuracy exact McNemar p = {mc.p_value:.3g} "
            f"(before only {mc.only_a}, after only {mc.only_b}); reward "
            f"{_mean([a[i]['reward'] - b[i]['reward'] for i in ids]):+.3f} per item.",
            "",
        ]
    lines += [
        "Single agents, one call, on the rows that offer them:",
        "",
        "| agent | rows | accuracy | reward |",
        "|---|---:|---:|---:|",
    ]
    for n, s in sorted(refs["single"].items(), key=lambda kv: -kv[1]["reward"]):
        lines.append(f"| `{n}` | {s['n']} | {s['accuracy']:.3f} | {s['reward']:.3f} |")
    lines.append("")
    for arm, rows in arms.items():
        lines += [
            f"## Plans {arm} training",
            "",
            "| plan (agents in order) | items | share |",
            "|---|---:|---:|",
        ]
        for plan, count in plans[arm].most_common(12):
            shown = " -> ".join(plan) if plan else "(unparsed)"
            lines.append(f"| {shown} | {count} | {count / len(rows):.0%} |")
        by_domain: dict[str, Counter[str]] = defaultdict(Counter)
        for r in rows:
            plan = _plan(r["completion"], names)
            by_domain[r["task_id"].split("/")[0]][" -> ".join(plan) if plan else "(unparsed)"] += 1
        lines += ["", "| domain | items | accuracy | most common plans |", "|---|---:|---:|---|"]
        for dom in sorted(by_domain):
            dom_rows = [r for r in rows if r["task_id"].split("/")[0] == dom]
            common = "; ".join(f"{k} ({v})" for k, v in by_domain[dom].most_common(3))
            lines.append(
                f"| {dom} | {len(dom_rows)} | {_mean([r['correct'] for r in dom_rows]):.2f} | {common} |"
            )
        if cfg.get("workflow_lam_range"):
            median = statistics.median(r["lam"] for r in rows)
            lo, hi = (
                _summary([r for r in rows if r["lam"] <= median]),
                _summary([r for r in rows if r["lam"] > median]),
            )
            lines += [
                "",
                f"Price of cost: rows at lambda <= {median:.3g} (the median) cost {lo['cost']:.3f} per item "
                f"({lo['calls']:.2f} calls, accuracy {lo['correct']:.2f}); rows above it cost "
                f"{hi['cost']:.3f} ({hi['calls']:.2f} calls, accuracy {hi['correct']:.2f}).",
            ]
        lines.append("")
    (args.out / "report.md").write_text("\n".join(lines) + "\n")
    (args.out / "references.json").write_text(
        json.dumps({k: v for k, v in refs.items() if k != "names"}, indent=2, default=float) + "\n"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
