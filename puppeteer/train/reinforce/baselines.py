"""The baselines of sampled REINFORCE: per group and episode, one value per step (``trainer.baseline``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from puppeteer.envs.rollout import Episode

if TYPE_CHECKING:  # config.py checks its baseline against BASELINES
    from puppeteer.train.reinforce.config import ReinforceConfig


# A baseline gives, per group and episode, one value per step: the advantage of step t is
# G_t - b_t. ``none``, ``ema`` and ``group`` give every step of an episode the same value;
# ``prefix`` gives each step its own.
StepBaselines = list[list[list[float]]]


Groups = list[list[Episode]]


def _every_step(groups: Groups, values: list[list[float]]) -> StepBaselines:
    return [
        [[b] * len(e.returns) for e, b in zip(g, bs, strict=True)]
        for g, bs in zip(groups, values, strict=True)
    ]


def _baseline_none(groups: Groups, state: dict[str, float], cfg: ReinforceConfig) -> StepBaselines:
    return _every_step(groups, [[0.0] * len(g) for g in groups])


def _baseline_ema(groups: Groups, state: dict[str, float], cfg: ReinforceConfig) -> StepBaselines:
    b = state.get("ema", 0.0)
    out = [[b] * len(g) for g in groups]
    mean = float(np.mean([e.returns[0] for g in groups for e in g]))
    state["ema"] = mean if "ema" not in state else cfg.ema_decay * b + (1 - cfg.ema_decay) * mean
    return _every_step(groups, out)


def _group_means(g: list[Episode]) -> list[float]:
    """Leave-one-out mean of the other episodes' returns (0 for a group of one)."""
    if len(g) == 1:
        return [0.0]
    g0 = np.array([e.returns[0] for e in g])
    return [float(x) for x in (g0.sum() - g0) / (len(g) - 1)]


def _baseline_group(groups: Groups, state: dict[str, float], cfg: ReinforceConfig) -> StepBaselines:
    return _every_step(groups, [_group_means(g) for g in groups])


def _baseline_prefix(groups: Groups, state: dict[str, float], cfg: ReinforceConfig) -> StepBaselines:
    """Per step t: the mean G_t of the other episodes of the group (same task) that took the same
    actions before step t, so reached the same decision; where none did, the group baseline.

    Step 0 is the ``group`` baseline. A later decision is judged against the other choices made in
    its own situation, not against the whole episodes of the group: in a two-step cascade the second
    call's advantage no longer carries the first call's luck (experiments/local-experiment/README.md)."""
    out: StepBaselines = []
    for g in groups:
        fallback = _group_means(g)
        rows = []
        for i, e in enumerate(g):
            row = []
            for t in range(len(e.returns)):
                same = [
                    o.returns[t]
                    for j, o in enumerate(g)
                    if j != i and len(o.returns) > t and o.actions[:t] == e.actions[:t]
                ]
                row.append(float(np.mean(same)) if same else fallback[i])
            rows.append(row)
        out.append(rows)
    return out


BASELINES: dict[str, Callable[[Groups, dict[str, float], ReinforceConfig], StepBaselines]] = {
    "none": _baseline_none,
    "ema": _baseline_ema,
    "group": _baseline_group,
    "prefix": _baseline_prefix,
}
