"""How much can any fixed plan (a workflow the conductor could write) earn over the best rule?

    python experiments/plan-space/run.py sim-routing               # (a) the simulated routing world
    python experiments/plan-space/run.py sim-local                 # (b) the calibrated simulator
    PUPPETEER_REPLAY=strict python experiments/plan-space/run.py local-mix   # (c) the replayed real table
    python experiments/plan-space/run.py sim-local --escalations   # with the cascade plans added

``--escalations`` adds every ordered pair of the world's ``escalate_top`` agents as a cascade plan on each
trigger (``escalate:A,B@TRIGGER``: B answers alone, only when the trigger fires on A's answer; the plans
a conductor writes under ``final_answer=cascade``) and writes ``results/<world>-escalations.*``.

Each plan of the declared space (:func:`plan_space.plan_specs`, beside this runner: singles, ordered
pairs whose second step sees the first and answers last, votes of three) runs as a fixed workflow policy
(``single:A``, ``chain:A,B``, ``vote:A,B,C``) through :func:`puppeteer.evaluation.evaluate.evaluate_policy`
on the training items (world 0) and on the held-out items in every world (simulator seeds
0..N-1; the replayed table is one world). The rules (``best-single``, ``best-rule``) are chosen on the
same training items at each lambda (:mod:`puppeteer.policies.rule_fit`) and run as fixed ``rules:`` specs
on the same held-out items. Every run's per-item (correct, cost) is kept under ``--work`` and reused on
the next run; the analysis writes ``results/<world>.json`` and ``results/<world>.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
from plan_space import (  # beside this runner
    Outcome,
    choose_by_kind,
    choose_plan,
    oracle,
    plan_form,
    plan_specs,
    routed,
    value_of,
)

import puppeteer.envs.parts as parts
from puppeteer.agents.pool import Pool, load_pool
from puppeteer.backends.replay import ReplayMiss, read_steps
from puppeteer.envs.reward import COST_MODELS
from puppeteer.envs.trajectories import read_trajectories
from puppeteer.envs.workflow import CASCADE_TRIGGERS
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.evaluation.stats import mcnemar_exact, wilson_interval
from puppeteer.policies.rule_fit import (
    Answer,
    fit_from_answers,
    recorded_chains,
    solver_names,
    training_answers,
)
from puppeteer.tasks import load_suite
from puppeteer.types import Task

HERE = Path(__file__).parent

WORLDS: Mapping[str, Mapping[str, Any]] = {
    "sim-routing": {
        "pool": "sim-routing",
        "suite": "mix-routing",
        "cost": "usd",
        "lams": (0.1,),
        "n_test": 400,
        "seeds": 3,
        "pair_top": None,  # ordered pairs of all 8 agents (a number: the most accurate on train only)
        "vote_top": None,  # votes of 3 among all 8 agents
        "escalate_top": None,  # with --escalations: ordered pairs of all 8 agents, on each trigger
        "backend": "simulator (sim-routing, published skills and list prices)",
    },
    "sim-local": {
        "pool": "sim-local",
        "suite": "mix-local",
        "cost": "minutes",
        "lams": (1.0, 0.0),
        "n_test": 320,
        "seeds": 3,
        "pair_top": 5,
        "vote_top": None,
        "escalate_top": 5,
        "backend": "simulator (sim-local, fitted from the real local-mix table)",
    },
    "local-mix": {
        "pool": "local-mix-steps",
        "suite": "mix-local",
        "cost": "minutes",
        "lams": (1.0, 0.0),
        "n_test": 320,
        "seeds": 1,
        "pair_top": 0,  # a second step that reads the first is recorded only for the verifier chains
        "vote_top": None,
        "escalate_top": None,  # an escalation's second call answers alone: a recorded single call
        "backend": "llama.cpp Qwen2.5-Coder 1.5B/0.5B, replayed from agents/local-mix.replay (strict)",
    },
}
UNIT = {"usd": ("US cent", "US cents"), "minutes": ("model minute", "model minutes")}


def share_memos() -> None:
    """One process-wide memo of sandbox runs, grades and visible checks for every evaluation here (each
    is a pure function of its key: a program, or an item and an answer), so the many plans that give
    the same answers on an item run the sandbox once."""
    programs, grades, checks = parts.ProgramMemo(), parts.GradeMemo(), parts.CheckMemo()
    parts.ProgramMemo = lambda: programs  # type: ignore[assignment,misc]
    parts.GradeMemo = lambda: grades  # type: ignore[assignment,misc]
    parts.CheckMemo = lambda: checks  # type: ignore[assignment,misc]


def world(pool: Pool, seed: int) -> Pool:
    """The pool with its simulator's seed set (another draw of every item and call); a replayed pool as is."""
    if "sim" not in pool.backend_options:
        return pool
    options = {k: dict(v) for k, v in pool.backend_options.items()}
    options["sim"]["seed"] = seed
    return replace(pool, backend_options=options)


