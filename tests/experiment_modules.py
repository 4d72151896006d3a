"""Import a module of a study (``experiments/<study>/``) or of ``benchmarks/``: neither is installed.

The module's folder goes on ``sys.path``, as it is when a runner beside it is started as a script, so
the module's imports of its sibling modules resolve the same way in tests.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _import_from(folder: Path, module: str) -> ModuleType:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module(module)


def experiment_module(study: str, module: str) -> ModuleType:
    """``experiments/<study>/<module>.py``, imported once."""
    return _import_from(ROOT / "experiments" / study, module)


def benchmark_module(module: str) -> ModuleType:
    """``benchmarks/<module>.py``, imported once."""
    return _import_from(ROOT / "benchmarks", module)
