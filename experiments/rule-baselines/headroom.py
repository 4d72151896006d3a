"""How much room a world leaves above its best rule, on held-out items.

Every solver's answer alone on every training and held-out item (replayed from the pool's table, or
drawn by the simulator), then on the held-out items:

- the best rule chosen on the training items (what `best-rule` runs);
- the best rule per kind chosen on the held-out items themselves: the most any rule of the space
  (one agent, an escalation on an answer signal, a recorded chain, a vote of three) can reach there,
  so what a policy that only learns *which rule per kind* could gain at most;
- the best single agent chosen on the training items;
- the per-item oracle over single agents (the first right agent, cheapest first): an upper bound no
  policy that sees only the question can reach;
- the same two choices (on the training items, on the held-out items) over the rule space plus the
  cascades of :mod:`puppeteer.analytics.cascade_room` that read a second step's answer, which a rule
  cannot: two agents, a third only where they disagree (``agreement``); a first agent and a verifier
  shown its work, a third only where the verifier flags it (``flag``, where the table records the
  verifier's chains: pass ``--n-train``/``--n-test`` within the shards recorded).

    PUPPETEER_REPLAY=strict python experiments/rule-baselines/headroom.py --lam 1 --cost minutes \
        --out experiments/rule-baselines/results/headroom_lam1.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from puppeteer.agents.pool import load_pool
from puppeteer.analytics.cascade_room import choose_per_kind, space, valued
from puppeteer.evaluation.stats import mcnemar_exact
from puppeteer.policies.rule_fit import (
    Chains,
    Singles,
    fit_from_answers,
    outcome,
    recorded_chains,
    solver_names,
    training_answers,
)
from puppeteer.policies.rules import Rule
from puppeteer.tasks import load_suite
from puppeteer.types import Task


def score(
    routes: Sequence[tuple[str, Rule]], tasks: Sequence[Task], singles: Singles, chains: Chains
) -> dict:
    by_kind = dict(routes)
    got = [outcome(by_kind.get(t.domain, by_kind.get("*")), t.id, singles, chains) for t in tasks]
    ok = [g for g in got if g is not None]
    return {
        "n": len(ok),
        "accuracy": sum(c for c, _ in ok) / len(ok),
        "cost": sum(c for _, c in ok) / len(ok),
        "rules": {k: r.text for k, r in routes},
    }


def oracle(tasks: Sequence[Task], singles: Singles, solvers: Sequence[str]) -> dict:
    right, cost = 0, 0.0
    for t in tasks:
        row = singles[t.id]
        hits = sorted((row[a].cost, a) for a in solvers if a in row and row[a].correct)
        right += bool(hits)
        cost += hits[0][0] if hits else min(row[a].cost for a in solvers if a in row)
    return {"n": len(tasks), "accuracy": right / len(tasks), "cost": cost / len(tasks)}


def cascade_rows(
    chains: Sequence[tuple[str, str]],
    solvers: Sequence[str],
    lam: float,
    train: Sequence[Task],
    test: Sequence[Task],
    answers_train: tuple[Singles, Chains],
    answers_test: tuple[Singles, Chains],
) -> dict[str, dict]:
    """The rule space alone and with each cascade family (and all of them), chosen on the training
    items, and the whole space chosen on the held-out items (the bound), all valued on the held-out
    items; McNemar of each against the rule space alone."""
    families = ["agreement", "flag"] if chains else ["agreement"]
    spaces = {"": [], **{f" + {f}": [f] for f in families}, " + all": families}
    choices = {
        f"best per kind of rules{k} (chosen on train)": (v, answers_train, train) for k, v in spaces.items()
    }
    choices["best per kind of rules + all chosen on the held-out items"] = (families, answers_test, test)
    out, correct = {}, {}
    for name, (extra, (s, c), items) in choices.items():
        candidates = space(solvers, chains, extra)
        v = valued(choose_per_kind(candidates, items, s, c, lam), candidates, test, *answers_test)
        out[name] = {"n": len(test), "accuracy": v.accuracy, "cost": v.cost, "rules": dict(v.routes)}
        correct[name] = v.correct
    ref = correct["best per kind of rules (chosen on train)"]
    for name, row in out.items():
        t = mcnemar_exact(correct[name], ref)
        row["mcnemar_vs_rules"] = {"only_this": t.only_a, "only_rules": t.only_b, "p": t.p_value}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", default="local-mix")
    p.add_argument("--suite", default="mix-local")
    p.add_argument("--lam", type=float, default=1.0)
    p.add_argument("--cost", default="minutes")
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--n-test", type=int, default=320)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    pool = load_pool(args.pool)
    train = load_suite(args.suite, "train", n=args.n_train)
    test = load_suite(args.suite, "test", n=args.n_test)
    solvers = solver_names(pool)
    singles_train = training_answers(pool, train, args.cost)
    singles_test = training_answers(pool, test, args.cost)
    chains_train = recorded_chains(pool, train, "train", args.cost)
    chains_test = recorded_chains(pool, test, "test", args.cost)
    answers_train, answers_test = (singles_train, chains_train), (singles_test, chains_test)
    fit = {
        form: fit_from_answers(train, singles_train, chains_train, solvers, args.lam, form)
        for form in ("single", "kind", "rule")
    }
    on_test = fit_from_answers(test, singles_test, chains_test, solvers, args.lam, "rule")
    rows = {
        "best-single (chosen on train)": score(fit["single"], test, singles_test, chains_test),
        "best-kind (chosen on train)": score(fit["kind"], test, singles_test, chains_test),
        "best-rule (chosen on train)": score(fit["rule"], test, singles_test, chains_test),
        "best rule per kind chosen on the held-out items": score(on_test, test, singles_test, chains_test),
        "per-item oracle over single agents": oracle(test, singles_test, solvers),
    }
    recorded = [p for p in chains_train if p in chains_test]  # a pick needs its chain on its kind's items
    rows.update(cascade_rows(recorded, solvers, args.lam, train, test, answers_train, answers_test))
    for row in rows.values():
        row["value"] = row["accuracy"] - args.lam * row["cost"]
    summary = {"pool": args.pool, "suite": args.suite, "lam": args.lam, "cost_model": args.cost, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    for name, row in rows.items():
        print(f"{name:50s} acc {row['accuracy']:.3f} cost {row['cost']:.3f} value {row['value']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