def _key(spec: str) -> str:
    safe = spec.replace(":", "_").replace(",", "+").replace("/", "_")
    return safe if len(safe) < 120 else hashlib.sha1(spec.encode()).hexdigest()[:16]


def run(
    spec: str, pool: Pool, suite: str, tasks: Sequence[Task], split: str, seed: int, cost: str, work: Path
) -> dict[str, Outcome] | None:
    """Per item (correct, cost) of ``spec`` in world ``seed``; None when the run could not finish (under
    strict replay: a call the table does not hold). Kept in ``work`` and read back next time."""
    path = work / _key(spec) / f"{split}{len(tasks)}-world{seed}.json"
    if path.is_file():
        got = json.loads(path.read_text())
        return None if got is None else {k: (bool(v[0]), float(v[1])) for k, v in got.items()}
    w = world(pool, seed)
    with tempfile.TemporaryDirectory(prefix="plan-space-") as tmp:
        try:
            res = evaluate_policy(
                spec, w, suite, split=split, tasks=tasks, max_steps=3, progress=False,
                out_dir=Path(tmp) / "r", lam=0.0, cost_model=cost,
            )  # fmt: skip
        except ReplayMiss:
            res = None  # strict replay: the plan asks for a call the table does not hold
        out: dict[str, Outcome] | None = None
        if res is not None and res.completed and not res.n_errors:
            out = {}
            for t in read_trajectories(Path(tmp) / "r" / "trajectories.jsonl"):
                c = sum(
                    COST_MODELS[cost](s.completion, w.agent(s.agent_id).model)
                    for s in t.steps
                    if 0 <= s.agent_id < len(w.agents)
                )
                out[t.task_id] = (bool(t.correct), float(c))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


def cached_training_answers(
    pool: Pool, train: Sequence[Task], cost: str, path: Path
) -> dict[str, dict[str, Answer]]:
    if path.is_file():
        raw = json.loads(path.read_text())
        return {t: {a: Answer(**v) for a, v in row.items()} for t, row in raw.items()}
    answers = training_answers(world(pool, 0), train, cost)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({t: {a: asdict(v) for a, v in row.items()} for t, row in answers.items()}))
    return answers


def recorded_chain_rows(
    pool: Pool, suite: str, splits: Mapping[str, Sequence[Task]], cost: str, lam: float, work: Path
) -> list[dict[str, Any]]:
    """Each chain the pool's table recorded (a first agent, then a verifier reading its answer), run as
    ``chain:FIRST,SECOND`` on the items it was recorded on, beside ``single:FIRST`` on the same items."""
    if pool.replay is None:
        return []
    by_pair: dict[tuple[str, str, str], set[str]] = {}
    for o in read_steps(pool.replay):
        if o.suite == suite and o.error is None:
            by_pair.setdefault((o.first, o.agent, o.split), set()).add(o.task_id)
    rows = []
    for (first, second, split), ids in sorted(by_pair.items()):
        tasks = [t for t in splits[split] if t.id in ids]
        if not tasks:
            continue
        kinds = sorted({t.domain for t in tasks})
        got = {}
        for spec in (f"single:{first}", f"chain:{first},{second}"):
            out = run(spec, pool, suite, tasks, f"{split}-recorded-{_key(second)}", 0, cost, work)
            got[spec] = None if out is None else value_of(out.values(), lam)
        one, two = got[f"single:{first}"], got[f"chain:{first},{second}"]
        rows.append(
            {
                "split": split,
                "kinds": kinds,
                "n": len(tasks),
                "first": first,
                "second": second,
                "first_alone": None if one is None else asdict(one),
                "chain": None if two is None else asdict(two),
            }
        )
    return rows


