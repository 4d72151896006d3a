"""Import a study's module from ``experiments/<study>/`` (not installed: studies are not in the package).

The study's folder goes on ``sys.path``, as it is when its runner is started as a script, so the
module's imports of its sibling modules resolve the same way in tests.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def experiment_module(study: str, module: str) -> ModuleType:
    """``experiments/<study>/<module>.py``, imported once."""
    folder = str(EXPERIMENTS / study)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(module)
