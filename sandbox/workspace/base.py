"""The records and the base class every workspace backend shares.

A workspace is one episode's computer: a file tree and a shell whose state (working directory,
environment variables, background jobs) persists between commands. ``exec`` runs one command in
that shell; a command past its timeout is killed and returns its partial output with a note, and
the episode goes on. The tree can be read and written from outside (``read_file``, ``write_file``,
``list``), archived (``snapshot``/``restore``) and compared with its first state (``diff``).

**The graded tree.** ``seal()`` ends every process of the workspace and returns its *tree*: a tar of
every directory the agent could write, except the system (read-only on the local backend, restored
from the task's image on Docker), the files directly in ``/`` (where ``pytest.ini`` or
``conftest.py`` would steer a verifier's test discovery), ``/tests`` and ``/logs/verifier`` (the
grader's own). A grader opens a fresh workspace on that tree (``open_workspace(spec, tree=...)``):
no process of the agent is alive there, and what it left outside its tree is gone.
"""

from __future__ import annotations

import dataclasses
import io
import posixpath
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# Top-level directories that are the system's, never the agent's tree (Docker restores them from the
# task's image; the local backend mounts them read-only or generates them).
SYSTEM_DIRS = frozenset({"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin",
                         "sys", "usr", "var", "tests"})
GRADER_DIRS = ("/tests", "/logs/verifier")  # the grader's: fresh and empty in every workspace
SPOOL_BYTES = 4 << 20  # a tree larger than this waits on disk, not in memory


class WorkspaceError(RuntimeError):
    """A workspace could not be built, started, or answered (an infrastructure failure: the episode
    that needed it leaves the loss, it is not a 0)."""


class TreeTooLarge(WorkspaceError):
    """The agent's tree is larger than its task's ``storage_mb``: it cannot be graded, and the agent
    caused it (score it 0, unlike other workspace errors)."""


class BuildError(WorkspaceError):
    """The task's environment could not be built (a Dockerfile instruction, a failing RUN line)."""


