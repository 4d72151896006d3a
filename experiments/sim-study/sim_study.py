"""Step-mode study on the simulated paper pool: learning vs optima, baseline ablation, lambda sweep.

    python experiments/sim-study/sim_study.py --episodes 3000 --encoder minilm
Writes --page (default: this folder) README.md and results/sim-*.png, and --out/study.json.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from rich.console import Console

# experiments/_shared/: the modules that several studies use (not installed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from study import StudyConfig, run_study


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
    p.add_argument(
        "--page", default=str(Path(__file__).resolve().parent), help="folder of README.md and results/"
    )
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
    results = run_study(cfg, a.out, a.page, progress=lambda m: console.log(m))
    console.print(f"optimum {results['optimum']:.3f}; report: {a.page}/README.md")


if __name__ == "__main__":
    main()
