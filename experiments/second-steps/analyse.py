"""Second steps on real models, read from the shipped local-mix table: verifiers' flag rates, revisers'
fix and break rates, and how the single agents' errors go together.

    python experiments/second-steps/analyse.py

Reads ``agents/local-mix.replay/`` (``steps.jsonl.gz``: the two-step chains recorded by
``puppeteer outcomes steps``; ``outcomes.jsonl.gz``: every solver alone) and writes
``results/second_steps.json``, ``results/second_steps.md`` beside this file. Definitions are in
:mod:`puppeteer.analytics.second_steps`. Backend: llama.cpp (Qwen2.5-Coder 1.5B / 0.5B Q4_K_M,
greedy), replayed from the table; nothing is called.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

from puppeteer.agents.pool import load_pool
from puppeteer.analytics.second_steps import (
    PairCorrelation,
    SecondStepRates,
    error_correlations,
    rates_by,
    relations,
)
from puppeteer.backends.replay import read_outcomes, read_steps

HERE = Path(__file__).parent
FAMILIES = {"qwen-1.5b": "Qwen2.5-Coder", "qwen-0.5b": "Qwen2.5-Coder"}  # model key -> family


def _rate_rows(rates: list[SecondStepRates]) -> list[str]:
    lines = [
        "| second agent | items | n | first right | chain right | flags wrong (detection) | "
        "flags right (false alarm) | fixes wrong | breaks right | no answer | s/call |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rates:
        lines.append(
            f"| {r.agent} | {r.group} | {r.n} | {r.first_accuracy.text()} | {r.chain_accuracy.text()} | "
            f"{r.detection.text()} | {r.false_alarm.text()} | {r.fix.text()} | {r.breaks.text()} | "
            f"{r.silent.text()} | {r.model_s:.1f} |"
        )
    return lines


def _corr_rows(pairs: list[PairCorrelation]) -> list[str]:
    lines = [
        "| agent A | agent B | relation | items | within-kind phi [95% bootstrap] | P(both wrong) | "
        "P(B wrong) | P(B wrong \\| A wrong) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(pairs, key=lambda c: (c.relation, -c.phi)):
        lines.append(
            f"| {c.a} | {c.b} | {c.relation} | {c.n} | {c.phi:.2f} [{c.low:.2f}, {c.high:.2f}] | "
            f"{c.both_wrong:.2f} | {c.b_wrong:.2f} | {c.b_wrong_given_a_wrong:.2f} |"
        )
    return lines


def _relation_summary(pairs: list[PairCorrelation]) -> list[str]:
    lines = ["| relation | pairs | mean phi | min | max |", "|---|---|---|---|---|"]
    for rel in sorted({c.relation for c in pairs}):
        phis = [c.phi for c in pairs if c.relation == rel]
        lines.append(
            f"| {rel} | {len(phis)} | {sum(phis) / len(phis):.2f} | {min(phis):.2f} | {max(phis):.2f} |"
        )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="local-mix-steps")
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args()
    pool = load_pool(args.pool)
    assert pool.replay is not None
    steps = read_steps(pool.replay)
    outcomes = read_outcomes(pool.replay)
    solvers = {a.name: a.model.name for i, a in enumerate(pool.agents) if not pool.reads_context(i)}
    by_kind = rates_by(steps, "domain")
    by_split = [
        (split, r)
        for split in ("train", "test")
        for r in rates_by(steps, "domain", (split,))
        if r.group == "all"
    ]
    pairs = error_correlations(outcomes, relations(solvers, FAMILIES))
    counts = Counter((o.split, o.first, o.agent) for o in steps)
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "backend": "llamacpp (replayed from agents/local-mix.replay)",
        "chains": {f"{s} {f} > {a}": n for (s, f, a), n in sorted(counts.items())},
        "rates_by_kind": [_rate_dict(r) for r in by_kind],
        "rates_by_split": [{**_rate_dict(r), "split": split} for split, r in by_split],
        "error_correlations": [asdict(c) for c in pairs],
    }
    (args.out / "second_steps.json").write_text(json.dumps(payload, indent=2) + "\n")
    md = ["## Recorded chains (split, first > second: items)", ""]
    md += [f"- {k}: {v}" for k, v in payload["chains"].items()] or ["- none yet"]
    md += ["", "## Second steps by kind (train and test items pooled)", "", *_rate_rows(by_kind)]
    md += [
        "",
        "## Second steps by split (all kinds)",
        "",
        *_rate_rows([replace(r, group=s) for s, r in by_split]),
    ]
    md += ["", "## Error correlation between single agents (train + test, 520 items)", ""]
    md += [*_relation_summary(pairs), "", *_corr_rows(pairs)]
    (args.out / "second_steps.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def _rate_dict(r: SecondStepRates) -> dict[str, object]:
    out: dict[str, object] = {"agent": r.agent, "group": r.group, "n": r.n, "model_s": r.model_s}
    for name in ("first_accuracy", "chain_accuracy", "detection", "false_alarm", "fix", "breaks", "silent"):
        rate = getattr(r, name)
        lo, hi = rate.interval
        out[name] = {"k": rate.k, "n": rate.n, "rate": rate.value if rate.n else None, "low": lo, "high": hi}
    return out


if __name__ == "__main__":
    main()
