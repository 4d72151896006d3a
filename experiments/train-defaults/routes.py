"""The most common call sequences per kind of request of each arm of an `ab` run (from its trajectories).

python experiments/train-defaults/routes.py runs/train-defaults/ab > routes.json
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path


def routes(ab_dir: Path, top: int = 3) -> list[dict[str, object]]:
    """Per arm folder of ``ab_dir``: each kind's ``top`` most common sequences of agents called."""
    out = []
    for arm in sorted(p for p in ab_dir.iterdir() if (p / "trajectories.jsonl").is_file()):
        seen: defaultdict[str, Counter[str]] = defaultdict(Counter)
        for line in (arm / "trajectories.jsonl").read_text().splitlines():
            t = json.loads(line)
            seen[t["task_id"].split("/")[0]][" > ".join(s["agent_name"] for s in t["steps"])] += 1
        by_kind = {k: dict(v.most_common(top)) for k, v in sorted(seen.items())}
        out.append({"arm": arm.name, "routes": by_kind})
    return out


if __name__ == "__main__":
    json.dump(routes(Path(sys.argv[1])), sys.stdout, indent=1)
    sys.stdout.write("\n")
