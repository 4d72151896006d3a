"""Agent pools: load ``agents/<pool>.yaml`` into an ordered, immutable pool.

An agent's id is its position. The Terminator is a distinguished member of every
pool with id ``len(agents)``: in step mode choosing it ends the episode. Measured agent cards
(``<pool>.cards.json`` beside the YAML, :mod:`puppeteer.agents.cards`) are loaded with the pool.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import yaml

from puppeteer.agents.cards import CardError, PoolCards, cards_path
from puppeteer.agents.reasoning import CONTEXT_LAYOUTS, PATTERNS
from puppeteer.types import EMPTY, Agent, ModelSpec, Step
from puppeteer.utils.resources import find_yaml
from puppeteer.utils.yamlsafe import YamlLimitError, load_yaml

TERMINATOR_NAME = "terminator"
MAX_TOKENS_LIMIT = 1_000_000  # an agent's completion budget (the largest context windows)


class PoolError(ValueError):
    """A pool file is malformed."""


@dataclass(frozen=True)
class Pool:
    name: str
    agents: tuple[Agent, ...]
    description: str = ""
    backend_options: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: EMPTY)
    context_layout: str = "turns"  # how workers see earlier work: reasoning.CONTEXT_LAYOUTS
    # step mode: solvers (patterns that do not read context) see only the question, so each answers
    # independently (a cascade's or a vote's members; their calls replay a single agent's cache);
    # reviewers (verify, refine, ...) still see every earlier step
    independent_solvers: bool = False
    # a shipped outcome table (``puppeteer.backends.replay``): its calls are served without loading a model
    replay: Path | None = None
    # step mode offers only the calls the replay table holds after the steps so far
    # (:mod:`puppeteer.envs.recorded`): a table with second steps after some first agents only
    recorded_only: bool = False
    # measured agent cards (``<pool>.cards.json`` beside the YAML, :mod:`puppeteer.agents.cards`); None: none
    cards: PoolCards | None = None
    # agent name -> the model that answers live traffic for it (an agent's ``live:`` model in the YAML),
    # where the agent's own model replays logged outcomes (:meth:`live_pool`)
    live: Mapping[str, ModelSpec] = field(default_factory=lambda: EMPTY)

    def __len__(self) -> int:
        return len(self.agents)

    @property
    def terminator_id(self) -> int:
        return len(self.agents)

    @property
    def n_actions(self) -> int:
        return len(self.agents) + 1

    def agent(self, agent_id: int) -> Agent:
        if not 0 <= agent_id < len(self.agents):
            raise IndexError(
                f"agent id {agent_id} out of range 0..{len(self.agents) - 1} for pool {self.name!r}"
            )
        return self.agents[agent_id]

    @property
    def has_speeds(self) -> bool:
        """Whether every model declares its single-stream speed (``ModelSpec.model_seconds``)."""
        return all(a.model.has_speed for a in self.agents)

    def model_seconds(self, steps: Iterable[Step]) -> float | None:
        """Single-stream model seconds of these activations at the declared speeds (None without them)."""
        if not self.has_speeds:
            return None
        total = 0.0
        for s in steps:
            c = s.completion
            total += self.agent(s.agent_id).model.model_seconds(c.prompt_tokens, c.completion_tokens) or 0.0
        return total

    def reads_context(self, agent_id: int) -> bool:
        """Whether agent ``agent_id``'s pattern builds on earlier work (a reviewer, not a solver)."""
        known = PATTERNS.get(self.agent(agent_id).pattern)
        return bool(known and known.reads_context)

    def sees_earlier_work(self, agent_id: int) -> bool:
        """Whether agent ``agent_id`` is shown the episode's earlier steps in step mode."""
        return not self.independent_solvers or self.reads_context(agent_id)

    def index(self, name: str) -> int:
        for i, agent in enumerate(self.agents):
            if agent.name == name:
                return i
        if name == TERMINATOR_NAME:
            return self.terminator_id
        raise KeyError(
            f"no agent named {name!r} in pool {self.name!r}; known: {[a.name for a in self.agents]}"
        )

    def availability(self, unavailable: Sequence[int] = ()) -> np.ndarray:
        """Boolean mask over all actions (agents then the Terminator)."""
        mask = np.ones(self.n_actions, dtype=np.int8)
        for i in unavailable:
            if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < len(self.agents):
                raise PoolError(
                    f"unavailable agent {i!r} is not an agent id of pool {self.name!r} "
                    f"(0..{len(self.agents) - 1}; the Terminator cannot be made unavailable)"
                )
            mask[i] = 0
        mask[self.terminator_id] = 1
        return mask

    def subset(self, names: Sequence[str]) -> Pool:
        """A pool of the named agents only, in the given order (ids are positions in the subset)."""
        known = [a.name for a in self.agents]
        unknown = [n for n in names if n not in known]
        if unknown or not names or len(set(names)) != len(names):
            problem = f"unknown agents {unknown}" if unknown else f"needs distinct names, got {list(names)}"
            raise PoolError(f"subset of pool {self.name!r}: {problem}; known: {known}")
        agents = tuple(self.agent(self.index(n)) for n in names)
        return Pool(
            name=f"{self.name}[{','.join(names)}]",
            agents=agents,
            description=self.description,
            backend_options=self.backend_options,
            context_layout=self.context_layout,
            independent_solvers=self.independent_solvers,
            replay=self.replay,
            recorded_only=self.recorded_only,
            cards=self.cards,
            live=MappingProxyType({n: m for n, m in self.live.items() if n in names}),
        )

    def live_pool(self) -> Pool:
        """This pool with every agent's ``live:`` model in place of its own (same names, order and
        descriptions, so a router trained on the logged pool routes live traffic); every agent needs one."""
        missing = [a.name for a in self.agents if a.name not in self.live]
        if missing:
            raise PoolError(
                f"pool {self.name!r}: agents {missing} name no live: model to answer live traffic"
            )
        agents = tuple(replace(a, model=self.live[a.name]) for a in self.agents)
        return replace(self, agents=agents, replay=None, recorded_only=False, live=EMPTY)

    def backends(self) -> tuple[str, ...]:
        return tuple(sorted({a.model.backend for a in self.agents}))

    @property
    def needs_answer_key(self) -> bool:
        """Whether a backend of this pool must know its tasks' answers (the simulator): such a
        backend is built for one set of tasks and cannot be shared with runs on other items."""
        return "sim" in self.backends()


