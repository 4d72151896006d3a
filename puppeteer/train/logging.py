"""Metric sinks: a JSONL file always, wandb when asked (offline unless the user opts in)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

SECRET_MARKERS = ("key", "token", "secret", "password")


class MetricLogger(Protocol):
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """Drop values whose names look like credentials (API keys never reach wandb)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping):
            out[k] = redact(v)
        elif any(m in k.lower() for m in SECRET_MARKERS):
            out[k] = "<redacted>"
        else:
            out[k] = v
    return out


class JsonlLogger:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")

    def close(self) -> None:
        return None


class WandbLogger:
    def __init__(
        self,
        run_dir: Path,
        project: str,
        config: Mapping[str, Any],
        mode: str | None = None,
        name: str | None = None,
    ) -> None:
        import wandb

        self._run = wandb.init(
            project=project,
            dir=str(run_dir),
            config=redact(config),
            name=name,
            mode=mode or os.environ.get("WANDB_MODE", "offline"),
            reinit="finish_previous",
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


class MultiLogger:
    def __init__(self, *loggers: MetricLogger) -> None:
        self.loggers = loggers

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for lg in self.loggers:
            lg.log(metrics, step)

    def close(self) -> None:
        for lg in self.loggers:
            lg.close()
