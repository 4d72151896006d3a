"""Locate the declarative data folders (agents/, envs/, configs/) in a wheel or a source checkout."""

from __future__ import annotations

from pathlib import Path

KINDS: tuple[str, ...] = ("agents", "envs", "configs")
_SUFFIXES: tuple[str, ...] = (".yaml", ".yml")


def data_dir(kind: str) -> Path:
    """The folder holding ``kind`` YAML files.

    A wheel install ships them as ``puppeteer/_data/<kind>`` (hatch force-include); an
    editable install reads the top-level ``<repo root>/<kind>`` folder of the checkout.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown data kind {kind!r}; expected one of {', '.join(KINDS)}")
    package_dir = Path(__file__).resolve().parents[1]  # puppeteer/ (this file is puppeteer/utils/)
    installed = package_dir / "_data" / kind
    if installed.is_dir():
        return installed
    return package_dir.parent / kind


def available(kind: str) -> tuple[str, ...]:
    """Names (file stems) of the YAML files of ``kind``, sorted."""
    folder = data_dir(kind)
    if not folder.is_dir():
        return ()
    return tuple(sorted({p.stem for p in folder.iterdir() if p.suffix in _SUFFIXES and p.is_file()}))


def find_yaml(kind: str, name: str) -> Path:
    """Path of ``<kind>/<name>.yaml``; ``name`` may also be a path to an existing YAML file."""
    direct = Path(name)
    if direct.suffix in _SUFFIXES and direct.is_file():
        return direct
    folder = data_dir(kind)
    for suffix in _SUFFIXES:
        candidate = folder / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
    names = ", ".join(available(kind)) or "(none)"
    raise FileNotFoundError(f"no {kind} file named {name!r} in {folder}; available: {names}")
