"""Per-item records of a conductor evaluation run, without question or answer text.

Committed beside the docs that cite a conductor run: the routing suites hold GPQA items, whose
authors ask that they not be republished, so a record keeps the item's id and domain, the plan as
agent names, the grade, reward, cost and tokens, and nothing the item says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import Pool
from puppeteer.envs.conductor_prompt import Valued, value_order


def reasoned(text: str) -> bool:
    """The completion has a '#' line before its lists (the reasoning the v2 prompts ask for)."""
    head = text.split("model_id", 1)[0]
    return any(line.strip().startswith("#") for line in head.splitlines())


def item_records(run: Path, agents: Sequence[str]) -> list[dict[str, Any]]:
    """Per item of an eval run (its ``trajectories.jsonl``): id, domain, the first round's plan as agent
    names (None: unparsed), whether the conductor reasoned first, grade, reward, worker cost and tokens,
    conductor completion tokens and the agents on offer."""
    out = []
    for line in (run / "trajectories.jsonl").read_text().splitlines():
        d = json.loads(line)
        calls = d.get("conductor") or [{}]
        wf = d.get("workflow")
        plan = [agents[i] if 0 <= i < len(agents) else "(conductor)" for i in wf["model_id"]] if wf else None
        out.append(
            {
                "task_id": d["task_id"],
                "domain": d["domain"],
                "plan": None if d.get("parse_error") else plan,
                "reasoned": reasoned(calls[0].get("text", "")),
                "correct": bool(d["correct"]),
                "reward": d["reward"],
                "usd": d["cost_usd"],
                "tokens": d["prompt_tokens"] + d["completion_tokens"],
                "conductor_completion_tokens": sum(c.get("completion_tokens", 0) for c in calls),
                "available": d.get("available"),
            }
        )
    return out


def first_is_best_value(pool: Pool, record: Mapping[str, Any], lam: float, cost_model: str) -> bool:
    """The record's plan starts with the agent of best value at ``lam`` (``card_value`` on the item's
    domain) among the agents on offer; False for an unparsed plan."""
    if not record["plan"]:
        return False
    offered = set(record["available"] or [a.name for a in pool.agents])
    order = [pool.agents[i].name for i in value_order(pool, Valued(record["domain"], lam, cost_model))]
    return record["plan"][0] == next(a for a in order if a in offered)
