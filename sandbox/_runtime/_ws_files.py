"""A workspace's files, for its runtime: reads and writes as the agent, trees as tar archives.

Standard library only. Reads, writes and listings run in a child process that has dropped to the
agent's uid (``as_agent``), so a link the agent planted can lead nowhere the agent itself could not
go (``/proc/1/fd/...`` of the runtime included). Trees are read and written by the runtime (root)
while no process of the agent runs: they are stopped (``snapshot``) or ended (``seal``, ``restore``),
so nothing can swap a file for a link under the archive, and every link is archived as a link.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import signal
import stat
import tarfile
import time

from _ws_common import SYSTEM_DIRS, processes  # type: ignore[import-not-found]


class TreeTooLarge(OSError):
    """The tree is larger than the workspace's storage allows (the agent's doing: it scores 0)."""


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


def tree_roots() -> list[str]:
    """The top-level directories that make up the tree (see ``sandbox.workspace.base``)."""
    out = []
    for name in sorted(os.listdir("/")):
        path = "/" + name
        if name not in SYSTEM_DIRS and os.path.isdir(path) and not os.path.islink(path) and not os.path.ismount(path):
            out.append(path)
    return out


def _excluded(path: str) -> bool:
    return path == "/logs/verifier" or path.startswith("/logs/verifier/")


def make_tree(limit: int) -> bytes:
    """A tar of the tree (links as links; no devices, fifos or sockets), at most ``limit`` bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for root in tree_roots():
            for top, dirs, files in os.walk(root, followlinks=False):
                if _excluded(top):
                    dirs[:] = []
                    continue
                tar.add(top, arcname=top.lstrip("/"), recursive=False)
                for name in sorted(files) + sorted(d for d in dirs if os.path.islink(os.path.join(top, d))):
                    path = os.path.join(top, name)
                    if _excluded(path):  # a link the agent made where the grader's directory goes
                        continue
                    st = os.lstat(path)
                    if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                        tar.add(path, arcname=path.lstrip("/"), recursive=False)
                dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(top, d))
                                 and not os.path.ismount(os.path.join(top, d)))
                if buf.tell() > limit:
                    raise TreeTooLarge(f"the tree is larger than the task's storage ({limit >> 20} MB)")
    return buf.getvalue()


def extract(data: bytes, dest: str, uid: int) -> None:
    """Unpack a tar under ``dest`` and give the agent what it unpacked. Nothing lands outside
    ``dest``: absolute or ``..`` names are refused, no member is written through a link (its parent
    directory must be a real directory under ``dest``), devices and fifos are skipped, a hard link
    must point at a member already unpacked. (Written out rather than ``filter="data"``, which older
    Pythons in task images lack and which would refuse the agent's own absolute links.)"""
    os.makedirs(dest, exist_ok=True)
    root = os.path.realpath(dest)
    trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
    done: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar:
            name = os.path.normpath(m.name)
            if name.startswith(("/", "..")) or m.isdev() or m.isfifo():
                continue
            parent = os.path.join(root, os.path.dirname(name))
            if os.path.realpath(parent) != os.path.normpath(parent):
                raise OSError(f"{m.name}: its directory is a link")
            if m.islnk() and os.path.normpath(m.linkname) not in done:
                raise OSError(f"{m.name}: a hard link to {m.linkname}, which is not in the archive")
            tar.extract(m, root, set_attrs=True, **trusted)
            os.lchown(os.path.join(root, name), uid, uid)
            done.add(name)
    if dest != "/":
        os.lchown(dest, uid, uid)


def wipe_tree() -> None:
    """Remove the tree's contents (before a restore); the top-level directories stay."""
    for root in tree_roots():
        for name in os.listdir(root):
            path = os.path.join(root, name)
            if _excluded(path) or os.path.ismount(path):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
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
    """SIGKILL every process but ``keep`` until none is left (a fork bomb included)."""
    deadline = time.monotonic() + 10.0
    while signal_all(signal.SIGKILL, keep) and time.monotonic() < deadline:
        time.sleep(0.005)
        reap()
    reap()


def prepare_container(uid: int) -> None:
    """In a Docker workspace (as root): an ``agent`` user of ``uid`` who owns the tree (the image's
    files included) and ``/logs``; the system stays root's."""
    with open("/etc/passwd") as f:
        known = any(line.split(":")[2:3] == [str(uid)] for line in f)
    if not known:
        with open("/etc/passwd", "a") as f:
            f.write(f"agent:x:{uid}:{uid}:agent:/root:/bin/bash\n")
        with open("/etc/group", "a") as f:
            f.write(f"agent:x:{uid}:\n")
    for d in ("/logs/agent", "/logs/verifier", "/root"):
        os.makedirs(d, exist_ok=True)
    for root in tree_roots():
        if root == "/tmp":
            continue
        for top, dirs, names in os.walk(root, followlinks=False):
            dirs[:] = [d for d in dirs if not os.path.ismount(os.path.join(top, d))]  # the runtime's own files
            for name in [top] + [os.path.join(top, n) for n in dirs + names]:
                os.lchown(name, uid, uid)
