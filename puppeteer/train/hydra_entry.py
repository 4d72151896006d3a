"""The Hydra entry moved to :mod:`puppeteer.jobs.hydra_entry`; this name stays for existing imports."""

from puppeteer.jobs.hydra_entry import TrainConfigError, check_values, hydra_main

__all__ = ["TrainConfigError", "check_values", "hydra_main"]
