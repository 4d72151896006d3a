"""Agents the router has never seen (issue 36, section 3; experiments/unseen-agents/README.md) [backend: sim].

Per seed: a card-reading router trained on `sim-routing` without the held-out agents, evaluated on
its own pool and with the held-out agents added; and a router retrained on the whole pool. Every run
writes ``OUT/runs/{held-out,retrained}-s{S}.json`` and is skipped when that exists (resumable; two
processes may share OUT with ``--kinds``); training files go under ``--work``. ``report.md`` and
``results.json`` are drawn from whatever runs exist. The pool's cards must exist first:

    puppeteer pool cards --pool sim-routing --suite mix-routing --per-domain 60
    python experiments/unseen-agents/unseen_agents_study.py --out experiments/unseen-agents/results \
        --seeds 0,1,2
    python experiments/unseen-agents/unseen_agents_study.py --out \
        experiments/unseen-agents/results/linear --cards-linear --seeds 0,1,2
    python experiments/unseen-agents/unseen_agents_study.py --out runs/ua --episodes 2048 \
        --batch-episodes 128 --seeds 0
    # real models, replayed from the shipped outcome table (its cards: --n 200 = the table's items)
    puppeteer pool cards --pool local-mix --suite mix-local --per-domain 50 --n 200
    PUPPETEER_REPLAY=strict python experiments/unseen-agents/unseen_agents_study.py --out \
        experiments/unseen-agents/results/local-mix \
        --pool local-mix --suite mix-local --held qwen1.5b-code,qwen1.5b-direct --lam 1 --cost-model minutes \
        --n-train 200 --n-eval 320 --no-surface --task-dims 8 --seeds 0,1,2 --work runs/unseen-local
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import fields
from pathlib import Path

from unseen import KINDS, UnseenSettings, references, report, run_one

from puppeteer.envs.encoders import make_encoder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="experiments/unseen-agents/results")
    p.add_argument("--work", default="runs/unseen-agents", help="training files (checkpoints, trajectories)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--kinds", default=",".join(KINDS), help="which routers to train: held-out,retrained")
    p.add_argument("--held", default="coder32b-cot,math72b-cot", help="agents held out of training")
    defaults = UnseenSettings()
    for f in fields(UnseenSettings):
        if f.name == "held":
            continue
        value = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=value)
        else:  # a setting whose default is None (task_dims) takes an integer
            p.add_argument(flag, type=type(value) if value is not None else int, default=value)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    settings = UnseenSettings(
        held=tuple(h.strip() for h in args.held.split(",") if h.strip()),
        **{f.name: getattr(args, f.name) for f in fields(UnseenSettings) if f.name != "held"},
    )
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    references(out, settings)
    encoder = make_encoder(settings.encoder)
    for seed in (int(x) for x in args.seeds.split(",") if x.strip()):
        for kind in (k.strip() for k in args.kinds.split(",") if k.strip()):
            run_one(out, work / out.name, settings, kind, seed, encoder)
    text, summary = report(out, settings)
    (out / "report.md").write_text(text)
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    print(text)


if __name__ == "__main__":
    main()
