"""Offline (RWR on random logs) vs offline-then-online vs online-only on the simulator.

python experiments/analytics/offline_study.py --out runs/offline_study [--seeds 0,1,2] [--episodes 1024]
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from pathlib import Path

from offline_job import OfflineStudyConfig, run_offline_study


def main() -> None:
    d = OfflineStudyConfig()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/offline_study")
    p.add_argument("--pool", default=d.pool)
    p.add_argument("--suite", default=d.suite)
    p.add_argument("--lam", type=float, default=d.lam)
    p.add_argument("--seeds", default=",".join(map(str, d.seeds)))
    p.add_argument("--log-seeds", default=",".join(map(str, d.log_seeds)), help="random-step log runs")
    p.add_argument("--episodes", type=int, default=d.online_episodes, help="online episodes per arm")
    p.add_argument("--encoder", default=d.encoder)
    p.add_argument("--n-eval", type=int, default=None)
    p.add_argument("--updates", type=int, default=d.offline.updates, help="offline gradient steps")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = OfflineStudyConfig(
        pool=args.pool,
        suite=args.suite,
        lam=args.lam,
        encoder=args.encoder,
        seeds=tuple(int(x) for x in args.seeds.split(",")),
        log_seeds=tuple(int(x) for x in args.log_seeds.split(",")),
        online_episodes=args.episodes,
        n_eval=args.n_eval,
        offline=replace(d.offline, updates=args.updates),
    )
    run_offline_study(cfg, args.out, say=logging.getLogger("offline_study").info)
    print(Path(args.out, "offline_study.md").read_text())


if __name__ == "__main__":
    main()
