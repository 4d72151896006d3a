"""Where a learned seed loses to the best rule: on its own training items or only on the held-out ones.

For a quickstart run on ``local-mix-steps`` (run.sh or backward.sh), every seed's final two-step policy,
`best-rule` and `best-single` are evaluated again on the run's 200 *training* items (strict replay: the
shipped table's calls, no model), and set beside their held-out evaluations from the run's ``eval/``. Per
kind and in all: accuracy, single-stream model seconds per item and the return the quickstart's price
puts on them (accuracy - lambda x model minutes). A seed at or above the rule on its training items and
below it held out generalises worse than the rule; a seed below it on its training items is not
optimising as well as the rule's search::

    PUPPETEER_REPLAY=strict python experiments/steps-learner/insample.py runs/qs-steps/lam1 \\
        --out experiments/steps-learner/results/lam1/insample.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.envs.trajectories import Trajectory, read_trajectories
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.tasks import load_suite

SUITE = "mix-local"
RULES = (("best-rule", 3), ("best-single", 1))  # (fitted rule, its call budget), as the quickstart's


def per_kind(trajectories: Sequence[Trajectory], pool: Pool, lam: float) -> dict[str, dict[str, float]]:
    """Per kind and ``all``: items, accuracy, model seconds per item and accuracy - lam x model minutes."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[t.task_id.split("/")[0]].append(t)
        groups["all"].append(t)
    out = {}
    for kind, ts in sorted(groups.items()):
        acc = sum(bool(t.correct) for t in ts) / len(ts)
        seconds = sum(pool.model_seconds(t.steps) for t in ts) / len(ts)
        out[kind] = {
            "items": len(ts),
            "accuracy": round(acc, 4),
            "model_s": round(seconds, 3),
            "return": round(acc - lam * seconds / 60.0, 4),
        }
    return out


def final_policy(seed_dir: Path) -> Path:
    """The seed's last two-step policy: after backward induction, or the decision after the call."""
    for name in ("policy-first-again", "policy-after-call"):
        if (seed_dir / name / "policy.json").is_file():
            return seed_dir / name
    raise FileNotFoundError(f"{seed_dir} holds no two-step policy (policy-after-call/)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a quickstart run directory (results.json, seed*/, eval/)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    summary = json.loads((args.run / "results.json").read_text())
    cfg = summary["config"]
    lam, n_train = float(cfg["lam"]), int(summary["n_train"])
    pool = load_pool(cfg["pool"]).subset(list(cfg["agents"]))
    arms: dict[str, tuple[str, int]] = {}  # eval folder name: (policy spec, call budget)
    for seed in summary["seeds"]:
        arms[f"puppeteer-seed{seed}"] = (f"puppeteer:{final_policy(args.run / f'seed{seed}')}", 2)
    for rule, steps in RULES:
        arms[f"{rule}_{n_train}"] = (f"{rule}:{n_train}", steps)
    tasks = load_suite(SUITE, "train", n=n_train)  # the quickstart's training items
    out: dict[str, Any] = {"lam": lam, "n_train": n_train, "arms": {}}
    for name, (spec, steps) in arms.items():
        train_dir = args.run / "insample" / name
        result = evaluate_policy(
            spec,
            pool,
            SUITE,
            tasks=tasks,
            seed=int(cfg["seed"]),
            out_dir=train_dir,
            max_steps=steps,
            lam=lam,
            progress=False,
            overwrite=True,
        )
        if result.n_errors:
            raise SystemExit(
                f"{name}: {result.n_errors} of {result.n} training items failed (see {train_dir})"
            )
        held = read_trajectories(args.run / "eval" / name / "trajectories.jsonl")
        out["arms"][name] = {
            "train": per_kind(read_trajectories(train_dir / "trajectories.jsonl"), pool, lam),
            "heldout": per_kind(held, pool, lam),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    rule = out["arms"][f"best-rule_{n_train}"]
    for name, arm in out["arms"].items():
        cells = []
        for kind in arm["train"]:
            d_train = 100 * (arm["train"][kind]["return"] - rule["train"][kind]["return"])
            d_held = 100 * (arm["heldout"][kind]["return"] - rule["heldout"][kind]["return"])
            cells.append(f"{kind} {d_train:+.1f} / {d_held:+.1f}")
        print(f"{name} (vs best rule, points of return, train / held out): {', '.join(cells)}")


if __name__ == "__main__":
    main()
