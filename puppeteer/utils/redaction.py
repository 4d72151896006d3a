"""Keep credentials out of everything the project writes (configs, argv, run files, logs).

Keys belong in environment variables (``OPENAI_API_KEY``, a pool's ``api_key_env``...).
A value is treated as a secret when its name has a credential-like part (``api_key``,
``hf_token``, ``password``...) or the value itself looks like a known key format.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REDACTED = "<redacted>"
# a name part (between _ . - or the ends) that marks a credential; "key" only with a qualifier,
# so that settings like "sort_key" or "no_such_key" stay visible
_NAME = re.compile(
    r"(?:^|[_.\-/])(?:(?:api|access|secret|private|auth|openai|anthropic|hf|wandb)[_\-]?key|apikey|token"
    r"|secret|password|passwd|passphrase|credentials?)(?:$|[_.\-/])",
    re.IGNORECASE,
)
_VALUE = re.compile(
    r"\b(?:sk-[A-Za-z0-9_\-]+|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_\-]{30,})"
)
_OVERRIDE = re.compile(r"^(?P<prefix>[+~]{0,2})(?P<name>[A-Za-z0-9_.\-/@]+)=(?P<value>.*)$", re.DOTALL)


def is_secret_name(name: str) -> bool:
    return _NAME.search(str(name)) is not None


def looks_like_key(value: str) -> bool:
    return _VALUE.search(value) is not None


def redact(obj: Any, name: str = "") -> Any:
    """A copy of ``obj`` (mappings, lists, strings) with secrets replaced by ``<redacted>``."""
    if name and is_secret_name(name) and obj not in (None, ""):
        return REDACTED
    if isinstance(obj, Mapping):
        return {k: redact(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(redact(v) for v in obj)
    if isinstance(obj, str):
        return _VALUE.sub(REDACTED, obj)
    return obj


@dataclass(frozen=True)
class SplitOverrides:
    kept: tuple[str, ...]
    secrets: Mapping[str, str]  # environment variable name -> value


def split_secret_overrides(overrides: Sequence[str]) -> SplitOverrides:
    """Take credential overrides (``+openai_api_key=sk-...``) out of a Hydra override list.

    Each becomes an environment variable named after its last key component in upper case
    (``+openai_api_key=...`` -> ``OPENAI_API_KEY``), where litellm and the pools look for keys.
    """
    kept: list[str] = []
    secrets: dict[str, str] = {}
    for item in overrides:
        m = _OVERRIDE.match(item)
        if m is None or not (is_secret_name(m["name"]) or looks_like_key(m["value"])):
            kept.append(item)
            continue
        env_name = re.sub(r"[^A-Za-z0-9_]", "_", m["name"].split(".")[-1]).upper()
        secrets[env_name] = m["value"]
    return SplitOverrides(kept=tuple(kept), secrets=secrets)
