"""One MaskablePPO model for every price against one model per price (issue 36, outside RL code).

Per seed: one MaskablePPO trained with lambda drawn per episode from ``--lam-range`` and read from the
observation (``puppeteer.envs.wrappers``), evaluated greedily on the held-out split at each of ``--lams``;
beside it, one MaskablePPO trained at each of those lambdas alone. Return = accuracy - lambda x cost in
US cents per item (the training reward with ``--cost-model usd``); the held-out items and their draws
are the same for every model of a seed, so the comparison is paired.

    python experiments/lam-conditioned/ppo_lam_front.py --out runs/ppo-lam-front --seeds 3

Writes OUT/conditioned/seed{S}/ and OUT/fixed/lam{X}_seed{S}/ (each a ``train_maskable_ppo`` run: an
``sb3:DIR`` model and held-out results), then OUT/front.json and OUT/report.md. A run whose held-out
results exist is not trained again, so an interrupted study resumes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from puppeteer.cli.analytics import lam_list
from puppeteer.train.sb3 import MaskablePPOConfig, train_maskable_ppo

log = logging.getLogger("ppo_lam_front")


def _name(lam: float) -> str:
    return f"lam{lam:g}"


def _result(path: Path) -> dict[str, Any]:
    return json.loads((path / "results.json").read_text())


def _point(result: dict[str, Any], lam: float) -> dict[str, float]:
    cents = 100.0 * float(result["mean_usd"])
    return {"accuracy": result["accuracy"], "cents": cents, "return": result["accuracy"] - lam * cents}


def _run(cfg: MaskablePPOConfig, out: Path, done: Path) -> float:
    """Train and evaluate unless ``done`` (a held-out results dir) exists; the wall seconds it took."""
    if (done / "results.json").exists():
        timing = out / "wall_s.json"
        return float(json.loads(timing.read_text())["wall_s"]) if timing.exists() else float("nan")
    t0 = time.perf_counter()
    train_maskable_ppo(cfg, out)
    wall = time.perf_counter() - t0
    (out / "wall_s.json").write_text(json.dumps({"wall_s": wall, "config": asdict(cfg)}, indent=2) + "\n")
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/ppo-lam-front")
    p.add_argument("--pool", default="sim-routing")
    p.add_argument("--suite", default="mix-routing")
    p.add_argument("--n-train", type=int, default=300)
    p.add_argument("--n-eval", type=int, default=200)
    p.add_argument("--lam-range", type=lam_list, default=(0.01, 0.5))
    p.add_argument("--lams", type=lam_list, default=(0.01, 0.0266, 0.0707, 0.188, 0.5))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=65536)
    p.add_argument("--encoder", default="minilm")
    args = p.parse_args()
    if len(args.lam_range) != 2:
        p.error("--lam-range takes LOW,HIGH")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    base = MaskablePPOConfig(
        pool=args.pool,
        suite=args.suite,
        n_train=args.n_train,
        n_eval=args.n_eval,
        steps=args.steps,
        encoder=args.encoder,
        max_steps=1,
        min_steps=1,
        cost_model="usd",
    )
    rows: list[dict[str, Any]] = []
    walls: dict[str, list[float]] = {"conditioned": [], "fixed": []}
    for seed in range(args.seeds):
        cdir = out / "conditioned" / f"seed{seed}"
        more = {"seed": seed, "lam": args.lams[0], "lam_range": args.lam_range, "eval_lams": args.lams}
        cond = MaskablePPOConfig(**{**asdict(base), **more})
        walls["conditioned"].append(_run(cond, cdir, cdir / f"eval_{_name(args.lams[-1])}"))
        for lam in args.lams:
            fdir = out / "fixed" / f"{_name(lam)}_seed{seed}"
            fixed = MaskablePPOConfig(**{**asdict(base), "seed": seed, "lam": lam})
            walls["fixed"].append(_run(fixed, fdir, fdir / "eval_trained"))
            c = _point(_result(cdir / f"eval_{_name(lam)}"), lam)
            f = _point(_result(fdir / "eval_trained"), lam)
            rows.append({"seed": seed, "lam": lam, "conditioned": c, "fixed": f})
            log.info("seed %d lambda %g: conditioned %.3f, fixed %.3f", seed, lam, c["return"], f["return"])
    front = {"args": {k: v for k, v in vars(args).items()}, "rows": rows, "wall_s": walls}
    (out / "front.json").write_text(json.dumps(front, indent=2) + "\n")
    lines = [
        f"MaskablePPO [backend: sim], `{args.pool}` / `{args.suite}`, {args.n_train} training items, "
        f"{args.n_eval} held-out items, {args.steps} steps, encoder `{args.encoder}`, one call per item, "
        f"cost in US cents; conditioned range {list(args.lam_range)}. Return = accuracy - lambda x cents.",
        "",
        "| lambda | conditioned: accuracy / cents / return (mean of seeds) | fixed: accuracy / cents / "
        "return | conditioned / fixed return (mean; worst seed) |",
        "|---:|---|---|---|",
    ]
    for lam in args.lams:
        at = [r for r in rows if r["lam"] == lam]

        def mean(arm: str, key: str, at: list[dict[str, Any]] = at) -> float:
            return statistics.fmean(r[arm][key] for r in at)

        ratios = [r["conditioned"]["return"] / r["fixed"]["return"] for r in at]
        c = [mean("conditioned", k) for k in ("accuracy", "cents", "return")]
        f = [mean("fixed", k) for k in ("accuracy", "cents", "return")]
        lines.append(
            f"| {lam:g} | {c[0]:.3f} / {c[1]:.3f} / {c[2]:.3f} | {f[0]:.3f} / {f[1]:.3f} / {f[2]:.3f} | "
            f"{100 * c[2] / f[2]:.1f}%; {100 * min(ratios):.1f}% |"
        )
    cw, fw = sum(walls["conditioned"]), sum(walls["fixed"])
    lines += [
        "",
        f"Training wall time (this machine, all seeds): conditioned {cw / 60:.1f} min for the whole front, "
        f"fixed {fw / 60:.1f} min for {len(args.lams)} prices ({fw / max(cw, 1e-9):.1f}x).",
    ]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
