"""The local workspace backend: namespaces, cgroups and a tmpfs root on this host (needs root).

Each workspace is a runtime process (``sandbox/_runtime/_workspace.py``, forked from a warm zygote that
this process starts once: ``_ws_zygote``) that builds its own
walls (``_ws_root``: a pid namespace whose init it is, no network, a tmpfs root of ``storage_mb``
with the host's ``/usr`` read-only, memory, pids and cpu cgroups) and runs the agent's shell as a
uid of its own, never root. Closing its pipe ends it: the kernel then kills every process of the
namespace and frees its mounts, so a workspace never outlives its owner (a SIGKILLed owner's pipe
closes too). Cgroups left by a killed waiter are removed by the next workspace that starts.

A runtime can also outlive its episode, reset (:meth:`LocalWorkspace.recycle`, :mod:`.recycle`): its
processes killed and checked gone, new ipc and network namespaces, a fresh root, a new uid; the next
workspace of the same limits starts in it without a fork, namespaces or cgroups of its own.
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from typing import Any, NamedTuple

from .base import Tree, WorkspaceError, WorkspaceSpec
from .runtime import RUNTIME_DIR, RuntimeWorkspace, end_runtime

UID_BASE = 1_500_000_000  # far from the program sandbox's (200000 + pid) and from real users
GRADER_OFFSET = 1 << 29  # a grading workspace's grader: agent uid + this (both below 2**31)
_serial = itertools.count()


class LocalWorkspace(RuntimeWorkspace):
    """A workspace on this host (see the module docstring)."""

    backend = "local"

    def __init__(self, spec: WorkspaceSpec, tree: Tree | None = None, bare: bool = False,
                 parked: Parked | None = None) -> None:
        if os.geteuid() != 0 or not sys.platform.startswith("linux"):
            raise WorkspaceError("the local workspace backend needs root on Linux (namespaces and cgroups); "
                                 "use backend=docker")
        self._parked = parked  # a runtime reset by :meth:`recycle`: started already, with ``spec.limits``
        super().__init__(spec, tree, bare)

    def _start_runtime(self) -> dict[str, Any]:
        if self._parked is None:
            return super()._start_runtime()
        (self.proc, info), self._parked = self._parked, None
        # a parked runtime ends at its park deadline unless a request comes; this one makes it a workspace of
        # its spec's idle limit again (a bare grader may wait longer than park_s for its tree), and a runtime
        # that ended in the meantime fails here, where the recycler starts a fresh one instead
        self._request({"op": "ping"}, 30.0, first=True)
        return info

    def _launch(self) -> Any:
        return zygote().spawn()

    def recycle(self, park_s: float = 10.0) -> Parked | None:
        """End this workspace for its user and keep its runtime for another episode of the same limits: the
        runtime's ``reset`` (every process of the episode killed and checked gone, new ipc and network
        namespaces, a fresh root, a new agent uid; ``_runtime/_workspace.py``); hand it to
        ``LocalWorkspace(spec, parked=...)``. Parked, the runtime ends by itself after ``park_s`` without a
        request (then its spec's ``idle_s`` again). None when that cannot be done for certain (closed, a request
        failed or timed out, the reset failed): the workspace is then closed as usual."""
        if self.closed or self.broken or self.proc is None or self.proc.poll() is not None:
            self.close()
            return None
        uid = self._uid()
        try:
            info = self._request({"op": "reset", "uid": uid, "grader_uid": self._grader_uid(uid), "park_s": park_s},
                                 60.0, first=True)["ready"]
        except WorkspaceError:
            self.close()
            return None
        parked, self.proc = Parked(self.proc, info), None
        self.closed = True
        return parked

    def _uid(self) -> int:
        return UID_BASE + (os.getpid() % 100_000) * 1000 + next(_serial) % 1000

    def _grader_uid(self, uid: int) -> int:
        return uid + GRADER_OFFSET


class Parked(NamedTuple):
    """A local workspace's runtime between episodes (:meth:`LocalWorkspace.recycle`)."""

    proc: Forked
    info: dict[str, Any]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def end(self) -> None:
        """End the runtime (as a workspace's close does)."""
        end_runtime(self.proc)


class Forked:
    """A workspace runtime forked by the zygote: the parts of ``Popen`` the workspace uses. Its exit
    is seen through a pidfd (it is the zygote's child, not ours; its exit status is not ours to read)."""

    def __init__(self, pid: int, stdin: Any, stdout: Any) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = 0
            os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"workspace runtime {self.pid}", timeout or 0)
            self.poll()
        return 0

    def kill(self) -> None:
        if self.returncode is None:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


class Zygote:
    """The warm runtime this process forks its local workspaces from (``_runtime/_ws_zygote.py``)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-E", "-s", "-S", os.path.join(RUNTIME_DIR, "_workspace.py"), "zygote",
             str(theirs.fileno())], pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, close_fds=True, cwd="/", env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        theirs.close()
        self.sock, self.owner, self.lock = ours, os.getpid(), threading.Lock()

    def spawn(self) -> Forked:
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        try:
            with self.lock:
                socket.send_fds(self.sock, [b"w"], [r_in, w_out])
                pid = struct.unpack(">i", self._recv(4))[0]
        except OSError as e:
            for f in (w_in, r_out):
                os.close(f)
            raise WorkspaceError(f"the workspace zygote is gone ({e})") from e
        finally:
            os.close(r_in)
            os.close(w_out)
        return Forked(pid, os.fdopen(w_in, "wb"), os.fdopen(r_out, "rb"))

    def _recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise OSError("the zygote closed its socket")
            out += chunk
        return out

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def zygote() -> Zygote:
    """This process's zygote, started on first use (a forked child of this process starts its own)."""
    global _zygote
    with _zygote_lock:
        if _zygote is None or not _zygote.alive():
            _zygote = Zygote()
        return _zygote
