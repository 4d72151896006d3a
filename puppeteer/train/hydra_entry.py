"""Hydra entry point shared by ``scripts/train.py`` and ``puppeteer train`` (multirun included)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from puppeteer.resources import data_dir


def hydra_main(overrides: Sequence[str] | None = None) -> None:
    """Run the training job under Hydra with the packaged configs; ``overrides`` like Hydra's CLI."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf
    from rich.console import Console

    from puppeteer.train.config_schema import register_configs
    from puppeteer.train.job import run_training

    register_configs()

    @hydra.main(config_path=str(data_dir("configs")), config_name="train", version_base="1.3")
    def _main(cfg: DictConfig) -> float:
        out = cfg.out or HydraConfig.get().runtime.output_dir
        console = Console()
        results = run_training(OmegaConf.to_container(cfg, resolve=True), out, console=console)  # type: ignore[arg-type]
        h = results["heldout"]
        console.print(
            f"[bold green]done[/bold green] held-out accuracy {h['accuracy']:.3f} return "
            f"{h['return']:.3f} cost {h['cost']:.3f} calls {h['calls']:.2f} -> {out}/results.json"
        )
        return float(h["return"])

    if overrides is not None:
        sys.argv = [sys.argv[0], *overrides]
    _main()
