"""A warm pool: workspaces started ahead, so that an episode does not wait for one to start.

``WorkspacePool(backend, size)`` keeps up to ``size`` started workspaces per spec (a spec is a
frozen, hashable record: one Harbor task, one environment). ``acquire(spec)`` hands out a ready one
(checked alive: an idle one past its ``idle_s`` has ended) and starts its replacement in the
background; with none ready it starts one now. The caller owns what it acquires and closes it.
``close()`` ends every workspace still waiting in the pool.

``GraderPool`` does the same for grading: bare workspaces (started, holding nothing) that a grade fills
with the sealed tree, so that grading does not wait for a start.

``Closer`` closes workspaces whose processes have ended (sealed, or graded) in the background, so that
nothing waits for a teardown (a container's removal, a namespace's end); its ``close()`` waits for them.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from . import open_workspace
from .base import Workspace, WorkspaceError, WorkspaceSpec

log = logging.getLogger(__name__)


class Closer:
    """Background closes of workspaces whose processes have ended (see the module docstring)."""

    def __init__(self, threads: int = 2) -> None:
        self.threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="agentrl-ws-close")
        self._owner = os.getpid()

    def _run(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` in the background. In a forked child (the rollout worker process) the parent's threads
        are gone and an inherited executor would queue work that never runs: the child makes its own."""
        if self._owner != os.getpid():
            self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="agentrl-ws-close")
            self._owner = os.getpid()
        self._pool.submit(fn, *args)

    def submit(self, ws: Workspace) -> None:
        """Close ``ws`` in the background (here, when this closer is closing)."""
        try:
            self._run(_quiet_close, ws)
        except RuntimeError:  # shut down: close it here
            ws.close()

    def close(self) -> None:
        """Wait for every close submitted (by this process)."""
        if self._owner == os.getpid():
            self._pool.shutdown(wait=True)


def _quiet_close(ws: Workspace) -> None:
    try:
        ws.close()
    except Exception as e:  # noqa: BLE001 - a teardown that failed is logged; the episode is over
        log.warning("closing a workspace in the background failed: %s", e)


