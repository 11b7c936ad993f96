"""A workspace's runtime: one persistent shell and the file operations, served to the host.

Started by ``sandbox.workspace`` as ``python -E -s -S _workspace.py MODE`` with MODE ``local`` (the
runtime builds its own walls first: ``_ws_root``) or ``container`` (inside a Docker container, whose
walls Docker made). Frames both ways on stdin/stdout (``_ws_common``): JSON requests and answers;
trees and archives travel as raw frames (``_ws_tree``) after the request that sends one (``put``,
``restore``) or before the answer to one that reads one (``snapshot``, ``seal``), so that neither
side ever holds a whole tree. The first frame is the configuration; the runtime answers
``{"ready": ...}``, then one answer per request. It exits at the end of its input (the host closed it or died), at its TTL, or after
``idle_s`` without a request; in local mode its exit ends every process of the workspace. In local mode
``reset`` readies it for another episode instead of ending it (see :func:`reset`).

**The shell** is ``_ws_shell.Shell``'s (a base of :class:`Runtime`).

Standard library only, every module imported before the root pivots (the interpreter's own files
are not in the workspace).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shlex
import signal
import sys
import time

import _ws_files as files  # type: ignore[import-not-found]
import _ws_grade as grading  # type: ignore[import-not-found]
import _ws_tree as trees  # type: ignore[import-not-found]
from _ws_common import (  # type: ignore[import-not-found]
    IGNORED,
    Capture,
    default_signals,
    parent_of,
    processes,
    read_frame,
    write_frame,
)
from _ws_shell import STATE, Shell  # type: ignore[import-not-found]

if sys.argv[1:2] in (["local"], ["zygote"]):
    import _ws_root  # type: ignore[import-not-found]  # noqa: F401 (imported before the pivot)

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_libc = ctypes.CDLL(None, use_errno=True)


class Runtime(Shell):
    """The served workspace (see the module docstring)."""

    def __init__(self, cfg: dict, cgroup_fds: list[int]) -> None:
        self.cfg, self.cgroup_fds = cfg, cgroup_fds
        self.uid, self.limits = int(cfg["uid"]), cfg["limits"]
        image_env = dict(os.environ) if cfg.get("container") else {}  # a Docker image's ENV lines
        self.env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", **image_env, "TERM": "dumb", "PAGER": "cat",
                    "GIT_PAGER": "cat", **cfg.get("env", {})}
        self.workdir = self.cwd = cfg.get("workdir", "/")
        self.keep = {1, os.getpid()} | self._ancestors()  # never signalled: pid 1, this runtime, its parents
        self.shell_pid = self.shell_in = self.shell_out = -1
        self.pending = Capture(int(self.limits["max_output_bytes"]))  # output between commands
        self.sealed = False
        self.marked: trees.Marked | None = None  # the tree's first state, for the diff
        self.grader_uid = int(cfg.get("grader_uid", self.uid + 1))
        os.makedirs(STATE, mode=0o700, exist_ok=True)
        os.chown(STATE, self.uid, self.uid)

    @staticmethod
    def _ancestors() -> set[int]:
        out, pid = set(), os.getppid()
        while pid > 1:
            out.add(pid)
            pid = parent_of(pid)
        return out

    # -------------------------------------------------------------- children as the agent
    def as_agent(self) -> None:
        """In a freshly forked child: join the cgroups, a new session, the agent's uid, no new privileges."""
        default_signals()
        for fd in self.cgroup_fds:
            os.write(fd, b"0")
        os.setsid()
        if os.getuid() == 0 and self.uid != 0:
            os.setgroups([])
            os.setresgid(self.uid, self.uid, self.uid)
            os.setresuid(self.uid, self.uid, self.uid)
        _libc.prctl(38, ctypes.c_ulong(1), 0, 0, 0)  # PR_SET_NO_NEW_PRIVS

    def agent_call(self, fn, *args) -> dict:
        """``fn(*args)`` (a dict) in a child that runs as the agent; errors come back as {"error"}."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                self.as_agent()
                try:
                    out = fn(*args)
                except OSError as e:
                    out = {"error": f"{e.strerror or e}: {e.filename or args[0]}"}
                except Exception as e:  # noqa: BLE001 - reported to the host
                    out = {"error": f"{type(e).__name__}: {e}"}
                write_frame(w, out)
            finally:
                os._exit(0)
        os.close(w)
        deadline = time.monotonic() + 30.0
        while not select.select([r], [], [], 0.5)[0]:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                break
        out = read_frame(r) if select.select([r], [], [], 0)[0] else None
        os.close(r)
        os.waitpid(pid, 0)
        return out if out is not None else {"error": "the file operation did not finish"}

    # -------------------------------------------------------------- requests
    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "exec":
            return self.exec(req["command"], float(req["timeout_s"]))
        if op == "read":
            return self.agent_call(files.read_file, req["path"], int(req["max_bytes"]))
        if op == "write":
            return self.agent_call(files.write_file, req["path"], req["data"], int(req["mode"]))
        if op == "list":
            return self.agent_call(files.list_dir, req["path"])
        if op == "put":
            self.extract(req["dest"])
            return {}
        if op == "mkdir":
            os.makedirs(req["path"], exist_ok=True)
            os.chown(req["path"], self.uid, self.uid)
            return {}
        if op == "setenv":
            self.env.update(req["vars"])
            if self.shell_pid > 0:  # else the shell starts with them
                self.send("".join(f"export {k}={shlex.quote(v)}\n" for k, v in req["vars"].items()))
            return {}
        if op == "workdir":
            self.workdir = self.cwd = req["path"]
            if self.shell_pid > 0:  # else the shell starts there
                self.send(f"cd {shlex.quote(req['path'])}\n")
            return {}
        if op in ("snapshot", "seal"):
            return self.tree(seal=op == "seal")
        if op == "mark":
            self.marked = trees.Marked(self.roots())
            return {"entries": len(self.marked.entries)}
        if op == "diff":
            with self.stopped():
                trees.check_size(self.roots(), int(self.limits["storage_mb"]) << 20)  # nothing huge is read
                return {"diff": self.marked.diff(trees.manifest(self.roots())) if self.marked else None}
        if op == "restore":
            files.end_all(self.keep, self.reap)
            self.stop_shell()
            files.wipe_tree(self.roots())
            self.extract("/")
            self.cwd = self.workdir  # a fresh shell starts with the next command (a grader never needs one)
            return {}
        if op == "grade":
            return grading.grade(self, req)
        if op == "ping":
            return {"pids": len([p for p in processes() if p not in self.keep]), "max_rss_kb": max_rss_kb()}
        return {"error": f"unknown request {op!r}"}

    def roots(self) -> list[str]:
        """The top-level directories of the tree (see ``_ws_tree.default_roots``, ``_ws_files.container_roots``)."""
        return files.container_roots(self.cfg.get("tree_workdir", "/")) if self.cfg.get("container") \
            else trees.default_roots()

    def extract(self, dest: str) -> None:
        """Unpack the archive that follows the request, as raw frames, under ``dest`` (the agent's)."""
        source = trees.FrameReader(0)
        try:
            files.extract(source, dest, self.uid)
        finally:
            source.drain()

    @contextlib.contextmanager
    def stopped(self):
        """The agent's processes stopped while the tree is read (so nothing changes under the archive)."""
        files.signal_all(signal.SIGSTOP, self.keep)
        try:
            yield
        finally:
            files.signal_all(signal.SIGCONT, self.keep)

    def tree(self, seal: bool) -> dict:
        """Send the tree as raw frames (see the module docstring), then its size and its diff against
        the first state; ``seal`` ends every process first, for good."""
        if seal:
            self.sealed = True
            self.stop_shell()
            files.end_all(self.keep, self.reap)
        with contextlib.nullcontext() if seal else self.stopped():
            roots = self.roots()
            try:
                trees.check_size(roots, int(self.limits["storage_mb"]) << 20)
            except trees.TreeTooLarge as e:
                trees.FrameWriter(1).close()
                return {"error": str(e), "too_large": True}
            archived: dict[str, str] = {}
            entries = trees.stream_tree(roots, 1, archived)
            out: dict = {"entries": len(entries), "digest": trees.tree_digest(entries, archived)}
            if self.marked is not None:
                out.update(diff=self.marked.diff(entries), unchanged=self.marked.unchanged(entries))
        return out


def max_rss_kb() -> int:
    """The runtime's peak resident memory (kB)."""
    with open("/proc/self/status") as f:
        return next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)


