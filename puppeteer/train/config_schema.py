"""Hydra config groups for ``puppeteer train``, derived from the declarative files.

``suite/<name>`` for every suite in ``envs/`` and ``pool/<name>`` for every pool in ``agents/``
are registered in Hydra's ConfigStore at start-up, so every shipped (or added) suite and pool
is usable as ``suite=<name>`` / ``pool=<name>`` without a copy under ``configs/``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

from puppeteer.resources import available

log = logging.getLogger(__name__)

@dataclass
class SuiteConfig:
    """A suite (``envs/<name>.yaml``) and how many items of each split a job uses.

    ``n_*`` are upper bounds: a split that holds fewer items is used whole (with a log line);
    ``None`` is the whole split.
    """

    name: str = "arith"
    train_split: str = "train"
    val_split: str = "validation"
    eval_split: str = "test"
    n_train: Optional[int] = None  # noqa: UP045 (OmegaConf reads typing.Optional on Python 3.10)
    n_val: Optional[int] = 50  # noqa: UP045
    n_eval: Optional[int] = 200  # noqa: UP045


@dataclass
class PoolConfig:
    """An agent pool (``agents/<name>.yaml``)."""

    name: str = "sim-paper"


def register_configs() -> None:
    """Store one ``suite/``, ``pool/`` node per declarative file (idempotent)."""
    from hydra.core.config_store import ConfigStore

    from puppeteer.tasks.spec import suite_names

    store = ConfigStore.instance()
    for name in suite_names():
        store.store(group="suite", name=name, node=SuiteConfig(name=name))
    for name in available("agents"):
        store.store(group="pool", name=name, node=PoolConfig(name=name))


def fit_to_split(suite: str, split: str, n: int | None) -> int | None:
    """``n`` capped at the number of items in ``suite``/``split`` (``None``: the whole split)."""
    if n is None:
        return None
    from puppeteer.tasks import split_sizes

    size = split_sizes(suite).get(split)
    if size is not None and n > size:
        log.warning("suite %s split %s holds %d items: using all of them (asked for %d)",
                    suite, split, size, n)
        return size
    return n
