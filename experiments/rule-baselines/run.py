"""The rule baselines on the replayed local-mix table: the best single agent, the best agent per kind and
the best rule of the declared space, each chosen on the 200 training items at lambda, run on the 320
held-out items.

    PUPPETEER_REPLAY=strict python experiments/rule-baselines/run.py --lam 1
    python experiments/rule-baselines/run.py --pool sim-routing --suite mix-routing --cost usd --lam 0.05 \
        --n-test 400 --seeds 5

Backend of the default: llama.cpp (Qwen2.5-Coder 1.5B / 0.5B), every call replayed from
agents/local-mix.replay (strict: a call the table lacks would fail the run); cost: single-stream model
minutes at the pool's declared speeds (the quickstart's cost model), lambda per minute. On a simulated
pool each seed is another draw of every call (``--seeds``). Writes ``results/<pool>_lam{LAM}.json``
and prints a markdown table: accuracy with its Wilson interval, model seconds per item, calls, the
rule chosen per kind, and the exact McNemar test against the best single agent on the same items.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from puppeteer.agents.pool import load_pool
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.evaluation.stats import mcnemar_exact
from puppeteer.policies.rule_fit import fit_rules
from puppeteer.tasks import load_suite

HERE = Path(__file__).parent
SPECS = ("best-single", "best-kind", "best-rule")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="local-mix")
    p.add_argument("--suite", default="mix-local")
    p.add_argument("--cost", default="minutes", help="the cost model lambda prices")
    p.add_argument("--seeds", type=int, default=1, help="run seeds 0..N-1 (draws of a simulated pool)")
    p.add_argument("--lam", type=float, default=1.0, help="price per unit of --cost")
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--n-test", type=int, default=320)
    p.add_argument("--work", type=Path, default=Path("runs/rule-baselines"))
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args()
    pool = load_pool(args.pool)
    train = load_suite(args.suite, "train", n=args.n_train)
    # each rule is chosen once, on the training items (seed 0), then run as a fixed `rules:` spec per seed:
    # the same as running `best-*:N:COST` at every seed, without refitting
    fitted = {}
    for kind in SPECS:
        routes = fit_rules(pool, train, args.lam, kind.removeprefix("best-"), args.cost)
        fitted[kind] = "rules:" + ",".join(f"{k}={r.text}" for k, r in routes)
    rows = []
    for seed in range(args.seeds):
        runs = {}
        for kind in SPECS:
            spec = fitted[kind]
            out = args.work / args.pool / f"lam{args.lam:g}" / f"seed{seed}" / kind
            res = evaluate_policy(
                spec, pool, args.suite, split="test", n=args.n_test, lam=args.lam, out_dir=out,
                overwrite=True, progress=False, seed=seed,
            )  # fmt: skip
            lines = [
                json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines() if x.strip()
            ]
            runs[kind] = (f"{kind}:{args.n_train}:{args.cost}", res, {d["task_id"]: d for d in lines})
        base = runs["best-single"][2]
        for spec, res, items in runs.values():
            ids = sorted(base)
            test = mcnemar_exact([base[i]["correct"] for i in ids], [items[i]["correct"] for i in ids])
            rules = Counter((i.split("/")[0], d.get("rule")) for i, d in items.items())
            rows.append(
                {
                    "policy": spec,
                    "seed": seed,
                    "lam": args.lam,
                    "n": res.n,
                    "correct": res.correct,
                    "accuracy": res.accuracy,
                    "ci": [res.ci_low, res.ci_high],
                    "model_s": res.mean_model_s,
                    "usd": res.mean_usd,
                    "calls": res.mean_calls,
                    "cache_misses": res.cache_misses,
                    "rules": {k: r for (k, r) in sorted(rules)},
                    "vs_best_single": {
                        "only_single": test.only_a,
                        "only_this": test.only_b,
                        "p": test.p_value,
                    },
                }
            )
    args.out.mkdir(parents=True, exist_ok=True)
    name = "rules" if args.pool == "local-mix" else args.pool
    path = args.out / f"{name}_lam{args.lam:g}.json"
    backend = "llamacpp, replayed (strict)" if args.pool == "local-mix" else "see the pool"
    path.write_text(json.dumps({"backend": backend, "pool": args.pool, "rows": rows}, indent=2) + "\n")
    print(
        "| policy | seed | accuracy [95%] | model s/item | usd/item | calls "
        "| vs best single: +/- (McNemar p) "
        "|"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        vs = r["vs_best_single"]
        model_s = f"{r['model_s']:.1f}" if r["model_s"] is not None else "-"
        print(
            f"| `{r['policy']}` | {r['seed']} | {r['accuracy']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | "
            f"{model_s} | {r['usd']:.5f} | {r['calls']:.2f} | +{vs['only_this']} / -{vs['only_single']} "
            f"(p = {vs['p']:.3g}) |"
        )
    for r in rows:
        if r["seed"] == 0:
            print(f"{r['policy']}: " + "; ".join(f"{k}: {v}" for k, v in r["rules"].items()))


if __name__ == "__main__":
    main()
