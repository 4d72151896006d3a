"""Cost-weight sweeps, the job: train one policy per (lambda, seed) with a Hydra multirun, then hand
the finished runs to :mod:`puppeteer.analytics.sweep` (gather, table, plot).

Each track of :data:`TRACKS` is the analysis track (where a run's held-out numbers are, how it is
evaluated) plus how its runs are trained: the Hydra entry it runs and the overrides it adds unless
the user gives the key (:attr:`defaults`). ``puppeteer sweep`` is :func:`run_sweep`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import pandas as pd

from puppeteer.analytics.sweep import ConductorTrack, PuppeteerTrack, SweepTrack, gather, write_report


class LaunchableTrack(SweepTrack, Protocol):
    """A sweep track that can also train its runs."""

    defaults: Mapping[str, str]  # Hydra overrides a sweep adds unless the user gives the key

    def launch(
        self, values: Sequence[float], seeds: Sequence[int], out: Path, overrides: Sequence[str]
    ) -> None:
        """Train every (value, seed) into ``out/<param><value>_seed<seed>/``."""
        ...


def _hydra_list(values: Sequence[Any]) -> str:
    return ",".join(str(v) for v in values)


def _multirun_args(param: str, values: Sequence[float], seeds: Sequence[int], out: Path) -> list[str]:
    """A Hydra multirun over ``param`` x ``seed`` into ``out/<param><value>_seed<seed>``."""
    return [
        "-m",
        f"{param}={_hydra_list(values)}",
        f"seed={_hydra_list(seeds)}",
        f"hydra.sweep.dir={out}",
        f"hydra.sweep.subdir={param}${{{param}}}_seed${{seed}}",
    ]


@dataclass(frozen=True)
class PuppeteerSweep(PuppeteerTrack):
    """The step-wise puppeteer's runs, trained with REINFORCE (``puppeteer train``) over ``lam``."""

    # min_steps=1: a greedy policy cannot stop before anyone acts
    defaults: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType(
            {"min_steps": "1", "wandb.enabled": "false", "progress": "false"}
        )
    )

    def launch(
        self, values: Sequence[float], seeds: Sequence[int], out: Path, overrides: Sequence[str]
    ) -> None:
        from puppeteer.jobs.hydra_entry import hydra_main

        hydra_main([*_multirun_args(self.param, values, seeds, out), *overrides])


@dataclass(frozen=True)
class ConductorSweep(ConductorTrack):
    """The conductor's runs, trained with GRPO (``puppeteer train track=conductor``) over ``workflow_lam``."""

    # configs/conductor.yaml has no min_steps or progress key: overriding them would fail
    defaults: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({"wandb.enabled": "false"}))

    def launch(
        self, values: Sequence[float], seeds: Sequence[int], out: Path, overrides: Sequence[str]
    ) -> None:
        from puppeteer.jobs.conductor_entry import TRACK_OVERRIDE, conductor_main

        conductor_main(
            [
                *_multirun_args(self.param, values, seeds, out),
                TRACK_OVERRIDE,
                *(o for o in overrides if o != TRACK_OVERRIDE),
            ]
        )


TRACKS: dict[str, LaunchableTrack] = {"puppeteer": PuppeteerSweep(), "conductor": ConductorSweep()}

# defaults the puppeteer track's sweep adds unless the user overrides them (key=value, Hydra syntax)
SWEEP_DEFAULTS: Mapping[str, str] = TRACKS["puppeteer"].defaults


def with_defaults(overrides: Sequence[str], defaults: Mapping[str, str] = SWEEP_DEFAULTS) -> list[str]:
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    return [*overrides, *(f"{k}={v}" for k, v in defaults.items() if k not in given)]


def run_sweep(
    values: Sequence[float],
    seeds: int | Sequence[int],
    out: str | Path,
    overrides: Sequence[str] = (),
    baselines: Sequence[str] = (),
    track: str = "puppeteer",
    cost: str = "tokens",
    n_eval: int | None = None,
    train: bool = True,
    reevaluate: bool = False,
) -> pd.DataFrame:
    """Train (unless ``train=False``: gather only), evaluate, and write sweep.csv/.md/.png under ``out``."""
    tr = TRACKS[track]
    out = Path(out).resolve()
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if train:
        tr.launch(values, seed_list, out, with_defaults(overrides, tr.defaults))
    df = gather(out, tr, baselines, n_eval, reevaluate=reevaluate)
    write_report(df, out, tr, cost)
    return df