def serve(rt: Runtime) -> str:
    """Answer requests until the input ends, the TTL or the idle timeout; the reason."""
    ttl_end = time.monotonic() + float(rt.limits["ttl_s"])
    last, idle_s = time.monotonic(), float(rt.limits["idle_s"])
    while True:
        now = time.monotonic()
        wait = min(ttl_end - now, last + idle_s - now)
        if wait <= 0:
            return "ttl" if ttl_end <= now else "idle"
        fds = [0] + ([rt.shell_out] if rt.shell_out >= 0 else [])
        ready = select.select(fds, [], [], min(wait, 1.0))[0]
        if rt.shell_out in ready:
            rt.drain()
        if 0 in ready:
            req = read_frame(0)
            if req is None:
                return "closed"
            last, idle_s = time.monotonic(), float(rt.limits["idle_s"])
            if req.get("op") == "reset":
                fresh, out = reset(rt, req)
                write_frame(1, out)
                if fresh is None:
                    return "reset failed"
                rt, ttl_end = fresh, time.monotonic() + float(fresh.limits["ttl_s"])
                idle_s = float(req.get("park_s", idle_s))  # parked: ends sooner unless the next episode comes
                continue
            try:
                out = rt.handle(req)
            except Exception as e:  # noqa: BLE001 - one failed request is the host's to report
                out = {"error": f"{type(e).__name__}: {e}"}
            write_frame(1, out)
        rt.reap()


