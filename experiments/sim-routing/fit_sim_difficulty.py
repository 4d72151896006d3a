"""Fit the simulator's visible difficulty on the shipped real outcomes (experiments/sim-routing/README.md,
section 1).

1. Reference quantiles of each domain's visible feature (ln of the question's length) over every item
   of the domain's suite (train, validation and test), for ``backend_options.sim.difficulty.quantiles``.
2. Per domain of the real table (``agents/local-mix.replay``: llamacpp, Qwen2.5-Coder 1.5B/0.5B), the
   maximum-likelihood (rho, w) of the simulator's random-effects probit with 95% bootstrap intervals.
3. Real against simulated: pairwise agreement, per-item oracle, vote gain and accuracy by difficulty
   tercile on the real table, and the same on 200 tables drawn from the fitted model.

    python experiments/sim-routing/fit_sim_difficulty.py --out \
        experiments/sim-routing/results/calibration.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from sim_calibration import bootstrap, domain_tables, fit_domain, fit_pooled, simulate, statistics

from puppeteer.backends.replay import read_outcomes
from puppeteer.backends.sim.difficulty import DifficultyModel, visible_feature
from puppeteer.tasks import load_suite

DOMAINS = ("gsm8k", "mmlu", "humaneval", "arith", "math500")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", default="agents/local-mix.replay")
    p.add_argument("--out", default="experiments/sim-routing/results/calibration.json")
    p.add_argument("--bootstrap", type=int, default=100)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    features: dict[str, list[float]] = {}
    ids: dict[str, float] = {}
    for domain in DOMAINS:
        for split in ("train", "validation", "test"):
            for t in load_suite(domain, split):
                x = visible_feature(t.question)
                features.setdefault(domain, []).append(x)
                ids[t.id] = x
    quantiles = DifficultyModel.fit_quantiles(features)
    model = DifficultyModel(quantiles)
    domain_of = {t: t.split("/")[0] for t in ids}
    scores = {t: model.score(domain_of[t], x) for t, x in ids.items()}

    outcomes = read_outcomes(args.table)
    tables = domain_tables(outcomes, {t: s for t, s in scores.items() if s is not None})
    fits = {}
    for domain, data in tables.items():
        fit = fit_domain(data)
        rho_ci, w_ci = bootstrap(data, n=args.bootstrap)
        real = statistics(data)
        sim = simulate(data, fit.rho, fit.w)
        fits[domain] = {
            "n_items": fit.n_items,
            "agents": list(data.agents),
            "rho": fit.rho,
            "rho_ci": rho_ci,
            "w": fit.w,
            "w_ci": w_ci,
            "real": real,
            "simulated": sim,
        }
        logging.info(
            "%s: %d items x %d agents: rho %.2f [%.2f, %.2f], w %.2f [%.2f, %.2f]",
            domain,
            fit.n_items,
            len(data.agents),
            fit.rho,
            *rho_ci,
            fit.w,
            *w_ci,
        )
    pooled = fit_pooled(list(tables.values()))
    logging.info("pooled: %d items: rho %.2f, w %.2f", pooled.n_items, pooled.rho, pooled.w)
    out = {
        "table": args.table,
        "backend": "llamacpp (replayed from the shipped table)",
        "feature": "ln(characters of the question)",
        "quantiles": quantiles,
        "n_reference_items": {d: len(v) for d, v in features.items()},
        "fits": fits,
        "pooled": {"n_items": pooled.n_items, "rho": pooled.rho, "w": pooled.w},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    logging.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
