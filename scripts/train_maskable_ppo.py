"""Train sb3-contrib's MaskablePPO on Conductor-v0 (step mode) and compare it with random routing.

    pip install 'puppeteer-orchestra[rl]'
    python scripts/train_maskable_ppo.py --pool sim-paper --suite mix-paper --steps 4096
    # one model for every price (lambda in the observation), evaluated at three prices
    python scripts/train_maskable_ppo.py --pool sim-routing --suite mix-routing --cost-model usd \
        --lam-range 0.01,0.5 --eval-lams 0.01,0.07,0.5 --max-steps 1 --min-steps 1

Writes OUT/model (an ``sb3:OUT/model`` policy for ``puppeteer eval/run/serve``) and
OUT/eval_trained, OUT/eval_random (results.json + trajectories.jsonl on the test split).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os

import torch

from puppeteer.analytics.tables import markdown_table
from puppeteer.cli.analytics import lam_list
from puppeteer.train.sb3 import MaskablePPOConfig, train_maskable_ppo
from puppeteer.utils.consoles import output_console

TUPLE_FIELDS = {"lam_range", "eval_lams"}  # comma-separated numbers on the command line


def main() -> None:
    d = MaskablePPOConfig()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(MaskablePPOConfig):
        default = getattr(d, f.name)
        flag = "--" + f.name.replace("_", "-")
        if f.name in TUPLE_FIELDS:
            p.add_argument(flag, type=lam_list, default=default, metavar="X,Y,...")
            continue
        if isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
            continue
        kind = type(default) if default is not None else int
        p.add_argument(flag, type=kind, default=default)
    p.add_argument("--out", default="runs/maskable_ppo")
    args = p.parse_args()
    # small networks on small batches: torch's default threads made this 13x slower on 2 cores
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        fields = dataclasses.fields(MaskablePPOConfig)
        cfg = MaskablePPOConfig(**{f.name: getattr(args, f.name) for f in fields})
    except ValueError as e:
        p.error(str(e))
    report = train_maskable_ppo(cfg, args.out)
    console = output_console()  # whole lines in a log file too
    console.print(
        markdown_table([report.trained, report.random, *report.at_lams]), markup=False, soft_wrap=True
    )
    console.print(f"model: {report.out_dir / 'model'}  (use it as --policy sb3:{report.out_dir / 'model'})")


if __name__ == "__main__":
    main()
