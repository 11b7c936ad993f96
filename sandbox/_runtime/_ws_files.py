"""A workspace's files, for its runtime: reads and writes as the agent, trees as tar archives.

Standard library only. Reads, writes and listings run in a child process that has dropped to the
agent's uid (``as_agent``), so a link the agent planted can lead nowhere the agent itself could not
go (``/proc/1/fd/...`` of the runtime included). Trees are read and written by the runtime (root)
while no process of the agent runs: they are stopped (``snapshot``) or ended (``seal``, ``restore``),
so nothing can swap a file for a link under the archive, and every link is archived as a link.
"""

from __future__ import annotations

import base64
import os
import signal
import stat
import tarfile
import time

from _ws_common import SYSTEM_DIRS, processes  # type: ignore[import-not-found]
from _ws_tree import excluded, remove_tree, walk  # type: ignore[import-not-found]

SHARED_TOPS = ("/opt", "/srv", "/mnt", "/media")  # top-level directories an image shares among tools


def read_file(path: str, max_bytes: int) -> dict:
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    return {"data": base64.b64encode(data[:max_bytes]).decode(), "truncated": len(data) > max_bytes}


def write_file(path: str, data: str, mode: int) -> dict:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(data))
    return {}


def list_dir(path: str) -> dict:
    entries = []
    with os.scandir(path) as it:
        for e in it:
            st = e.stat(follow_symlinks=False)
            kind = ("link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode)
                    else "file" if stat.S_ISREG(st.st_mode) else "other")
            entries.append([e.name, kind, st.st_size])
    return {"entries": sorted(entries)}


def extract(source, dest: str, uid: int) -> None:
    """Unpack a tar read from ``source`` (a file: read as a stream) under ``dest`` and give ``uid`` what
    it unpacked. Nothing lands outside ``dest``: absolute or ``..`` names are refused, no member is
    written through a link (its parent directory must be a real directory under ``dest``), devices and
    fifos are skipped, a hard link must point at a member already unpacked. (Written out rather than
    ``filter="data"``, which older Pythons in task images lack and which would refuse the agent's own
    absolute links.)"""
    os.makedirs(dest, exist_ok=True)
    root = os.path.realpath(dest)
    trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
    done: set[str] = set()
    real_dirs = {root}  # directories this extraction made (or found real): no link check again
    with tarfile.open(fileobj=source, mode="r|") as tar:
        for m in tar:
            name = os.path.normpath(m.name)
            if name.startswith(("/", "..")) or m.isdev() or m.isfifo():
                continue
            parent = os.path.join(root, os.path.dirname(name)).rstrip("/") or "/"
            if parent not in real_dirs:
                if os.path.realpath(parent) != os.path.normpath(parent):
                    raise OSError(f"{m.name}: its directory is a link")
                real_dirs.add(parent)
            if m.islnk() and os.path.normpath(m.linkname) not in done:
                raise OSError(f"{m.name}: a hard link to {m.linkname}, which is not in the archive")
            target = os.path.join(root, name)
            real_dirs.discard(target)
            if m.isdir() and parent in real_dirs:  # the common case, in three calls (a deep tree has many)
                try:
                    os.mkdir(target, 0o700)
                except FileExistsError:
                    if not os.path.isdir(target) or os.path.islink(target):
                        raise
                os.chmod(target, m.mode & 0o7777)
            else:
                tar.extract(m, root, set_attrs=True, **trusted)
            os.lchown(target, uid, uid)
            if m.isdir():
                real_dirs.add(target)
            done.add(name)
    if dest != "/":
        os.lchown(dest, uid, uid)


def wipe_tree(roots: list[str]) -> None:
    """Remove the tree's contents (before a restore); the top-level directories stay."""
    for root in roots:
        for name in os.listdir(root):
            path = os.path.join(root, name)
            if excluded(path) or os.path.ismount(path):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                remove_tree(path)
            else:
                os.unlink(path)


def signal_all(sig: int, keep: set[int]) -> int:
    """Send ``sig`` to every process of the workspace but ``keep``; how many got it."""
    n = 0
    for pid in processes():
        if pid in keep:
            continue
        try:
            os.kill(pid, sig)
            n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n


def end_all(keep: set[int], reap) -> None:
    """SIGKILL every process but ``keep`` until none is left (a fork bomb included). Those already dead
    are reaped before each round, and the wait between rounds grows from 0.5 to 5 ms: a process just
    killed is usually gone within the first (a flat 5 ms wait cost every seal and grade 5-10 ms)."""
    deadline, wait = time.monotonic() + 10.0, 0.0005
    while True:
        reap()
        if not signal_all(signal.SIGKILL, keep) or time.monotonic() >= deadline:
            break
        time.sleep(wait)
        wait = min(2 * wait, 0.005)
    reap()


def container_roots(workdir: str) -> list[str]:
    """A Docker workspace's tree: the working directory's top-level directory (the directory itself
    when its top is shared, such as ``/opt``), ``/root``, ``/home`` and ``/logs``. Everything else
    the image holds stays the image's: root's, read-only to the agent, restored from the image
    when graded (an image's ``/opt/venv`` is the verifier's, whatever the agent did)."""
    top = "/" + workdir.strip("/").split("/")[0] if workdir.strip("/") else ""
    own = workdir if top in SHARED_TOPS else top
    roots = {"/root", "/home", "/logs"} | ({own} if own and top.strip("/") not in SYSTEM_DIRS else set())
    return sorted(roots)


def prepare_container(uid: int, roots: list[str]) -> None:
    """In a Docker workspace (as root): an ``agent`` user of ``uid`` who owns the tree (``roots``,
    the image's files there included) and ``/logs``; the rest stays root's."""
    with open("/etc/passwd") as f:
        known = any(line.split(":")[2:3] == [str(uid)] for line in f)
    if not known:
        with open("/etc/passwd", "a") as f:
            f.write(f"agent:x:{uid}:{uid}:agent:/root:/bin/bash\n")
        with open("/etc/group", "a") as f:
            f.write(f"agent:x:{uid}:\n")
    for d in ("/logs/agent", "/logs/verifier", "/root", "/home", *roots):
        os.makedirs(d, exist_ok=True)
    for path, _st in walk(roots):
        os.lchown(path, uid, uid)
