"""A faster ``__init__`` for the frozen dataclasses that every env step builds.

``@dataclass(frozen=True)`` writes each field through ``object.__setattr__`` (on CPython 3.11 about
a tenth of a microsecond a field, the same again for the global and attribute lookups); a simulated
env step builds half a dozen such records (request, completion, step, trajectory so far), so their
constructors alone were a tenth of a step. :func:`fast_init` gives a frozen dataclass an
``__init__`` that fills the instance's ``__dict__`` directly, with the same signature, defaults,
default factories and ``__post_init__``. Everything else (immutability, equality, hashing, repr,
``dataclasses.replace``) stays the dataclass's own. ``tests/utils/test_fastinit.py`` checks that each
decorated class builds what the dataclass's own ``__init__`` built.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_NOTHING = object()  # a default-factory field left out of the call


def fast_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of the frozen dataclass ``cls`` (no slots, no ``InitVar``s)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"fast_init: {cls.__name__} is not a frozen dataclass")
    if "__slots__" in cls.__dict__:
        raise TypeError(f"fast_init: {cls.__name__} has slots (its instances have no __dict__)")
    namespace: dict[str, Any] = {"_NOTHING": _NOTHING}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            raise TypeError(f"fast_init: field {f.name!r} of {cls.__name__} is not an init field")
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            param = f"{f.name}=_default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            param = f"{f.name}=_NOTHING"
            body.append(f"    if {f.name} is _NOTHING: {f.name} = _factory_{f.name}()")
        else:
            param = f.name
        (keyword if f.kw_only else positional).append(param)
        body.append(f"    d[{f.name!r}] = {f.name}")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    lines = [f"def __init__({signature}):", "    d = self.__dict__", *body]
    if hasattr(cls, "__post_init__"):
        lines.append("    self.__post_init__()")
    exec("\n".join(lines), namespace)  # code made above from the class's own field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[misc]
    return cls


__all__ = ["fast_init"]