# --------------------------------------------------------------------------- analysis


def _row(name: str, rows: Mapping[str, Outcome], lam: float, chosen: str = "") -> dict[str, Any]:
    v = value_of(rows.values(), lam)
    k = sum(c for c, _ in rows.values())
    lo, hi = wilson_interval(k, len(rows))
    return {
        "policy": name,
        "accuracy": v.accuracy,
        "ci": [lo, hi],
        "cost": v.cost,
        "return": v.value,
        "n": v.n,
        "chosen": chosen,
    }


def _choice_text(choice: Mapping[str, str]) -> str:
    plans = set(choice.values())
    if len(plans) == 1:
        return f"`{next(iter(plans))}` everywhere"
    return "; ".join(f"{k} `{p}`" for k, p in choice.items())


def analyse(
    name: str,
    cfg: Mapping[str, Any],
    plans: Sequence[str],
    train_out: Mapping[str, Mapping[str, Outcome]],
    test_out: Mapping[str, Mapping[str, Outcome]],
    rules_test: Mapping[float, Mapping[str, Mapping[str, Outcome]]],
    rules_text: Mapping[float, Mapping[str, str]],
    train_kinds: Mapping[str, str],
    test_kinds: Mapping[str, str],
    lam: float,
) -> dict[str, Any]:
    possible = [p for p in plans if p in train_out and p in test_out]
    forms = ["single", "chain", "vote", "escalate"]
    rows: list[dict[str, Any]] = []
    picks: dict[str, Any] = {}
    test_items = list(test_kinds)
    for form in [*forms, "any"]:
        space = [p for p in possible if form == "any" or plan_form(p) == form]
        if not space:
            continue
        one = choose_plan(train_out, list(train_kinds), lam, space)
        rows.append(
            _row(f"best {form} plan (one for all items), chosen on train", test_out[one], lam, f"`{one}`")
        )
        per = choose_by_kind(train_out, train_kinds, lam, space)
        got = routed(test_out, per, test_kinds)
        rows.append(_row(f"best {form} plan per kind, chosen on train", got, lam, _choice_text(per)))
        picks[form] = {"one": one, "per_kind": per, "per_kind_test": got}
        ins = choose_by_kind(test_out, test_kinds, lam, space)
        rows.append(
            _row(
                f"best {form} plan per kind, chosen on the held-out items (in-sample)",
                routed(test_out, ins, test_kinds),
                lam,
                _choice_text(ins),
            )
        )
    rows.append(
        _row("per-item oracle over the plans (hindsight)", oracle(test_out, test_items, lam, possible), lam)
    )
    for spec_name in ("best-single", "best-rule"):
        rows.append(
            _row(
                f"`{spec_name}` (chosen on train)",
                rules_test[lam][spec_name],
                lam,
                rules_text[lam][spec_name],
            )
        )
    rule = rules_test[lam]["best-rule"]
    tests = {}
    for form, pick in picks.items():
        got = pick["per_kind_test"]
        t = mcnemar_exact([rule[i][0] for i in test_items], [got[i][0] for i in test_items])
        tests[form] = {"only_plan": t.only_b, "only_rule": t.only_a, "p": t.p_value}
    return {
        "world": name,
        "backend": cfg["backend"],
        "lam": lam,
        "cost": cfg["cost"],
        "n_plans": len(possible),
        "n_plans_impossible": len(plans) - len(possible),
        "rows": rows,
        "mcnemar_per_kind_plan_vs_best_rule": tests,
    }


def markdown(res: Mapping[str, Any], cfg: Mapping[str, Any], n_train: int) -> list[str]:
    one, unit = UNIT[res["cost"]]
    seeds = cfg["seeds"]
    worlds = f"{seeds} worlds (simulator seeds 0..{seeds - 1})" if seeds > 1 else "one world (the table)"
    lines = [
        f"### {res['world']}, lambda = {res['lam']:g} per {one}",
        "",
        f"Backend: {res['backend']}. {res['n_plans']} plans ({res['n_plans_impossible']} more not possible). "
        f"Chosen on the first {n_train} training items (world 0); valued on {cfg['n_test']} held-out items x "
        f"{worlds}, pooled (n = {res['rows'][0]['n']}). "
        f"Return = accuracy - {res['lam']:g} x {unit} per item.",
        "",
        f"| policy | accuracy [95% Wilson] | {unit} / item | return | chosen |",
        "|---|---|---:|---:|---|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['policy']} | {r['accuracy']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {r['cost']:.4f} | "
            f"{r['return']:.4f} | {r['chosen']} |"
        )
    lines += [
        "",
        "Per-kind plan (chosen on train) against `best-rule`, pooled held-out items, exact McNemar:",
        "",
    ]
    for form, t in res["mcnemar_per_kind_plan_vs_best_rule"].items():
        lines.append(
            f"- {form}: only the plan right {t['only_plan']}, only the rule {t['only_rule']}, "
            f"p = {t['p']:.3g}"
        )
    return [*lines, ""]


