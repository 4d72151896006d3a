"""Every derived seed of the project, in one place (each hash is fixed: committed runs depend on it).

* :func:`item_seed`: the reset seed of one evaluation item, from the run seed and the task id only,
  so an item gets the same sample index under every policy, in any order, on any executor.
* :func:`shuffle_seed`: a 64-bit seed from any parts, e.g. the order of a multiple-choice item's
  options (a different hash from :func:`item_seed`, kept so shipped suites keep their letters).
"""

from __future__ import annotations

import hashlib


def item_seed(seed: int, task_id: str) -> int:
    """The reset seed of one item: depends on the run seed and the task id only, not on order or n."""
    digest = hashlib.blake2b(f"{seed}|{task_id}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def shuffle_seed(*parts: object) -> int:
    """A 64-bit seed derived from the parts (stable across processes and Python versions)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


__all__ = ["item_seed", "shuffle_seed"]
