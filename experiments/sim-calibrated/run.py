"""The simulator calibrated on the real local-mix table: real against simulated for every calibrated
figure, and the optimum against the best rule in that world.

    python -m puppeteer outcomes fit-sim --pool local-mix-steps --suite mix-local --name sim-local \
        --verifier qwen0.5b-verify --chains train:40 --chains test:40 --out agents/sim-local.yaml
    python experiments/sim-calibrated/run.py check --seeds 200      # results/check.{json,md}
    python experiments/sim-calibrated/run.py optimum --seeds 5      # results/optimum.{json,md}
    python experiments/sim-calibrated/run.py room --seeds 5         # results/room.{json,md}

``check`` reads the real table (``agents/local-mix.replay/``: llama.cpp, Qwen2.5-Coder 1.5B / 0.5B,
greedy; replayed, nothing is called) and draws the same items on the simulator (``agents/sim-local.yaml``)
``--seeds`` times (``sim_check.py`` beside this runner). ``optimum`` runs on the simulator only: every
solver alone on the first 200 training items of ``mix-local`` (world seed 0; the rules are chosen
there, :mod:`puppeteer.policies.rule_fit`) and on the 320 held-out items in worlds 0..N-1 (each world
another draw of every item's latent and every call: the pool's simulator seed), through the ordinary
evaluation; cost = model minutes at the real models' declared speeds.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
from sim_check import (
    Figure,
    backend,
    pair_figures,
    real_matrix,
    repeat_figure,
    signal_figures,
    sim_matrix,
    single_call_figures,
    verifier_figures,
)

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.analytics.cascade_room import choose_per_kind, space, valued
from puppeteer.analytics.second_steps import flagged, relations
from puppeteer.backends.replay import read_outcomes, read_steps
from puppeteer.evaluation.stats import mcnemar_exact, wilson_interval
from puppeteer.policies.rule_fit import (
    Answer,
    Chosen,
    choose_and_value,
    fit_from_answers,
    outcome,
    solver_names,
    training_answers,
)
from puppeteer.tasks import load_suite
from puppeteer.types import Task

HERE = Path(__file__).parent
SIM = "simulator (sim-local, fitted from local-mix)"
REAL = "real (replayed local-mix table)"


# --------------------------------------------------------------------------- check


def _fmt(f: Figure) -> str:
    inside = "yes" if f.inside else "**no**"
    return (
        f"| {f.name} | {f.real:.3f} [{f.low:.3f}, {f.high:.3f}] | {f.sim:.3f} [{f.sim_low:.3f}, "
        f"{f.sim_high:.3f}] | {inside} |"
    )


def check(args: argparse.Namespace) -> None:
    real_pool, pool = load_pool(args.real_pool), load_pool(args.pool)
    assert real_pool.replay is not None
    outcomes = [o for o in read_outcomes(real_pool.replay) if o.suite == args.suite]
    steps = [s for s in read_steps(real_pool.replay) if s.suite == args.suite]
    tasks = load_suite(args.suite, "train") + load_suite(args.suite, "test")
    solvers = solver_names(pool)
    groups = {a.name: str(a.model.options["group"]) for a in pool.agents if a.name in solvers}
    rel = {
        k: ("same model" if v == "same model" else "other size")
        for k, v in relations(groups, dict.fromkeys(groups.values(), "Qwen2.5-Coder")).items()
    }
    real = real_matrix(outcomes, solvers)
    sims = [backend(pool, tasks, seed) for seed in range(args.seeds)]
    mats = [sim_matrix(s, pool, real) for s in sims]
    sections = {
        "single calls": single_call_figures(real, mats, rel, args.boot),
        "pairs": pair_figures(real, mats, args.boot),
        "verifier": verifier_figures(steps, sims, pool, flagged),
        "repeats": [repeat_figure(sims[:5], pool, solvers, real.items)],
        "answer signals": signal_figures(outcomes, sims[: args.signal_seeds], pool, tasks, solvers),
    }
    out = {
        "real": REAL,
        "sim": SIM,
        "seeds": args.seeds,
        "items": len(real.items),
        "sections": {k: [asdict(f) | {"inside": f.inside} for f in v] for k, v in sections.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "check.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [
        f"Real: {REAL}, 95% interval (Wilson for rates, bootstrap over items for phi and vote gain). "
        f"Simulated: {SIM}, the same {len(real.items)} items, mean over {args.seeds} draws "
        "[2.5%, 97.5% of the per-draw value].",
        "",
    ]
    for name, figs in sections.items():
        inside = sum(f.inside for f in figs)
        lines += [
            f"## {name} ({inside} of {len(figs)} inside the real interval)",
            "",
            "| figure | real [95%] | simulated mean [per-draw 95%] | inside |",
            "|---|---|---|---|",
        ]
        lines += [_fmt(f) for f in figs]
        lines.append("")
    (args.out / "check.md").write_text("\n".join(lines))
    for name, figs in sections.items():
        print(f"{name}: {sum(f.inside for f in figs)} / {len(figs)} inside")
        for f in figs:
            if not f.inside:
                print("  outside:", _fmt(f))


# --------------------------------------------------------------------------- optimum against rules


def world(pool: Pool, seed: int) -> Pool:
    """The pool with its simulator's seed set: another draw of every item's latent and every call."""
    options = {k: dict(v) for k, v in pool.backend_options.items()}
    options["sim"]["seed"] = seed
    return replace(pool, backend_options=options)


def _value(rows: Sequence[tuple[bool, float]], lam: float) -> dict[str, float]:
    acc = float(np.mean([c for c, _ in rows]))
    cost = float(np.mean([x for _, x in rows]))
    return {"accuracy": acc, "cost": cost, "return": acc - lam * cost}


def policies_on(
    tasks: Sequence[Task],
    singles: Mapping[str, Mapping[str, Answer]],
    routes: Mapping[str, Mapping[str, object]],
    expect: Mapping[str, Mapping[str, Mapping[str, float]]],
    mean_cost: Mapping[tuple[str, str], float],
    solvers: Sequence[str],
    lam: float,
    third: Mapping[str, str],
) -> dict[str, dict[str, float]]:
    """Each policy's accuracy, cost and return on one world's held-out items (``third``: task id ->
    ``KIND:THIRD``, its kind and the third of visible difficulty it falls in)."""
    out: dict[str, dict[str, float]] = {}

    def choice(given: str, t: Task) -> str:
        return max(solvers, key=lambda a: expect[given][t.id][a] - lam * mean_cost[(a, t.domain)])

    for form, by_kind in routes.items():
        rows = []
        for t in tasks:
            rule = (
                by_kind.get(t.domain)
                or by_kind.get(third[t.id])
                or by_kind.get("*")
                or routes["rule"][t.domain]  # a visible third the training items lack: its kind's rule
            )
            got = outcome(rule, t.id, singles, {})  # type: ignore[arg-type]
            assert got is not None
            rows.append(got)
        out[form] = _value(rows, lam)
    for name, given in (
        ("optimum: kind", "kind"),
        ("optimum: visible", "visible"),
        ("optimum: item", "item"),
    ):
        rows = []
        for t in tasks:
            ans = singles[t.id][choice(given, t)]
            rows.append((ans.correct, ans.cost))
        out[name] = _value(rows, lam)
    rows = []
    for t in tasks:
        best = max(solvers, key=lambda a: singles[t.id][a].correct - lam * singles[t.id][a].cost)
        rows.append((singles[t.id][best].correct, singles[t.id][best].cost))
    out["oracle (hindsight, single agents)"] = _value(rows, lam)
    # the rule spaces' own optimum: rules chosen on these held-out items themselves (in-sample, so an
    # optimistic bound on what a policy of that form, fixed cascades per kind or per kind and visible
    # third, could reach)
    for name, bins in (
        ("rule, chosen in-sample", None),
        ("rule per kind and visible third, in-sample", third),
    ):
        chosen = choose_and_value(tasks, singles, tasks, singles, solvers, lam, "rule", bins)
        out[name] = _value(chosen.outcomes, lam)
    # expected returns (no luck of the draws) of the kind, visible and item choices, each scored by the
    # item-latent probabilities: the paired measure of what the visible share is worth
    for given in ("kind", "visible", "item"):
        values = [
            expect["item"][t.id][a] - lam * mean_cost[(a, t.domain)]
            for t in tasks
            for a in [choice(given, t)]
        ]
        out[f"expected: {given} choice"] = {"return": float(np.mean(values))}
    return out


def expectations(
    pool: Pool, tasks: Sequence[Task], solvers: Sequence[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """P(correct) of each solver on each item given its kind alone, what its question shows, or its
    whole latent (item difficulty; the model-group draw stays unknown)."""
    sim = backend(pool, tasks, int(pool.backend_options["sim"].get("seed", 0)))
    agents = {a: pool.agent(pool.index(a)) for a in solvers}
    out: dict[str, dict[str, dict[str, float]]] = {"kind": {}, "visible": {}, "item": {}}
    for t in tasks:
        out["kind"][t.id] = {a: float(agents[a].model.options["skills"][t.domain]) for a in solvers}
        out["visible"][t.id] = {a: sim.accuracy_given_visible(agents[a], t.id) for a in solvers}
        out["item"][t.id] = {a: sim.accuracy_given_item(agents[a], t.id) for a in solvers}
    return out


def thirds(pool: Pool, tasks: Sequence[Task]) -> dict[str, str]:
    """Task id -> ``KIND:easy|mid|hard``: its visible score's third (of a standard normal)."""
    sim = backend(pool, tasks, 0)
    out = {}
    for t in tasks:
        d = sim.visible_score(t.id)
        label = "mid" if d is None or -0.4307 <= d <= 0.4307 else ("easy" if d < 0 else "hard")
        out[t.id] = f"{t.domain}:{label}"
    return out


