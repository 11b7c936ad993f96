"""What the workspace runtime's modules share: frames, the tree's excluded directories, processes.

Standard library only (see ``_workspace``).
"""

from __future__ import annotations

import json
import os
import struct

from _leftovers import reap_children  # type: ignore[import-not-found]  # noqa: F401 (the workspace runtime's)

# Top-level directories that are the system's, never part of the agent's tree (``sandbox.workspace.base``).
SYSTEM_DIRS = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "usr",
               "var", "tests"}


def _read_exact(fd: int, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def read_frame(fd: int) -> dict | None:
    """One frame (4-byte big-endian length + JSON) from ``fd``; None at the end of the input."""
    try:
        (size,) = struct.unpack(">I", _read_exact(fd, 4))
        return json.loads(_read_exact(fd, size))
    except EOFError:
        return None


def write_frame(fd: int, obj: dict) -> None:
    data = json.dumps(obj).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def processes() -> dict[int, int]:
    """pid -> process group of every process in this pid namespace but this one."""
    out = {}
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
                out[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[2])
            except (OSError, ValueError, IndexError):
                continue
    return out


def parent_of(pid: int) -> int:
    """The parent pid of ``pid`` (0 when unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return 0

