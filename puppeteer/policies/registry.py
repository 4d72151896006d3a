"""Policy specs -> policies: one registry for every kind, built-in or registered from outside.

A spec is ``KIND`` or ``KIND:ARG`` (``single:qwen1.5b-cot``, ``puppeteer:runs/x/best``,
``conductor:grpo:runs/grpo``). A kind may itself contain colons; the longest registered kind that
the spec starts with wins, so ``conductor:grpo`` takes ``conductor:grpo:RUN`` before ``conductor``.

A factory is ``factory(arg, pool, max_steps) -> object``; the object is a
:class:`~puppeteer.policies.protocol.Policy`, or a step or workflow policy that
:func:`~puppeteer.policies.protocol.as_policy` adapts. Like gymnasium's ``entry_point``, a factory
may be given as ``"module:function"``, imported on first use: the ``conductor:grpo`` kind lives with
the GRPO trainer (it needs torch and peft), and the core never imports it::

    from puppeteer.policies.registry import register_policy

    register_policy("always-first", lambda arg, pool, max_steps: MyStepPolicy(), "always-first   my policy")
    evaluate_policy("always-first", "sim-paper", "arith")
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from puppeteer.agents.pool import Pool
from puppeteer.policies.baselines import PARSERS, SPEC_FORMS, SpecError
from puppeteer.policies.protocol import Policy, as_policy
from puppeteer.policies.rules import RULE_KINDS, RULE_SPEC_FORMS

Factory = Callable[[str, Pool, int], Any]

GRPO_KIND = "conductor:grpo"
_BUILTIN_LAZY: Mapping[str, str] = {GRPO_KIND: "puppeteer.train.grpo.policy:grpo_conductor"}


@dataclass
class PolicyRegistry:
    """Kinds of policy and their factories (``"module:function"`` strings are imported on first use)."""

    factories: dict[str, Factory | str] = field(default_factory=dict)
    forms: list[str] = field(default_factory=list)  # the help text's lines, one or more per kind

    def register(self, kind: str, factory: Factory | str, form: str = "", *, replace: bool = False) -> None:
        """Add ``kind``; re-registering an existing kind needs ``replace=True``."""
        key = kind.strip().lower()
        if not key or key != kind.strip().lower().strip(":") or any(c.isspace() for c in key):
            raise ValueError(
                f"a policy kind is a non-empty word without spaces or outer colons, got {kind!r}"
            )
        if key in self.factories and not replace:
            raise ValueError(f"policy kind {key!r} is already registered (pass replace=True to override)")
        self.factories[key] = factory
        if form:
            self.forms.append(form)

    def kinds(self) -> tuple[str, ...]:
        return tuple(self.factories)

    def spec_forms(self) -> tuple[str, ...]:
        return tuple(self.forms)

    def _resolve(self, spec: str) -> tuple[str, str]:
        """``(kind, arg)``: the longest registered kind that ``spec`` starts with (at a colon)."""
        text = spec.strip()
        lowered = text.lower()
        for kind in sorted(self.factories, key=len, reverse=True):
            if lowered == kind or lowered.startswith(kind + ":"):
                return kind, text[len(kind) + 1 :] if len(text) > len(kind) else ""
        path = Path(text)
        if "/" in text or os.sep in text or path.exists():  # a run or policy folder given bare
            what = (
                "does not exist"
                if not path.exists()
                else "is a file"
                if not path.is_dir()
                else "is an empty folder"
                if not any(path.iterdir())
                else "is a folder"
            )
            raise SpecError(
                f"unknown policy spec {spec!r}: a path, and it {what}; a trained policy is "
                "puppeteer:DIR or sb3:DIR (`puppeteer eval --help` lists every form)"
            )
        raise SpecError(
            f"unknown policy spec {spec!r}; known kinds: {', '.join(sorted(self.factories))} "
            "(`puppeteer eval --help` lists every form)"
        )

    def _factory(self, kind: str) -> Factory:
        factory = self.factories[kind]
        if isinstance(factory, str):
            module, _, name = factory.partition(":")
            factory = getattr(importlib.import_module(module), name)
            self.factories[kind] = factory
        return factory

    def make(self, spec: str, pool: Pool, max_steps: int = 5) -> Any:
        """The object the spec's factory builds (a baseline, a step policy, a conductor...)."""
        kind, arg = self._resolve(spec)
        colon = len(spec.strip()) > len(kind)
        if colon and not arg.strip():  # "chain:" silently ran the default chain
            raise SpecError(
                f"policy spec {spec!r} has nothing after ':'; write {kind!r} alone for its default"
            )
        try:
            return self._factory(kind)(arg.strip(), pool, max_steps)
        except SpecError:
            raise
        except (KeyError, IndexError, ValueError) as e:
            raise SpecError(f"policy spec {spec!r}: {e.args[0] if e.args else e}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.factories)


def default_registry() -> PolicyRegistry:
    """The built-in kinds: the baselines, the trained puppeteer, SB3 models and the conductors."""
    registry = PolicyRegistry(forms=[*SPEC_FORMS, *RULE_SPEC_FORMS])  # the conductor:grpo line is among them
    for kind, parser in (*PARSERS.items(), *RULE_KINDS.items()):
        registry.register(kind, parser)
    for kind, target in _BUILTIN_LAZY.items():
        registry.register(kind, target)
    return registry


REGISTRY = default_registry()
"""What :func:`make_policy` and :func:`load_policy` read; add kinds with :func:`register_policy`."""


def register_policy(kind: str, factory: Factory | str, form: str = "", *, replace: bool = False) -> None:
    """Make ``kind`` (``KIND`` or ``KIND:ARG`` specs) known to every command and API that takes a spec."""
    REGISTRY.register(kind, factory, form, replace=replace)


def make_policy(spec: str, pool: Pool, max_steps: int = 5) -> Any:
    """The object a spec builds (see :data:`~puppeteer.policies.baselines.SPEC_FORMS`): a baseline, a
    step policy or a conductor, checked against ``pool`` now; ``max_steps`` bounds ``random`` and sets
    the Terminator rate of ``random-step``."""
    return REGISTRY.make(spec, pool, max_steps)


def load_policy(spec: str, pool: Pool, max_steps: int = 5) -> Policy:
    """The :class:`~puppeteer.policies.protocol.Policy` for a spec: what evaluation and serving run."""
    return as_policy(make_policy(spec, pool, max_steps))


__all__ = [
    "REGISTRY",
    "PolicyRegistry",
    "default_registry",
    "load_policy",
    "make_policy",
    "register_policy",
]
