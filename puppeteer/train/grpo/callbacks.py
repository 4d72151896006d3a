"""The HF Trainer's hooks of a conductor GRPO run: metrics forwarded to the project's logger, a time
budget, and the checkpoint a run resumes from."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from puppeteer.train.logging import MetricLogger

if TYPE_CHECKING:
    from transformers import TrainerCallback
from puppeteer.train.grpo.config import GRPOJob

log = logging.getLogger(__name__)


OnLog = Callable[[int, Mapping[str, float]], None]


def metric_forwarder(logger: MetricLogger, on_log: OnLog | None = None) -> TrainerCallback:
    """A trainer callback that sends numeric log entries to the project's metric logger as ``train/...``."""
    from transformers import TrainerCallback

    class MetricForwarder(TrainerCallback):
        def on_log(
            self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kw: Any
        ):
            numeric = {f"train/{k}": float(v) for k, v in (logs or {}).items() if isinstance(v, int | float)}
            if numeric:
                logger.log(numeric, step=int(state.global_step))
                if on_log is not None:
                    on_log(int(state.global_step), numeric)

    return MetricForwarder()


def time_budget(seconds: float) -> TrainerCallback:
    """A trainer callback that ends training (with a checkpoint) once ``seconds`` of it have passed.

    Counted from this process's start of training, so a resumed run gets the budget again.
    """
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        def __init__(self) -> None:
            self.start: float | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.start is not None and time.perf_counter() - self.start > seconds:
                log.warning("time budget of %.0f s spent at step %d: stopping", seconds, state.global_step)
                control.should_training_stop = True
                control.should_save = True

    return TimeBudget()


def latest_checkpoint(directory: Path) -> Path | None:
    from transformers.trainer_utils import get_last_checkpoint

    if not directory.is_dir():
        return None
    last = get_last_checkpoint(str(directory))
    return Path(last) if last else None


def resume_from(job: GRPOJob, checkpoints: Path) -> str | None:
    if job.resume == "never":
        return None
    if job.resume == "auto":
        last = latest_checkpoint(checkpoints)
        return str(last) if last else None
    path = Path(job.resume)
    if not path.is_dir():
        raise FileNotFoundError(f"resume checkpoint {path} not found")
    return str(path)


def load_if_finished(trainer: Any, checkpoint: str | None) -> bool:
    """Load ``checkpoint`` into ``trainer`` without a training step if it already holds the trainer's
    ``max_steps`` optimizer steps (a finished run started again); False (nothing loaded) otherwise.

    The HF Trainer checks its step count only after a step, so resuming from such a checkpoint would
    train one step beyond ``max_steps`` (measured: a finished 2-step run started again ended at step 3).
    """
    from transformers import TrainerState

    state_file = Path(checkpoint) / "trainer_state.json" if checkpoint else None
    max_steps = int(trainer.args.max_steps)
    if state_file is None or max_steps <= 0 or not state_file.is_file():
        return False  # no checkpoint, an epoch-counted run, or one train() itself must refuse
    state = TrainerState.load_from_json(str(state_file))
    if state.global_step < max_steps:
        return False
    trainer._load_from_checkpoint(checkpoint)  # the weights (a peft model: its adapters), as train() does
    trainer.state = state
    return True
