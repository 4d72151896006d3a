"""Typed Hydra configs for ``puppeteer train``, and config groups derived from the declarative files.

* ``suite/<name>`` for every suite in ``envs/`` and ``pool/<name>`` for every pool in ``agents/``
  are registered in Hydra's ConfigStore at start-up, so every shipped (or added) suite and pool
  is usable as ``suite=<name>`` / ``pool=<name>`` without a copy under ``configs/``.
* ``train_schema`` (first in ``configs/train.yaml``'s defaults) types every key: ``lam=abc`` fails
  when the config is composed. The trainer's node is derived from
  :class:`~puppeteer.train.reinforce.ReinforceConfig`, so a new trainer field is typed too.
* :func:`check_overrides` composes the config before the run (each sweep value once in a
  multirun) and turns a composition error into a one-line message; :func:`job_dirname` names
  multirun sub-directories (job number plus the overrides, cut and ended with a hash when long:
  many overrides no longer hit "File name too long").
* :func:`file_overrides` lets ``pool=PATH.yaml`` and ``suite=PATH.yaml`` name a user's own file, as
  ``puppeteer eval --pool PATH`` does: a Hydra group option cannot be a path, so such an override
  becomes ``pool.name=PATH`` (the loader takes a name or a path).

The schema classes are mutable dataclasses because OmegaConf merges overrides into them;
the values live in ``configs/*.yaml``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from puppeteer.envs.env import EnvConfig
from puppeteer.errors import UserError
from puppeteer.policies.puppeteer_config import REMOVED_SETTINGS, removed_message
from puppeteer.train.reinforce import ReinforceConfig
from puppeteer.utils.resources import available

log = logging.getLogger(__name__)

SCHEMA_NAME = "train_schema"
DIRNAME_RESOLVER = "pp_dirname"
_PRIMITIVES = (int, float, str, bool)
_MAX_DIRNAME = 80


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
    n_train: int | None = None
    n_val: int | None = 50
    n_eval: int | None = 200


@dataclass
class PoolConfig:
    """An agent pool (``agents/<name>.yaml``), or only some of its agents (``pool.agents=[a,b]``)."""

    name: str = "sim-paper"
    agents: list[str] | None = None  # train and evaluate on these agents only (their order); None: all
    # backend options merged over the pool file's, per backend: pool.options={sim:{repeat_corr:1.0}}
    options: Any = None


@dataclass
class PolicyNode:
    """The puppeteer policy's network (``max_steps``/``min_steps``/``seed`` come from the top level)."""

    encoder: str = "minilm"
    encoder_options: dict[str, Any] = field(default_factory=dict)
    state_encoder: str = "hashing"  # the transcript's encoder: hashing (fast: new text every step) | same
    hidden: int = 128
    signals: bool = False  # read obs["signals"] (answered / whole number / agreement): learns cascades
    surface: bool = False  # read the question's length and number count (puppeteer.envs.surface)
    task_dims: int | None = 8  # read the question on its k principal directions among training tasks
    by_kind: bool = False  # read the question only as its kind, classified (needs task_dims: null)
    cards: bool = False  # read each agent's measured card (agents/<pool>.cards.json): scores unseen agents
    cards_linear: bool = False  # with cards: the agent only through its card's price and domain accuracy
    cards_text: bool = True  # with cards: the agent's text beside its card (false: the agent is its card)
    step_heads: bool = False  # a second scorer (own weights) for every decision after the first (no cards)
    one_call_first: bool = False  # with step_heads: the first scorer laid out as a one-call router's
    later_inputs: str = (
        "all"  # with step_heads, what the decisions after a call read: all | question | signals
    )


@dataclass
class WandbConfig:
    enabled: bool = True
    project: str = "puppeteer"
    mode: str | None = "offline"