class WorkspacePool:
    """Started workspaces per spec (see the module docstring)."""

    def __init__(self, backend: str = "local", size: int = 2, starters: int = 2) -> None:
        if size < 0:
            raise ValueError(f"a pool's size must be >= 0, got {size}")
        self.backend, self.size = backend, size
        self._ready: dict[WorkspaceSpec, deque[Future]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._starter = ThreadPoolExecutor(max_workers=max(1, starters), thread_name_prefix="agentrl-ws-pool")
        self.closed = False
        self.hits = self.misses = 0

    def _start(self, spec: WorkspaceSpec) -> Workspace:
        return open_workspace(spec, self.backend)

    def _refill(self, spec: WorkspaceSpec) -> None:
        with self._lock:
            while not self.closed and len(self._ready[spec]) < self.size:
                self._ready[spec].append(self._starter.submit(self._start, spec))

    def acquire(self, spec: WorkspaceSpec) -> Workspace:
        """A started workspace of ``spec`` (see the module docstring)."""
        if self.closed:
            raise WorkspaceError("the workspace pool is closed")

        def pop() -> Future | None:
            with self._lock:
                return self._ready[spec].popleft() if self._ready[spec] else None

        ws = _take(pop, lambda: self._start(spec), self, "a pooled workspace")
        self._refill(spec)
        return ws

    def close(self) -> None:
        """End every workspace still in the pool (those handed out are their owners')."""
        with self._lock:
            self.closed = True
            pending = [f for q in self._ready.values() for f in q]
            self._ready.clear()
        for fut in pending:
            try:
                fut.result().close()
            except Exception:  # noqa: BLE001 - a failed start has nothing to close
                pass
        self._starter.shutdown(wait=True)

    def __enter__(self) -> WorkspacePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _take(pop: Callable[[], Future | None], start: Callable[[], Workspace], pool: Any, what: str) -> Workspace:
    """The first live workspace of the starts ``pop()`` hands out (one that failed to start or has ended is
    skipped), else ``start()``'s now; counts ``pool.hits`` and ``pool.misses``."""
    while (fut := pop()) is not None:
        try:
            ws = fut.result()
        except WorkspaceError as e:  # a start that failed in the background: the next one, or now
            log.warning("%s failed to start ahead: %s", what, e)
            continue
        if _alive(ws):
            pool.hits += 1
            return ws
        ws.close()
    pool.misses += 1
    return start()


def _alive(ws: Workspace) -> bool:
    try:
        ws.process_count()
        return True
    except WorkspaceError:
        return False


def bare_kind(spec: WorkspaceSpec, backend: str) -> WorkspaceSpec:
    """What a bare workspace of ``spec`` is started from: its limits and workdir (local), and its image
    (Docker: the spec less its variables, which a tree's restore sets). Specs of one kind share bare ones."""
    if backend == "local":
        return WorkspaceSpec(workdir=spec.workdir, limits=spec.limits, name="grader")
    return spec.replace(env=(), name="grader")


class GraderPool:
    """Grading workspaces started ahead (see :func:`sandbox.workspace.grading.verify`): up to ``size`` bare
    ones (started, holding nothing) per kind (:func:`bare_kind`), at most ``max_idle`` in all (the least
    recently used kind's go first). ``acquire(spec)`` hands out a ready one (or starts one now) and starts
    its replacement in the background; the grade fills it with the sealed tree (``receive``), so that it
    does not wait for a start. ``close()`` ends those still waiting; the caller closes what it acquired."""

    def __init__(self, backend: str = "local", size: int = 1, max_idle: int = 8) -> None:
        if size < 1 or max_idle < 1:
            raise ValueError(f"a grader pool needs size >= 1 and max_idle >= 1, got {size}, {max_idle}")
        self.backend, self.size, self.max_idle = backend, size, max_idle
        self._ready: dict[WorkspaceSpec, deque[Future]] = {}  # insertion order: least recently used first
        self._lock = threading.Lock()
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentrl-grader-pool")
        self._closer = Closer(threads=1)
        self.closed = False
        self.hits = self.misses = 0

    def _start(self, kind: WorkspaceSpec) -> Workspace:
        return open_workspace(kind, self.backend, bare=True)

    def acquire(self, spec: WorkspaceSpec) -> Workspace:
        """A bare workspace for grading ``spec`` (see the class docstring)."""
        if self.closed:
            raise WorkspaceError("the grader pool is closed")
        kind = bare_kind(spec, self.backend)

        def pop() -> Future | None:
            with self._lock:
                queue = self._ready.pop(kind, deque())
                self._ready[kind] = queue  # now the most recently used kind
                return queue.popleft() if queue else None

        ws = _take(pop, lambda: self._start(kind), self, "a grading workspace")
        self._refill(kind)
        return ws

    def _refill(self, kind: WorkspaceSpec) -> None:
        evicted: list[Future] = []
        with self._lock:
            if self.closed:
                return
            queue = self._ready.setdefault(kind, deque())
            while len(queue) < self.size:
                queue.append(self._starter.submit(self._start, kind))
            while sum(len(q) for q in self._ready.values()) > self.max_idle:
                oldest = next(k for k, q in self._ready.items() if q)
                evicted.append(self._ready[oldest].popleft())
        for fut in evicted:
            fut.add_done_callback(_close_started)

    def release(self, ws: Workspace) -> None:
        """Close ``ws`` (one it handed out, graded: its processes have ended) in the background, so that the
        grade does not wait for its teardown (a container's removal); :meth:`close` waits for it."""
        self._closer.submit(ws)

    def close(self) -> None:
        """End every bare workspace still waiting and every one released (those handed out and not released
        are their owners')."""
        with self._lock:
            self.closed = True
            pending = [f for q in self._ready.values() for f in q]
            self._ready.clear()
        for fut in pending:
            _close_started(fut)
        self._starter.shutdown(wait=True)
        self._closer.close()

    def __deepcopy__(self, memo: dict[int, object]) -> GraderPool:  # an env's per-episode copies share it
        return self

    def __enter__(self) -> GraderPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_started(fut: Future) -> None:
    try:
        fut.result().close()
    except Exception:  # noqa: BLE001 - a failed start has nothing to close
        pass
