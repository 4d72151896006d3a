"""Fixed cascades on a shipped outcome table, escalating when an answer fails the question's visible checks.

With a pool of independent solvers (each agent answers the question alone), a cascade's outcome on an
item is what its members did alone: the table holds every agent's answer, grade and model seconds, so
any escalation rule is scored without a model. For each kind of request the first agent is the kind's
best on the training items (lambda-priced like the routers: accuracy - lambda * model minutes); on
a kind with a visible check (HumanEval: the calls its docstring shows, :mod:`puppeteer.tasks.visible`,
run in the sandbox) gets a chain instead, chosen the same way among every ordered chain of up to
``--max-chain`` agents: the next agent is called while the answer so far fails its check, and the
last answer stands.

    python experiments/local-mix/visible_check_cascades.py --pool local-mix --suite mix-local \
        --n-train 200 --n-test 320

Prints, for the held-out items: each router's accuracy, model seconds per item, and the exact McNemar
test against the best single agent (chosen on the training items); ``--out`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from scipy.stats import binomtest

from puppeteer.agents.pool import load_pool
from puppeteer.backends.replay import Outcome, read_outcomes
from puppeteer.tasks import load_suite
from puppeteer.tasks.visible import VISIBLE_CHECKS
from puppeteer.types import Task

Table = dict[str, dict[str, Outcome]]  # task id -> agent -> outcome


def _table(rows: Sequence[Outcome], split: str, suite: str, ids: Sequence[str]) -> Table:
    table: Table = defaultdict(dict)
    for o in rows:
        if o.split == split and o.suite == suite:
            table[o.task_id][o.agent] = o
    missing = [i for i in ids if i not in table]
    if missing:
        raise SystemExit(f"the table lacks {len(missing)} {split} items (first: {missing[0]})")
    return {i: table[i] for i in ids}


Verdicts = dict[tuple[str, str], bool | None]  # (task id, agent) -> the visible check's verdict


def verdicts_of(table: Table, tasks: dict[str, Task]) -> Verdicts:
    """Every answer's visible-check verdict (one sandbox run each; None where the kind has no check)."""
    out: Verdicts = {}
    for task_id, row in table.items():
        check = VISIBLE_CHECKS.get(tasks[task_id].grader)
        for agent, o in row.items():
            out[(task_id, agent)] = None if check is None else check.check(o.answer, tasks[task_id])
    return out


def _walk(
    row: dict[str, Outcome], task_id: str, chain: Sequence[str], verdicts: Verdicts
) -> tuple[Outcome, float]:
    """The chain's agents in order until an answer does not fail its visible check (the last stands)."""
    spent = 0.0
    for i, agent in enumerate(chain):
        o = row[agent]
        spent += o.model_s
        if verdicts[(task_id, agent)] is not False or i == len(chain) - 1:
            return o, spent
    raise ValueError("an empty chain")


def _chain_value(items: Table, chain: Sequence[str], verdicts: Verdicts, lam: float) -> float:
    walked = [_walk(row, task_id, chain, verdicts) for task_id, row in items.items()]
    return sum(o.correct - lam * s / 60.0 for o, s in walked) / len(walked)


def run_routes(
    table: Table, tasks: dict[str, Task], routes: dict[str, list[str]], verdicts: Verdicts
) -> tuple[list[bool], list[float]]:
    """Each item: its kind's chain (one agent, or agents escalating on failed visible checks)."""
    correct, seconds = [], []
    for task_id, row in table.items():
        o, spent = _walk(row, task_id, routes[tasks[task_id].domain], verdicts)
        correct.append(o.correct)
        seconds.append(spent)
    return correct, seconds


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="local-mix")
    p.add_argument("--suite", default="mix-local")
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--n-test", type=int, default=320)
    p.add_argument("--lam", type=float, default=1.0, help="price per model minute when choosing agents")
    p.add_argument("--max-chain", type=int, default=3, help="longest escalation chain tried per checked kind")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)

    pool = load_pool(args.pool)
    if pool.replay is None:
        raise SystemExit(f"pool {args.pool!r} ships no outcome table")
    rows = read_outcomes(pool.replay)
    train_tasks = load_suite(args.suite, "train", n=args.n_train)
    test_tasks = load_suite(args.suite, "test", n=args.n_test)
    train = _table(rows, "train", args.suite, [t.id for t in train_tasks])
    test = _table(rows, "test", args.suite, [t.id for t in test_tasks])
    agents = sorted(next(iter(train.values())))
    best_single = max(agents, key=lambda a: sum(r[a].correct for r in train.values()))
    tasks = {t.id: t for t in (*train_tasks, *test_tasks)}
    verdicts = {**verdicts_of(train, tasks), **verdicts_of(test, tasks)}
    by_kind: dict[str, Table] = {}
    for t in sorted(train_tasks, key=lambda t: t.domain):
        by_kind.setdefault(t.domain, {})[t.id] = train[t.id]
    # each kind's agent by its value on the training items (accuracy - lambda x model minutes per item);
    # a kind with a visible check gets the best ordered chain of up to --max-chain agents the same way
    first = {
        k: max(agents, key=lambda a: _chain_value(items, [a], verdicts, args.lam))
        for k, items in by_kind.items()
    }
    candidates = [list(c) for n in range(1, args.max_chain + 1) for c in itertools.permutations(agents, n)]
    chains = {
        k: max(candidates, key=lambda c: _chain_value(by_kind[k], c, verdicts, args.lam))
        for k in sorted({t.domain for t in train_tasks if t.grader in VISIBLE_CHECKS})
    }
    base = [test[t][best_single].correct for t in test]
    base_s = [test[t][best_single].model_s for t in test]
    results = []
    for name, routes in (
        (f"single:{best_single}", None),
        ("best agent per kind", {k: [a] for k, a in first.items()}),
        (
            "best agent per kind, escalating on failed visible checks",
            {**{k: [a] for k, a in first.items()}, **chains},
        ),
    ):
        if routes is None:
            correct, seconds = base, base_s
        else:
            correct, seconds = run_routes(test, tasks, routes, verdicts)
        only_a = sum(a and not b for a, b in zip(correct, base, strict=True))
        only_b = sum(b and not a for a, b in zip(correct, base, strict=True))
        pvalue = binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else 1.0
        results.append(
            {
                "router": name,
                "routes": routes,
                "accuracy": sum(correct) / len(correct),
                "model_s": sum(seconds) / len(seconds),
                "time_ratio": sum(seconds) / sum(base_s),
                "only_router": only_a,
                "only_best_single": only_b,
                "mcnemar_p": pvalue,
            }
        )
    print(f"first agent per kind (training items, lambda {args.lam:g}): {first}; best single: {best_single}")
    print(f"escalation chains (training items): {chains}")
    print(f"held-out items: {len(test)}")
    for r in results:
        print(
            f"{r['accuracy']:.3f}  {r['model_s']:5.1f} s ({r['time_ratio']:.2f}x)  "
            f"{r['only_router']}/{r['only_best_single']}  p={r['mcnemar_p']:.4f}  {r['router']}"
        )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        summary = {
            "pool": args.pool,
            "suite": args.suite,
            "lam": args.lam,
            "first": first,
            "chains": chains,
            "best_single": best_single,
            "n_train": len(train),
            "n_test": len(test),
            "results": results,
        }
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