def _node_type(hint: Any) -> Any:
    """``hint`` when OmegaConf can check it (a primitive or an optional primitive), else ``Any``."""
    if hint in _PRIMITIVES:
        return hint
    args = typing.get_args(hint)
    if type(None) in args and len(args) == 2:
        inner = next(a for a in args if a is not type(None))
        if inner in _PRIMITIVES:
            return inner | None
    return Any


def mutable_schema(
    cls: type, name: str, exclude: Sequence[str] = (), only: Sequence[str] | None = None
) -> type:
    """A mutable dataclass with ``cls``'s fields (``only`` these, none of ``exclude``), checkable
    types and defaults (for OmegaConf)."""
    hints = typing.get_type_hints(cls)
    spec: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(cls):
        if f.name in exclude or (only is not None and f.name not in only):
            continue
        if f.default is not dataclasses.MISSING:
            default = field(default=f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = field(default_factory=f.default_factory)
        else:
            default = field(default=None)
        spec.append((f.name, _node_type(hints[f.name]), default))
    return dataclasses.make_dataclass(name, spec)


# the seed is the job's top-level ``seed``
TrainerNode = mutable_schema(ReinforceConfig, "TrainerNode", exclude=("seed",))
# the environment's settings that a training job sets at the top level
ENV_KEYS = (
    "lam",
    "gamma",
    "phi",
    "max_steps",
    "min_steps",
    "cost_model",
    "temperature",
    "samples_per_item",
    "aggregate",  # the final answer: vote (default) | last (puppeteer.envs.aggregate)
    "lam_range",  # [low, high]: one policy for every lambda in the range (puppeteer.envs.lam_range)
)
EnvNode = mutable_schema(EnvConfig, "EnvNode", only=ENV_KEYS)


@dataclass
class TrainConfig(EnvNode):  # type: ignore[misc,valid-type]
    """Every key of ``configs/train.yaml`` with its type (values: the YAML files)."""

    suite: SuiteConfig = field(default_factory=SuiteConfig)
    pool: PoolConfig = field(default_factory=PoolConfig)
    policy: PolicyNode = field(default_factory=PolicyNode)
    trainer: Any = field(default_factory=TrainerNode)
    k_available: int | None = None  # random k-of-n agent subsets in the training env (None: all)
    holdout_subsets: Any = None  # k-of-n subsets (agent ids) never drawn in training
    cache: str | None = None
    seed: int = 0
    out: str | None = None
    progress: bool = True
    wandb: WandbConfig = field(default_factory=WandbConfig)


def register_configs() -> None:
    """Store the schema and one ``suite/``, ``pool/`` node per declarative file (idempotent)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from puppeteer.tasks.spec import suite_names

    store = ConfigStore.instance()
    store.store(name=SCHEMA_NAME, node=TrainConfig)
    for name in suite_names():
        store.store(group="suite", name=name, node=SuiteConfig(name=name))
    for name in available("agents"):
        store.store(group="pool", name=name, node=PoolConfig(name=name))
    OmegaConf.register_new_resolver(DIRNAME_RESOLVER, job_dirname, replace=True)


def job_dirname(num: Any, overrides: Any = "") -> str:
    """``<job number>_<overrides>`` as one safe path component; long override lists are cut and
    end in a short hash of the whole list, so names stay unique and below file-name limits."""
    text = re.sub(r"[^A-Za-z0-9=,._+-]+", "_", str(overrides or "")).strip("_")
    if len(text) > _MAX_DIRNAME:
        digest = hashlib.sha1(str(overrides).encode()).hexdigest()[:8]
        text = f"{text[: _MAX_DIRNAME - 9]}-{digest}"
    return f"{num}_{text}" if text else str(num)


def check_overrides(config_dir: str, config_name: str, overrides: Sequence[str]) -> str | None:
    """Compose the config as the run (or each value of a sweep) would; ``None`` or a one-line error.

    ``-m``/``--multirun`` sweeps are checked value by value (``lam=0,abc`` fails on ``abc``); other
    flags (``--cfg``, ``--info``, ``--help``...) are Hydra's business and skip the check.
    """
    args = [o for o in overrides if o not in ("-m", "--multirun")]
    for item in args:
        key = item.partition("=")[0].lstrip("+~")
        if key.startswith("policy.") and key[len("policy.") :] in REMOVED_SETTINGS:
            return removed_message(key)
    if any(o.startswith("-") for o in args):
        return None
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    try:
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            for run in single_runs(args):
                compose(config_name=config_name, overrides=run)
    except Exception as e:  # any composition error becomes the message
        return _one_line(e)
    finally:
        GlobalHydra.instance().clear()
    return None


# the config groups whose node names a declarative file, and the key that holds the name
FILE_GROUPS = {"pool": "pool.name", "suite": "suite.name"}
_YAML = (".yaml", ".yml")


def _is_path(value: str) -> bool:
    value = value.strip().strip("'\"")
    return value.endswith(_YAML) or "/" in value or "\\" in value


def file_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` with ``pool=PATH`` / ``suite=PATH`` (a YAML file of the user's) as ``pool.name=PATH``
    / ``suite.name=PATH``; a sweep (``pool=sim-paper,my.yaml``) is rewritten when any value is a path
    (names work there too). A path to no file is a :class:`UserError` before any run directory exists.
    Everything else, Hydra's flags included, is left as it is."""
    out: list[str] = []
    for item in overrides:
        key, sep, value = item.partition("=")
        values = value.split(",")
        if sep and key in FILE_GROUPS and "(" not in value and any(map(_is_path, values)):
            missing = [v for v in values if _is_path(v) and not Path(v.strip().strip("'\"")).is_file()]
            if missing:
                raise UserError(f"{key}={missing[0]}: no such file")
            item = f"{FILE_GROUPS[key]}={value}"
        out.append(item)
    return out


def single_runs(overrides: Sequence[str]) -> list[list[str]]:
    """Override lists without sweeps that together use every value of every sweep once.

    The first run takes each sweep's first value; each further run changes one sweep to another
    value. Sweeps that cannot be listed (``glob(...)``) and unparsable text are left for Hydra.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # unparsable: composing reports it
        return [list(overrides)]
    fixed: list[str] = []
    sweeps: list[list[str]] = []
    for text, override in zip(overrides, parsed, strict=True):
        if not override.is_sweep_override():
            fixed.append(text)
            continue
        try:
            values = [f"{override.get_key_element()}={v}" for v in override.sweep_string_iterator()]
        except Exception:  # a sweep Hydra expands itself
            continue
        if values:
            sweeps.append(values)
    first = [values[0] for values in sweeps]
    runs = [[*fixed, *first]]
    for i, values in enumerate(sweeps):
        runs += [[*fixed, *first[:i], value, *first[i + 1 :]] for value in values[1:]]
    return runs


def _one_line(error: BaseException) -> str:
    """The first line of the error and of its cause, plus OmegaConf's ``full_key`` if it has one."""
    parts: list[str] = []
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        first = str(e).strip().splitlines()[0].strip().rstrip(".:") if str(e).strip() else type(e).__name__
        if first not in parts:
            parts.append(first)
        e = e.__cause__
    key = getattr(error.__cause__, "full_key", None) or getattr(error, "full_key", None)
    text = ": ".join(parts)
    return f"{text} (key: {key})" if key and str(key) not in text else text


def fit_to_split(suite: str, split: str, n: int | None) -> int | None:
    """``n`` capped at the number of items in ``suite``/``split`` (``None``: the whole split)."""
    if n is None:
        return None
    from puppeteer.tasks import split_sizes

    size = split_sizes(suite).get(split)
    if size is not None and n > size:
        log.warning(
            "suite %s split %s holds %d items: using all of them (asked for %d)", suite, split, size, n
        )
        return size
    return n
