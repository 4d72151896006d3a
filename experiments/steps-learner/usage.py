"""What each learned seed and the best rule call on the held-out items of a quickstart run on
``local-mix-steps``: per kind, the first agents, the share of items where the verifier was on offer
(the first agent is the one its chain was recorded after) and where it was called, and the escalations.

    python experiments/steps-learner/usage.py runs/qs-steps/lam1 \
        --out experiments/steps-learner/results/lam1/usage.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from puppeteer.backends.replay import read_steps
from puppeteer.envs.trajectories import read_trajectories

TABLE = Path(__file__).resolve().parents[2] / "agents" / "local-mix.replay"
VERIFIER = "qwen0.5b-verify"


def usage(trajectories: Path, chained: set[tuple[str, str]]) -> dict[str, Any]:
    """Per kind: items, accuracy, first agents, the verifier offered / called, and second calls."""
    per: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"items": 0, "right": 0, "first": Counter(), "offered": 0, "verified": 0, "second": Counter()}
    )
    for t in read_trajectories(trajectories):
        k = per[t.task_id.split("/")[0]]
        names = [s.agent_name for s in t.steps]
        k["items"] += 1
        k["right"] += bool(t.correct)
        k["first"][names[0]] += 1
        k["offered"] += (t.task_id, names[0]) in chained
        k["verified"] += VERIFIER in names
        if len(names) > 1:
            k["second"][names[1]] += 1
    return {
        kind: {
            "items": k["items"],
            "accuracy": round(k["right"] / k["items"], 4),
            "first": dict(k["first"].most_common()),
            "verifier_offered": k["offered"],
            "verifier_called": k["verified"],
            "second": dict(k["second"].most_common()),
        }
        for kind, k in sorted(per.items())
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a quickstart run directory (its eval/ folder)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    chained = {(s.task_id, s.first) for s in read_steps(TABLE) if s.agent == VERIFIER}
    arms = sorted(p for p in (args.run / "eval").iterdir() if (p / "trajectories.jsonl").is_file())
    out = {arm.name: usage(arm / "trajectories.jsonl", chained) for arm in arms}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    for name, kinds in out.items():
        line = ", ".join(
            f"{kind} {v['accuracy']:.3f} (verifier offered {v['verifier_offered']}, "
            f"called {v['verifier_called']}; second calls {sum(v['second'].values())})"
            for kind, v in kinds.items()
        )
        print(f"{name}: {line}")


if __name__ == "__main__":
    main()
