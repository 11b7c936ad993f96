"""That workspaces leave nothing behind: no process, cgroup, container or mount of theirs
(``sandbox.workspace.leftovers``), narrowed to the workspaces this test process opened, and those of
``owners`` (a finished subprocess), so that other sessions' live workspaces do not count."""

from __future__ import annotations

import os
import time

from sandbox.workspace.leftovers import leftovers as host_leftovers


def leftovers(owners: tuple[int, ...] = (), wait_s: float = 15.0) -> list[str]:
    """What this process's workspaces (and ``owners``') left, as ``kind: item`` lines; waits up to
    ``wait_s`` for what a closing workspace is still ending."""
    deadline = time.monotonic() + wait_s
    while True:
        found = [f"{kind}: {item}" for owner in (os.getpid(), *owners)
                 for kind, items in host_leftovers(owner).items() for item in items]
        if not found or time.monotonic() > deadline:
            return sorted(set(found))
        time.sleep(0.2)
