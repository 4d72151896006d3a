"""Process inspection shared by the sandbox tests (Linux /proc)."""

from __future__ import annotations

import os
from pathlib import Path


def live_members(leader: int) -> list[int]:
    """Non-zombie processes whose process group or session is ``leader``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        state, _ppid, pgrp, session = stat.rsplit(")", 1)[1].split()[:4]
        if state not in ("Z", "X") and leader in (int(pgrp), int(session)):
            found.append(int(name))
    return found
