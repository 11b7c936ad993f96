"""The slow path of :mod:`rewards.math`: Math-Verify/sympy comparisons in a helper process.

Why a process: sympy can run for minutes on adversarial input (``10^{10^{10}}``, huge
factorials) and such work cannot be interrupted from another thread; ``signal.alarm`` (what
Math-Verify uses) only works in the main thread. Here every comparison gets a hard deadline that
works from any thread: the caller waits on the helper's pipe with ``select`` and kills the helper
when the deadline passes (a fresh one starts on the next call). Parsed gold answers are cached in
the helper (``lru_cache``), so each gold string is parsed once.

One helper per calling process (re-created after ``fork``); calls are serialised with a lock.
The protocol is JSON lines on stdin/stdout: ``{"id", "pred", "gold", "float_rounding"}`` ->
``{"id", "eq": true | false | null, "error"?}``.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import select
import subprocess
import sys
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

STARTUP_TIMEOUT_S = 60.0


class SympyWorker:
    """A lazily started helper process that compares two answers with a deadline."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._buf = b""
        self._ready = False
        self._ids = itertools.count()
        self.restarts = 0

    def equal(self, pred: str, gold: str, *, timeout_s: float, float_rounding: int = 6) -> bool | None:
        """True/False from Math-Verify; ``None`` when it timed out or failed."""
        with self._lock:
            self._ensure_started()
            assert self._proc is not None and self._proc.stdin is not None
            rid = next(self._ids)
            req = {"id": rid, "pred": pred, "gold": gold, "float_rounding": float_rounding}
            try:
                self._proc.stdin.write(json.dumps(req).encode() + b"\n")
                self._proc.stdin.flush()
                while True:
                    msg = self._read_message(time.monotonic() + timeout_s)
                    if msg is None:
                        self._kill()
                        self._spawn()  # warm a fresh helper in the background for the next call
                        return None
                    if msg.get("id") == rid:
                        return msg.get("eq")
            except BaseException:
                self._kill()
                self._spawn()
                raise

    def start(self, wait: bool = True) -> None:
        """Start the helper now instead of on the first call (``wait``: until it is ready)."""
        with self._lock:
            if self._pid != os.getpid() or self._proc is None or self._proc.poll() is not None:
                self._pid = os.getpid()
                self._spawn()
            if wait:
                self._ensure_started()

    def close(self) -> None:
        """Stop the helper process (a new one starts on the next call)."""
        with self._lock:
            self._kill()

    def _ensure_started(self) -> None:
        if self._pid != os.getpid():  # forked: the helper belongs to the parent
            self._proc, self._pid, self._buf, self._ready = None, os.getpid(), b"", False
        if self._proc is None or self._proc.poll() is not None:
            self._spawn()
        if not self._ready:
            if self._read_message(time.monotonic() + STARTUP_TIMEOUT_S) is None:
                self._kill()
                raise RuntimeError("the sympy helper process did not start")
            self._ready = True

    def _spawn(self) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from rewards._sympy_worker import main; main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self._buf, self._ready = b"", False

    def _read_message(self, deadline: float) -> dict[str, Any] | None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _kill(self) -> None:
        if self._proc is not None and self._pid == os.getpid():
            self.restarts += 1
            self._proc.kill()
            self._proc.wait()
        self._proc, self._buf, self._ready = None, b"", False


_WORKER = SympyWorker()
atexit.register(_WORKER.close)


def prestart(wait: bool = False) -> None:
    """Start this process's helper now (in the background unless ``wait``), ahead of any item."""
    _WORKER.start(wait=wait)


def sympy_equal(pred: str, gold: str, *, timeout_s: float, float_rounding: int = 6) -> bool | None:
    """Compare two normalised answers with Math-Verify in the helper process (see module doc)."""
    return _WORKER.equal(pred, gold, timeout_s=timeout_s, float_rounding=float_rounding)


# ---- inside the helper process -------------------------------------------------------------


@lru_cache(maxsize=16384)
def _parse(answer: str) -> list[Any]:
    from math_verify import parse

    return parse(f"${answer}$", parsing_timeout=None)


def _compare(pred: str, gold: str, float_rounding: int) -> bool:
    from math_verify import verify

    g, p = _parse(gold), _parse(pred)
    if not g or not p:
        return False
    return bool(verify(g, p, float_rounding=float_rounding, timeout_seconds=None))


def main() -> None:
    """Helper loop: one JSON request per line in, one JSON answer per line out."""
    import logging

    logging.disable(logging.WARNING)
    _compare("x^2+\\frac{1}{2}", "\\sqrt{2}", 6)  # warm up imports and parser before saying ready

    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        req = json.loads(line)
        resp: dict[str, Any] = {"id": req["id"]}
        try:
            resp["eq"] = _compare(req["pred"], req["gold"], int(req.get("float_rounding", 6)))
        except Exception as e:  # noqa: BLE001 - any sympy failure is "not equal", reported
            resp["eq"], resp["error"] = False, repr(e)[:300]
        out.write(json.dumps(resp).encode() + b"\n")
        out.flush()
