"""GRPO training of the conductor with ``trl.GRPOTrainer`` (:mod:`~puppeteer.train.grpo.trainer`).

The run's settings in :mod:`~puppeteer.train.grpo.config`, the trainer's callbacks, the held-out
evaluation and the learning curve each in a module of their own; this package re-exports the public
names, as ``trl`` does for its trainers. Two modules are imported on first use only:
:mod:`~puppeteer.train.grpo.shared_prompt` (the ``trl.GRPOTrainer`` that runs a group's shared prompt
once) and :mod:`~puppeteer.train.grpo.policy` (a finished run as the policy ``conductor:grpo:RUN``).
"""

from puppeteer.train.grpo.callbacks import latest_checkpoint, metric_forwarder, resume_from, time_budget
from puppeteer.train.grpo.config import (
    EvalSpec,
    GRPOJob,
    LoraSpec,
    bf16_choice,
    grpo_config,
    scale_rewards_choice,
)
from puppeteer.train.grpo.curve import conductor_curve
from puppeteer.train.grpo.heldout import (
    conductor_completions,
    evaluate_conductor,
    generate,
    heldout_summary,
    paired_heldout,
)
from puppeteer.train.grpo.trainer import backend_label, run_conductor_training, train_dataset

__all__ = [
    "EvalSpec",
    "GRPOJob",
    "LoraSpec",
    "backend_label",
    "bf16_choice",
    "conductor_completions",
    "conductor_curve",
    "evaluate_conductor",
    "generate",
    "grpo_config",
    "heldout_summary",
    "latest_checkpoint",
    "metric_forwarder",
    "paired_heldout",
    "resume_from",
    "run_conductor_training",
    "scale_rewards_choice",
    "time_budget",
    "train_dataset",
]
