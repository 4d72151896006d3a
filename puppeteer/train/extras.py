"""One-line errors for the optional packages a training setting needs, naming the extra that installs them."""

from __future__ import annotations

import importlib.util


def require(module: str, setting: str, extra: str) -> None:
    """Raise ImportError (the CLI prints it as one line) unless ``module`` is installed."""
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"{setting} needs {module}: pip install 'puppeteer-orchestra[{extra}]'")
