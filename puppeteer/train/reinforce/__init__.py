"""REINFORCE with a baseline for the step-wise puppeteer (:mod:`~puppeteer.train.reinforce.trainer`).

The settings in :mod:`~puppeteer.train.reinforce.config`, the baselines, the batch losses, the
validation, the checkpoint and what a group of ``first_step=all`` tries each in a module of their own;
this package re-exports the public names, as ``trl`` does for its trainers.
"""

from puppeteer.train.reinforce.baselines import BASELINES
from puppeteer.train.reinforce.checkpoint import (
    ResumeMismatch,
    TrainingStopped,
    TrainState,
    check_resume,
    run_fingerprint,
)
from puppeteer.train.reinforce.config import ReinforceConfig
from puppeteer.train.reinforce.groups import first_actions, second_actions
from puppeteer.train.reinforce.losses import entropy_coef
from puppeteer.train.reinforce.trainer import ROUNDED_UP, check_lam_conditioning, check_training, train
from puppeteer.train.reinforce.validation import evaluate, evaluate_over, top_share

__all__ = [
    "BASELINES",
    "ROUNDED_UP",
    "ReinforceConfig",
    "ResumeMismatch",
    "TrainState",
    "TrainingStopped",
    "check_lam_conditioning",
    "check_resume",
    "check_training",
    "entropy_coef",
    "evaluate",
    "evaluate_over",
    "first_actions",
    "run_fingerprint",
    "second_actions",
    "top_share",
    "train",
]
