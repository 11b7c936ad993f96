"""A workspace's tree, for its runtime: walked without recursion, archived as a stream, and compared
with its first state under caps (standard library only).

Whatever the agent left (a 1,100-deep tree, a sparse 200 GB file, a 64 MB log, two million empty
files), the runtime's memory stays bounded: walks keep a stack of paths, never a list of the tree;
the tree's size is measured by apparent sizes *before* anything is read, and a tree past the task's
storage is refused (the agent's doing: it scores 0); the archive leaves in frames of ``FRAME``
bytes as it is written; files are hashed in blocks; the diff reads at most ``TEXT_CAP`` bytes of a
file and stops at ``DIFF_CAP`` bytes of output. The first state kept for the diff (``Marked``) holds
each path's kind, mode, size and digest, and the text of small text files up to ``TEXT_TOTAL``.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
import struct
import tarfile

from _ws_common import SYSTEM_DIRS, read_exact  # type: ignore[import-not-found]

FRAME = 1 << 20  # archive bytes per raw frame
BLOCK = 1 << 20  # bytes read at once when hashing or copying a file
TEXT_CAP = 256 << 10  # a text file larger than this is diffed by name and size only
TEXT_TOTAL = 16 << 20  # texts of the first state kept for the diff, in all
DIFF_CAP = 65536  # bytes of diff text
DIFF_SKIP = ("__pycache__", ".pytest_cache", ".bash_history")
EXCLUDED = "/logs/verifier"


class TreeTooLarge(OSError):
    """The tree is larger than the workspace's storage allows (the agent's doing: it scores 0)."""


def excluded(path: str) -> bool:
    return path == EXCLUDED or path.startswith(EXCLUDED + "/")


def default_roots(skip: tuple[str, ...] = ("tmp",)) -> list[str]:
    """The top-level directories that make up the tree: every one but the system's, ``/tmp`` (the
    verifier's scratch space starts empty) and mount points."""
    out = []
    for name in sorted(os.listdir("/")):
        path = "/" + name
        if name not in SYSTEM_DIRS and name not in skip and os.path.isdir(path) and not os.path.islink(path) \
                and not os.path.ismount(path):
            out.append(path)
    return out


def walk(roots: list[str]):
    """(path, lstat) of every entry under ``roots`` in sorted pre-order, directories before what they
    hold; links are not followed, mount points (a directory on another device than its parent: not
    ``os.path.ismount``, which resolves every parent and is quadratic on a deep tree) and the
    grader's directory are left out."""
    stack: list[tuple[str, int]] = [(r, -1) for r in sorted(roots, reverse=True)]
    while stack:
        path, parent_dev = stack.pop()
        if excluded(path):
            continue
        try:
            st = os.lstat(path)
        except OSError:  # gone, or a path longer than the kernel takes
            continue
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            continue  # devices, fifos and sockets are not part of a tree
        if stat.S_ISDIR(st.st_mode) and parent_dev not in (-1, st.st_dev):
            continue
        yield path, st
        if stat.S_ISDIR(st.st_mode):
            try:
                names = os.listdir(path)
            except OSError:
                continue
            stack.extend((os.path.join(path, name), st.st_dev) for name in sorted(names, reverse=True))


def check_size(roots: list[str], limit: int) -> None:
    """Raise :class:`TreeTooLarge` when the archive of ``roots`` would pass ``limit`` bytes (apparent
    sizes, a sparse file at its full size; a header block per entry), before anything is read."""
    total = 0
    for path, st in walk(roots):
        total += 1024 + len(path)  # a header and, for long names, an extended header
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
        if total > limit:
            raise TreeTooLarge(f"the tree is larger than the task's storage ({limit >> 20} MB)")


