"""The package's architecture as a test: the import graph of ``puppeteer`` has no cycle, and no module
imports from a layer above its own.

Layers, bottom to top; a module may import from its own layer and the layers below it:

0. **utils** — ``puppeteer.utils`` (checks, memos, seeds, safe loading, run directories, progress),
   the value types and errors (``types``, ``errors``).
1. **components** — what an episode is made of: ``backends`` (the simulator, llama.cpp, litellm,
   replayed tables), ``tasks`` (suites, graders, answer signals), ``tools`` (the sandbox among them),
   ``agents`` (pools, cards, reasoning patterns), ``outcomes`` (logged outcome tables).
2. **envs** — the Gymnasium environment (``puppeteer.envs``) and the package itself, whose
   ``__init__`` registers ``Conductor-v0``.
3. **policies** — every kind of policy behind one contract, and the spec registry.
4. **evaluation** — ``evaluation``, ``serving`` (the orchestrator and the endpoint), ``integrations``.
5. **analytics** — reads runs: statistics, plots, tables, A/B tests, the analysis of sweeps.
6. **train** — the trainers (REINFORCE, offline, GRPO, sb3).
7. **jobs** — configuration in, run directory out: the training job and its Hydra entries, sweeps,
   the quickstart, outcome tables.
8. **cli** — the command line (``puppeteer.cli``, ``puppeteer.__main__``).

The graph has one node per module; an edge for every ``import`` / ``from ... import`` at module level
or inside a function (imports under ``if TYPE_CHECKING:`` are left out: they never run). Importing
``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``, but those implicit edges are left out: a
package ``__init__`` that imports its submodules would otherwise close a cycle with each of them.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, to the submodule that
defines ``name`` when ``pkg/__init__.py`` only re-exports it, and to ``pkg`` itself otherwise (a
name that ``__init__`` defines: a real dependency on the package's own code).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "puppeteer"

# (layer, module prefixes), bottom to top; a module no layer names is in the first
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("utils", ("puppeteer.utils", "puppeteer.types", "puppeteer.errors")),
    (
        "components",
        (
            "puppeteer.backends",
            "puppeteer.tasks",
            "puppeteer.tools",
            "puppeteer.agents",
            "puppeteer.outcomes",
        ),
    ),
    ("envs", ("puppeteer.envs",)),
    ("policies", ("puppeteer.policies",)),
    ("evaluation", ("puppeteer.evaluation", "puppeteer.serving", "puppeteer.integrations")),
    ("analytics", ("puppeteer.analytics",)),
    ("train", ("puppeteer.train",)),
    ("jobs", ("puppeteer.jobs",)),
    ("cli", ("puppeteer.cli", "puppeteer.__main__")),
)
PACKAGE_LAYER = "envs"  # the package's own __init__ registers the environment

# Violations that exist today, each with the change that removes it. The test fails when one of them
# is no longer a violation (the edge is gone, or no longer closes a cycle or points up): delete it here.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {
    (
        "puppeteer.policies.rule_fit",
        "puppeteer.evaluation.evaluate",
    ): "a fitted rule (best-rule, best-single) "
    "runs every solver on the training items when its run starts; the policy registry imports rule_fit "
    "on first use only",
}


# --------------------------------------------------------------------------- the import graph


def module_name(path: Path, root: Path) -> str:
    """``root/pkg/sub/mod.py`` -> ``pkg.sub.mod``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at module level, in functions and classes, in ``try`` and
    ``if`` bodies; not in an ``if TYPE_CHECKING:`` body (its ``else`` runs, so it is kept)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child):
            for stmt in child.orelse:
                yield from _imports(ast.Module(body=[stmt], type_ignores=[]))
        else:
            yield from _imports(child)


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


@dataclass(frozen=True)
class Source:
    name: str
    tree: ast.Module
    is_package: bool


