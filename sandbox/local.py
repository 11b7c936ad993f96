"""The local backend: a pool of fork-servers, each a warm interpreter that forks one child per job."""

from __future__ import annotations

import json
import logging
import os
import queue
import select
import struct
import subprocess
import sys
import threading
import time
import warnings
import weakref
from typing import Any

from .types import Limits, Sandbox, failed_result

log = logging.getLogger(__name__)
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_runtime", "_server.py")
DEFAULT_PRELOAD = (
    "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string", "typing",
    "json", "random", "statistics", "fractions", "decimal", "hashlib", "datetime", "copy",
    "operator", "array", "cmath", "textwrap", "unicodedata", "dataclasses", "enum", "sympy",
)
SERVER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
_warned = False


class ServerError(RuntimeError):
    """The fork-server died or stopped answering."""


class ForkServer:
    """One warm server process; used by one thread at a time."""

    def __init__(self, preload: tuple[str, ...], python: str) -> None:
        self.proc = subprocess.Popen(
            [python, "-E", "-s", SERVER, ",".join(preload)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=SERVER_ENV, close_fds=True,
        )
        self.info: dict = self._read(deadline=time.monotonic() + 120.0)["ready"]

    def request(self, obj: dict, timeout_s: float) -> dict:
        """Send one request; wait at most `timeout_s` for the answer."""
        data = json.dumps(obj).encode()
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise ServerError("fork-server is gone") from exc
        return self._read(time.monotonic() + timeout_s)

    def _read(self, deadline: float) -> dict:
        head = self._read_exact(4, deadline)
        return json.loads(self._read_exact(struct.unpack(">I", head)[0], deadline))

    def _read_exact(self, n: int, deadline: float) -> bytes:
        fd, data = self.proc.stdout.fileno(), b""
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.kill()
                raise ServerError("fork-server did not answer in time")
            chunk = os.read(fd, n - len(data))
            if not chunk:
                self.kill()
                raise ServerError("fork-server exited")
            data += chunk
        return data

    @property
    def alive(self) -> bool:
        """True while the server process runs."""
        return self.proc.poll() is None

    def kill(self) -> None:
        """Stop the server at once (its jobs die with it: parent-death signals)."""
        if self.alive:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def close(self) -> None:
        """Ask the server to exit (end of its stdin), then make sure it did."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def _warn_once(info: dict) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    if not info["namespaces"]:
        msg = ("sandbox: Linux namespaces are NOT available (needs root); jobs run WITHOUT network, "
               "pid and filesystem isolation, only rlimits, a private work dir and a new session")
        warnings.warn(msg, RuntimeWarning, stacklevel=4)
        log.warning(msg)
    if info["uid"] is None:
        log.warning("sandbox: not running as root; jobs run under your own uid")
    if info.get("unreadable"):
        msg = (f"sandbox: the interpreter lives under {info['unreadable']}, which the jobs' uid cannot "
               "enter and (without namespaces) cannot be shown; jobs can import only preloaded modules")
        warnings.warn(msg, RuntimeWarning, stacklevel=4)
        log.warning(msg)


class LocalSandbox(Sandbox):
    """Runs jobs on a pool of fork-servers (one per core by default). Safe to share between threads."""

    backend = "local"

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        workers: int | None = None,
        preload: tuple[str, ...] = DEFAULT_PRELOAD,
        python: str | None = None,
    ) -> None:
        super().__init__(limits)
        self.size = workers or os.cpu_count() or 1
        self.preload = tuple(preload)
        self.python = python or sys.executable
        self._free: queue.LifoQueue[ForkServer] = queue.LifoQueue()
        self._all: list[ForkServer] = []
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_all, self._all)

    def new_server(self) -> ForkServer:
        """Start a dedicated server (sessions hold one for their lifetime)."""
        server = ForkServer(self.preload, self.python)
        _warn_once(server.info)
        return server

    def _acquire(self) -> ForkServer:
        while True:
            if self._closed:
                raise RuntimeError("sandbox is closed")
            try:
                return self._free.get(timeout=0.05 if self._all else 0)
            except queue.Empty:
                pass
            with self._lock:
                start = len(self._all) < self.size
                if start:
                    self._all.append(None)  # type: ignore[arg-type]  # reserve the slot
            if start:
                return self._start_reserved()

    def _start_reserved(self) -> ForkServer:
        try:
            server = self.new_server()
        except BaseException:
            with self._lock:
                self._all.remove(None)  # type: ignore[arg-type]
            raise
        with self._lock:
            self._all[self._all.index(None)] = server  # type: ignore[arg-type]
        return server

    def _release(self, server: ForkServer) -> None:
        if server.alive and not self._closed:
            self._free.put(server)
            return
        with self._lock:
            if server in self._all:
                self._all.remove(server)
        server.kill()

    def _execute(self, job: dict[str, Any]) -> dict[str, Any]:
        for attempt in range(2):  # a server that died (killed from outside) is replaced once
            server = self._acquire()
            try:
                result = server.request({"op": "run", "job": job}, job["limits"]["timeout_s"] + 60.0)
                if result.get("leftovers"):  # could not count the job's processes gone: retire it
                    log.warning("sandbox: %d processes outlived a job; replacing its server", result["leftovers"])
                    server.kill()
                return result
            except ServerError as exc:
                if attempt or "in time" in str(exc):
                    return failed_result(str(exc))
            finally:
                self._release(server)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Stop every server; later runs raise RuntimeError."""
        self._closed = True
        with self._lock:
            servers = [s for s in self._all if s is not None]
        _close_all(servers)


def _close_all(servers: list[ForkServer]) -> None:
    for server in list(servers):
        if server is not None:
            server.close()