class FrameWriter:
    """A write-only file that sends what it gets as raw frames (4-byte length + bytes) on ``fd``."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, bytearray()

    def write(self, data: bytes) -> int:
        self.buf += data
        while len(self.buf) >= FRAME:
            self._send(bytes(self.buf[:FRAME]))
            del self.buf[:FRAME]
        return len(data)

    def close(self) -> None:
        if self.buf:
            self._send(bytes(self.buf))
            self.buf = bytearray()
        self._send(b"")  # the end of the stream

    def _send(self, data: bytes) -> None:
        view = memoryview(struct.pack(">I", len(data)) + data)
        while view:
            view = view[os.write(self.fd, view):]


class FrameReader:
    """A read-only file over the raw frames that arrive on ``fd``, up to the empty frame."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.ended = fd, bytearray(), False

    def read(self, n: int = -1) -> bytes:
        while not self.ended and (n < 0 or len(self.buf) < n):
            (size,) = struct.unpack(">I", read_exact(self.fd, 4))
            if size == 0:
                self.ended = True
            else:
                self.buf += read_exact(self.fd, size)
        n = len(self.buf) if n < 0 else min(n, len(self.buf))
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def drain(self) -> None:
        """Read the rest of the stream (a failed extraction must not leave frames in the pipe)."""
        while not self.ended:
            self.buf.clear()
            self.read(FRAME)


class Hashing:
    """A file read in blocks for the archive, hashed on the way."""

    def __init__(self, f) -> None:  # noqa: ANN001 - a binary file
        self.f, self.h = f, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(BLOCK if n < 0 else min(n, BLOCK))
        self.h.update(data)
        return data


def entry_of(path: str, st: os.stat_result, digest: str) -> tuple:
    """What the diff compares: (kind, permission bits, size, digest or link target)."""
    kind = "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"
    target = os.readlink(path) if kind == "l" else digest
    return kind, stat.S_IMODE(st.st_mode), st.st_size if kind == "f" else 0, target


