"""Step-mode study on the simulated paper pool: learning vs optima, baseline ablation, lambda sweep.

    python scripts/sim_study.py --episodes 3000 --encoder minilm
Writes docs/sim-study.md, docs/img/sim-*.png and runs/sim-study/study.json.
"""

from __future__ import annotations

import argparse
import logging
import os

from rich.console import Console

from puppeteer.jobs.study import StudyConfig, run_study


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pool", default="sim-paper")
    p.add_argument("--suite", default="mix-paper")
    p.add_argument("--lam", type=float, default=0.1)
    p.add_argument("--episodes", type=int, default=3000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--baselines", nargs="+", default=["group", "none"])
    p.add_argument("--lams", type=float, nargs="+", default=[0.0, 0.1, 0.3, 1.0])
    p.add_argument("--encoder", default="minilm")
    p.add_argument("--out", default="runs/sim-study")
    p.add_argument("--docs", default="docs")
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    console = Console()
    cfg = StudyConfig(
        pool=a.pool,
        suite=a.suite,
        lam=a.lam,
        episodes=a.episodes,
        seeds=tuple(a.seeds),
        baselines=tuple(a.baselines),
        lams=tuple(a.lams),
        encoder=a.encoder,
    )
    results = run_study(cfg, a.out, a.docs, progress=lambda m: console.log(m))
    console.print(f"optimum {results['optimum']:.3f}; report: {a.docs}/sim-study.md")


if __name__ == "__main__":
    main()
