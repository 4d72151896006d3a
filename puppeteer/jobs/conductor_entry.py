"""Hydra entry point of the conductor track: ``puppeteer train track=conductor ...``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from puppeteer.utils.resources import data_dir

TRACK_OVERRIDE = "track=conductor"


def is_conductor_track(overrides: Sequence[str]) -> bool:
    return TRACK_OVERRIDE in overrides


def conductor_main(overrides: Sequence[str] | None = None) -> None:
    """Run GRPO training under Hydra with the packaged ``configs/conductor.yaml``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    from puppeteer.jobs.hydra_entry import secrets_to_environment
    from puppeteer.train.config_schema import file_overrides, register_configs
    from puppeteer.train.grpo import run_conductor_training
    from puppeteer.utils.consoles import output_console
    from puppeteer.utils.rundir import claim

    register_configs()  # the suite/ and pool/ groups come from envs/ and agents/

    @hydra.main(config_path=str(data_dir("configs")), config_name="conductor", version_base="1.3")
    def _main(cfg: DictConfig) -> float:
        out = cfg.out or HydraConfig.get().runtime.output_dir
        console = output_console()

        def on_log(step: int, metrics: dict[str, float]) -> None:
            if "train/reward" in metrics:
                console.print(
                    f"step {step}: reward {metrics['train/reward']:.3f} "
                    f"parse {metrics.get('train/conductor/parse_rate', float('nan')):.2f} "
                    f"acc {metrics.get('train/conductor/accuracy', float('nan')):.2f} "
                    f"len {metrics.get('train/completions/mean_length', float('nan')):.0f}",
                    highlight=False,
                )

        with claim(out):  # one writer at a time, as for the step-wise track
            container = OmegaConf.to_container(cfg, resolve=True)
            results = run_conductor_training(container, out, on_log=on_log)  # type: ignore[arg-type]
        a, b = results["heldout_after"], results.get("heldout_before")
        if b:
            console.print(f"held-out before: accuracy {b['accuracy']:.3f} parse rate {b['parse_rate']:.3f}")
        if a is None:  # the warm start alone with eval.before=false: nothing was evaluated
            console.print(f"[bold green]done[/bold green] (no held-out pass) -> {out}/results.json")
            return float("nan")
        console.print(
            f"[bold green]done[/bold green] held-out accuracy {a['accuracy']:.3f} "
            f"[{a['accuracy_ci95'][0]:.3f}, {a['accuracy_ci95'][1]:.3f}] parse rate {a['parse_rate']:.3f} "
            f"reward {a['reward']:.3f} -> {out}/results.json"
        )
        return float(a["reward"])

    # credentials never reach Hydra (its saved configs, the run directory's config.json); pool=PATH.yaml
    argv = file_overrides(secrets_to_environment(overrides if overrides is not None else sys.argv[1:]))
    sys.argv = [sys.argv[0], *argv]
    _main()
