"""The host's side of a workspace runtime (``sandbox/_runtime/_workspace.py``): requests over its pipes.

Both backends run the same runtime: the local one as a process of this host that builds its own
walls, Docker as the container's main process (through ``docker run -i``). :class:`RuntimeWorkspace` speaks
its protocol and implements every :class:`~sandbox.workspace.base.Workspace` method on top; a
backend only starts the process (``_launch``) and ends what it made (``_teardown``). Trees travel
as raw frames straight between the runtime and a :class:`~sandbox.workspace.base.Tree`'s spooled
file, a frame at a time: a large tree never sits whole in this process's memory.
"""

from __future__ import annotations

import base64
import io
import json
import os
import select
import struct
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterable
from typing import Any

from .base import (
    BuildError,
    CommandResult,
    FileEntry,
    Tree,
    TreeTooLarge,
    Workspace,
    WorkspaceError,
    WorkspaceSpec,
    resolve,
)

RUNTIME_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_runtime")
FRAME = 1 << 20  # archive bytes per raw frame (the runtime's ``_ws_tree.FRAME``)
MARGIN_S = 15.0  # an answer may come this much later than the command's own timeout
BUILD_RUN_TIMEOUT_S = 600.0


class RuntimeWorkspace(Workspace):
    """A workspace served by a runtime process; see the module docstring."""

    backend = "runtime"

    def __init__(self, spec: WorkspaceSpec, tree: Tree | None = None, bare: bool = False) -> None:
        self.spec, self.proc = spec, None
        self._lock = threading.Lock()
        self.closed = False
        self.bare = bare
        self.broken = False  # a request failed on the pipes (or timed out): the runtime is not to be trusted
        self.info: dict[str, Any] = {}
        try:
            self.info = self._start_runtime()
            self._started()
            if not bare:
                self._prepare(tree)
        except BaseException:
            self.close()
            raise

    def receive(self, tree: Tree, spec: WorkspaceSpec | None = None) -> None:
        """Fill a bare workspace (started ahead, holding nothing: ``open_workspace(..., bare=True)``) with
        ``tree``, as if it had been opened with it; ``spec`` (same limits and workdir) names it from now on."""
        if not self.bare:
            raise WorkspaceError(f"{self.spec.name}: only a bare workspace receives a tree")
        if spec is not None:
            if (spec.limits, spec.workdir) != (self.spec.limits, self.spec.workdir):
                raise WorkspaceError(f"{spec.name}: a bare workspace of other limits or workdir cannot hold it")
            self.spec = spec
        self.bare = False
        try:
            self._prepare(tree)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- what a backend provides
    def _start_runtime(self) -> dict[str, Any]:
        """Start the runtime (``self.proc``) and configure it; its ``ready`` answer."""
        self.proc = self._launch()
        uid = self._uid()
        cfg = {"uid": uid, "grader_uid": self._grader_uid(uid), "limits": _limits(self.spec), "workdir": "/",
               "env": {}, "owner": os.getpid(), "tree_workdir": self.spec.workdir}
        return self._request(cfg, 120.0, first=True)["ready"]

    def _launch(self) -> subprocess.Popen:
        raise NotImplementedError

    def _uid(self) -> int:
        raise NotImplementedError

    def _grader_uid(self, uid: int) -> int:
        """The grader's uid in a workspace whose agent (the testee, when graded) is ``uid``."""
        raise NotImplementedError

    def _teardown(self) -> None:
        pass

    def _build(self) -> None:
        """Apply the spec's build steps (the local backend; Docker's image already holds them)."""
        for step in self.spec.steps:
            self._step(step)

    # ---------------------------------------------------------------- start
    def _started(self) -> None:
        """Called once the runtime answered its configuration (a backend reads what its start made)."""

    def _prepare(self, tree: Tree | None) -> None:
        if tree is None:
            self._build()
        else:
            self._request({"op": "restore"}, 300.0, send=tree.chunks(FRAME))
        self._request({"op": "mkdir", "path": self.spec.workdir}, 30.0)
        self._request({"op": "workdir", "path": self.spec.workdir}, 30.0)
        if self.spec.env:
            self._request({"op": "setenv", "vars": dict(self.spec.env)}, 30.0)
        if tree is None:  # the first state, kept by the runtime for diffs
            self._request({"op": "mark"}, 300.0)
        self.marked = tree is None

    def _step(self, step: Any) -> None:
        kind, args = step.kind, step.args
        if kind == "workdir":
            path = resolve(self._workdir_now, args[0])
            self._request({"op": "mkdir", "path": path}, 30.0)
            self._request({"op": "workdir", "path": path}, 30.0)
            self._workdir_now = path
        elif kind == "env":
            self._request({"op": "setenv", "vars": {args[0]: args[1]}}, 30.0)
        elif kind == "copy":
            from .dockerfile import copy_archive

            dest, data = copy_archive(self.spec.context, list(args[:-1]), args[-1], self._workdir_now)
            self.put_archive(dest, data)
        elif kind == "run":
            r = self.exec(args[0], timeout_s=BUILD_RUN_TIMEOUT_S)
            if r.exit_code != 0:
                from .dockerfile import run_failed

                raise BuildError(run_failed(f"{self.spec.name}: RUN at line {step.line}", args[0], r.output, r.exit_code))
        else:
            raise BuildError(f"{self.spec.name}: unknown build step {kind!r}")

    _workdir_now = "/"

    # ---------------------------------------------------------------- the interface
    def exec(self, command: str, timeout_s: float = 30.0) -> CommandResult:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        out = self._request({"op": "exec", "command": command, "timeout_s": timeout_s}, timeout_s + MARGIN_S)
        return CommandResult(out["exit_code"], out["output"], out["timed_out"], out["truncated"],
                             out["duration_s"], timeout_s, out["shell_restarted"])

    def read_file(self, path: str, max_bytes: int = 1 << 20) -> bytes:
        out = self._request({"op": "read", "path": resolve(self.spec.workdir, path), "max_bytes": max_bytes}, 60.0,
                            user_error=True)
        return base64.b64decode(out["data"])

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        raw = data.encode() if isinstance(data, str) else data
        self._request({"op": "write", "path": resolve(self.spec.workdir, path), "mode": mode,
                       "data": base64.b64encode(raw).decode()}, 60.0, user_error=True)

    def list(self, path: str = ".") -> list[FileEntry]:
        out = self._request({"op": "list", "path": resolve(self.spec.workdir, path)}, 60.0, user_error=True)
        return [FileEntry(*e) for e in out["entries"]]

    def snapshot(self) -> Tree:
        return self._download("snapshot")

    def restore(self, tree: Tree) -> None:
        self._request({"op": "restore"}, 300.0, send=tree.chunks(FRAME))
        self._request({"op": "workdir", "path": self.spec.workdir}, 30.0)
        if self.spec.env:
            self._request({"op": "setenv", "vars": dict(self.spec.env)}, 30.0)

    def seal(self) -> Tree:
        return self._download("seal")

    def diff(self) -> str:
        if not self.marked:
            raise WorkspaceError("this workspace was opened on a given tree: it has no initial tree to diff")
        try:
            return self._request({"op": "diff"}, 300.0)["diff"]
        except WorkspaceError as e:
            raise _too_large(e) from None

    def put_archive(self, dest: str, data: bytes) -> None:
        """Unpack the tar ``data`` under ``dest`` (owned by the agent)."""
        self._request({"op": "put", "dest": dest}, 300.0, send=(data[i:i + FRAME] for i in range(0, len(data), FRAME)))

    def _download(self, op: str) -> Tree:
        tree = Tree()
        try:
            out = self._request({"op": op}, 300.0, receive=tree)
        except WorkspaceError as e:
            raise _too_large(e) from None
        tree.diff, tree.unchanged, tree.digest = out.get("diff"), out.get("unchanged"), out.get("digest")
        return tree

    def put_dir(self, host_dir: str, dest: str) -> None:
        """Copy a host directory's contents to ``dest`` in the workspace."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name in sorted(os.listdir(host_dir)):
                tar.add(os.path.join(host_dir, name), arcname=name)
        self.put_archive(dest, buf.getvalue())

    def grade(self, argv: list[str], timeout_s: float) -> dict[str, Any]:
        from .testee_hook import hook_bytes

        req = {"op": "grade", "argv": list(argv), "timeout_s": timeout_s,
               "hook": base64.b64encode(hook_bytes()).decode()}
        return self._request(req, timeout_s + MARGIN_S + 30.0)

    def runtime_max_rss_kb(self) -> int:
        """The runtime process's peak resident memory in kB (tests: a tree never sits in it whole)."""
        return int(self._request({"op": "ping"}, 30.0)["max_rss_kb"])

    def process_count(self) -> int:
        """Processes of the workspace besides its runtime and shell's own (tests, leak checks)."""
        return int(self._request({"op": "ping"}, 30.0)["pids"])

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        proc, self.proc = self.proc, None
        if proc is not None:
            end_runtime(proc)
        self._teardown()

    # ---------------------------------------------------------------- the protocol
    def _request(self, obj: dict, timeout_s: float, first: bool = False, user_error: bool = False,
                 send: Iterable[bytes] | None = None, receive: Tree | None = None) -> dict:
        """One request and its answer; ``send``: an archive that follows the request as raw frames;
        ``receive``: where the archive that precedes the answer goes."""
        if self.bare and not first and obj.get("op") != "ping":
            raise WorkspaceError(f"{self.spec.name}: a bare workspace holds nothing yet (receive a tree first)")
        with self._lock:
            proc = self.proc
            if proc is None or self.closed and not first:
                raise WorkspaceError(f"{self.spec.name}: the workspace is closed")
            data = json.dumps(obj).encode()
            deadline = time.monotonic() + timeout_s
            try:
                proc.stdin.write(struct.pack(">I", len(data)) + data)
                if send is not None:
                    for block in send:
                        proc.stdin.write(struct.pack(">I", len(block)) + block)
                    proc.stdin.write(struct.pack(">I", 0))
                proc.stdin.flush()
                if receive is not None:
                    self._receive(proc, receive, deadline)
                out = self._answer(proc, deadline)
            except (BrokenPipeError, EOFError, OSError) as e:
                self.broken = True
                raise WorkspaceError(f"{self.spec.name}: the workspace ended ({self._why()})") from e
        if "error" in out:
            if user_error:
                raise OSError(out["error"])
            raise WorkspaceError(f"{self.spec.name}: {out['error']}")
        return out

    def _receive(self, proc: subprocess.Popen, tree: Tree, deadline: float) -> None:
        """Raw frames into ``tree`` until the empty one."""
        while True:
            size = struct.unpack(">I", self._read_exact(proc, 4, deadline))[0]
            if size == 0:
                return
            tree.write(self._read_exact(proc, size, deadline))

    def _answer(self, proc: subprocess.Popen, deadline: float) -> dict:
        head = self._read_exact(proc, 4, deadline)
        return json.loads(self._read_exact(proc, struct.unpack(">I", head)[0], deadline))

    def _read_exact(self, proc: subprocess.Popen, n: int, deadline: float) -> bytes:
        fd, out = proc.stdout.fileno(), bytearray()
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.broken = True
                proc.kill()
                raise WorkspaceError(f"{self.spec.name}: the workspace stopped answering")
            chunk = os.read(fd, n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return bytes(out)

    def _why(self) -> str:
        if self.proc is not None and self.proc.poll() is None:
            try:  # its pipe closes a moment before its exit is seen
                self.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None and self.proc.poll() is not None:
            return f"its runtime exited with {self.proc.returncode}: closed, TTL or idle timeout"
        return "its runtime closed its pipe"


def end_runtime(proc: Any) -> None:
    """End a runtime process: close its pipes (it exits at the end of its input), wait, else kill it."""
    end_runtimes([proc])


def end_runtimes(procs: list[Any]) -> None:
    """``end_runtime`` of several at once: every pipe closed first, then each waited for (their teardowns,
    cgroups removed included, overlap: a process ending its parked runtimes at exit ends them in one wait)."""
    for proc in procs:
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
    deadline = time.monotonic() + 10
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _too_large(e: WorkspaceError) -> WorkspaceError:
    """A runtime's refusal of a tree past the task's storage as :class:`TreeTooLarge` (the agent's doing)."""
    return TreeTooLarge(str(e).replace("TreeTooLarge: ", "")) if "larger than the task's storage" in str(e) else e


def _limits(spec: WorkspaceSpec) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(spec.limits)
