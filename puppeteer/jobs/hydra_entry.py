"""Hydra entry point of ``puppeteer train`` (multirun included).

Credentials never reach Hydra: an override that names a key (``+openai_api_key=sk-...``) is
taken out of the argument list before Hydra sees it (so it is in no ``.hydra/*.yaml``, run
directory name or wandb metadata) and exported as an environment variable instead.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from puppeteer.errors import UserError
from puppeteer.utils.redaction import split_secret_overrides
from puppeteer.utils.resources import data_dir

log = logging.getLogger(__name__)


class TrainConfigError(UserError):
    """The training overrides do not compose into a valid configuration."""


def secrets_to_environment(overrides: Sequence[str]) -> list[str]:
    """The overrides without credentials; each credential is exported as an environment variable."""
    split = split_secret_overrides(overrides)
    for name, value in split.secrets.items():
        log.warning(
            "a credential override was moved to the environment variable %s; "
            "pass keys as environment variables",
            name,
        )
        os.environ[name] = value
    return list(split.kept)


def _plain(overrides: Sequence[str]) -> list[str] | None:
    """The job overrides as a compose() list (Hydra's own settings left out), None under flags (-m...)."""
    if any(item.startswith("-") for item in overrides):
        return None
    return [item for item in overrides if not item.lstrip("+~").startswith(("hydra.", "hydra/", "hydra="))]


def check_values(overrides: Sequence[str]) -> None:
    """Compose the training config with ``overrides`` and check its values; one-line errors."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from puppeteer.jobs.train import validate_config

    try:
        with initialize_config_dir(config_dir=str(data_dir("configs")), version_base="1.3"):
            cfg = compose("train", overrides=list(overrides))
        container = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrainConfigError(f"bad training override: {first}") from None
    validate_config(container)  # type: ignore[arg-type]


def hydra_main(overrides: Sequence[str] | None = None) -> None:
    """Run the training job under Hydra with the packaged configs; ``overrides`` like Hydra's CLI.

    Hydra's flags pass through (``--cfg job``, ``--info``, ``-m``). Raises
    :class:`~puppeteer.errors.UserError` (one-line message) for an override that does not compose
    (``lam=abc``, an unknown suite) or a bad value, before any work; for an unusable checkpoint or
    cache, or a run that stopped (after the other sweep jobs ran).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    from puppeteer.jobs.train import run_training
    from puppeteer.train.config_schema import check_overrides, file_overrides, register_configs
    from puppeteer.train.reinforce import TrainingStopped
    from puppeteer.utils.consoles import output_console
    from puppeteer.utils.redaction import redact

    register_configs()
    args = file_overrides(secrets_to_environment(sys.argv[1:] if overrides is None else overrides))
    problem = check_overrides(str(data_dir("configs")), "train", args)
    if problem is not None:
        raise TrainConfigError(f"config: {problem}")
    plain = _plain(args)
    if plain is not None:
        check_values(plain)  # fail before Hydra creates a run directory
    failures: list[str] = []

    @hydra.main(config_path=str(data_dir("configs")), config_name="train", version_base="1.3")
    def _main(cfg: DictConfig) -> float:
        hc = HydraConfig.get()
        out = cfg.out or hc.runtime.output_dir
        if hc.output_subdir is not None:  # Hydra's own copy of the config: keys redacted
            saved = os.path.join(hc.runtime.output_dir, hc.output_subdir, "config.yaml")
            if os.path.exists(saved):
                OmegaConf.save(OmegaConf.create(redact(OmegaConf.to_container(cfg))), saved)
        console = output_console()
        try:
            results = run_training(OmegaConf.to_container(cfg, resolve=True), out, console=console)  # type: ignore[arg-type]
        except (UserError, ValueError, KeyError, OSError, TrainingStopped) as exc:  # one line, no traceback
            failures.append(f"{out}: {exc}")  # reported once by the caller; other sweep jobs still run
            return float("nan")
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
    if failures:
        raise TrainConfigError(
            failures[0] if len(failures) == 1 else f"{len(failures)} runs failed; first: {failures[0]}"
        )
