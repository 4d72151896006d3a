"""The file of a saved step-wise policy (``DIR/policy.json``), its shape and values checked before any
layer is built: a file that someone else wrote may ask for a scorer of billions of weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from puppeteer.envs.encoders import ENCODERS, check_options
from puppeteer.policies.puppeteer_config import without_removed


def read_policy_file(path: Path, config_cls: type[Any]) -> dict[str, Any]:
    """``policy.json`` of a saved policy, its shape checked: ``ValueError`` naming the file and field.

    The values themselves are checked by building ``config_cls`` (the policy's ``PolicyConfig``, whose
    bounds hold), the way :meth:`PuppeteerPolicy.load` reads them (``layers`` absent: ``tanh``).
    A setting the library no longer has is dropped at its off value (the returned ``config`` lacks
    it) and refused otherwise (:class:`~puppeteer.policies.puppeteer_config.RemovedSetting`).
    """
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read it ({e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise ValueError(f"{path}: not a saved policy (an object with a 'config' object)")
    agents = meta.get("agents")
    if not isinstance(agents, list) or not all(isinstance(a, str) for a in agents):
        raise ValueError(f"{path}: 'agents' must be a list of agent names")
    meta["config"] = without_removed(meta["config"], str(path))
    known = set(config_cls.__dataclass_fields__)
    unknown = sorted(set(meta["config"]) - known)
    if unknown:
        raise ValueError(
            f"{path}: config.{unknown[0]} is not a policy setting; known: {', '.join(sorted(known))}"
        )
    encoder = meta["config"].get("encoder", config_cls.encoder)
    if not isinstance(encoder, str) or encoder not in ENCODERS:
        raise ValueError(f"{path}: config.encoder {encoder!r:.40} is not one of {', '.join(ENCODERS)}")
    options = meta["config"].get("encoder_options", ())
    if not isinstance(options, list | tuple) or not all(
        isinstance(x, list | tuple) and len(x) == 2 and isinstance(x[0], str) for x in options
    ):
        raise ValueError(f"{path}: config.encoder_options must be a list of [name, value] pairs")
    try:
        check_options(encoder, dict(tuple(x) for x in options))
        config_cls(
            **{"layers": "tanh", **meta["config"], "encoder_options": tuple(tuple(x) for x in options)}
        )
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None
    return meta
