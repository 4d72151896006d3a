"""Does batched decoding change accuracy? Same items, greedy, one-at-a-time vs batched (backend: llamacpp).

Side A runs the llama.cpp backend's one-at-a-time path (``batching=False``, items in order);
side B the batched path with every item in flight at once (``batching=True``,
``concurrency=n``). Both use the same threads and their own response cache under ``--out``
(so an interrupted run resumes, and neither reads answers the other produced). Prints
accuracy per side, the item-by-item agreement and how many texts are identical.

    python benchmarks/batched_accuracy.py --n 20 --policy single:qwen0.5b-cot --suite gsm8k
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from puppeteer.agents.pool import load_pool
from puppeteer.backends import make_router
from puppeteer.backends.llamacpp import default_threads
from puppeteer.envs.trajectories import read_trajectories
from puppeteer.evaluation.evaluate import evaluate_policy, slug


def run_side(name: str, batching: bool, args: argparse.Namespace, out: Path) -> dict[str, object]:
    pool = load_pool(args.pool)
    options = {k: dict(v) for k, v in pool.backend_options.items()}
    options.setdefault("llamacpp", {}).update(batching=batching, n_threads=args.n_threads)
    backend = make_router(options, cache=out / f"{name}.sqlite")
    result = evaluate_policy(
        args.policy,
        pool,
        args.suite,
        split=args.split,
        n=args.n,
        seed=args.seed,
        out_dir=out / name,
        backend=backend,
        progress=False,
        concurrency=args.n if batching else 1,
    )
    backend.backend("llamacpp").inner.close()  # type: ignore[attr-defined]
    return result.to_dict()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pool", default="local")
    parser.add_argument("--suite", default="gsm8k")
    parser.add_argument("--split", default="test")
    parser.add_argument("--policy", default="single:qwen0.5b-cot")
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-threads", type=int, default=None, help="default: default_threads(batching=True)")
    parser.add_argument("--out", default=None, help="default: runs/batched_accuracy/<policy>_<suite>")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.n_threads = args.n_threads or default_threads(batching=True)
    out = Path(args.out or Path("runs") / "batched_accuracy" / slug(f"{args.policy}_{args.suite}"))
    out.mkdir(parents=True, exist_ok=True)
    sides = {
        name: run_side(name, batching, args, out)
        for name, batching in (("sequential", False), ("batched", True))
    }
    trajs = {
        name: {t.task_id: t for t in read_trajectories(out / name / "trajectories.jsonl")} for name in sides
    }
    ids = sorted(trajs["sequential"])
    seq, bat = trajs["sequential"], trajs["batched"]
    both = sum(seq[i].correct and bat[i].correct for i in ids)
    only_seq = sum(seq[i].correct and not bat[i].correct for i in ids)
    only_bat = sum(bat[i].correct and not seq[i].correct for i in ids)
    same_text = sum(
        seq[i].steps[0].completion.text == bat[i].steps[0].completion.text
        for i in ids
        if seq[i].steps and bat[i].steps
    )
    same_answer = sum(seq[i].final_answer == bat[i].final_answer for i in ids)
    summary = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "backend": "llamacpp",
        "n": len(ids),
        "n_threads": args.n_threads,
        "accuracy": {k: v["accuracy"] for k, v in sides.items()},
        "wall_s": {k: v["wall_s"] for k, v in sides.items()},
        "both_correct": both,
        "only_sequential": only_seq,
        "only_batched": only_bat,
        "identical_text": same_text,
        "same_final_answer": same_answer,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    sys.stdout.write(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
