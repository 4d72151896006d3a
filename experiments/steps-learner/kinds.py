"""How often a by-kind router (``--by-kind``) reads a held-out question as the kind the suite names.

    python experiments/steps-learner/kinds.py runs/qs-dims/kkind-s351 \
        --out experiments/steps-learner/results/by-kind/kinds.json

Loads each seed's saved router (``seed*/policy``) and classifies the held-out items of the run's suite
with its kind classifier (fitted on the training items' named kinds; no model call). Writes, per seed,
the share read right and the confusion (named kind -> read kind -> items).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch

from puppeteer.agents.pool import load_pool
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.tasks import load_suite


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a quickstart run directory of --by-kind routers")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--pool", default="local-mix-steps", help="the pool the routers were trained on")
    p.add_argument("--suite", default="mix-local")
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--n-eval", type=int, default=320)
    args = p.parse_args()
    pool = load_pool(args.pool)
    train = load_suite(args.suite, "train", n=args.n_train)
    test = load_suite(args.suite, "test", n=args.n_eval)
    kinds = list(dict.fromkeys(t.domain for t in train))  # the classifier's order (fit_inputs)
    out = {}
    encoder, emb = None, None  # the seeds share the encoder: the questions are encoded once
    for policy_dir in sorted(args.run.glob("seed*/policy")):
        agents = json.loads((policy_dir / "policy.json").read_text())["agents"]
        policy = PuppeteerPolicy.load(policy_dir, pool.subset(agents), encoder=encoder)
        if emb is None:
            encoder = policy.encoder
            emb = torch.as_tensor(encoder.encode([t.question for t in test]), dtype=torch.float32)
        scorer = policy.scorer
        with torch.no_grad():
            read = scorer.kind_of(scorer.standardized(emb)).tolist()
        pairs = Counter((t.domain, kinds[k]) for t, k in zip(test, read, strict=True))
        right = sum(n for (named, got), n in pairs.items() if named == got)
        out[policy_dir.parent.name] = {
            "items": len(test),
            "read_right": right / len(test),
            "confusion": {f"{named} -> {got}": n for (named, got), n in sorted(pairs.items())},
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
