"""Recycled local workspaces: the runtime of an ended episode, reset, starts the next one.

A local workspace's start forks the zygote and makes a pid namespace, cgroups and a root on a tmpfs; its end
tears all of it down: 15-20 ms of CPU, three quarters of it the kernel's (page tables copied and freed,
namespaces made and destroyed), for every episode and every grade. :class:`Recycler` keeps the runtimes
instead. ``release(ws)`` hands it a workspace whose episode is over (sealed, or graded); in the background
it is reset (:meth:`sandbox.workspace.local.LocalWorkspace.recycle`: every process of the episode killed and
checked gone, new ipc and network namespaces, a fresh root, a new agent uid; anything uncertain closes it
instead) and parked, at most ``max_idle`` of them, each for at most ``park_s`` (then it ends by itself: an
env left open between runs does not hold them). ``open(spec)`` takes a parked runtime of the same limits
when there is one and builds the spec in it, as a fresh start would; ``acquire(spec)`` is a bare one for
grading (the :class:`~sandbox.workspace.pool.GraderPool` protocol, so ``verify(..., graders=recycler)``
recycles graders too). ``close()`` waits for the resets under way and ends the parked runtimes.

The Docker backend is not recycled: ``open`` starts, ``release`` closes in the background. A forked child
(the rollout worker process) never touches its parent's parked runtimes: it parks its own.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import defaultdict
from typing import Any

from . import open_workspace
from .base import BuildError, Tree, Workspace, WorkspaceError, WorkspaceLimits, WorkspaceSpec
from .pool import Closer, _quiet_close, bare_kind
from .runtime import end_runtimes


class Recycler(Closer):
    """Workspaces opened from recycled runtimes (see the module docstring)."""

    def __init__(self, backend: str = "local", max_idle: int = 64, park_s: float = 10.0, threads: int = 2) -> None:
        if max_idle < 0 or not park_s > 0:
            raise ValueError(f"a recycler needs max_idle >= 0 and park_s > 0, got {max_idle}, {park_s}")
        super().__init__(threads)
        self.backend, self.max_idle, self.park_s = backend, max_idle, park_s
        self._parked: dict[WorkspaceLimits, list[Any]] = defaultdict(list)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._resetting = self._queued = 0  # resets running; workspaces submitted whose reset has not begun
        self._at_exit()
        _LIVE.add(self)
        self.closed = False
        self.reused = self.started = 0

    def _at_exit(self) -> None:
        """Parked runtimes end when this recycler is collected or the interpreter exits (after the resets
        under way: their threads are joined first), so that a process that never closed its env leaves
        nothing behind when it ends."""
        weakref.finalize(self, _end_parked, self._parked, self._pid)

    def _mine(self) -> None:
        """In a forked child: forget the parent's parked runtimes (theirs to end), start empty."""
        if self._pid != os.getpid():
            self._parked, self._lock, self._pid = defaultdict(list), threading.Lock(), os.getpid()
            self._resetting = self._queued = 0
            self._at_exit()

    def _take(self, limits: WorkspaceLimits) -> Any:
        with self._lock:
            self._mine()
            queue = self._parked.get(limits)
            while queue:
                parked = queue.pop()
                if parked.alive():
                    return parked
                parked.end()  # parked past park_s: it ended by itself (its pipes are closed here)
        return None

    def _count(self) -> int:
        """Runtimes parked and alive (those that ended by themselves are let go); under the lock."""
        for queue in self._parked.values():
            for p in [p for p in queue if not p.alive()]:
                p.end()
                queue.remove(p)
        return sum(map(len, self._parked.values()))

    def open(self, spec: WorkspaceSpec, tree: Tree | None = None, bare: bool = False) -> Workspace:
        """A workspace of ``spec`` (built from its steps, holding ``tree``, or ``bare``: see
        :func:`sandbox.workspace.open_workspace`), in a recycled runtime when one of its limits is parked."""
        if self.closed:
            raise WorkspaceError("the workspace recycler is closed")
        if self.backend == "local":
            from .local import LocalWorkspace

            parked = self._take(spec.limits)
            if parked is not None:
                try:
                    ws: Workspace = LocalWorkspace(spec, tree, bare, parked=parked)
                    self.reused += 1
                    return ws
                except BuildError:
                    raise  # the spec's own failure: a fresh start fails alike
                except WorkspaceError:
                    pass  # the parked runtime failed: a fresh one
        self.started += 1
        return open_workspace(spec, self.backend, tree, bare)

    def acquire(self, spec: WorkspaceSpec) -> Workspace:
        """A bare workspace to grade ``spec`` in (``GraderPool.acquire``'s contract)."""
        return self.open(bare_kind(spec, self.backend), bare=True)

    def release(self, ws: Workspace) -> None:
        """``submit``: its runtime recycled in the background (``GraderPool.release``'s contract)."""
        self.submit(ws)

    def submit(self, ws: Workspace) -> None:
        """Recycle ``ws`` (its episode is over) in the background, or close it when it cannot be. It counts as
        queued from here, so that :meth:`end_parked` right after waits for it even before its thread runs."""
        with self._lock:
            self._mine()
            self._queued += 1
        try:
            self._run(self._recycle, ws)
        except RuntimeError:  # shut down: close it here
            with self._lock:
                self._queued -= 1
            ws.close()

    def _recycle(self, ws: Workspace) -> None:
        recycle = getattr(ws, "recycle", None)
        with self._lock:
            self._queued -= 1
            room = not self.closed and self._count() + self._resetting < self.max_idle
            if room and recycle is not None and self.backend == "local":
                self._resetting += 1  # its place is held while it resets (the resets run in parallel)
            else:
                recycle = None
        if recycle is None:
            _quiet_close(ws)
            return
        parked = None
        try:
            parked = recycle(self.park_s)
        except Exception:  # noqa: BLE001 - the episode is over; a failed recycle closes
            _quiet_close(ws)
        with self._lock:
            self._resetting -= 1
            if parked is not None and not self.closed:
                self._parked[ws.spec.limits].append(parked)
                return
        if parked is not None:
            parked.end()

    def parked(self) -> int:
        """Runtimes parked now."""
        with self._lock:
            self._mine()
            return self._count()

    def end_parked(self, wait_s: float = 10.0) -> None:
        """End the runtimes parked now and those submitted or resetting (waited for up to ``wait_s``); the
        recycler stays open: later workspaces start afresh."""
        deadline = time.monotonic() + wait_s
        while self._resetting + self._queued > 0 and self._pid == os.getpid() and time.monotonic() < deadline:
            time.sleep(0.005)
        with self._lock:
            self._mine()
            ended = [p for queue in self._parked.values() for p in queue]
            self._parked.clear()
        end_runtimes([p.proc for p in ended])

    def close(self) -> None:
        """Wait for the resets under way, then end every parked runtime (those handed out are their owners')."""
        self.closed = True
        super().close()
        self.end_parked()

    def __enter__(self) -> Recycler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __deepcopy__(self, memo: dict[int, object]) -> Recycler:  # an env's per-episode copies share it
        return self


def _end_parked(parked: dict[WorkspaceLimits, list[Any]], owner: int) -> None:
    """End the parked runtimes of ``parked`` (in the process that parked them only)."""
    if os.getpid() != owner:
        return
    ended = [p for queue in parked.values() for p in queue]
    parked.clear()
    end_runtimes([p.proc for p in ended])


_LIVE: weakref.WeakSet[Recycler] = weakref.WeakSet()


def end_all_parked() -> None:
    """End the parked runtimes of every recycler of this process (tests: between modules, so that an env a
    module left open holds no workspace when the next module checks the host is clean)."""
    for recycler in list(_LIVE):
        recycler.end_parked()