def cached_answers(
    pool: Pool, tasks: Sequence[Task], cost: str, seed: int, path: Path
) -> dict[str, dict[str, Answer]]:
    """:func:`training_answers` in world ``seed``, kept in ``path`` (JSON) for the next run."""
    if path.is_file():
        raw = json.loads(path.read_text())
        return {t: {a: Answer(**v) for a, v in row.items()} for t, row in raw.items()}
    answers = training_answers(world(pool, seed), tasks, cost, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({t: {a: asdict(v) for a, v in row.items()} for t, row in answers.items()}))
    return answers


def through_env(
    args: argparse.Namespace, test: Sequence[Task], worlds: Sequence[Mapping[str, Mapping[str, Answer]]]
) -> list[str]:
    """Per agent and kind on the held-out items: accuracy and model seconds through the ordinary
    evaluation (the env renders, runs pot programs in the sandbox and grades), simulated over the
    worlds, against the real table's on the same items."""
    real_pool = load_pool(args.real_pool)
    assert real_pool.replay is not None
    ids = {t.id for t in test}
    real = [o for o in read_outcomes(real_pool.replay) if o.suite == args.suite and o.task_id in ids]
    lines = [
        "| agent | kind | real accuracy [95%] | simulated (env) | inside | real model s | sim model s |",
        "|---|---|---|---|---|---|---|",
    ]
    inside = 0
    cells = sorted({(o.agent, o.domain) for o in real})
    for agent, kind in cells:
        rows = [o for o in real if o.agent == agent and o.domain == kind]
        k, n = sum(o.correct for o in rows), len(rows)
        lo, hi = wilson_interval(k, n)
        sim = [w[t.id][agent] for w in worlds for t in test if t.domain == kind]
        acc = float(np.mean([a.correct for a in sim]))
        ok = lo - 1e-9 <= acc <= hi + 1e-9
        inside += ok
        lines.append(
            f"| {agent} | {kind} | {k / n:.3f} [{lo:.3f}, {hi:.3f}] | {acc:.3f} | "
            f"{'yes' if ok else '**no**'} | "
            f"{np.mean([o.model_s for o in rows]):.1f} | {60 * np.mean([a.cost for a in sim]):.1f} |"
        )
    return [f"{inside} of {len(cells)} cells inside the real interval.", "", *lines]


