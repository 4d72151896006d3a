"""``SuiteSpec``: the typed form of one ``envs/<name>.yaml`` suite declaration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from puppeteer.tasks.packages import DataPackage
from puppeteer.utils.resources import available, find_yaml

_KEYS = frozenset(
    {
        "name",
        "order_name",
        "description",
        "loader",
        "grader",
        "domain",
        "package",
        "module",
        "no_deps",
        "splits",
        "seed",
        "options",
        "components",
        "stratify",
    }
)
MIX_SPLITS: tuple[str, ...] = ("train", "validation", "test")


@dataclass(frozen=True)
class Component:
    """One suite inside a mix and its share of the items."""

    suite: str
    weight: float


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    loader: str
    grader: str
    domain: str
    splits: Mapping[str, float | int]
    seed: int = 0
    package: DataPackage | None = None
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    components: tuple[Component, ...] = ()
    stratify: str | None = None
    description: str = ""
    path: Path | None = None
    order_name: str | None = None  # the name its seeded orders hash (a renamed suite keeps its items)

    @property
    def is_mix(self) -> bool:
        return bool(self.components)

    @property
    def order_key(self) -> str:
        """What the suite's seeded splits and orders hash: ``order_name``, else ``name``."""
        return self.order_name or self.name


def _splits(raw: object, where: str) -> dict[str, float | int]:
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"{where}: 'splits' must be a non-empty mapping of split name -> fraction or count")
    out: dict[str, float | int] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(
                f"{where}: split {key!r} must be a non-negative fraction or count, got {value!r}"
            )
        out[str(key)] = value
    kinds = {isinstance(v, int) for v in out.values()}
    if len(kinds) > 1:
        raise ValueError(f"{where}: give all splits as fractions (0.7) or all as counts (700), not both")
    if kinds == {False} and sum(out.values()) > 1.0 + 1e-9:
        raise ValueError(f"{where}: split fractions add up to {sum(out.values())} > 1")
    return out


def _components(raw: object, where: str) -> tuple[Component, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: 'components' must be a list of {{suite, weight}}")
    comps = []
    for item in raw:
        if not isinstance(item, Mapping) or "suite" not in item:
            raise ValueError(f"{where}: every component needs a 'suite' (got {item!r})")
        weight = float(item.get("weight", 1.0))
        if weight <= 0:
            raise ValueError(f"{where}: component {item['suite']!r} has a non-positive weight")
        comps.append(Component(str(item["suite"]), weight))
    total = sum(c.weight for c in comps)
    return tuple(Component(c.suite, c.weight / total) for c in comps)


def parse_spec(data: Mapping[str, Any], path: Path | None = None) -> SuiteSpec:
    """Validate a suite mapping (as read from YAML)."""
    where = str(path) if path else str(data.get("name", "suite"))
    unknown = set(data) - _KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    is_mix = data.get("loader") == "mix"
    for key in ("name", "loader") if is_mix else ("name", "loader", "grader"):
        if not data.get(key):
            raise ValueError(f"{where}: missing required key {key!r}")
    package = None
    if data.get("package"):
        package = DataPackage(
            str(data["package"]), str(data.get("module", "")), bool(data.get("no_deps", False))
        )
    name = str(data["name"])
    components = _components(data.get("components"), where)
    if is_mix and not components:
        raise ValueError(f"{where}: loader 'mix' needs 'components'")
    raw_splits = data.get("splits", list(MIX_SPLITS) if is_mix else None)
    if is_mix and isinstance(raw_splits, list):  # a mix only names its splits; sizes come from components
        raw_splits = dict.fromkeys(map(str, raw_splits), 0)
    return SuiteSpec(
        name=name,
        loader=str(data["loader"]),
        grader=str(data.get("grader") or "mixed"),
        domain=str(data.get("domain") or name),
        splits=MappingProxyType(_splits(raw_splits, where)),
        seed=int(data.get("seed", 0)),
        package=package,
        options=MappingProxyType(dict(data.get("options") or {})),
        components=components,
        stratify=str(data["stratify"]) if data.get("stratify") else None,
        description=str(data.get("description", "")),
        path=path,
        order_name=str(data["order_name"]) if data.get("order_name") else None,
    )


def read_spec(name: str) -> SuiteSpec:
    """Read ``envs/<name>.yaml`` (or a YAML path)."""
    path = find_yaml("envs", name)
    with path.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, Mapping) or "loader" not in data:
        raise ValueError(f"{path} is not a suite declaration (no 'loader' key)")
    spec = parse_spec(data, path)
    if path.stem != spec.name and path.parent.name == "envs":
        raise ValueError(f"{path}: file name and 'name: {spec.name}' differ")
    return spec


def suite_names() -> tuple[str, ...]:
    """Stems of the YAML files in envs/ that declare a suite."""
    names = []
    for stem in available("envs"):
        with find_yaml("envs", stem).open(encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
        if isinstance(data, Mapping) and "loader" in data:
            names.append(stem)
    return tuple(names)
