"""``puppeteer outcomes import``: a checked table of logged outcomes as a pool, a suite and their table.

The output folder holds

- ``pool.yaml``: one agent per logged model, on the ``logged`` backend (the table answers for it; no
  model is called), ``replay: .`` naming the folder; an agent may also name a ``live:`` model of the
  pool (``--live MODEL=LITELLM_ID`` writes one on litellm; edit it for any backend, an embedded
  llama.cpp model included) that ``puppeteer serve --live`` calls for real traffic;
- ``suite.yaml``: the table's prompts in the table's own splits (``loader: logged``);
- ``logged.csv.gz``: the checked table (:mod:`puppeteer.outcomes.store`).

Everything is written into a temporary folder beside the output and renamed into place at the end, so
a refused table leaves nothing behind and an existing output is replaced only with ``force``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import yaml

from puppeteer.errors import UserError
from puppeteer.outcomes.store import TABLE_FILE, write_logged
from puppeteer.outcomes.table import LoggedTable, ReadOptions, read_logged

POOL_FILE = "pool.yaml"
SUITE_FILE = "suite.yaml"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Imported:
    """What an import wrote."""

    folder: Path
    table: LoggedTable

    @property
    def pool(self) -> Path:
        return self.folder / POOL_FILE

    @property
    def suite(self) -> Path:
        return self.folder / SUITE_FILE


def agent_name(model: str) -> str:
    """A model name as an agent name: letters, digits, ``.``, ``_`` and ``-`` (others become ``-``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-") or "model"


LIVE_MAX_TOKENS = 1024


def pool_dict(table: LoggedTable, name: str, live: Mapping[str, str], source: str) -> dict[str, object]:
    names = [agent_name(m) for m in table.models]
    if len(set(names)) != len(names):
        raise UserError(f"model names {list(table.models)} give clashing agent names {names}")
    unknown = sorted(set(live) - set(table.models))
    if unknown:
        raise UserError(
            f"--live names models the table does not have: {unknown}; models: {list(table.models)}"
        )
    models, agents = {}, []
    mean = dict(zip(table.models, table.score.mean(axis=0), strict=True))
    for model, agent in zip(table.models, names, strict=True):
        spec: dict[str, object] = {"backend": "logged", "target": model, "params_b": 0.0}
        models[agent] = spec
        entry: dict[str, object] = {
            "name": agent,
            "model": agent,
            "pattern": "direct",
            # the logged backend ignores it; a live model answers with up to this many tokens
            "max_tokens": LIVE_MAX_TOKENS,
            "description": f"{model}: its logged outcomes (mean score {mean[model]:.3f})",
        }
        if model in live:
            models[f"{agent}-live"] = {"backend": "litellm", "target": live[model], "params_b": 0.0}
            entry["live"] = f"{agent}-live"
        agents.append(entry)
    return {
        "name": name,
        "description": f"{len(table.models)} models' logged outcomes on {len(table)} prompts, imported from "
        f"{source}; replayed, no model is called",
        "replay": ".",
        "independent_solvers": True,
        "models": models,
        "agents": agents,
    }


def suite_dict(table: LoggedTable, name: str, source: str) -> dict[str, object]:
    sizes = {s: sum(1 for x in table.splits if x == s) for s in sorted(table.split_names)}
    return {
        "name": name,
        "description": f"The prompts of {source} in its own splits; gold '1': the logged backend "
        "answers it where the log was right",
        "loader": "logged",
        "grader": "exact",
        "domain": name,
        "splits": sizes,
        "options": {"table": TABLE_FILE},
    }


def _dump(path: Path, data: Mapping[str, object], header: str) -> None:
    text = yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=120)
    path.write_text(f"# {header}\n{text}", encoding="utf-8")


def import_table(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    name: str | None = None,
    options: ReadOptions | None = None,
    live: Mapping[str, str] = MappingProxyType({}),
    force: bool = False,
) -> Imported:
    """Read and check ``paths``, then write the pool, suite and table into ``out`` (all or nothing)."""
    out = Path(out)
    name = name or out.name
    if not _NAME_RE.match(name):
        raise UserError(f"name {name!r}: use letters, digits, '.', '_' and '-'")
    if out.exists() and not force:
        raise UserError(f"{out} exists; give --force to replace it")
    table = read_logged(paths, options or ReadOptions())
    source = ", ".join(Path(p).name for p in paths)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # a folder like any other, not mkdtemp's private one
    try:
        write_logged(table, tmp)
        header = "written by `puppeteer outcomes import`; edit the descriptions or live: models freely"
        _dump(tmp / POOL_FILE, pool_dict(table, name, live, source), header)
        _dump(tmp / SUITE_FILE, suite_dict(table, name, source), header)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return Imported(out, table)
