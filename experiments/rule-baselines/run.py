"""The rule baselines on the replayed local-mix table: the best single agent, the best agent per kind and
the best rule of the declared space, each chosen on the 200 training items at lambda, run on the 320
held-out items.

    PUPPETEER_REPLAY=strict python experiments/rule-baselines/run.py --lam 1

Backend: llama.cpp (Qwen2.5-Coder 1.5B / 0.5B), every call replayed from agents/local-mix.replay
(strict: a call the table lacks would fail the run). Cost: single-stream model minutes at the pool's
declared speeds (the quickstart's cost model), lambda per minute. Writes ``results/rules_lam{LAM}.json``
and prints a markdown table: accuracy with its Wilson interval, model seconds per item, calls, the
rule chosen per kind, and the exact McNemar test against the best single agent on the same items.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from puppeteer.evaluation import evaluate_policy
from puppeteer.stats import mcnemar_exact

HERE = Path(__file__).parent
SPECS = ("best-single", "best-kind", "best-rule")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lam", type=float, default=1.0, help="price per single-stream model minute")
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--n-test", type=int, default=320)
    p.add_argument("--work", type=Path, default=Path("runs/rule-baselines"))
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args()
    runs = {}
    for kind in SPECS:
        spec = f"{kind}:{args.n_train}:minutes"
        out = args.work / f"lam{args.lam:g}" / kind
        res = evaluate_policy(
            spec, "local-mix", "mix-local", split="test", n=args.n_test, lam=args.lam, out_dir=out,
            overwrite=True, progress=False,
        )  # fmt: skip
        lines = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines() if x.strip()]
        runs[kind] = (res, {d["task_id"]: d for d in lines})
    base = runs["best-single"][1]
    rows = []
    for kind, (res, items) in runs.items():
        ids = sorted(base)
        test = mcnemar_exact([base[i]["correct"] for i in ids], [items[i]["correct"] for i in ids])
        rules = Counter((i.split("/")[0], d.get("rule")) for i, d in items.items())
        rows.append(
            {
                "policy": f"{kind}:{args.n_train}:minutes",
                "lam": args.lam,
                "n": res.n,
                "correct": res.correct,
                "accuracy": res.accuracy,
                "ci": [res.ci_low, res.ci_high],
                "model_s": res.mean_model_s,
                "calls": res.mean_calls,
                "cache_misses": res.cache_misses,
                "rules": {k: r for (k, r) in sorted(rules)},
                "vs_best_single": {"only_single": test.only_a, "only_this": test.only_b, "p": test.p_value},
            }
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"rules_lam{args.lam:g}.json"
    path.write_text(json.dumps({"backend": "llamacpp, replayed (strict)", "rows": rows}, indent=2) + "\n")
    print("| policy | accuracy [95%] | model s/item | calls | vs best single: +/- (McNemar p) | rules |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        rules = "; ".join(f"{k}: `{v}`" for k, v in r["rules"].items())
        vs = r["vs_best_single"]
        print(
            f"| `{r['policy']}` | {r['accuracy']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | "
            f"{r['model_s']:.1f} | {r['calls']:.2f} | +{vs['only_this']} / -{vs['only_single']} "
            f"(p = {vs['p']:.3g}) | {rules} |"
        )


if __name__ == "__main__":
    main()
