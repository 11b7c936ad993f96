"""The fork-server: a warm interpreter that runs jobs sent by `LocalSandbox` over its stdin/stdout.

Started as a script (`python _server.py MODULES`) so that this directory is sys.path[0] and the
sibling modules import by their top-level names. Frames both ways: 4-byte big-endian length + JSON.
Requests: {"op": "run", "job": {...}}; {"op": "open", "job": {...}} then {"op": "exec", "code",
"timeout_s"} and {"op": "close"} for a session. Startup answers {"ready": isolation summary}.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import struct
import sys
import time

import _isolation  # type: ignore[import-not-found]
import _program  # type: ignore[import-not-found]  # noqa: F401 (preloaded for the jobs)
import _supervisor  # type: ignore[import-not-found]


def read_frame(fd: int) -> dict | None:
    """One frame from `fd`, None at end of file."""
    try:
        (size,) = struct.unpack(">I", _program._read_exact(fd, 4))
        return json.loads(_program._read_exact(fd, size))
    except EOFError:
        return None


def write_frame(fd: int, obj: dict) -> None:
    """Write one frame to `fd`."""
    data = json.dumps(obj).encode()
    os.write(fd, struct.pack(">I", len(data)))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def preload(names: list[str]) -> list[str]:
    """Import modules so every job starts with them loaded; return those that failed."""
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name)
    return failed


class SessionHost:
    """One persistent session job and the requests sent to it."""

    def __init__(self, job: dict, iso: dict) -> None:
        self.proc = _supervisor.start_job(job, iso, session=True)
        self.next_id = 0

    def execute(self, code: str, timeout_s: float) -> dict:
        """Run `code` in the session; kill the session when it overruns `timeout_s`."""
        proc = self.proc
        for fd in (proc["fds"]["out"], proc["fds"]["err"], proc["fds"]["rep"]):
            proc["bufs"][fd].clear()
            proc["seen"][fd] = 0
        self.next_id += 1
        marker = json.dumps({"id": self.next_id})[:-1].encode()
        start = time.monotonic()
        try:
            write_frame(proc["fds"]["req"], {"id": self.next_id, "code": code})
        except OSError:
            pass  # the session died; drain() sees the closed pipes
        answered = drain(proc, start + timeout_s, marker)
        reply = bytes(proc["bufs"][proc["fds"]["rep"]])
        alive = answered and marker in reply and bool(proc["open"])
        if alive:
            _supervisor.read_available(proc)
            result = self._result(b'"error": true' not in reply, start)
            return result
        result = _supervisor.finish_job(proc)
        result["duration_s"] = time.monotonic() - start
        result["session_ended"] = True
        return result

    def _result(self, ok: bool, start: float) -> dict:
        proc, fds = self.proc, self.proc["fds"]
        out, err = bytes(proc["bufs"][fds["out"]]), bytes(proc["bufs"][fds["err"]])
        return {
            "status": "ok" if ok else "error", "exit_code": 0 if ok else 1,
            "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace"),
            "stdout_truncated": proc["seen"][fds["out"]] > len(out),
            "stderr_truncated": proc["seen"][fds["err"]] > len(err),
            "duration_s": time.monotonic() - start, "report": "", "session_ended": False,
        }

    def close(self) -> None:
        """Kill the session and reap it."""
        _supervisor.kill(self.proc)
        _supervisor.finish_job(self.proc)


def drain(proc: dict, deadline: float, marker: bytes) -> bool:
    """Read until the reply with `marker` arrives; False when the session died or overran."""
    ok = _supervisor.drain(proc, deadline, until_report=marker)
    return ok and not proc["timed_out"]


def serve(modules: list[str], container_uid: int | None = None) -> None:
    """Answer requests until stdin closes. In a container (`container_uid` given) jobs run as that
    uid without namespaces; the container is the boundary."""
    # No parent-death signal here: it fires when the *thread* that started us exits. We exit at
    # the end of stdin instead, i.e. when the client process goes away.
    failed = preload(modules)
    iso = _isolation.probe(uid=container_uid, container=container_uid is not None)
    atexit.register(_isolation.remove_cgroups, iso)
    summary = {k: iso[k] for k in ("root", "uid", "namespaces")}
    # Without a mount namespace nothing can make these readable to the job's uid.
    summary["unreadable"] = [top for top, _ in iso["reveal"]] if iso["uid"] is not None and not iso["namespaces"] else []
    write_frame(1, {"ready": {**summary, "cgroup": bool(iso["cgroup"]), "preload_failed": failed}})
    session: SessionHost | None = None
    while (req := read_frame(0)) is not None:
        try:
            session = handle(req, iso, session)
        except Exception:  # e.g. fork or pipe failed: report it, keep serving
            import traceback

            if session is not None:
                try:
                    session.close()
                except Exception:
                    pass
                session = None
            write_frame(1, failed("sandbox server error:\n" + traceback.format_exc()))


def failed(message: str) -> dict:
    """The result of a request that could not be carried out."""
    return {"status": "killed", "exit_code": None, "stdout": "", "stderr": message,
            "stdout_truncated": False, "stderr_truncated": False, "duration_s": 0.0, "report": "",
            "session_ended": True}


def handle(req: dict, iso: dict, session: SessionHost | None) -> SessionHost | None:
    """Answer one request; return the session that is open afterwards."""
    op = req["op"]
    if op == "run":
        write_frame(1, _supervisor.run_job(req["job"], iso))
    elif op == "open":
        session = SessionHost(req["job"], iso)
        write_frame(1, {"opened": True})
    elif op == "exec" and session is None:
        write_frame(1, failed("no open session"))
    elif op == "exec":
        result = session.execute(req["code"], req["timeout_s"])
        if result.get("session_ended"):
            session = None
        write_frame(1, result)
    elif op == "close":
        if session is not None:
            session.close()
            session = None
        write_frame(1, {"closed": True})
    else:
        write_frame(1, {"error": f"bad request {op!r}"})
    return session


if __name__ == "__main__":
    serve([m for m in sys.argv[1].split(",") if m] if len(sys.argv) > 1 else [],
          int(sys.argv[2]) if len(sys.argv) > 2 else None)
