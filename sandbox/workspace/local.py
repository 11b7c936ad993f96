"""The local workspace backend: namespaces, cgroups and a tmpfs root on this host (needs root).

Each workspace is a runtime process (``sandbox/_runtime/_workspace.py local``) that builds its own
walls (``_ws_root``: a pid namespace whose init it is, no network, a tmpfs root of ``storage_mb``
with the host's ``/usr`` read-only, memory, pids and cpu cgroups) and runs the agent's shell as a
uid of its own, never root. Closing its pipe ends it: the kernel then kills every process of the
namespace and frees its mounts, so a workspace never outlives its owner (a SIGKILLed owner's pipe
closes too). Cgroups left by a killed waiter are removed by the next workspace that starts.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

from .base import Tree, WorkspaceError, WorkspaceSpec
from .runtime import RUNTIME_DIR, RuntimeWorkspace

UID_BASE = 1_500_000_000  # far from the program sandbox's (200000 + pid) and from real users
_serial = itertools.count()


class LocalWorkspace(RuntimeWorkspace):
    """A workspace on this host (see the module docstring)."""

    backend = "local"

    def __init__(self, spec: WorkspaceSpec, tree: Tree | None = None) -> None:
        if os.geteuid() != 0 or not sys.platform.startswith("linux"):
            raise WorkspaceError("the local workspace backend needs root on Linux (namespaces and cgroups); "
                                 "use backend=docker")
        super().__init__(spec, tree)

    def _launch(self) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-E", "-s", "-S", os.path.join(RUNTIME_DIR, "_workspace.py"), "local"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True, cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})

    def _uid(self) -> int:
        return UID_BASE + (os.getpid() % 100_000) * 1000 + next(_serial) % 1000
