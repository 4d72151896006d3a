"""A declared space of fixed plans: the workflows a conductor can write, as policy specs.

:func:`plan_specs` lists every agent alone (``single:A``), every ordered pair of distinct agents whose
second step sees the first and gives the final answer (``chain:A,B``), every vote of ``k`` distinct
agents answering independently (``vote:A,B,C``, the first listed winning ties) and, given triggers,
every ordered pair as an escalation on each (``escalate:A,B@failed-check``: B answers alone, only if
the trigger fires on A's answer; a plan for an env with ``aggregate="cascade"``). Each spec builds with
:func:`puppeteer.policies.registry.make_policy` and runs as an ordinary workflow-mode policy; the
conductor's warm start (:mod:`puppeteer.train.grpo.warm_start`) searches this space per question.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def plan_specs(
    solvers: Sequence[str],
    *,
    pair_agents: Sequence[str] | None = None,
    revisers: Sequence[str] = (),
    vote_agents: Sequence[str] | None = None,
    vote_k: int = 3,
    cascades: Sequence[str] = (),
) -> list[str]:
    """Singles (``solvers`` and ``revisers``), ordered pairs of distinct ``pair_agents`` (default: the
    solvers) plus each solver followed by each reviser, and votes of ``vote_k`` distinct ``vote_agents``
    (default: the solvers; members in the order given, so the first listed wins ties), then each ordered
    pair as an escalation on each of ``cascades`` (triggers)."""
    pairs = list(itertools.permutations(pair_agents if pair_agents is not None else solvers, 2))
    pairs += [(a, r) for a in solvers for r in revisers if a != r]
    voters = vote_agents if vote_agents is not None else solvers
    votes = list(itertools.combinations(voters, vote_k)) if 2 <= vote_k <= len(voters) else []
    specs = [f"single:{a}" for a in (*solvers, *revisers)]
    specs += ["chain:" + ",".join(p) for p in dict.fromkeys(pairs)]
    specs += ["vote:" + ",".join(v) for v in votes]
    specs += [f"escalate:{','.join(p)}@{t}" for t in cascades for p in dict.fromkeys(pairs)]
    return specs


def plan_form(spec: str) -> str:
    """``single``, ``chain``, ``vote`` or ``escalate``: the form of a spec of :func:`plan_specs`."""
    return spec.partition(":")[0]


__all__ = ["plan_form", "plan_specs"]