def tree_digest(entries: dict[str, tuple], archived: dict[str, str]) -> str:
    """One digest of an archived tree: each path with its :func:`entry_of` (kind, mode, size, contents or
    link target) and ``archived``'s hard link, so that two trees share it only when what a grader restores
    from them differs in nothing but times."""
    h = hashlib.sha256()
    for path in sorted(entries):
        h.update(repr((path, entries[path], archived.get(path))).encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()


def file_digest(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb", buffering=0) as f:
            while True:
                block = f.read(BLOCK)
                if not block:
                    break
                h.update(block)
    except OSError:
        return "?"
    return h.hexdigest()


def stream_tree(roots: list[str], fd: int, archived: dict[str, tuple] | None = None) -> dict:
    """Archive ``roots`` (already size-checked) as raw frames on ``fd``; every entry's
    :func:`entry_of`, keyed by path (for the diff). Links as links; hard links as hard links.
    ``archived`` gets, per path, what else a restore takes from its archive entry: the path it is a hard
    link to ("" when none; owners are not restored: every file is the new tree's agent's) (for
    :func:`tree_digest`)."""
    out = FrameWriter(fd)
    entries: dict[str, tuple] = {}
    hardlinks: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path, st in walk(roots):
            info = tar_info(path, st, hardlinks)
            digest = ""
            if info.isfile():
                try:
                    f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below
                except OSError:
                    continue
                with f:
                    reader = Hashing(f)
                    tar.addfile(info, reader)
                    digest = reader.h.hexdigest()
            else:
                tar.addfile(info)
                if info.islnk():  # a hard link: compared by contents, as the first state has it
                    digest = file_digest(path)
            entries[path] = entry_of(path, st, digest)
            if archived is not None:
                archived[path] = info.linkname if info.islnk() else ""
    out.close()
    return entries


def tar_info(path: str, st: os.stat_result, hardlinks: dict[tuple[int, int], str]) -> tarfile.TarInfo:
    """The archive header of an entry from its lstat (``tarfile.gettarinfo`` would stat it again and
    look its owner up by name); a regular file seen before under another name becomes a hard link."""
    info = tarfile.TarInfo(path.lstrip("/"))
    info.mode, info.uid, info.gid, info.mtime = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
    elif st.st_nlink > 1 and (st.st_dev, st.st_ino) in hardlinks:
        info.type, info.linkname = tarfile.LNKTYPE, hardlinks[(st.st_dev, st.st_ino)]
    else:
        info.size = st.st_size
        if st.st_nlink > 1:
            hardlinks[(st.st_dev, st.st_ino)] = info.name
    return info


def manifest(roots: list[str]) -> dict[str, tuple]:
    """Every entry's :func:`entry_of` (files hashed, nothing archived)."""
    return {path: entry_of(path, st, file_digest(path) if stat.S_ISREG(st.st_mode) else "")
            for path, st in walk(roots)}


class Marked:
    """The tree's first state: its manifest and the text of its small text files (see the module
    docstring)."""

    def __init__(self, roots: list[str]) -> None:
        self.entries = manifest(roots)
        self.texts: dict[str, str] = {}
        kept = 0
        for path, (kind, _mode, size, _digest) in self.entries.items():
            if kind == "f" and size <= TEXT_CAP and kept + size <= TEXT_TOTAL:
                text = read_text(path)
                if text is not None:
                    self.texts[path] = text
                    kept += size

    def unchanged(self, now: dict[str, tuple]) -> bool:
        return now == self.entries

    def diff(self, now: dict[str, tuple]) -> str:
        """A unified diff of the tree now (``now``: its entries) against the first state, capped."""
        parts, size, more = [], 0, 0
        for path in sorted(set(self.entries) | set(now)):
            old, new = self.entries.get(path), now.get(path)
            if old == new or any(s in path.split("/") for s in DIFF_SKIP):
                continue
            if size > DIFF_CAP:
                more += 1
                continue
            part = self._part(path, old, new)
            if part:
                parts.append(part if part.endswith("\n") else part + "\n")
                size += len(parts[-1])
        out = "".join(parts)
        if len(out) > DIFF_CAP or more:
            out = out[:DIFF_CAP] + f"\n[... diff cut at {DIFF_CAP} bytes; {more} more changed paths ...]\n"
        return out

    def _part(self, path: str, old: tuple | None, new: tuple | None) -> str:
        kinds = (old[0] if old else None, new[0] if new else None)
        if "d" in kinds:
            if old is None or new is None:
                return f"{'new' if old is None else 'deleted'} directory {path}\n"
            return "" if kinds == ("d", "d") else f"{path}: a directory and a file swapped\n"
        if old is not None and new is not None and old[:1] == new[:1] and old[2:] == new[2:]:
            return f"mode of {path}: {old[1]:o} -> {new[1]:o}\n"
        a = "" if old is None else (f"-> {old[3]}\n" if old[0] == "l" else self.texts.get(path))
        b = "" if new is None else (f"-> {new[3]}\n" if new[0] == "l" else
                                    read_text(path) if new[2] <= TEXT_CAP else None)
        if a is None or b is None:
            what = "added" if old is None else "deleted" if new is None else "changed"
            return f"binary or large file {path} {what} ({new[2] if new else old[2]} bytes)\n"
        if not a and not b:
            return f"{'new' if old is None else 'deleted'} empty file {path}\n"
        return "".join(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                            "/dev/null" if old is None else f"a{path}",
                                            "/dev/null" if new is None else f"b{path}"))


def read_text(path: str, cap: int = TEXT_CAP) -> str | None:
    """A regular file's text, if it is UTF-8 and at most ``cap`` bytes (else None)."""
    try:
        with open(path, "rb", buffering=0) as f:
            data = f.read(cap + 1)
        return None if len(data) > cap else data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def remove_tree(path: str) -> None:
    """Remove a directory and everything under it, deepest first, without recursion."""
    stack = [(path, False)]
    while stack:
        top, listed = stack.pop()
        if listed:
            try:
                os.rmdir(top)
            except OSError:
                pass
            continue
        stack.append((top, True))
        try:
            names = os.listdir(top)
        except OSError:
            continue
        here = os.lstat(top).st_dev
        for name in names:
            child = os.path.join(top, name)
            try:
                st = os.lstat(child)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if st.st_dev == here:  # never into a mount point
                    stack.append((child, False))
            else:
                try:
                    os.unlink(child)
                except OSError:
                    pass
