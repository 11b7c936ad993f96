"""A workspace's runtime: one persistent shell and the file operations, served to the host.

Started by ``sandbox.workspace`` as ``python -E -s -S _workspace.py MODE`` with MODE ``local`` (the
runtime builds its own walls first: ``_ws_root``) or ``container`` (inside a Docker container, whose
walls Docker made). Frames both ways on stdin/stdout (``_ws_common``): JSON requests and answers;
trees and archives travel as raw frames (``_ws_tree``) after the request that sends one (``put``,
``restore``) or before the answer to one that reads one (``snapshot``, ``seal``), so that neither
side ever holds a whole tree. The first frame is the configuration; the runtime answers ``{"ready": ...}``, then one answer per
request. It exits at the end of its input (the host closed it or died), at its TTL, or after
``idle_s`` without a request; in local mode its exit ends every process of the workspace. In local mode
``reset`` readies it for another episode instead of ending it (see :func:`reset`).

**The shell.** One ``bash`` with job control on (``set -m``: every command runs in its own process
group), started with the first command (a grading workspace never starts one), reading commands from a pipe, its stdout and stderr one stream. A command is wrapped so that
it cannot read the protocol (stdin is ``/dev/null``), a syntax error is its own (``eval``), and it
ends with a line holding a per-command random marker, its exit status and working directory; after
each command the working directory and exported variables are saved. A command past its timeout:
the process groups it started are SIGKILLed (its background jobs too) and so is the shell (the rest
of the command line must not run on), and a new shell starts in the saved directory with the saved
variables; a shell that exited (``exit``) is replaced the same way. Background jobs of earlier
commands keep running through both.

Standard library only, every module imported before the root pivots (the interpreter's own files
are not in the workspace).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
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
    reap_children,
    write_frame,
)

if sys.argv[1:2] in (["local"], ["zygote"]):
    import _ws_root  # type: ignore[import-not-found]  # noqa: F401 (imported before the pivot)

STATE = "/run/agentrl"
HARNESS_EVAL = re.compile(r"^(\S*bash): eval: line (\d+):", re.M)
"""The ``eval`` that runs each command names itself in bash's errors, with the shell's input line: the agent sees
``bash: line N:`` with N the line of its own command, as ``bash -c`` would say."""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_libc = ctypes.CDLL(None, use_errno=True)


class Runtime:
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

    # -------------------------------------------------------------- the shell
    def start_shell(self, restore: bool) -> None:
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                self.as_agent()
                os.dup2(r_in, 0)
                os.dup2(w_out, 1)
                os.dup2(w_out, 2)
                os.closerange(3, 1 << 16)
                for d in (self.cwd if restore else self.workdir, self.workdir, "/"):
                    try:
                        os.chdir(d)
                        break
                    except OSError:
                        continue
                os.execve("/bin/bash", ["bash", "--norc", "--noprofile"], self.env)
            finally:
                os._exit(127)
        os.close(r_in)
        os.close(w_out)
        self.shell_pid, self.shell_in, self.shell_out = pid, w_in, r_out
        setup = "set -m 2>/dev/null; unset HISTFILE\n"
        if restore:
            setup += f". {STATE}/env 2>/dev/null; cd {shlex.quote(self.cwd)} 2>/dev/null\n"
        self.send(setup)

    def send(self, text: str) -> None:
        view = memoryview(text.encode())
        try:
            while view:
                view = view[os.write(self.shell_in, view):]
        except BrokenPipeError:
            pass  # the shell is gone: the command's marker never comes and the shell restarts

    def stop_shell(self) -> None:
        if self.shell_pid > 0:
            try:
                os.killpg(self.shell_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for fd in (self.shell_in, self.shell_out):
                os.close(fd)
            self.reap()
            self.shell_pid = self.shell_in = self.shell_out = -1

    reap = staticmethod(reap_children)

    def drain(self) -> None:
        """Output of background jobs between commands (it leads the next command's output)."""
        while self.shell_out >= 0 and select.select([self.shell_out], [], [], 0)[0]:
            data = os.read(self.shell_out, 65536)
            if not data:
                return
            self.pending.add(data)

    def exec(self, command: str, timeout_s: float) -> dict:
        if self.sealed:
            return {"error": "the workspace is sealed: its processes ended for grading"}
        if self.shell_pid < 0:  # started on the first command (after a restore: afresh)
            self.start_shell(restore=False)
        self.drain()
        cap, self.pending = self.pending, Capture(int(self.limits["max_output_bytes"]))
        nonce = os.urandom(12).hex()
        before = set(processes().values())
        self.send(f"IFS= read -r -d '' __agentrl_cmd <<'AGENTRL_{nonce}'\n{command}\nAGENTRL_{nonce}\n"
                  f"__agentrl_line=$LINENO; eval \"$__agentrl_cmd\" < /dev/null\n__agentrl_rc=$?\n"
                  f"export -p 2>/dev/null > {STATE}/env\n"
                  f"printf '\\n{nonce} %d %d %s\\n' \"$__agentrl_rc\" \"$__agentrl_line\" \"$PWD\"\n")
        start = time.monotonic()
        found = self.read_until(cap, nonce.encode(), start + timeout_s)
        timed_out = found is None and time.monotonic() >= start + timeout_s  # else: the shell's output ended
        if found is None:  # past its timeout, or the shell exited (``exit``): a new shell, the saved state
            if timed_out:  # the shell first: the rest of the command line must not run on
                os.kill(self.shell_pid, signal.SIGKILL)
                self.kill_new_groups(before)
            self.read_until(cap, b"", time.monotonic() + 0.2)  # what the killed command printed last
            self.stop_shell()
            self.start_shell(restore=True)
            code, cut = None, 0
        else:
            code, cut, self.cwd, base = found
        output, truncated = cap.result(cut)
        if found is not None:  # bash numbers the eval's lines from the shell's input: the command's own instead
            output = HARNESS_EVAL.sub(lambda m: f"{m[1]}: line {max(1, int(m[2]) - base + 1)}:", output)
        return {"exit_code": code, "output": output, "timed_out": timed_out, "truncated": truncated,
                "duration_s": time.monotonic() - start, "shell_restarted": found is None and not timed_out}

    def read_until(self, cap: Capture, nonce: bytes, deadline: float) -> tuple[int, int, str, int] | None:
        """Read the shell's output into ``cap`` until the marker line: (status, its length, cwd, the shell's
        input line of the command's ``eval``)."""
        while True:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                return None
            if not select.select([self.shell_out], [], [], min(timeout, 0.5))[0]:
                self.reap()
                continue
            data = os.read(self.shell_out, 65536)
            if not data:
                return None
            cap.add(data)
            if not nonce:
                continue
            tail = cap.last(8192)
            at = tail.rfind(b"\n" + nonce + b" ")
            if at >= 0 and tail.endswith(b"\n"):
                _, status, line, cwd = (tail[at + 1:-1].decode("utf-8", "replace").split(" ", 3) + [""])[:4]
                return int(status), len(tail) - at, cwd or self.cwd, int(line or 1)

    def kill_new_groups(self, before: set[int]) -> None:
        """SIGKILL every process group that appeared since the command started (not the shell's)."""
        for _ in range(100):
            groups = {g for p, g in processes().items() if p not in self.keep} - before - {self.shell_pid, 0}
            if not groups:
                return
            for g in groups:
                try:
                    os.killpg(g, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)
            self.reap()

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