def _text(raw: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    """``raw[key]`` as a string: a YAML string (or a plain number, e.g. a version), never a list or map."""
    value = raw.get(key, default)
    if value is None:
        raise PoolError(f"{where} lacks field {key!r}")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PoolError(f"{where}: {key} must be a string, got {type(value).__name__}")
    return str(value)


def _number(
    raw: Mapping[str, Any], key: str, where: str, *, default: float | None = None, positive: bool = False
) -> float | None:
    """``raw[key]`` as a finite number, ``>= 0`` (``> 0`` when ``positive``); ``default`` if absent."""
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PoolError(f"{where}: {key} must be a number, got {value!r:.40}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise PoolError(f"{where}: {key} must be a finite number {bound}, got {value!r}")
    return number


def _mapping(raw: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PoolError(f"{where}: {key} must be a mapping, got {type(value).__name__}")
    return dict(value)


def _model(name: str, raw: Mapping[str, Any]) -> ModelSpec:
    where = f"model {name!r}"
    if not isinstance(raw, Mapping):
        raise PoolError(f"{where}: must be a mapping of fields, got {type(raw).__name__}")
    # 0: the size is not published (a closed model, a logged table); the flops cost model then prices 0
    params_b = _number(raw, "params_b", where)
    if params_b is None:
        raise PoolError(f"{where} lacks field 'params_b'")
    return ModelSpec(
        name=name,
        backend=_text(raw, "backend", where),
        target=_text(raw, "target", where, default=name),
        params_b=params_b,
        price_in=_number(raw, "price_in", where, default=0.0) or 0.0,
        price_out=_number(raw, "price_out", where, default=0.0) or 0.0,
        options=MappingProxyType(_mapping(raw, "options", where)),
        prefill_tps=_number(raw, "prefill_tps", where, positive=True),
        decode_tps=_number(raw, "decode_tps", where, positive=True),
    )


def _max_tokens(raw: Mapping[str, Any], where: str) -> int:
    value = raw.get("max_tokens", 512)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS_LIMIT:
        raise PoolError(
            f"{where}: max_tokens must be a whole number in 1..{MAX_TOKENS_LIMIT}, got {value!r:.40}"
        )
    return value


def _agent(i: int, a: Any, models: Mapping[str, ModelSpec]) -> Agent:
    if not isinstance(a, Mapping):
        raise PoolError(f"agent #{i}: must be a mapping of fields, got {type(a).__name__}")
    where = f"agent #{i}"
    name = _text(a, "name", where, default=f"agent{i}")
    where = f"agent #{i} ({name!r})"
    model_name = a.get("model")
    if not isinstance(model_name, str) or model_name not in models:
        raise PoolError(f"{where} uses unknown model {model_name!r:.60}")
    if name == TERMINATOR_NAME:
        raise PoolError(f"{TERMINATOR_NAME!r} is reserved")
    tools = a.get("tools") or ()
    if isinstance(tools, str | Mapping) or not all(isinstance(t, str) for t in tools):
        raise PoolError(f"{where}: tools must be a list of tool names")
    return Agent(
        name=name,
        model=models[model_name],
        pattern=_text(a, "pattern", where, default="cot"),
        tools=tuple(tools),
        description=_text(a, "description", where, default=""),
        max_tokens=_max_tokens(a, where),
    )


def pool_from_dict(raw: Mapping[str, Any], base: Path | None = None) -> Pool:
    """A pool from its parsed YAML; ``base`` is the folder that a relative ``replay:`` path starts from."""
    if not isinstance(raw, Mapping) or "agents" not in raw or "models" not in raw:
        raise PoolError("a pool needs 'models' and 'agents'")
    if not isinstance(raw["models"] or {}, Mapping) or not isinstance(raw["agents"] or [], list):
        raise PoolError("'models' must be a mapping of models and 'agents' a list of agents")
    models = {str(name): _model(str(name), spec) for name, spec in (raw["models"] or {}).items()}
    agents = [_agent(i, a, models) for i, a in enumerate(raw["agents"] or [])]
    live: dict[str, ModelSpec] = {}
    for agent, a in zip(agents, raw["agents"] or [], strict=True):
        if a.get("live") is not None:
            if a["live"] not in models:
                raise PoolError(f"agent {agent.name!r}: live model {a['live']!r} is not in 'models'")
            live[agent.name] = models[a["live"]]
    if not agents:
        raise PoolError("a pool needs at least one agent")
    names = [a.name for a in agents]
    if len(set(names)) != len(names):
        raise PoolError(f"agent names must be unique: {names}")
    options = {
        str(k): MappingProxyType(_mapping({"options": v}, "options", f"backend_options.{k}"))
        for k, v in _mapping(raw, "backend_options", "the pool").items()
    }
    layout = str(raw.get("context_layout", "turns"))
    if layout not in CONTEXT_LAYOUTS:
        raise PoolError(f"unknown context_layout {layout!r}; known: {', '.join(CONTEXT_LAYOUTS)}")
    independent = raw.get("independent_solvers", False)
    if not isinstance(independent, bool):
        raise PoolError(f"independent_solvers must be true or false, got {independent!r}")
    replay = raw.get("replay")
    if replay is not None and not isinstance(replay, str):
        raise PoolError(f"replay must be a folder name, got {replay!r}")
    recorded_only = raw.get("recorded_only", False)
    if not isinstance(recorded_only, bool):
        raise PoolError(f"recorded_only must be true or false, got {recorded_only!r}")
    if recorded_only and replay is None:
        raise PoolError("recorded_only offers the calls of the pool's replay table: it needs replay:")
    return Pool(
        name=_text(raw, "name", "the pool", default="pool"),
        agents=tuple(agents),
        description=_text(raw, "description", "the pool", default=""),
        backend_options=MappingProxyType(options),
        context_layout=layout,
        independent_solvers=independent,
        replay=(base or Path.cwd()) / replay if replay else None,
        recorded_only=recorded_only,
        live=MappingProxyType(live),
    )


def load_pool(name_or_path: str | Path) -> Pool:
    """Load a shipped pool by name (``local``, ``sim-paper``...) or any YAML file by path."""
    path = Path(name_or_path)
    if not (path.suffix in {".yaml", ".yml"} and path.exists()):
        path = find_yaml("agents", str(name_or_path))
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"), path)
    except YamlLimitError as e:
        raise PoolError(str(e)) from None
    except OSError as e:
        raise PoolError(f"{path}: cannot read it ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or type(e).__name__
        raise PoolError(f"{where}: not valid YAML ({problem})") from None
    except UnicodeDecodeError:
        raise PoolError(f"{path}: not a text (UTF-8) file") from None
    try:
        pool = pool_from_dict(raw, base=path.parent)
    except PoolError as e:
        raise PoolError(f"{path}: {e}") from None
    except (AttributeError, TypeError, ValueError) as e:
        raise PoolError(f"{path}: not a pool definition ({type(e).__name__}: {e})") from None
    card_file = cards_path(path)
    if not card_file.is_file():
        return pool
    try:
        return replace(pool, cards=PoolCards.load(card_file))
    except CardError as e:
        raise PoolError(str(e)) from None


def configured_pool(node: Mapping[str, Any]) -> Pool:
    """The pool a config's ``pool`` node names (``{name: ..., agents: [...]}``): the whole pool, or the
    subset ``agents`` when it lists some."""
    pool = load_pool(node["name"])
    agents = node.get("agents")
    return pool.subset(list(agents)) if agents else pool