# --------------------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("world", choices=sorted(WORLDS))
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--seeds", type=int, default=None, help="held-out worlds (default: the world's)")
    p.add_argument("--work", type=Path, default=Path("runs/plan-space"))
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument(
        "--escalations",
        action="store_true",
        help="add the cascade plans (escalate:A,B@TRIGGER); results/<world>-escalations.*",
    )
    args = p.parse_args()
    name = f"{args.world}-escalations" if args.escalations else args.world
    cfg = dict(WORLDS[args.world])
    if args.seeds is not None:
        cfg["seeds"] = args.seeds
    share_memos()
    pool = load_pool(cfg["pool"])
    cost = cfg["cost"]
    work = args.work / args.world
    train = load_suite(cfg["suite"], "train", n=args.n_train)
    test = load_suite(cfg["suite"], "test", n=cfg["n_test"])
    solvers = solver_names(pool)
    revisers = [a.name for i, a in enumerate(pool.agents) if pool.reads_context(i)]
    t0 = time.time()

    def status(msg: str) -> None:
        print(f"[{time.time() - t0:6.0f}s] {msg}", flush=True)

    # singles first: their training accuracy orders the agents for the pairs and votes
    train_out: dict[str, dict[str, Outcome]] = {}
    singles_possible = []
    for a in (*solvers, *revisers):
        got = run(f"single:{a}", pool, cfg["suite"], train, "train", 0, cost, work)
        if got is not None:
            train_out[f"single:{a}"] = got
            singles_possible.append(a)
    acc = {a: np.mean([c for c, _ in train_out[f"single:{a}"].values()]) for a in singles_possible}
    ranked = sorted((a for a in solvers if a in acc), key=lambda a: (-acc[a], solvers.index(a)))
    pair_agents = ranked[: cfg["pair_top"]] if cfg["pair_top"] is not None else ranked
    vote_agents = ranked[: cfg["vote_top"]] if cfg["vote_top"] else ranked
    plans = plan_specs(
        ranked,
        pair_agents=pair_agents,
        revisers=[r for r in revisers if r in acc] if cfg["pair_top"] != 0 else [],
        vote_agents=vote_agents,
    )
    plans = [s for s in plans if not s.startswith("single:") or s.removeprefix("single:") in acc] + [
        f"single:{r}" for r in revisers if r in acc and f"single:{r}" not in plans
    ]
    if args.escalations:
        top = ranked[: cfg["escalate_top"]] if cfg["escalate_top"] is not None else ranked
        plans += [
            s for s in plan_specs(top, vote_agents=(), cascades=CASCADE_TRIGGERS) if s.startswith("escalate:")
        ]
    status(
        f"{len(plans)} plans; agents by training accuracy: {', '.join(f'{a} {acc[a]:.2f}' for a in ranked)}"
    )
    test_out: dict[str, dict[str, Outcome]] = {}
    for n, spec in enumerate(plans):
        got = run(spec, pool, cfg["suite"], train, "train", 0, cost, work)
        if got is None:
            continue
        train_out[spec] = got
        pooled: dict[str, Outcome] = {}
        for seed in range(cfg["seeds"]):
            g = run(spec, pool, cfg["suite"], test, "test", seed, cost, work)
            if g is None:
                pooled = {}
                break
            pooled.update({f"{seed}|{k}": v for k, v in g.items()})
        if pooled:
            test_out[spec] = pooled
        if n % 10 == 9:
            status(f"{n + 1} of {len(plans)} plans")

    # the rules, chosen on the same training items at each lambda, run as fixed rules: specs
    answers = cached_training_answers(pool, train, cost, work / f"train{len(train)}-answers.json")
    chains = recorded_chains(pool, train, "train", cost)
    rules_test: dict[float, dict[str, dict[str, Outcome]]] = {}
    rules_text: dict[float, dict[str, str]] = {}
    for lam in cfg["lams"]:
        rules_test[lam], rules_text[lam] = {}, {}
        for form in ("single", "rule"):
            routes = fit_from_answers(train, answers, chains, solvers, lam, form)
            spec = "rules:" + ",".join(f"{k}={r.text}" for k, r in routes)
            pooled = {}
            for seed in range(cfg["seeds"]):
                g = run(spec, pool, cfg["suite"], test, "test", seed, cost, work)
                assert g is not None, f"{spec} did not finish"
                pooled.update({f"{seed}|{k}": v for k, v in g.items()})
            rules_test[lam][f"best-{form}"] = pooled
            rules_text[lam][f"best-{form}"] = "; ".join(f"{k} `{r.text}`" for k, r in routes)
    chain_rows = {
        str(lam): recorded_chain_rows(pool, cfg["suite"], {"train": train, "test": test}, cost, lam, work)
        for lam in cfg["lams"]
    }
    status("all runs done")

    train_kinds = {t.id: t.domain for t in train}
    test_kinds = {f"{s}|{t.id}": t.domain for s in range(cfg["seeds"]) for t in test}
    results = [
        analyse(
            args.world, cfg, plans, train_out, test_out, rules_test, rules_text, train_kinds, test_kinds, lam
        )
        for lam in cfg["lams"]
    ]
    singles_table = {
        spec.removeprefix("single:"): {
            "train_accuracy": float(np.mean([c for c, _ in train_out[spec].values()])),
            "test_accuracy": float(np.mean([c for c, _ in test_out[spec].values()]))
            if spec in test_out
            else None,
        }
        for spec in train_out
        if spec.startswith("single:")
    }
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "world": args.world,
        "escalations": args.escalations,
        "config": {k: v for k, v in cfg.items()},
        "n_train": len(train),
        "plans": plans,
        "impossible": [p for p in plans if p not in test_out],
        "singles": singles_table,
        "results": results,
        "recorded_chains": chain_rows,
        # a chain against its second agent alone (a solver, not a reviser), held out: what seeing the
        # first step's answer changed
        "chain_minus_second": {
            p: value_of(test_out[p].values(), 0.0).accuracy
            - value_of(test_out["single:" + p.split(",")[1]].values(), 0.0).accuracy
            for p in plans
            if p.startswith("chain:")
            and p in test_out
            and p.split(",")[1] not in revisers
            and "single:" + p.split(",")[1] in test_out
        },
        # each plan's accuracy and cost on train and pooled held out, and its return per lambda
        "plan_accuracy_cost": {
            p: [
                [value_of(o[p].values(), 0.0).accuracy, value_of(o[p].values(), 0.0).cost]
                for o in (train_out, test_out)
            ]
            for p in plans
            if p in test_out
        },
        "plan_returns": {
            str(lam): {
                p: [value_of(train_out[p].values(), lam).value, value_of(test_out[p].values(), lam).value]
                for p in plans
                if p in test_out
            }
            for lam in cfg["lams"]
        },
    }
    (args.out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = [line for res in results for line in markdown(res, cfg, len(train))]
    for lam, crows in chain_rows.items():
        if not crows:
            continue
        md += [
            f"### Recorded verifier chains, on the items they were recorded on (lambda = {lam} per "
            f"{UNIT[cost][0]})",
            "",
            "| split | kinds | n | first alone: accuracy, cost, return "
            "| chain first > second: accuracy, cost, "
            "return |",
            "|---|---|---:|---|---|",
        ]
        for r in crows:
            cells = [
                "not recorded" if v is None else f"{v['accuracy']:.3f}, {v['cost']:.3f}, {v['value']:.3f}"
                for v in (r["first_alone"], r["chain"])
            ]
            md.append(
                f"| {r['split']} | {', '.join(r['kinds'])} | {r['n']} | `{r['first']}`: {cells[0]} | "
                f"`{r['first']}` > `{r['second']}`: {cells[1]} |"
            )
        md.append("")
    (args.out / f"{name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    status("written")


if __name__ == "__main__":
    main()
