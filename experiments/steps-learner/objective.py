"""What the decision after a call converges to under two objectives, computed exactly on the table.

The quickstart's second stage tries every second action after the router's call on an item and fits
the policy to ``softmax(Q / t)`` of that item's returns (cross-entropy, ``trainer.second_target``).
Where several items share what the policy reads, the best fit is the *mean of the items' Boltzmann
targets*: an action that pays on a third of them gets at most a third of the mass, whatever it pays,
while stopping (the cheapest action) is the per-item best on every item that nothing fixes. The
expected-return objective with an entropy bonus, ``sum_a pi(a) Q(a) + t H(pi)``, has the best fit
``softmax(E[Q] / t)`` instead: the action with the best mean return.

This script takes the policy's inputs to be what a rule reads (the kind and the answer signals after
the first call, the visible checks included), runs every second action after each kind's first agent
on every item in the env (strict replay of the shipped table with second steps), and compares the
greedy policies of both fits, fitted on the 200 training items, on the 320 held-out ones.

    PUPPETEER_REPLAY=strict python experiments/steps-learner/objective.py --lam 1 \\
        --out experiments/steps-learner/results/objective_lam1.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.backends.replay import read_steps
from puppeteer.envs.build import EnvConfig, build_env
from puppeteer.jobs.quickstart import QuickstartConfig
from puppeteer.tasks import load_suite
from puppeteer.types import Task

VERIFIER = "qwen0.5b-verify"
AGENTS = (*QuickstartConfig().agents, VERIFIER)  # the quickstart's eight solvers and the verifier


def first_agents(pool: Pool) -> dict[str, str]:
    """Each kind's first agent: the one the verifier's chains were recorded after
    (experiments/second-steps), read from the pool's table."""
    firsts: dict[str, set[str]] = defaultdict(set)
    for s in read_steps(pool.replay):
        if s.agent == VERIFIER:
            firsts[s.domain].add(s.first)
    if any(len(f) != 1 for f in firsts.values()):
        raise ValueError(f"the verifier's chains follow more than one first agent in a kind: {dict(firsts)}")
    return {kind: next(iter(f)) for kind, f in sorted(firsts.items())}


def outcomes(lam: float, tasks: Sequence[Task], pool: Pool, firsts: dict[str, str]) -> list[dict[str, Any]]:
    """Per item: its kind, the signals after its kind's first call, and per second action (the
    Terminator included) the return, the grade and the model seconds of the two-step episode."""
    config = EnvConfig(
        mode="step",
        lam=lam,
        max_steps=2,
        min_steps=1,
        cost_model="minutes",
        samples_per_item=1,
        phi=1.0,
        visible_checks=True,
    )  # fmt: skip  (the quickstart's second stage)
    env = build_env(config, pool=pool, tasks=tasks)
    rows = []
    for index, task in enumerate(tasks):
        kind = task.id.split("/")[0]
        first = pool.index(firsts[kind])
        obs, _ = env.reset(seed=0, options={"task_index": index})
        obs, *_ = env.step(first)
        offered = np.flatnonzero(obs["mask"]).tolist()
        per: dict[str, dict[str, float]] = {}
        for action in offered:
            env.reset(seed=0, options={"task_index": index})
            env.step(first)
            *_, info = env.step(action)
            traj = info["trajectory"]
            name = "stop" if action == pool.terminator_id else pool.agents[action].name
            per[name] = {
                "return": float(info["returns"][0]),
                "correct": bool(info["correct"]),
                "model_s": float(pool.model_seconds(traj.steps)),
            }
        rows.append(
            {"task_id": task.id, "kind": kind, "signals": obs["signals"].round(3).tolist(), "actions": per}
        )
    env.close()
    return rows


def fit(rows: Sequence[dict[str, Any]], t: float) -> dict[str, dict[tuple[float, ...], str]]:
    """The greedy action per (kind, signals) under each objective's best fit on ``rows``."""
    groups: dict[tuple[str, tuple[float, ...]], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["kind"], tuple(r["signals"]))].append(r)
    out: dict[str, dict[Any, str]] = {"target": {}, "soft": {}}
    for key, items in groups.items():
        names = sorted(set.intersection(*(set(r["actions"]) for r in items)))
        q = np.array([[r["actions"][a]["return"] for a in names] for r in items])
        boltzmann = np.exp((q - q.max(axis=1, keepdims=True)) / t)
        boltzmann /= boltzmann.sum(axis=1, keepdims=True)
        out["target"][key] = names[int(np.argmax(boltzmann.mean(axis=0)))]
        out["soft"][key] = names[int(np.argmax(q.mean(axis=0)))]
    return out


def value(rows: Sequence[dict[str, Any]], policy: dict[Any, str]) -> dict[str, float]:
    """Accuracy, model seconds and return per item of a greedy policy (stopping on an unseen group)."""
    picked = [r["actions"][policy.get((r["kind"], tuple(r["signals"])), "stop")] for r in rows]
    return {
        "accuracy": round(float(np.mean([p["correct"] for p in picked])), 4),
        "model_s": round(float(np.mean([p["model_s"] for p in picked])), 2),
        "return": round(float(np.mean([p["return"] for p in picked])), 4),
        "second_calls": sum(
            a != "stop" for a in (policy.get((r["kind"], tuple(r["signals"])), "stop") for r in rows)
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument(
        "--target", type=float, default=0.1, help="the Boltzmann temperature t (the quickstart's)"
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    pool = load_pool("local-mix-steps").subset(list(AGENTS))
    firsts = first_agents(pool)
    train = outcomes(args.lam, load_suite("mix-local", "train", n=200), pool, firsts)
    test = outcomes(args.lam, load_suite("mix-local", "test", n=320), pool, firsts)
    fits = fit(train, args.target)
    result = {
        "lam": args.lam,
        "target": args.target,
        "backend": "llamacpp (replayed table local-mix.replay, strict)",
        "first_agents": firsts,
        "policies": {
            name: {
                "train": value(train, policy),
                "test": value(test, policy),
                "rules": {f"{k}|{','.join(map(str, s))}": a for (k, s), a in sorted(policy.items())},
            }
            for name, policy in fits.items()
        },
        "stop_after_first": {"train": value(train, {}), "test": value(test, {})},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, p in (*result["policies"].items(), ("first call alone", result["stop_after_first"])):
        print(name, "train", p["train"], "test", p["test"])


if __name__ == "__main__":
    main()
