"""Suites: fixed, seeded train/validation/test splits of the items a loader provides.

Splits are decided by hashing each item's stable id with the suite's ``seed`` (sha256),
so they are identical on every machine and Python version. A YAML ``stratify: subject``
applies the cut within each group. ``load_suite(..., n, seed)`` takes the first ``n``
items of a seeded order of the split (proportionally interleaved across groups when
stratified), so ``load_suite(s, n=k)`` is always a prefix of ``load_suite(s)``.

Mixes (``loader: mix``) draw from their component suites' same split in fixed
proportions; each item keeps its component's id and ``domain``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from puppeteer.tasks.loaders import ItemSource, Loader, default_loaders
from puppeteer.tasks.spec import SuiteSpec, read_spec, suite_names
from puppeteer.types import Task

ALL = "all"


def _key(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()


def _cut_sizes(n: int, splits: Mapping[str, float | int]) -> dict[str, int]:
    """Item count of each split: integer counts as given, fractions rounded at cumulative boundaries."""
    if all(isinstance(v, int) for v in splits.values()):
        sizes = {k: int(v) for k, v in splits.items()}
        if sum(sizes.values()) > n:
            raise ValueError(f"split counts {sizes} need {sum(sizes.values())} items, the suite has {n}")
        return sizes
    sizes, cumulative, start = {}, 0.0, 0
    for name, fraction in splits.items():
        cumulative += float(fraction)
        end = min(n, round(cumulative * n))
        sizes[name] = end - start
        start = end
    return sizes


def split_positions(spec: SuiteSpec, source: ItemSource) -> dict[str, tuple[int, ...]]:
    """Split name -> positions (indices into ``source``) of its items, in hash order."""
    if source.splits is not None:  # the data names each item's split
        return {name: tuple(source.splits.get(name, ())) for name in spec.splits}
    groups: dict[str, list[int]] = defaultdict(list)
    labels = source.groups if spec.stratify and source.groups is not None else None
    if labels and all(isinstance(v, int) for v in spec.splits.values()):
        raise ValueError(f"suite {spec.name!r}: stratified splits must be fractions")
    for i in range(len(source)):
        groups[labels[i] if labels else ""].append(i)
    out: dict[str, list[int]] = {name: [] for name in spec.splits}
    for label in sorted(groups):
        members = sorted(groups[label], key=lambda i: _key(spec.seed, spec.order_key, source.ids[i]))
        start = 0
        for name, size in _cut_sizes(len(members), spec.splits).items():
            out[name].extend(members[start : start + size])
            start += size
    return {name: tuple(pos) for name, pos in out.items()}


def _ordered(
    spec: SuiteSpec, source: ItemSource, positions: Sequence[int], split: str, seed: int
) -> list[int]:
    """The positions in the seeded order used for first-n sampling."""

    def h(i: int) -> bytes:
        return _key(seed, spec.order_key, split, source.ids[i])

    labels = source.groups if spec.stratify and source.groups is not None else None
    if not labels:
        return sorted(positions, key=h)
    by_group: dict[str, list[int]] = defaultdict(list)
    for i in positions:
        by_group[labels[i]].append(i)
    keyed = []
    for members in by_group.values():
        members.sort(key=h)
        keyed += [((rank + 0.5) / len(members), h(i), i) for rank, i in enumerate(members)]
    return [i for _, _, i in sorted(keyed)]


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Largest-remainder split of ``total`` by ``weights`` (which sum to 1)."""
    raw = [total * w for w in weights]
    counts = [math.floor(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: (counts[i] - raw[i], i))[: total - sum(counts)]:
        counts[i] += 1
    return counts


class SuiteLibrary:
    """Loads suites declared in ``envs/`` with a loader registry (replaceable for custom loaders).

    A library keeps what it has read (specs and item sources), so one instance answers
    repeated or mixed requests without re-reading data files; a new instance starts fresh.
    """

    def __init__(self, loaders: Mapping[str, Loader] | None = None) -> None:
        self.loaders: Mapping[str, Loader] = loaders if loaders is not None else default_loaders()
        self._specs: dict[str, SuiteSpec] = {}
        self._sources: dict[str, ItemSource] = {}

    def spec(self, name: str) -> SuiteSpec:
        if name not in self._specs:
            self._specs[name] = read_spec(name)
        return self._specs[name]

    def source(self, spec: SuiteSpec) -> ItemSource:
        if spec.name not in self._sources:
            self._sources[spec.name] = self._read(spec)
        return self._sources[spec.name]

    def _read(self, spec: SuiteSpec) -> ItemSource:
        try:
            loader = self.loaders[spec.loader]
        except KeyError:
            known = ", ".join(sorted([*self.loaders, "mix"]))
            raise ValueError(f"suite {spec.name!r}: unknown loader {spec.loader!r}; known: {known}") from None
        return loader(spec)

    def split_sizes(self, name: str) -> dict[str, int]:
        spec = self.spec(name)
        if spec.is_mix:
            return {split: self._mix_capacity(spec, split) for split in spec.splits}
        return {k: len(v) for k, v in split_positions(spec, self.source(spec)).items()}

    def load(
        self, name: str, split: str = "test", *, n: int | None = None, seed: int = 0
    ) -> tuple[Task, ...]:
        spec = self.spec(name)
        if n is not None and n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if split != ALL and split not in spec.splits:
            raise ValueError(
                f"suite {name!r} has no split {split!r}; splits: {', '.join(spec.splits)}, {ALL}"
            )
        if spec.is_mix:
            return self._load_mix(spec, split, n, seed)
        source = self.source(spec)
        if split == ALL:
            positions: Sequence[int] = range(len(source))
        else:
            positions = split_positions(spec, source)[split]
        order = _ordered(spec, source, positions, split, seed)
        return tuple(source.make(i) for i in (order if n is None else order[:n]))

    def _component_sizes(self, spec: SuiteSpec, split: str) -> list[int]:
        sizes = []
        for comp in spec.components:
            per_split = self.split_sizes(comp.suite)
            sizes.append(sum(per_split.values()) if split == ALL else per_split[split])
        return sizes

    def _mix_capacity(self, spec: SuiteSpec, split: str) -> int:
        sizes = self._component_sizes(spec, split)
        cap = min(math.floor(size / c.weight + 1e-9) for size, c in zip(sizes, spec.components, strict=True))
        if "size" in spec.options:
            cap = min(cap, int(spec.options["size"]))
        while cap > 0 and any(
            q > s for q, s in zip(_apportion(cap, [c.weight for c in spec.components]), sizes, strict=True)
        ):
            cap -= 1
        return cap

    def _load_mix(self, spec: SuiteSpec, split: str, n: int | None, seed: int) -> tuple[Task, ...]:
        capacity = self._mix_capacity(spec, split)
        total = capacity if n is None else n
        if total > capacity:
            raise ValueError(
                f"mix {spec.name!r} split {split!r} can hold at most {capacity} items in its proportions "
                f"(components: {', '.join(f'{c.suite} {c.weight:.2f}' for c in spec.components)}); "
                f"asked for {n}"
            )
        quotas = _apportion(total, [c.weight for c in spec.components])
        tasks = []
        for comp, quota in zip(spec.components, quotas, strict=True):
            tasks += [
                dataclasses.replace(t, suite=spec.name)
                for t in self.load(comp.suite, split, n=quota, seed=seed)
            ]
        return tuple(sorted(tasks, key=lambda t: _key(seed, spec.order_key, split, t.id)))


def available_suites() -> tuple[str, ...]:
    """Names of the suites declared in envs/ (whether or not their data package is installed)."""
    return suite_names()


def suite_spec(name: str) -> SuiteSpec:
    return read_spec(name)


def load_suite(name: str, split: str = "test", *, n: int | None = None, seed: int = 0) -> tuple[Task, ...]:
    """The tasks of one split (``train``, ``validation``, ``test`` or ``all``) of a suite.

    ``n`` takes the first ``n`` of a ``seed``-ed order of that split (deterministic).
    Raises :class:`~puppeteer.tasks.packages.MissingDataPackage` when the data package is absent.
    """
    return SuiteLibrary().load(name, split, n=n, seed=seed)


def split_sizes(name: str) -> dict[str, int]:
    """Number of items in each split of a suite (for a mix: the most it can hold per split)."""
    return SuiteLibrary().split_sizes(name)
