"""Hydra entry point shared by ``scripts/train.py`` and ``puppeteer train`` (multirun included)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from puppeteer.resources import data_dir


def hydra_main(overrides: Sequence[str] | None = None) -> None:
    """Run the training job under Hydra with the packaged configs; ``overrides`` like Hydra's CLI.

    Hydra's flags pass through (``--cfg job``, ``--info``, ``-m``). A config that does not compose
    (``lam=abc``, an unknown suite) raises ``ValueError`` with a one-line message before any work.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf
    from rich.console import Console

    from puppeteer.train.config_schema import check_overrides, register_configs
    from puppeteer.train.job import run_training

    register_configs()
    args = list(sys.argv[1:] if overrides is None else overrides)
    problem = check_overrides(str(data_dir("configs")), "train", args)
    if problem is not None:
        raise ValueError(f"config: {problem}")

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

    sys.argv = [sys.argv[0], *args]
    for handler in list(logging.root.handlers):  # Hydra configures logging itself (--info adds a handler)
        logging.root.removeHandler(handler)
    _main()