def reset(rt: Runtime, req: dict) -> tuple[Runtime | None, dict]:
    """The runtime made ready for another episode (local mode; the host's ``LocalWorkspace.recycle``): every
    process of the last one ended, new ipc and network namespaces, a fresh root (``_ws_root.renew``), the new
    agent and grader uids ``req`` names, a fresh shell state; its answer is a start's. (None, the error)
    when that cannot be done for certain: the runtime then ends, as a closed one does."""
    try:
        if rt.cfg.get("container"):
            raise RuntimeError("only a local workspace is reset")
        rt.stop_shell()
        files.end_all(rt.keep, rt.reap)
        left = [p for p in processes() if p not in rt.keep]
        if left:
            raise RuntimeError(f"{len(left)} processes of the episode are still there")
        cfg = {**rt.cfg, "uid": int(req["uid"]), "grader_uid": int(req["grader_uid"])}
        _ws_root.renew(cfg)
        fresh = Runtime(cfg, rt.cgroup_fds)
    except Exception as e:  # noqa: BLE001 - the host closes this runtime instead
        return None, {"error": f"the workspace could not be reset: {type(e).__name__}: {e}"}
    return fresh, {"ready": {"pid": os.getpid(), "uid": fresh.uid}}


def main() -> None:
    mode = sys.argv[1]
    if mode == "zygote":
        import _ws_zygote  # type: ignore[import-not-found]

        _ws_zygote.serve_forks(int(sys.argv[2]), lambda: run("local"))
    else:
        run(mode)


def run(mode: str) -> None:
    """Serve one workspace on stdin/stdout (``local``: after building its walls; ``container``)."""
    cfg = read_frame(0)
    if cfg is None:
        return
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)  # only the end of its input (or SIGKILL) ends a runtime
    try:
        if mode != "local":  # orphans of the agent come to this runtime, which reaps them
            _libc.prctl(36, ctypes.c_ulong(1), 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        fds = _ws_root.enter(cfg) if mode == "local" else []
        cfg["container"] = mode == "container"
        if cfg["container"]:
            files.prepare_container(int(cfg["uid"]), files.container_roots(cfg.get("tree_workdir", "/")))
        rt = Runtime(cfg, fds)  # its shell starts with the first command
    except Exception as e:  # noqa: BLE001 - the host reports why the workspace could not start
        write_frame(1, {"error": f"{type(e).__name__}: {e}"})
        return
    write_frame(1, {"ready": {"pid": os.getpid(), "uid": rt.uid}})
    serve(rt)
    if mode != "local":  # a container's workspace ends here too (local: the namespace's end does it)
        files.end_all(rt.keep, rt.reap)


if __name__ == "__main__":
    main()
