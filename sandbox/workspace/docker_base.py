"""The Docker workspaces' base image, built here from this host's Debian packages (no registry).

A task's Dockerfile names its own base image (``FROM python:3.12-slim``); no registry is reachable
here, so when that image is not in the local daemon the same Dockerfile is built on this image
instead (``sandbox.workspace.docker`` says so in one line). It is a real Debian root filesystem:
the files ``dpkg`` lists for the workspace's tools (bash, coreutils, grep, sed, mawk, findutils,
diffutils, patch, git, python3, tar, gzip, bzip2, xz, procps, less, file) and every package they
depend on, as installed on this host, plus the ``/etc/alternatives`` links among them, a generated
``/etc/passwd`` and ``/etc/group`` and the merged-/usr links; documentation, manuals and locales are
left out; the Python modules' byte-code (``__pycache__``) is in. Built once and cached by tag (a hash
of the package versions and of this file); ``python -m sandbox.workspace.docker_base`` builds it ahead
of time. About 200 MB and half a minute.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
from typing import Any

from sandbox.docker_image import import_rootfs_once

TOOLS = ("bash", "coreutils", "grep", "sed", "mawk", "findutils", "diffutils", "patch", "git", "python3", "tar",
         "gzip", "bzip2", "xz-utils", "procps", "less", "file", "dash", "base-files", "base-passwd", "debianutils",
         "ncurses-base", "libc-bin", "sensible-utils")
SKIP_PREFIXES = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/locale/", "/usr/share/info/",
                 "/usr/share/lintian/", "/usr/share/bash-completion/")
PASSWD = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"
REPOSITORY = "agentrl-workspace-base"


def installed_packages() -> dict[str, tuple[str, str]]:
    """Installed package -> (version, its Depends and Pre-Depends)."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Version}\t${Depends}, ${Pre-Depends}\n"],
                         capture_output=True, text=True, check=True).stdout
    pkgs = {}
    for line in out.splitlines():
        name, status, version, deps = (line.split("\t") + ["", "", ""])[:4]
        if status.endswith(" installed"):
            pkgs[name] = (version, deps)
    return pkgs


def closure(wanted: tuple[str, ...], pkgs: dict[str, tuple[str, str]]) -> list[str]:
    """``wanted`` and everything they depend on (the first installed choice of each alternative)."""
    seen: set[str] = set()
    stack = [p for p in wanted if p in pkgs]
    missing = [p for p in ("bash", "coreutils", "python3", "git") if p not in pkgs]
    if missing:
        raise RuntimeError(f"this host lacks the Debian packages {', '.join(missing)} the workspace image needs")
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for dep in pkgs[name][1].split(","):
            for choice in dep.split("|"):
                base = re.split(r"[ :(]", choice.strip())[0]
                if base in pkgs:
                    stack.append(base)
                    break
    return sorted(seen)


def image_tag() -> str:
    """The tag of the image for this host's packages and this build script."""
    pkgs = installed_packages()
    names = closure(TOOLS, pkgs)
    h = hashlib.sha256()
    with open(__file__, "rb") as f:
        h.update(f.read())
    for n in names:
        h.update(f"{n}={pkgs[n][0]}\n".encode())
    return f"{REPOSITORY}:{h.hexdigest()[:12]}"


def write_rootfs(path: str) -> None:
    """Write the image's root filesystem as a tar at ``path``."""
    files: set[str] = set()
    for name in closure(TOOLS, installed_packages()):
        listed = subprocess.run(["dpkg", "-L", name], capture_output=True, text=True).stdout.splitlines()
        files.update(_canonical(f) for f in listed if f.startswith("/") and not f.startswith(SKIP_PREFIXES))
    with tarfile.open(path, "w") as tar:
        made = {"/" + d for d in ("tmp", "var/tmp", "root", "etc", "proc", "sys", "dev", "run", "home", "opt",
                                  "bin", "sbin", "lib", "lib64", "etc/passwd", "etc/group")}
        for d, mode in (("tmp", 0o1777), ("var/tmp", 0o1777), ("root", 0o700), ("etc", 0o755), ("proc", 0o755),
                        ("sys", 0o755), ("dev", 0o755), ("run", 0o755), ("home", 0o755), ("opt", 0o755)):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        for link in ("bin", "sbin", "lib", "lib64"):
            if os.path.islink(f"/{link}"):
                _add_link(tar, link, os.readlink(f"/{link}"))
        for name, text in (("etc/passwd", PASSWD), ("etc/group", GROUP)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for path in sorted(files | _compiled(files)):
            if os.path.lexists(path) and path not in made:
                tar.add(path, arcname=path.lstrip("/"), recursive=False, filter=_root_owned)
        alternatives, chosen = "/etc/alternatives", set()
        for name in sorted(os.listdir(alternatives)) if os.path.isdir(alternatives) else ():
            link = os.path.join(alternatives, name)
            target = os.readlink(link) if os.path.islink(link) else ""
            if target in files:
                _add_link(tar, f"etc/alternatives/{name}", target)
                chosen.add(link)
        for d in ("/usr/bin", "/usr/sbin"):  # the links to the alternatives (awk -> /etc/alternatives/awk)
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if os.path.islink(path) and os.readlink(path) in chosen and path not in files:
                    _add_link(tar, path.lstrip("/"), os.readlink(path))


def _compiled(files: set[str]) -> set[str]:
    """The host's byte-code of the Python modules among ``files`` (``__pycache__/NAME.cpython-*.pyc``; dpkg
    does not list them): without it every interpreter in a container compiles the standard library modules
    it imports again (~80 ms of a workspace's start)."""
    out: set[str] = set()
    for path in files:
        if path.endswith(".py"):
            cache = os.path.join(os.path.dirname(path), "__pycache__")
            stem = os.path.basename(path)[:-3] + ".cpython-"
            names = os.listdir(cache) if os.path.isdir(cache) else ()
            out.update(os.path.join(cache, n) for n in names if n.startswith(stem) and n.endswith(".pyc")
                       and n.count(".") == 2)  # not the optimized (.opt-1) ones
    return out | {os.path.dirname(p) for p in out}


def _canonical(path: str) -> str:
    """``path`` with a merged-/usr link resolved (dpkg lists ``/bin/bash``; the file is ``/usr/bin/bash``)."""
    top, _, rest = path.strip("/").partition("/")
    if rest and os.path.islink("/" + top):
        return os.path.join(os.path.realpath("/" + top), rest)
    return path


def _add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    tar.addfile(info)


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def build_base_image(client: Any = None) -> str:
    """Build (once; cached by tag) the base image and return its tag."""
    return import_rootfs_once(client, image_tag(), "agentrl-workspace-image.lock", write_rootfs, changes=[
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ENV LANG=C.UTF-8", 'CMD ["bash"]'])


if __name__ == "__main__":
    print(build_base_image())
