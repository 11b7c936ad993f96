"""A warm pool: workspaces started ahead, so that an episode does not wait for one to start.

``WorkspacePool(backend, size)`` keeps up to ``size`` started workspaces per spec (a spec is a
frozen, hashable record: one Harbor task, one environment). ``acquire(spec)`` hands out a ready one
(checked alive: an idle one past its ``idle_s`` has ended) and starts its replacement in the
background; with none ready it starts one now. The caller owns what it acquires and closes it.
``close()`` ends every workspace still waiting in the pool.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict, deque
from concurrent.futures import Future, ThreadPoolExecutor

from . import open_workspace
from .base import Workspace, WorkspaceError, WorkspaceSpec

log = logging.getLogger(__name__)


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
        while True:
            with self._lock:
                fut = self._ready[spec].popleft() if self._ready[spec] else None
            if fut is None:
                self.misses += 1
                ws = self._start(spec)
                break
            try:
                ws = fut.result()
            except WorkspaceError as e:  # a start that failed in the background: try the next, or cold
                log.warning("a pooled workspace failed to start: %s", e)
                continue
            if _alive(ws):
                self.hits += 1
                break
            ws.close()
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


def _alive(ws: Workspace) -> bool:
    try:
        ws.process_count()
        return True
    except WorkspaceError:
        return False
