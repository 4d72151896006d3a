"""A bounded YAML loader for files a user (or anybody) hands in: no alias bombs, no recursion.

``yaml.safe_load`` builds no objects of its own choosing, but its aliases share nodes: 6.6 KB of
``&a [*b, *b, ...]`` stand for billions of values, and whoever walks or prints the result (a ``str()``
of an agent's name) runs out of memory. :func:`load_yaml` counts the values the document stands for
(each alias counted as often as it is used) and refuses a document over :data:`MAX_NODES`, or one
whose aliases refer to themselves, with one line naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_NODES = 200_000  # values a document may stand for; the largest shipped file has a few hundred


class YamlLimitError(ValueError):
    """A YAML document that stands for more values than a file of settings may hold."""


def _expanded_size(root: Node, limit: int) -> int:
    """How many nodes ``root`` stands for with every alias expanded; stops counting past ``limit``."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise YamlLimitError("an alias refers to the value that holds it (a recursive document)")
        open_.add(key)
        total = 1
        if isinstance(node, SequenceNode):
            for child in node.value:
                total += size(child)
                if total > limit:
                    break
        elif isinstance(node, MappingNode):
            for k, v in node.value:
                total += size(k) + size(v)
                if total > limit:
                    break
        open_.discard(key)
        sizes[key] = total
        return total

    return size(root)


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a document standing for more than :data:`MAX_NODES` values."""

    max_nodes = MAX_NODES

    def compose_document(self) -> Node | None:
        node: Node | None = super().compose_document()
        if node is not None and _expanded_size(node, self.max_nodes) > self.max_nodes:
            raise YamlLimitError(
                f"the document stands for more than {self.max_nodes:,} values (aliases expanded); "
                "refusing it (an alias bomb?)"
            )
        return node


def load_yaml(text: str, where: str | Path = "<string>") -> Any:
    """Parse one YAML document safely and within bounds; ``YamlLimitError`` naming ``where`` otherwise."""
    try:
        return yaml.load(text, Loader=BoundedLoader)
    except RecursionError:
        raise YamlLimitError(f"{where}: nested too deeply") from None
    except YamlLimitError as e:
        raise YamlLimitError(f"{where}: {e}") from None