def _study_inputs(
    args: argparse.Namespace,
) -> tuple[
    Pool, Sequence[Task], Sequence[Task], Sequence[str], list[float], Path, dict[str, dict[str, Answer]]
]:
    """What ``optimum`` and ``room`` both start from: the pool, the train and test items, the solvers,
    the prices, the work folder and every solver's answers on the training items in world 0."""
    pool = load_pool(args.pool)
    train = load_suite(args.suite, "train", n=args.n_train)
    test = load_suite(args.suite, "test", n=args.n_test)
    lams = [float(x) for x in args.lams.split(",")]
    work = args.work / f"{args.pool}-{args.cost}"
    train_answers = cached_answers(pool, train, args.cost, 0, work / f"train{len(train)}-world0.json")
    return pool, train, test, solver_names(pool), lams, work, train_answers


def optimum(args: argparse.Namespace) -> None:
    pool, train, test, solvers, lams, work, train_answers = _study_inputs(args)
    mean_cost = {
        (a, k): float(np.mean([train_answers[t.id][a].cost for t in train if t.domain == k]))
        for a in solvers
        for k in {t.domain for t in train}
    }
    third = thirds(pool, list(train) + list(test))
    binned = [replace(t, domain=third[t.id]) for t in train]
    routes = {
        lam: {
            form: dict(fit_from_answers(train, train_answers, {}, solvers, lam, form))
            for form in ("single", "kind", "rule")
        }
        | {
            "rule per kind and visible third": dict(
                fit_from_answers(binned, train_answers, {}, solvers, lam, "rule")
            )
        }
        for lam in lams
    }
    rows, worlds = [], []
    for seed in range(args.seeds):
        w = world(pool, seed)
        singles = cached_answers(pool, test, args.cost, seed, work / f"test{len(test)}-world{seed}.json")
        worlds.append(singles)
        expect = expectations(w, test, solvers)
        for lam in lams:
            res = policies_on(test, singles, routes[lam], expect, mean_cost, solvers, lam, third)
            rows.append({"seed": seed, "lam": lam, "policies": res})
        print(f"world {seed} done", flush=True)
    chosen = {
        str(lam): {form: {k: r.text for k, r in by.items()} for form, by in r_.items()}
        for lam, r_ in routes.items()
    }
    out = {
        "backend": SIM,
        "cost": args.cost,
        "n_train": len(train),
        "n_test": len(test),
        "rules": chosen,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "optimum.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [
        f"Backend: {SIM}. Held-out: the {len(test)} test items of {args.suite}, {args.seeds} worlds "
        f"(simulator seeds 0..{args.seeds - 1}); rules chosen on the first {len(train)} training items "
        f"of world 0. Cost: model {args.cost} at the real models' declared speeds.",
        "",
    ]
    names = list(rows[0]["policies"])
    for lam in lams:
        mine = [r for r in rows if r["lam"] == lam]
        lines += [
            f"### lambda = {lam:g} per model minute",
            "",
            "| policy | accuracy: mean (worst) | model min / item | return: mean (worst world) |",
            "|---|---|---|---|",
        ]
        for name in names:
            vals = [r["policies"][name] for r in mine]
            ret = [v["return"] for v in vals]
            if "accuracy" in vals[0]:
                acc = [v["accuracy"] for v in vals]
                cost = float(np.mean([v["cost"] for v in vals]))
                lines.append(
                    f"| {name} | {np.mean(acc):.3f} ({min(acc):.3f}) | {cost:.3f} | "
                    f"{np.mean(ret):.3f} ({min(ret):.3f}) |"
                )
            else:
                lines.append(f"| {name} | - | - | {np.mean(ret):.4f} ({min(ret):.4f}) |")
        rule = [r["policies"]["rule"]["return"] for r in mine]
        oracle = [r["policies"]["oracle (hindsight, single agents)"]["return"] for r in mine]
        item = [r["policies"]["optimum: item"]["return"] for r in mine]
        visible = [r["policies"]["optimum: visible"]["return"] for r in mine]
        lines += [
            "",
            f"Headroom above the best rule (return points, mean over worlds): hindsight oracle "
            f"{100 * (np.mean(oracle) - np.mean(rule)):+.1f}, item-latent optimum "
            f"{100 * (np.mean(item) - np.mean(rule)):+.1f}, visible optimum "
            f"{100 * (np.mean(visible) - np.mean(rule)):+.1f}.",
            "",
            "Rules chosen: " + "; ".join(f"{f}: {v}" for f, v in chosen[str(lam)].items()),
            "",
        ]
    if args.cost == "minutes":
        lines += [
            f"### The simulated agents through the env, against the real table ({len(test)} held-out items, "
            f"{args.seeds} worlds)",
            "",
            *through_env(args, test, worlds),
            "",
        ]
    (args.out / "optimum.md").write_text("\n".join(lines))
    print("\n".join(lines))


