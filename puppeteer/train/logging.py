"""Metric sinks: a JSONL file always, wandb when asked (offline unless the user opts in)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from puppeteer.utils.redaction import redact as _redact


class MetricLogger(Protocol):
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Rewindable(Protocol):
    def rewind(self, step: int) -> None:
        """Forget what was logged after ``step`` (a resumed run logs those steps again)."""
        ...


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """Replace values whose names or contents look like credentials (API keys never reach wandb)."""
    return dict(_redact(config))


class JsonlLogger:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")

    def close(self) -> None:
        return None

    def rewind(self, step: int) -> None:
        """Keep the lines with ``step <= step`` (and drop a torn last line); atomic."""
        if not self.path.exists():
            return
        kept = []
        with self.path.open() as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # torn by a kill during the write
                if isinstance(record, dict) and record.get("step", 0) <= step:
                    kept.append(json.dumps(record) + "\n")
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(kept))
        os.replace(tmp, self.path)


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

    def rewind(self, step: int) -> None:
        for lg in self.loggers:
            if isinstance(lg, Rewindable):
                lg.rewind(step)
