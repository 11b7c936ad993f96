"""What the workspace runtime's modules share: frames, the tree's excluded directories, processes,
and the capture of a command's output.

Standard library only (see ``_workspace``).
"""

from __future__ import annotations

import json
import os
import signal
import struct

from _leftovers import reap_children  # type: ignore[import-not-found]  # noqa: F401 (the workspace runtime's)

# Top-level directories that are the system's, never part of the agent's tree (``sandbox.workspace.base``).
SYSTEM_DIRS = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "usr",
               "var", "tests"}


IGNORED = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)  # by a runtime


def default_signals() -> None:
    """In a child of the runtime: the signals it ignores back to their defaults (an ignored signal
    stays ignored across exec)."""
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_DFL)


def read_exact(fd: int, n: int) -> bytes:
    """Exactly ``n`` bytes from ``fd`` (EOFError at an early end)."""
    out = bytearray()
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def read_frame(fd: int) -> dict | None:
    """One frame (4-byte big-endian length + JSON) from ``fd``; None at the end of the input."""
    try:
        (size,) = struct.unpack(">I", read_exact(fd, 4))
        return json.loads(read_exact(fd, size))
    except EOFError:
        return None


def write_frame(fd: int, obj: dict) -> None:
    data = json.dumps(obj).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def processes() -> dict[int, int]:
    """pid -> process group of every process in this pid namespace but this one."""
    out = {}
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
                out[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[2])
            except (OSError, ValueError, IndexError):
                continue
    return out


def parent_of(pid: int) -> int:
    """The parent pid of ``pid`` (0 when unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


class Capture:
    """The bytes of one command: all of them up to ``limit``, then the head and a rolling tail."""

    def __init__(self, limit: int) -> None:
        self.limit, self.head, self.tail, self.dropped = limit, bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        if len(self.head) < self.limit // 2:
            take = self.limit // 2 - len(self.head)
            self.head += data[:take]
            data = data[take:]
        self.tail += data
        extra = len(self.tail) - (self.limit - self.limit // 2) - 8192  # 8 KiB more: the marker line
        if extra > 0:
            del self.tail[:extra]
            self.dropped += extra

    def last(self, n: int) -> bytes:
        return bytes((self.head + self.tail)[-n:]) if len(self.tail) < n else bytes(self.tail[-n:])

    def result(self, cut_tail: int) -> tuple[str, bool]:
        """The output less its last ``cut_tail`` bytes (the marker line), head and tail with a mark."""
        whole = self.head + self.tail
        if not self.dropped:
            data = bytes(whole[:len(whole) - cut_tail])
            if len(data) <= self.limit:
                return data.decode("utf-8", "replace"), False
            head, tail, dropped = data[:self.limit // 2], data[self.limit // 2:], 0
        else:
            head, tail, dropped = bytes(self.head), bytes(self.tail[:len(self.tail) - cut_tail]), self.dropped
        keep = self.limit - len(head)
        dropped += max(0, len(tail) - keep)
        tail = tail[len(tail) - keep:] if len(tail) > keep else tail
        return (head.decode("utf-8", "replace") + f"\n[... {dropped} bytes of output cut ...]\n"
                + tail.decode("utf-8", "replace")), True