# --------------------------------------------------------------------------- the room, out of sample

ROOM_FORMS = ("per kind", "per kind x visible third")


CASCADE_FORM = "per kind, rules or agreement cascades"


def _room_row(
    name: str,
    got: Sequence[Chosen[Any]],
    ref: Sequence[Chosen[Any]],
    lam: float,
    picks: Mapping[str, str] | None,
) -> tuple[dict[str, object], str]:
    """One policy's row of the room table (``got``, ``ref``: per world, the chosen rules valued on the
    held-out items: accuracy, cost, correct, value(lam)) and its line."""
    ret, ref_ret = [g.value(lam) for g in got], [r.value(lam) for r in ref]
    delta = [100 * (a - b) for a, b in zip(ret, ref_ret, strict=True)]
    test_ = mcnemar_exact([c for r in ref for c in r.correct], [c for g in got for c in g.correct])
    entry: dict[str, object] = {
        "return": ret,
        "accuracy": [g.accuracy for g in got],
        "cost": [g.cost for g in got],
        "delta_points": float(np.mean(delta)),
        "delta_points_worst_world": float(min(delta)),
        "mcnemar": asdict(test_),
        "identical_to_reference": all(g.outcomes == r.outcomes for g, r in zip(got, ref, strict=True)),
    }
    if picks is not None:
        entry["rules"] = dict(picks)
    line = (
        f"| {name} | {np.mean([g.accuracy for g in got]):.3f} | {np.mean([g.cost for g in got]):.3f} | "
        f"{np.mean(ret):.3f} ({min(ret):.3f}) | {np.mean(delta):+.1f} ({min(delta):+.1f}) | "
        f"{test_.only_a} / {test_.only_b}, p = {test_.p_value:.2g} |"
    )
    return entry, line