@dataclass(frozen=True)
class WorkspaceLimits:
    """What one workspace may use (a Harbor ``task.toml`` ``[environment]`` sets the first four)."""

    cpus: float = 1.0
    """CPU cores (cgroup quota; Docker ``nano_cpus``)."""
    memory_mb: int = 2048
    """Memory of every process together, files on its tmpfs included on the local backend."""
    storage_mb: int = 1024
    """Size of the writable tree."""
    allow_internet: bool = False
    """False: no network at all (no interface up, not even loopback to the host)."""
    max_processes: int = 256
    """Processes and threads at once (pids cgroup): a fork bomb stops here."""
    ttl_s: float = 3600.0
    """The workspace ends this long after it started, whatever it is doing."""
    idle_s: float = 900.0
    """The workspace ends when no request came for this long."""
    max_output_bytes: int = 16384
    """Output kept per command: the head and the tail, with a visible mark where bytes were cut."""

    def __post_init__(self) -> None:
        for name in ("cpus", "memory_mb", "storage_mb", "max_processes", "ttl_s", "idle_s", "max_output_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"WorkspaceLimits.{name} must be > 0, got {getattr(self, name)!r}")

    def replace(self, **changes: Any) -> WorkspaceLimits:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class BuildStep:
    """One instruction of the environment's build: ``workdir`` (path), ``env`` (key, value),
    ``copy`` (sources relative to the build context, destination) or ``run`` (a shell command)."""

    kind: str
    args: tuple[str, ...]
    line: int = 0


@dataclass(frozen=True)
class WorkspaceSpec:
    """What a workspace starts from: build steps (a Dockerfile's) on a base, a working directory,
    environment variables and limits. ``context`` is the host directory ``copy`` steps read."""

    steps: tuple[BuildStep, ...] = ()
    context: str | None = None
    workdir: str = "/app"
    env: tuple[tuple[str, str], ...] = ()
    limits: WorkspaceLimits = field(default_factory=WorkspaceLimits)
    dockerfile: str | None = None
    """Docker: the Dockerfile text the image is built from (its FROM is the base image)."""
    name: str = "workspace"

    def replace(self, **changes: Any) -> WorkspaceSpec:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class CommandResult:
    """What one command did: exit status, output (stdout and stderr interleaved, capped), whether it
    ran past its timeout and was killed."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0
    timeout_s: float = 0.0
    shell_restarted: bool = False

    def text(self) -> str:
        """The output as an agent sees it, with a one-line note when the command did not end normally."""
        notes = []
        if self.timed_out:
            notes.append(f"[the command ran past its {self.timeout_s:g} s timeout and was killed; its output "
                         f"so far is above; directory and variables are as before it]")
        if self.shell_restarted:
            notes.append("[the shell exited and was restarted: working directory and exported variables were kept]")
        if self.exit_code not in (0, None) and not self.timed_out:
            notes.append(f"[exit code {self.exit_code}]")
        return self.output + ("\n" if self.output and not self.output.endswith("\n") and notes else "") \
            + "\n".join(notes)


@dataclass(frozen=True)
class FileEntry:
    """One entry of a directory listing."""

    name: str
    kind: str  # file | dir | link | other
    size: int


class Tree:
    """A workspace's tree as a tar archive (paths relative to ``/``; see the module docstring), held in a
    spooled temporary file: in memory up to ``SPOOL_BYTES``, on disk beyond, so that a large tree
    never sits in the trainer's memory. ``diff`` (a capped unified diff against the tree right after
    the build) and ``unchanged`` (byte for byte that tree) come from the workspace's runtime when it
    knows its first state (None otherwise); ``digest`` (the runtime's hash of every entry's path, kind,
    mode, size, contents or link target and hard link, not its times) when the runtime made the archive."""

    def __init__(self, data: bytes | None = None, *, diff: str | None = None, unchanged: bool | None = None,
                 digest: str | None = None) -> None:
        self._file = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
        self.size = 0
        self.diff, self.unchanged, self.digest = diff, unchanged, digest
        if data:
            self.write(data)

    def write(self, data: bytes) -> None:
        """Append archive bytes (as they arrive from a runtime)."""
        self._file.seek(0, io.SEEK_END)
        self._file.write(data)
        self.size += len(data)

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """The archive in pieces of at most ``size`` bytes."""
        self._file.seek(0)
        while True:
            block = self._file.read(size)
            if not block:
                return
            yield block

    @property
    def data(self) -> bytes:
        """The whole archive (for small trees and tests: it is read into memory)."""
        return b"".join(self.chunks())

    def files(self) -> dict[str, bytes | str]:
        """Path -> contents (bytes) for regular files, ``"-> TARGET"`` for links, ``"<dir>"`` for dirs."""
        out: dict[str, bytes | str] = {}
        self._file.seek(0)
        with tarfile.open(fileobj=self._file, mode="r|") as tar:
            for m in tar:
                path = "/" + m.name.lstrip("./")
                if m.isfile():
                    f = tar.extractfile(m)
                    out[path] = f.read() if f is not None else b""
                elif m.issym() or m.islnk():
                    out[path] = f"-> {m.linkname}"
                elif m.isdir():
                    out[path] = "<dir>"
        return out


def resolve(workdir: str, path: str) -> str:
    """``path`` as an absolute, normalised path (relative paths are from ``workdir``)."""
    if not path:
        raise ValueError("an empty path")
    return posixpath.normpath(posixpath.join(workdir, path))


class Workspace:
    """The interface (see the module docstring); backends implement the methods that raise here.

    A workspace is a context manager; ``close()`` ends it and everything it started, and is safe to
    call twice. Methods of a closed workspace raise :class:`WorkspaceError`.
    """

    spec: WorkspaceSpec

    def exec(self, command: str, timeout_s: float = 30.0) -> CommandResult:
        """Run ``command`` in the workspace's shell (its state persists); see :class:`CommandResult`."""
        raise NotImplementedError

    def read_file(self, path: str, max_bytes: int = 1 << 20) -> bytes:
        """The first ``max_bytes`` of a file (relative paths are from the working directory)."""
        raise NotImplementedError

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Create or replace a file (parents are created), owned by the agent."""
        raise NotImplementedError

    def list(self, path: str = ".") -> list[FileEntry]:
        """The entries of a directory, sorted by name."""
        raise NotImplementedError

    def snapshot(self) -> Tree:
        """The tree now (processes keep running)."""
        raise NotImplementedError

    def restore(self, tree: Tree) -> None:
        """Replace the tree with ``tree`` (a snapshot of this workspace or of one of the same spec)."""
        raise NotImplementedError

    def seal(self) -> Tree:
        """End every process of the workspace and return its final tree (for grading)."""
        raise NotImplementedError

    def put_archive(self, dest: str, data: bytes) -> None:
        """Unpack the tar ``data`` under ``dest`` (owned by the agent)."""
        raise NotImplementedError

    def put_dir(self, host_dir: str, dest: str) -> None:
        """Copy a host directory's contents to ``dest`` in the workspace."""
        raise NotImplementedError

    def process_count(self) -> int:
        """Processes of the agent running now (the shell included); raises if the workspace has ended."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def diff(self) -> str:
        """A unified diff of the tree now against the tree right after the build (capped)."""
        raise NotImplementedError

    def grade(self, argv: list[str], timeout_s: float) -> dict[str, Any]:
        """Run a verifier (``argv``, e.g. ``["/bin/bash", "/tests/test.sh"]``) as the grader, its programs
        as the testee, and return what it did: ``exit_code``, ``output``, ``timed_out``, ``rewards``
        (reward file name -> text, None when not written) and ``problem`` (see
        :mod:`sandbox.workspace.grading`). The workspace's processes end first; use it once, last."""
        raise NotImplementedError

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
