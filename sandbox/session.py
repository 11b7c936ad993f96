"""A persistent Python session for multi-turn tools: state survives between `execute` calls."""

from __future__ import annotations

import threading

from .local import DEFAULT_PRELOAD, ForkServer, ServerError, _warn_once
from .types import ExecutionResult, Limits, failed_result, make_job, result_from_dict


class PythonSession:
    """One isolated interpreter whose globals persist across `execute` calls.

    It runs in its own fork-server job with the same isolation and `limits` as `Sandbox.run`;
    `timeout_s` applies to each call, the CPU limit (default 10 x (timeout_s + 1)) to the whole
    session. A call that times out or kills the interpreter ends the session: the next call
    starts a fresh one (its stderr says so). `close()` (or leaving a `with` block) tears it down.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        preload: tuple[str, ...] = DEFAULT_PRELOAD,
        python: str | None = None,
    ) -> None:
        limits = limits or Limits()
        if limits.cpu_s is None:
            limits = limits.replace(cpu_s=10 * (limits.timeout_s + 1))
        self.limits = limits
        self._preload, self._python = tuple(preload), python
        self._server: ForkServer | None = None
        self._open = False
        self._ended_before = False
        self._lock = threading.Lock()
        self._closed = False

    def _start(self) -> None:
        import sys

        if self._server is None or not self._server.alive:
            self._server = ForkServer(self._preload, self._python or sys.executable)
            _warn_once(self._server.info)
        self._server.request({"op": "open", "job": make_job("", self.limits)}, 60.0)
        self._open = True

    def execute(self, code: str) -> ExecutionResult:
        """Run `code` in the session; a final expression's value is printed, as in a REPL."""
        with self._lock:
            if self._closed:
                raise RuntimeError("session is closed")
            note = ""
            if not self._open:
                if self._ended_before:
                    note = "[session restarted: the previous interpreter ended, its state is lost]\n"
                self._start()
            assert self._server is not None
            timeout = self.limits.timeout_s
            try:
                raw = self._server.request({"op": "exec", "code": code, "timeout_s": timeout}, timeout + 60)
            except ServerError as exc:
                raw = {**failed_result(str(exc)), "session_ended": True}
            if raw.get("session_ended"):
                self._open, self._ended_before = False, True
            if note:
                raw["stderr"] = note + raw["stderr"]
            return result_from_dict(raw)

    def close(self) -> None:
        """End the session and its server."""
        with self._lock:
            self._closed = True
            if self._server is not None:
                self._server.close()
                self._server = None

    def __enter__(self) -> PythonSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            server.kill()