def room(args: argparse.Namespace) -> None:
    """The rules' optimum of each form (per kind; per kind and visible-difficulty third) chosen on the
    held-out items themselves (in-sample, as ``optimum`` reports it) and chosen on the training items
    (world 0, where the best rule is chosen), each valued on the held-out items of every world, against
    the best rule: return deltas and an exact McNemar test on correctness over the (world, item) pairs."""
    pool, train, test, solvers, lams, work, train_answers = _study_inputs(args)
    third = thirds(pool, list(train) + list(test))
    worlds = [
        cached_answers(pool, test, args.cost, seed, work / f"test{len(test)}-world{seed}.json")
        for seed in range(args.seeds)
    ]
    out: dict[str, object] = {
        "backend": SIM,
        "cost": args.cost,
        "n_train": len(train),
        "n_test": len(test),
        "worlds": args.seeds,
        "reference": "best rule (per kind, the whole rule space), chosen on the training items of world 0",
    }
    lines = [
        f"Backend: {SIM}. Held-out: the {len(test)} test items of {args.suite} in {args.seeds} worlds "
        f"(simulator seeds 0..{args.seeds - 1}); training: its first {len(train)} training items in "
        f"world 0. Cost: model {args.cost} at the real models' declared speeds. Return = accuracy - "
        "lambda x cost; delta = return minus the best rule's (chosen on train), points, mean over the "
        "worlds (worst world); McNemar: exact, on correctness, over the "
        f"{args.seeds * len(test)} (world, item) pairs (ref right only / policy right only); the "
        "in-sample rows' p values are no test (their rules were chosen on those very items), only a "
        "yardstick of how far the in-sample choice moves the outcomes.",
        "",
    ]
    by_lam: dict[str, object] = {}
    for lam in lams:
        ref = [choose_and_value(train, train_answers, test, w, solvers, lam, "rule") for w in worlds]
        ref_ret = [r.value(lam) for r in ref]
        rows: dict[str, object] = {
            "best rule (chosen on train)": {
                "return": ref_ret,
                "accuracy": [r.accuracy for r in ref],
                "cost": [r.cost for r in ref],
                "rules": {k: r.text for k, r in ref[0].routes},
            }
        }
        lines += [
            f"### lambda = {lam:g} per model minute",
            "",
            "| policy (held-out, simulator sim-local) | accuracy | min / item | return: mean (worst) "
            "| delta vs best rule, points: mean (worst world) | McNemar ref-only / policy-only, p |",
            "|---|---|---|---|---|---|",
            f"| best rule (chosen on train) | {np.mean([r.accuracy for r in ref]):.3f} | "
            f"{np.mean([r.cost for r in ref]):.3f} | {np.mean(ref_ret):.3f} ({min(ref_ret):.3f}) | - | - |",
        ]
        for form, bins in zip(ROOM_FORMS, (None, third), strict=True):
            for where in ("in-sample", "chosen on train"):
                got = [
                    choose_and_value(test, w, test, w, solvers, lam, "rule", bins)
                    if where == "in-sample"
                    else choose_and_value(train, train_answers, test, w, solvers, lam, "rule", bins)
                    for w in worlds
                ]
                picks = {k: r.text for k, r in got[0].routes} if where == "chosen on train" else None
                rows[f"{form}, {where}"], line = _room_row(f"{form}, {where}", got, ref, lam, picks)
                lines.append(line)
        cascades = space(solvers, (), ["agreement"])  # the simulator's verifier is no solver: no flags
        on_train = choose_per_kind(cascades, train, train_answers, {}, lam)
        for where in ("in-sample", "chosen on train"):
            got = [
                valued(
                    choose_per_kind(cascades, test, w, {}, lam) if where == "in-sample" else on_train,
                    cascades, test, w, {},
                )
                for w in worlds
            ]  # fmt: skip
            name = f"{CASCADE_FORM}, {where}"
            picks = dict(on_train) if where == "chosen on train" else None
            rows[name], line = _room_row(name, got, ref, lam, picks)
            lines.append(line)
        lines.append("")
        by_lam[str(lam)] = rows
    out["lams"] = by_lam
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "room.json").write_text(json.dumps(out, indent=1) + "\n")
    (args.out / "room.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("check", "optimum", "room"))
    p.add_argument("--pool", default="sim-local")
    p.add_argument("--real-pool", default="local-mix-steps")
    p.add_argument("--suite", default="mix-local")
    p.add_argument("--seeds", type=int, default=None, help="simulated draws (check: 200; optimum: 5)")
    p.add_argument("--boot", type=int, default=1000, help="bootstrap resamples of the real items")
    p.add_argument("--signal-seeds", type=int, default=5, help="simulated draws for the answer signals")
    p.add_argument("--lams", default="1,0", help="prices per model minute (optimum)")
    p.add_argument("--cost", default="minutes")
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--n-test", type=int, default=320)
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--work", type=Path, default=Path("runs/sim-calibrated"), help="scratch: cached answers")
    args = p.parse_args()
    if args.seeds is None:
        args.seeds = 200 if args.what == "check" else 5  # optimum and room: the same 5 worlds
    {"check": check, "optimum": optimum, "room": room}[args.what](args)


if __name__ == "__main__":
    main()
