"""Build a minimal Python image for the Docker backend locally, with no registry pull.

The image is a `docker import` of a tar made from this host: the running interpreter's prefix
(standard library only, no site-packages or tests) at its own path, the shared libraries it and its
extension modules link against, `/bin/sh` and a few core utilities. Built once and cached by tag
(the tag carries a hash of this file and the Python version). Run `python -m sandbox.docker_image`
to build it ahead of time.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

TOOLS = ("sh", "sleep", "id", "cat", "echo", "ls", "env", "true", "false", "kill")
SKIP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
        f"config-{sys.version_info.major}.{sys.version_info.minor}-x86_64-linux-gnu", "__phello__"}
PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"


def local_image_tag() -> str:
    """The tag of the locally built image for this interpreter and this build script."""
    with open(__file__, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:10]
    return f"agentrl-sandbox:py{sys.version_info.major}.{sys.version_info.minor}-{digest}"


def _libraries(paths: list[str]) -> set[str]:
    """Shared libraries (and the loader) that the given binaries need, per ldd."""
    libs: set[str] = set()
    for path in paths:
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) > 2 and parts[2].startswith("/"):
                libs.add(parts[2])
            elif parts and parts[0].startswith("/"):
                libs.add(parts[0])
    return libs


def _skip(info: tarfile.TarInfo, seen: set[str]) -> tarfile.TarInfo | None:
    parts = info.name.split("/")
    if SKIP & set(parts) or "_tkinter" in parts[-1] or info.name in seen:
        return None
    seen.add(info.name)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _add_text(tar: tarfile.TarFile, name: str, text: str, mode: int = 0o644) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def _add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    tar.addfile(info)


def write_rootfs(path: str) -> None:
    """Write the image's root filesystem as a tar at `path`."""
    prefix = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(sys.executable)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = os.path.join(prefix, "lib", ver)
    dynload = os.path.join(stdlib, "lib-dynload")
    tools = [p for t in TOOLS if os.path.exists(p := f"/bin/{t}")]
    modules = [os.path.join(dynload, n) for n in os.listdir(dynload) if "_tkinter" not in n]
    seen: set[str] = set()

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return _skip(info, seen)

    with tarfile.open(path, "w") as tar:
        for d, mode in (("tmp", 0o1777), ("var", 0o755), ("var/tmp", 0o1777), ("proc", 0o755),
                        ("dev", 0o755), ("sys", 0o755), ("etc", 0o755), ("run", 0o755), ("root", 0o755),
                        ("opt", 0o755), ("opt/sandbox", 0o755), ("usr", 0o755), ("usr/local", 0o755),
                        ("usr/local/bin", 0o755), ("usr/bin", 0o755), ("bin", 0o755)):
            _add_dir(tar, d, mode)
        _add_text(tar, "etc/passwd", PASSWD)
        _add_text(tar, "etc/group", GROUP)
        for lib in sorted(_libraries([exe, *modules, *tools])):
            tar.add(os.path.realpath(lib), arcname=lib.lstrip("/"), filter=keep)
        for tool in tools:
            tar.add(os.path.realpath(tool), arcname=tool.lstrip("/"), filter=keep)
        tar.add(exe, arcname=exe.lstrip("/"), filter=keep)
        for lib in os.listdir(os.path.join(prefix, "lib")):
            if lib.startswith("libpython"):
                tar.add(os.path.join(prefix, "lib", lib), arcname=f"{prefix.lstrip('/')}/lib/{lib}", filter=keep)
        tar.add(stdlib, arcname=stdlib.lstrip("/"), filter=keep)
        for link in ("usr/local/bin/python3", "usr/local/bin/python", "usr/bin/python3"):
            _add_link(tar, link, exe)


def build_local_image(client: Any = None, tag: str | None = None) -> str:
    """Build (once; cached by tag) the local image and return its tag."""
    return import_rootfs_once(client, tag or local_image_tag(), "agentrl-sandbox-image.lock", write_rootfs)


def import_rootfs_once(client: Any, tag: str, lock_name: str, write: Callable[[str], None],
                       changes: Sequence[str] = ()) -> str:
    """The image ``tag``: imported from the root file system tar that ``write(path)`` makes, unless it
    exists; one build at a time across processes (a file lock named ``lock_name`` in the temp dir)."""
    import docker

    client = client or docker.from_env()
    with open(os.path.join(tempfile.gettempdir(), lock_name), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        with tempfile.TemporaryDirectory() as tmp:
            rootfs = os.path.join(tmp, "rootfs.tar")
            write(rootfs)
            repo, _, version = tag.partition(":")
            client.api.import_image_from_file(rootfs, repository=repo, tag=version or "latest",
                                              changes=list(changes) or None)
        client.images.get(tag)
    return tag


if __name__ == "__main__":
    print(build_local_image())