def parse_package(root: Path, package: str) -> dict[str, Source]:
    return {
        module_name(p, root): Source(
            module_name(p, root), ast.parse(p.read_text(encoding="utf-8")), p.stem == "__init__"
        )
        for p in sorted((root / package).rglob("*.py"))
    }


def _reexports(sources: Mapping[str, Source]) -> dict[str, dict[str, str]]:
    """Per package: the names its ``__init__`` imports from its own submodules, and from which."""
    out: dict[str, dict[str, str]] = {}
    for name, src in sources.items():
        if not src.is_package:
            continue
        names: dict[str, str] = {}
        for node in src.tree.body:  # a re-export is a module-level import
            if isinstance(node, ast.ImportFrom):
                origin = _absolute(node, name, True)
                if origin.startswith(name + ".") and origin in sources:
                    names.update({a.asname or a.name: origin for a in node.names})
        out[name] = names
    return out


def import_graph(sources: Mapping[str, Source]) -> nx.DiGraph:
    """Modules of ``sources`` and their imports of each other (edge attribute ``line``: the first)."""
    reexports = _reexports(sources)

    def target(module: str, name: str | None) -> str | None:
        if name is not None:
            if f"{module}.{name}" in sources:
                return f"{module}.{name}"
            seen = set()
            while name in reexports.get(module, {}) and module not in seen:  # follow re-exports down
                seen.add(module)
                module = reexports[module][name]
        while module and module not in sources:  # ``import a.b.name`` of a non-module: its module
            module = module.rpartition(".")[0]
        return module or None

    graph = nx.DiGraph()
    for name, src in sources.items():
        graph.add_node(name)
        for node in _imports(src.tree):
            if isinstance(node, ast.Import):
                found = [target(a.name, None) for a in node.names]
            else:
                origin = _absolute(node, name, src.is_package)
                found = [target(origin, a.name) for a in node.names]
            for t in found:
                if t is not None and t != name and not graph.has_edge(name, t):
                    graph.add_edge(name, t, line=node.lineno)
    return graph


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the highest layer whose prefix names ``module``."""
    if module == "puppeteer":
        return next(i for i, (name, _) in enumerate(LAYERS) if name == PACKAGE_LAYER)
    found = 0
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            found = i
    return found


# --------------------------------------------------------------------------- the rules


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """One cycle per strongly connected group of modules that import each other, shortest first."""
    found = []
    for group in nx.strongly_connected_components(graph):
        if len(group) > 1:
            sub = graph.subgraph(group)
            found.append([a for a, _ in nx.find_cycle(sub, source=min(group))])
    return sorted(found, key=lambda c: (len(c), c))


def upward(graph: nx.DiGraph) -> list[tuple[str, str]]:
    """Edges from a module to a module of a higher layer."""
    return sorted((a, b) for a, b in graph.edges if layer_of(b) > layer_of(a))


def violations(graph: nx.DiGraph, known: Mapping[tuple[str, str], str]) -> tuple[list[str], list[str]]:
    """(new problems, known violations that no longer exist). An edge in ``known`` is left out of the
    checks; it must still exist and still point up or close a cycle in the full graph."""
    rest = graph.copy()
    rest.remove_edges_from([e for e in known if rest.has_edge(*e)])
    problems = [" -> ".join([*c, c[0]]) + " (cycle)" for c in cycles(rest)]
    problems += [
        f"{a} -> {b} (line {graph.edges[a, b]['line']}: {LAYERS[layer_of(a)][0]} imports "
        f"{LAYERS[layer_of(b)][0]})"
        for a, b in upward(rest)
    ]
    cyclic = {
        (a, b) for group in nx.strongly_connected_components(graph) for a, b in graph.subgraph(group).edges
    }
    stale = [
        f"{a} -> {b}"
        for a, b in known
        if not graph.has_edge(a, b) or (layer_of(b) <= layer_of(a) and (a, b) not in cyclic)
    ]
    return problems, stale


# --------------------------------------------------------------------------- the package


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return import_graph(parse_package(ROOT, "puppeteer"))


def test_the_package_has_no_import_cycle_and_no_upward_import(graph: nx.DiGraph) -> None:
    problems, stale = violations(graph, KNOWN_VIOLATIONS)
    assert not problems, "\n".join(problems)
    assert not stale, "fixed, remove from KNOWN_VIOLATIONS: " + ", ".join(stale)


def test_the_graph_sees_the_package(graph: nx.DiGraph) -> None:
    """A broken parser must not pass vacuously: known modules and edges of every kind are there."""
    assert len(graph) >= 100 and graph.number_of_edges() >= 300
    assert {
        "puppeteer.cli.app",
        "puppeteer.envs.env",
        "puppeteer.train.reinforce",
        "puppeteer.policies",
    } <= set(graph)
    assert graph.has_edge("puppeteer.cli.app", "puppeteer.cli.eval")  # from puppeteer.cli import eval
    assert graph.has_edge("puppeteer.envs.env", "puppeteer.envs.executor")  # module level
    assert graph.has_edge("puppeteer.cli.train", "puppeteer.jobs.hydra_entry")  # inside a function
    # through the re-export in backends/__init__.py to where the name is defined
    assert graph.has_edge("puppeteer.envs.parallel", "puppeteer.backends.base")
    names = [name for name, _ in LAYERS]
    assert (
        names[layer_of("puppeteer.jobs.sweep")] == "jobs"
        and names[layer_of("puppeteer.analytics.sweep")] == "analytics"
    )
    assert (
        names[layer_of("puppeteer.__main__")] == "cli" and names[layer_of("puppeteer.envs.build")] == "envs"
    )
    assert names[layer_of("puppeteer")] == "envs" and names[layer_of("puppeteer.utils.memo")] == "utils"
    assert names[layer_of("puppeteer.agents.pool")] == "components"


# DESIGN.md: "Data flows one way ... Nothing below env.py knows about policies; no backend knows about
# tasks; graders know nothing about agents." Each rule: modules (a prefix), and what nothing they import,
# directly or through other modules, may be.
DATA_FLOW: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "puppeteer.envs.env",
        (
            "puppeteer.policies",
            "puppeteer.envs.rollout",
            "puppeteer.evaluation.evaluate",
            "puppeteer.evaluation.executors",
            "puppeteer.serving.orchestrator",
        ),
        "nothing below the env knows about policies or what runs them",
    ),
    (
        "puppeteer.backends",
        ("puppeteer.tasks", "puppeteer.agents.pool", "puppeteer.envs.executor", "puppeteer.envs.env"),
        "no backend knows about tasks, agents or episodes",
    ),
    (
        "puppeteer.tasks",
        ("puppeteer.agents.pool", "puppeteer.backends", "puppeteer.envs.executor", "puppeteer.envs.env"),
        "graders know nothing about agents",
    ),
)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize(("prefix", "forbidden", "why"), DATA_FLOW, ids=[r[0] for r in DATA_FLOW])
def test_the_one_way_data_flow_of_design_md(
    graph: nx.DiGraph, prefix: str, forbidden: tuple[str, ...], why: str
) -> None:
    modules = [m for m in graph if _under(m, prefix)]
    assert modules
    bad = sorted(
        f"{m} reaches {r}"
        for m in modules
        for r in nx.descendants(graph, m)
        if any(_under(r, f) for f in forbidden)
    )
    assert not bad, f"{why}:\n" + "\n".join(bad)


# --------------------------------------------------------------------------- the checker itself


def _write(root: Path, files: Mapping[str, str]) -> dict[str, Source]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return parse_package(root, "pkg")


def test_edges_of_every_kind_of_import(tmp_path: Path) -> None:
    sources = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.base import Thing\nfrom pkg import util\nOWN = 1\n",
            "pkg/base.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.top import T\n",
            "pkg/util.py": "",
            "pkg/mid.py": "from pkg import Thing\nfrom . import util\n",
            "pkg/top.py": "import pkg.mid\n\ndef f():\n    from pkg import OWN\n"
            "    from .sub.leaf import x\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/leaf.py": "from .. import base\nimport json\n",
        },
    )
    g = import_graph(sources)
    assert set(g.edges) == {
        ("pkg", "pkg.base"),  # __init__ re-exports
        ("pkg", "pkg.util"),
        ("pkg.mid", "pkg.base"),  # Thing is re-exported by pkg: the edge goes to where it is defined
        ("pkg.mid", "pkg.util"),  # relative
        ("pkg.top", "pkg.mid"),
        ("pkg.top", "pkg"),  # OWN is defined in pkg/__init__.py: a real edge to the package
        ("pkg.top", "pkg.sub.leaf"),  # inside a function
        ("pkg.sub.leaf", "pkg.base"),  # two dots
    }  # not base -> top (TYPE_CHECKING), not json (outside the package)


def test_a_cycle_through_an_init_counts_only_when_real(tmp_path: Path) -> None:
    # m takes g from the package, which only re-exports it from n: m depends on n, not on __init__
    reexport = {
        "pkg/__init__.py": "from pkg.m import f\nfrom pkg.n import g\n",
        "pkg/m.py": "from pkg import g\n\ndef f(): ...\n",
        "pkg/n.py": "def g(): ...\n",
    }
    g = import_graph(_write(tmp_path / "a", reexport))
    assert g.has_edge("pkg.m", "pkg.n") and not g.has_edge("pkg.m", "pkg") and cycles(g) == []
    # m needs a name that __init__ itself defines, and __init__ imports m: a real cycle
    real = {
        "pkg/__init__.py": "from pkg.m import f\nLIMIT = 3\n",
        "pkg/m.py": "def f():\n    from pkg import LIMIT\n",
    }
    assert cycles(import_graph(_write(tmp_path / "b", real))) == [["pkg", "pkg.m"]]


def test_the_checker_finds_a_new_cycle_and_an_upward_import() -> None:
    g = nx.DiGraph()
    edges = [
        ("puppeteer.envs.env", "puppeteer.types"),
        ("puppeteer.jobs.train", "puppeteer.envs.env"),  # down: fine
        ("puppeteer.cli.app", "puppeteer.jobs.train"),
        ("puppeteer.envs.parts", "puppeteer.envs.reward"),
        ("puppeteer.envs.reward", "puppeteer.envs.executor"),
        ("puppeteer.envs.executor", "puppeteer.envs.parts"),  # a cycle of three
        ("puppeteer.envs.rollout", "puppeteer.train.reinforce"),  # envs -> train
        ("puppeteer.analytics.sweep", "puppeteer.jobs.train"),  # analytics -> jobs
    ]
    for i, (a, b) in enumerate(edges):
        g.add_edge(a, b, line=i + 1)
    problems, stale = violations(g, {})
    assert problems == [
        "puppeteer.envs.executor -> puppeteer.envs.parts -> puppeteer.envs.reward -> puppeteer.envs.executor"
        " (cycle)",
        "puppeteer.analytics.sweep -> puppeteer.jobs.train (line 8: analytics imports jobs)",
        "puppeteer.envs.rollout -> puppeteer.train.reinforce (line 7: envs imports train)",
    ]
    assert stale == []
    # listed violations are left out, and a listed one that is gone or harmless is reported
    known = {
        ("puppeteer.envs.executor", "puppeteer.envs.parts"): "cycle",
        ("puppeteer.envs.rollout", "puppeteer.train.reinforce"): "up",
        ("puppeteer.analytics.sweep", "puppeteer.jobs.train"): "up",
        ("puppeteer.jobs.train", "puppeteer.envs.env"): "down: not a violation",
        ("puppeteer.envs.env", "puppeteer.cli.app"): "no such edge",
    }
    problems, stale = violations(g, known)
    assert problems == []
    assert stale == ["puppeteer.jobs.train -> puppeteer.envs.env", "puppeteer.envs.env -> puppeteer.cli.app"]
