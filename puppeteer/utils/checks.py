"""Value checks for user-facing settings, with messages that say what is wrong and where."""

from __future__ import annotations

import math
from numbers import Real


def number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float within the bounds, else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, Real | str):
        raise ValueError(f"{name}={value!r}: must be a number")
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: must be a number") from None
    if not math.isfinite(x):
        raise ValueError(f"{name}={value!r}: must be finite")
    if low is not None and (x <= low if low_open else x < low):
        raise ValueError(f"{name}={value!r}: must be {'>' if low_open else '>='} {low:g}")
    if high is not None and (x >= high if high_open else x > high):
        raise ValueError(f"{name}={value!r}: must be {'<' if high_open else '<='} {high:g}")
    return x


def integer(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int (no bools, no fractions) in ``[low, high]``, else ``ValueError`` naming it."""
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r}: must be an integer")
    try:
        x = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r}: must be an integer") from None
    if isinstance(value, float) and value != x:
        raise ValueError(f"{name}={value!r}: must be an integer")
    if low is not None and x < low:
        raise ValueError(f"{name}={value!r}: must be >= {low}")
    if high is not None and x > high:
        raise ValueError(f"{name}={value!r}: must be <= {high}")
    return x


def check_env_settings(
    *,
    lam: object,
    gamma: object,
    phi: object,
    workflow_lam: object,
    temperature: object,
    samples_per_item: object,
) -> None:
    """The numeric settings of ``ConductorEnv``: costs >= 0, gamma in (0, 1], phi > 0, all finite."""
    number("lam", lam, low=0.0)
    number("gamma", gamma, low=0.0, high=1.0, low_open=True)
    if phi is not None:
        number("phi", phi, low=0.0, low_open=True)
    number("workflow_lam", workflow_lam, low=0.0)
    number("temperature", temperature, low=0.0)
    if samples_per_item is not None:
        integer("samples_per_item", samples_per_item, low=1)
