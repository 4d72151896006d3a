"""A conductor GRPO run's held-out "before" evaluation again, decoded without the grammar.

Reads a run's ``config.json`` (a run made with ``constrained=true``), evaluates the untrained
conductor on the same held-out items, prompts and agent subsets with ``constrained=false`` and
writes ``heldout_free.json`` / ``heldout_free.jsonl`` to OUT: the paired check of what the grammar
changes (parse rate, accuracy) with everything else equal.

    python experiments/conductor-grpo/conductor_heldout_free.py \
        experiments/conductor/results/constrained-sim-routing-k4/config.json OUT
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from puppeteer.train.conductor_generation import install_access_list_stop
from puppeteer.train.conductor_model import load_conductor_model
from puppeteer.train.grpo import GRPOJob, evaluate_conductor


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config", type=Path, help="a conductor run's config.json")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    cfg = {**json.loads(args.config.read_text()), "constrained": False}
    job = GRPOJob.from_mapping(cfg)
    env = job.env(job.eval_split, job.n_eval, training=False)
    model, tokenizer = load_conductor_model(job.model)
    if job.stop_after_access_list:
        install_access_list_stop(model, tokenizer)
    args.out.mkdir(parents=True, exist_ok=True)
    result = evaluate_conductor(
        model,
        tokenizer,
        env,
        job.eval,
        job.chat,
        job.seed,
        args.out / "heldout_free.jsonl",
        job.reward_workers,
        job.answer_prefix,
    )
    (args.out / "heldout_free.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
