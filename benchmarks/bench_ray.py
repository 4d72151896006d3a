"""Side-by-side wall time of one evaluation in one process and spread over local Ray workers.

The pool is sim-paper with ``realtime: true`` (each call really waits its simulated latency,
like an API call) and latencies scaled down by ``--speedup`` so the run is short. Results
are checked identical; only wall time differs. Backend: sim (realtime).

    python benchmarks/bench_ray.py --n 24 --workers 1 2 4 --policy chain
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from puppeteer.envs.distributed import init_ray
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.evaluation.settings import RayExecutor
from puppeteer.utils.resources import data_dir


def realtime_pool(directory: Path, speedup: float) -> Path:
    raw = yaml.safe_load((data_dir("agents") / "sim-paper.yaml").read_text())
    raw["name"] = "sim-paper-realtime"
    raw["backend_options"]["sim"]["realtime"] = True
    for model in raw["models"].values():
        opts = model.setdefault("options", {})
        opts["tokens_per_s"] = float(opts.get("tokens_per_s", 50)) * speedup
        opts["first_token_s"] = float(opts.get("first_token_s", 1.0)) / speedup
    path = directory / "sim-paper-realtime.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default="chain")
    p.add_argument("--suite", default="arith")
    p.add_argument("--n", type=int, default=24)
    p.add_argument("--speedup", type=float, default=50.0, help="latencies divided by this")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--num-cpus", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pool = realtime_pool(Path(tmp), args.speedup)
        t0 = time.perf_counter()
        base = evaluate_policy(args.policy, pool, args.suite, n=args.n, progress=False)
        single = time.perf_counter() - t0
        init_ray(None, num_cpus=args.num_cpus)
        print(
            f"| setting | wall s | ratio to one process | accuracy |\n|---|---:|---:|---:|\n"
            f"| one process | {single:.1f} | 1.00 | {base.accuracy:.3f} |"
        )
        for w in args.workers:
            t0 = time.perf_counter()
            res = evaluate_policy(
                args.policy,
                pool,
                args.suite,
                n=args.n,
                progress=False,
                ray=RayExecutor(workers=w, worker_cpus=args.num_cpus / max(args.workers)),
            )
            wall = time.perf_counter() - t0
            same = res.accuracy == base.accuracy and res.mean_usd == base.mean_usd
            print(
                f"| Ray, {w} worker(s) | {wall:.1f} | {single / wall:.2f} | {res.accuracy:.3f}"
                f"{'' if same else ' (DIFFERS)'} |"
            )


if __name__ == "__main__":
    main()
