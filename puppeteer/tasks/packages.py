"""Data packages: find the installed files of a pip package without importing its code."""

from __future__ import annotations

import importlib
import importlib.util
import logging
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

EXTRA_HINT = "pip install 'puppeteer-orchestra[data]'"


class MissingDataPackage(ImportError):
    """A suite's data package is not installed; the message says how to install it."""


@dataclass(frozen=True)
class DataPackage:
    """A pip distribution that ships task data.

    ``requirement`` is ``dist==version``; ``module`` is the import name when it differs from
    the distribution name; ``no_deps`` marks packages that must be installed with
    ``--no-deps`` (their own pins clash with ours) and so are not part of the ``[data]`` extra.
    """

    requirement: str
    module: str = ""
    no_deps: bool = False

    @property
    def dist(self) -> str:
        return self.requirement.split("==", 1)[0].strip()

    @property
    def version(self) -> str | None:
        parts = self.requirement.split("==", 1)
        return parts[1].strip() if len(parts) == 2 else None

    @property
    def import_name(self) -> str:
        return self.module or self.dist.replace("-", "_").lower()

    def install_hint(self) -> str:
        pin = self.requirement
        if self.no_deps:
            return f"pip install --no-deps {pin}  (--no-deps: its own pins clash; not in the [data] extra)"
        return f"{EXTRA_HINT}  or  pip install {pin}"

    def missing(self, suite: str) -> MissingDataPackage:
        return MissingDataPackage(
            f"suite {suite!r} needs the data package {self.requirement} (import name "
            f"{self.import_name!r}), which is not installed. Install it with: {self.install_hint()}"
        )

    def root(self, suite: str = "?") -> Path:
        """The installed package folder; raises :class:`MissingDataPackage` when absent."""
        try:
            spec = importlib.util.find_spec(self.import_name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise self.missing(suite)
        if spec.submodule_search_locations:
            folder = Path(next(iter(spec.submodule_search_locations)))
        elif spec.origin:
            folder = Path(spec.origin).parent
        else:
            raise self.missing(suite)
        self._check_version()
        return folder

    def file(self, relative: str, suite: str = "?") -> Path:
        """A data file inside the installed package."""
        path = self.root(suite) / relative
        if not path.is_file():
            raise FileNotFoundError(
                f"suite {suite!r}: {relative!r} is not in the installed {self.dist} at {path.parent}; "
                f"is it version {self.version}? Reinstall with: {self.install_hint()}"
            )
        return path

    def _check_version(self) -> None:
        if self.version is None:
            return
        try:
            installed = metadata.version(self.dist)
        except metadata.PackageNotFoundError:
            return
        if installed != self.version:
            log.warning("%s %s is installed; suites are pinned to %s", self.dist, installed, self.version)


REASONING_GYM = DataPackage("reasoning-gym==0.1.25")


def import_rg(suite: str = "rg") -> ModuleType:
    """Import reasoning_gym (its code is the data source), with a clear error when it is missing."""
    REASONING_GYM.root(suite)
    return importlib.import_module("reasoning_gym")
